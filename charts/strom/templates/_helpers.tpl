{{- define "strom.fullname" -}}
{{- if contains "strom" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-strom" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "strom.labels" -}}
app.kubernetes.io/name: strom-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: strom
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "strom.selectorLabels" -}}
app.kubernetes.io/name: strom-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* A Service name is a DNS-1035 label (63 at most): room for the suffix even with a 53-character
release name (Helm's maximum). */}}
{{- define "strom.metricsServiceName" -}}
{{- printf "%s-metrics" (include "strom.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{- define "strom.serviceAccountName" -}}
{{- default (include "strom.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "strom.watchNamespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- join "," .Values.watch.namespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- /*
RBAC rules the operator needs inside each watched namespace. Neither kopf nor the operator ever
sends PUT (kopf patches; the operator uses server-side apply, merge patches and the scale
subresource), so no rule grants `update` except on finalizers, which the API server checks as
`update` (below). Events are kopf's, through the core API, create only.
*/}}
{{- define "strom.namespacedRules" }}
  - apiGroups: ["strom.dev"]
    resources: [stromclusters, stromtopics, stromconsumergroups]
    verbs: [get, list, watch, patch]
  - apiGroups: ["strom.dev"]
    resources: [stromclusters/status, stromtopics/status, stromconsumergroups/status]
    verbs: [patch]
  # The objects it creates for a cluster carry an ownerReference with blockOwnerDeletion: with the
  # OwnerReferencesPermissionEnforcement admission plugin (OpenShift) that needs this permission.
  - apiGroups: ["strom.dev"]
    resources: [stromclusters/finalizers]
    verbs: [update]
  - apiGroups: [""]
    resources: [configmaps, services, serviceaccounts]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch, delete]
  - apiGroups: [""]
    resources: [persistentvolumeclaims]
    verbs: [get, list, watch, patch]
  - apiGroups: [""]
    resources: [events]
    verbs: [create]
  - apiGroups: ["apps"]
    resources: [statefulsets]
    verbs: [get, list, watch, create, patch, delete]
  # StromConsumerGroup autoscaling reads its target and sets replicas through /scale only.
  - apiGroups: ["apps"]
    resources: [deployments]
    verbs: [get]
  - apiGroups: ["apps"]
    resources: [deployments/scale, statefulsets/scale]
    verbs: [patch]
  - apiGroups: ["policy"]
    resources: [poddisruptionbudgets]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: ["networking.k8s.io"]
    resources: [networkpolicies]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: ["monitoring.coreos.com"]
    resources: [servicemonitors]
    verbs: [get, list, watch, create, patch, delete]
{{- end }}

{{- /*
Whether to render a prometheus-operator object: "true" for enabled=true, and for enabled="auto"
when the API server serves its kind (.Capabilities; `helm template` needs --api-versions).
Called with (dict "enabled" VALUE "kind" "PodMonitor" "root" $).
*/}}
{{- define "strom.monitoringEnabled" -}}
{{- $on := .enabled -}}
{{- if and (kindIs "string" $on) (eq $on "auto") -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) -}}true{{- end -}}
{{- else if and (kindIs "bool" $on) $on -}}true
{{- end -}}
{{- end -}}

{{/* The admission webhook's Service (a DNS label: at most 63 characters). */}}
{{- define "strom.webhookName" -}}
{{- printf "%s-webhook" (include "strom.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}
