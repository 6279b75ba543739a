"""vllm-operator: reconciles VLLMService custom resources into vLLM serving deployments."""

GROUP = "serving.vllm-operator.dev"
VERSION = "v1alpha1"
KIND = "VLLMService"
PLURAL = "vllmservices"
SINGULAR = "vllmservice"
SHORT_NAMES = ("vsvc",)
API_VERSION = f"{GROUP}/{VERSION}"
