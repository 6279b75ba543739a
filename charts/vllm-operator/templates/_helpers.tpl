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

{{/* The pods' selector; without releaseLabels (the plain manifests of deploy/) the name alone. */}}
{{- define "vllm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-operator.name" . }}
{{- if .Values.releaseLabels }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end }}

{{- define "vllm-operator.labels" -}}
{{ include "vllm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- if .Values.releaseLabels }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
app.kubernetes.io/part-of: vllm-operator
{{- if .Values.releaseLabels }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
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

{{/* The operator's environment: VLLM_OPERATOR_<SETTING> for every non-null setting. */}}
{{- define "vllm-operator.env" -}}
{{- range $key, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
{{- if and (kindIs "map" $value) (not $value) }}{{ continue }}{{ end }}
- name: VLLM_OPERATOR_{{ snakecase $key | upper }}
  value: {{ if kindIs "map" $value }}{{ toJson $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- end }}
{{- with .Values.rbac.watchNamespaces }}
- name: VLLM_OPERATOR_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
# the pod's namespace (leader election's Lease lives there unless settings.leaseNamespace)
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: VLLM_OPERATOR_LIVENESS_ENDPOINT
  value: {{ printf "http://0.0.0.0:%d/healthz" (int .Values.healthPort) | quote }}
- name: VLLM_OPERATOR_METRICS_PORT
  value: {{ ternary (int .Values.metrics.port) 0 .Values.metrics.enabled | toString | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The operator's permissions in a namespace it serves: exactly the requests it makes
(operator/vllm_operator/write/transport.py, write/apply.py, write/benchmark_runs.py, observe/read.py, runtime/informer.py and kopf's
watch); tests/integration/test_least_privilege.py runs it under these rules and finds no
refusal, and every grant used. */}}
{{- define "vllm-operator.rules" -}}
# the API it serves: watched (kopf), read fresh before each reconcile, its status replaced;
# patch: the operator removes the finalizer an early version left behind (a JSON patch)
- apiGroups: [serving.vllm-operator.dev]
  resources: [vllmservices]
  verbs: [get, list, watch, patch]
- apiGroups: [serving.vllm-operator.dev]
  resources: [vllmservices/status]
  verbs: [patch]
# children carry blockOwnerDeletion; clusters with the OwnerReferencesPermissionEnforcement
# admission plugin (OpenShift) let only those who may update the owner's finalizers set it
- apiGroups: [serving.vllm-operator.dev]
  resources: [vllmservices/finalizers]
  verbs: [update]
# the children it renders: watched with the server-side selector managed-by=vllm-operator
# (a change wakes the owning service; reads come from that cache), read before writing (no
# write when nothing changed), written by server-side apply (patch; `create` too when the
# object does not exist yet); Deployments and Services are never deleted (the garbage
# collector does that through owner references)
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch]
# children that come and go with the spec: also pruned (autoscaling off, one replica)
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# a canary's bake on live traffic (rollout.canary.bake): one EndpointSlice that adds the
# canary's pod to the Service's endpoints for the bake window, deleted after it; watched
# with the managed-by selector as the other children
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, patch, delete]
# the Prometheus Operator's kinds, only where its CRDs are served (not watched)
- apiGroups: [monitoring.coreos.com]
  resources: [prometheusrules, podmonitors]
  verbs: [get, list, create, patch, delete]
# the benchmark of each rollout: the Job and the run's ConfigMaps (a finished run wakes the
# operator; superseded runs and pruned history are deleted)
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
# the Job's own ServiceAccount, its Role (get/patch of its one ConfigMap: the API server lets
# the operator grant only what it holds itself, so no bind or escalate) and RoleBinding
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
# observe: why a replica is not up (unschedulable, crash loop, image pull); the benchmark's
# target pod
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# a pod's start, once, when it is first Ready (status.startup): vLLM's own start-up lines
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Events on the VLLMService, one per condition transition; a pod's image pull (its Pulled
# event), read once per start
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
{{- end }}
