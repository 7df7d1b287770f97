{{/* Names and labels shared by every template of the Kelp chart. */}}

{{- define "kelp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name, with the chart name appended unless the release name holds it. */}}
{{- define "kelp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "kelp.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "kelp.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Cluster-scoped objects are shared by every namespace: their names carry the release namespace. */}}
{{- define "kelp.clusterScopedName" -}}
{{- printf "%s-%s" (include "kelp.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" }}
{{- end }}

{{- define "kelp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kelp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kelp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kelp.labels" -}}
helm.sh/chart: {{ include "kelp.chart" . }}
{{ include "kelp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kelp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kelp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false: name an existing ServiceAccount" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kelp.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
What the operator does in a namespace it watches: reconcile Kelp resources into
their children (docs/operator.md). It holds every permission it grants the broker
Role it creates (leases, configmaps, pods read), so it needs neither `bind` nor
`escalate`. Secrets: a secured Cluster's CAs and certificates, and each KelpUser's
credentials (created, read back, renewed, deleted with their owner). cert-manager
Certificates only with certManager.enabled (Clusters with spec.tls.issuerRef).
*/}}
{{- define "kelp.namespacedRules" -}}
- apiGroups: ["kelp.dev"]
  resources: ["clusters", "topics", "consumergroups", "kelpusers"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["kelp.dev"]
  resources: ["clusters/status", "topics/status", "consumergroups/status", "kelpusers/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["kelp.dev"]
  resources: ["clusters/finalizers", "topics/finalizers", "consumergroups/finalizers", "kelpusers/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- if .Values.certManager.enabled }}
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "serviceaccounts", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}

{{/* Cluster-scoped rules in every mode: the reads kopf needs (namespaces, CRDs), StorageClasses (may a broker
volume grow in place?), and for Clusters with
rack.topologyKey the shared `kelp-broker-rack` ClusterRole (get nodes — RBAC lets the operator grant it
only because it holds it) and one ClusterRoleBinding per such Cluster, deleted when the Cluster goes. */}}
{{- define "kelp.clusterRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
- apiGroups: ["storage.k8s.io"]
  resources: ["storageclasses"]
  verbs: ["get"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  resourceNames: ["kelp-broker-rack"]
  verbs: ["get", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterrolebindings"]
  verbs: ["get", "list", "create", "patch", "delete"]
{{- end }}

{{/* The operator's own Lease (`kelp-operator`, active-replica election) and its events. */}}
{{- define "kelp.electionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["get", "create", "patch"]
{{- end }}
