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

{{/* The namespaces watched (JSON, for fromJsonArray) unless watchAnyNamespace: watchNamespaces, or the release
namespace alone. */}}
{{- define "kelp.watchedNamespaces" -}}
{{- .Values.watchNamespaces | default (list .Release.Namespace) | toJson }}
{{- end }}

{{- define "kelp.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
What the operator does in a namespace it watches: reconcile Kelp resources into
their children (docs/operator.md) — and nothing more (issue 32: tests/chart checks
these rules against what the code calls, both ways). Children are written by
server-side apply (create, patch); the operator deletes only pods (rolling
restarts), Services (external and HTTP ones switched off) and NetworkPolicies
(switched off); Secrets, StatefulSets, claims and RBAC objects go with their owner
(garbage collection). It holds every permission it grants the broker Role it
creates (leases and configmaps: every verb, pods: read), so it needs neither
`bind` nor `escalate`: those are the only rules beyond its own calls. Secrets: a
secured Cluster's CAs and certificates, and each KelpUser's credentials.
cert-manager Certificates only with certManager.enabled (Clusters with
spec.tls.issuerRef).
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
  verbs: ["get", "list", "create", "patch"]
{{- if .Values.certManager.enabled }}
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "create", "patch"]
{{- end }}
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "patch"]
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
  verbs: ["create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
{{- /* The broker Role's rights, which RBAC's escalation check makes the operator hold to create it. */}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}

{{/* Cluster-scoped rules in every mode: the reads kopf needs (namespaces, CRDs) and StorageClasses (may a
broker volume grow in place?). With rbac.rackAwareness, for Clusters with rack.topologyKey: the shared
`kelp-broker-rack` ClusterRole (get nodes — RBAC lets the operator grant it only because it holds it) and one
ClusterRoleBinding per such Cluster, deleted by the resync when the Cluster goes (their names are the
Clusters', so resourceNames cannot narrow them). */}}
{{- define "kelp.clusterRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["storageclasses"]
  verbs: ["get"]
{{- if .Values.rbac.rackAwareness }}
- apiGroups: [""]
  resources: ["nodes"]
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
  verbs: ["list", "create", "patch", "delete"]
{{- end }}
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
