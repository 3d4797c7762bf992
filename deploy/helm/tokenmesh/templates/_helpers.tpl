{{/* Names and labels. */}}
{{- define "tokenmesh.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tokenmesh.headless" -}}
{{- printf "%s-peers" (include "tokenmesh.fullname" .) -}}
{{- end -}}

{{- define "tokenmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tokenmesh.labels" -}}
{{ include "tokenmesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tokenmesh.secretName" -}}
{{- .Values.secretKey.existingSecret | default (printf "%s-secret" (include "tokenmesh.fullname" .)) -}}
{{- end -}}

{{/* The join list: every pod's stable DNS name, gossip port. */}}
{{- define "tokenmesh.join" -}}
{{- $full := include "tokenmesh.fullname" . -}}
{{- $svc := include "tokenmesh.headless" . -}}
{{- $out := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $out = append $out (printf "%s-%d.%s.%s.svc.cluster.local:%d" $full $i $svc $.Release.Namespace (int $.Values.ports.gossip)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
