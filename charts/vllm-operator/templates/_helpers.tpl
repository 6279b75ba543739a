{{/* The full name of the release's objects. */}}
{{- define "vllm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vllm-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "vllm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "vllm-operator.labels" -}}
{{ include "vllm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vllm-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "vllm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vllm-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "vllm-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The one watched namespace, or "" for cluster-wide. The operator (settings.namespace)
watches one namespace at most; a longer list is refused rather than silently narrowed. */}}
{{- define "vllm-operator.watchNamespace" -}}
{{- $ns := .Values.rbac.watchNamespaces }}
{{- if gt (len $ns) 1 }}
{{- fail (printf "rbac.watchNamespaces has %d entries, but the operator watches one namespace (VLLM_OPERATOR_NAMESPACE) or all: install one release per namespace, or leave the list empty for cluster-wide" (len $ns)) }}
{{- end }}
{{- if $ns }}{{ first $ns }}{{ end }}
{{- end }}

{{/* The operator's environment: VLLM_OPERATOR_<SETTING> for every non-null setting. */}}
{{- define "vllm-operator.env" -}}
{{- range $key, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
{{- if and (kindIs "map" $value) (not $value) }}{{ continue }}{{ end }}
- name: VLLM_OPERATOR_{{ snakecase $key | upper }}
  value: {{ if kindIs "map" $value }}{{ toJson $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- end }}
{{- with include "vllm-operator.watchNamespace" . }}
- name: VLLM_OPERATOR_NAMESPACE
  value: {{ . | quote }}
{{- end }}
- name: VLLM_OPERATOR_LIVENESS_ENDPOINT
  value: {{ printf "http://0.0.0.0:%d/healthz" (int .Values.healthPort) | quote }}
- name: VLLM_OPERATOR_METRICS_PORT
  value: {{ ternary (int .Values.metrics.port) 0 .Values.metrics.enabled | toString | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The namespaces that get namespaced RBAC: the watched one, or none (cluster-wide). */}}
{{- define "vllm-operator.rules" -}}
# the API it serves
- apiGroups: [serving.vllm-operator.dev]
  resources: [vllmservices]
  verbs: [get, list, watch, patch, update]
- apiGroups: [serving.vllm-operator.dev]
  resources: [vllmservices/status]
  verbs: [get, patch, update]
# the children it renders (server-side apply = patch; prune = delete)
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, update, delete]
# monitoring objects, rendered only where the Prometheus Operator's CRDs exist
- apiGroups: [monitoring.coreos.com]
  resources: [prometheusrules, podmonitors]
  verbs: [get, list, watch, create, patch, update, delete]
# benchmark of each rollout: the Job, its result ConfigMap, its ServiceAccount + Role + binding
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [configmaps, serviceaccounts]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, update, delete]
# observe: why a replica is not up (unschedulable, crash loop, image pull)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Events on the VLLMService for important transitions
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
