{{/* The release's resource name prefix, at most 63 characters. */}}
{{- define "korovod.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "korovod.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "korovod.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "korovod.operatorImage" -}}
{{ .Values.operator.image.repository }}:{{ .Values.operator.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "korovod.sidecarImage" -}}
{{ .Values.sidecar.image.repository }}:{{ .Values.sidecar.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "korovod.webhookService" -}}
{{ include "korovod.fullname" . }}-webhook
{{- end -}}

{{- define "korovod.webhookSecret" -}}
{{ include "korovod.fullname" . }}-webhook-tls
{{- end -}}

{{- /* The Secret the operator keeps its own webhook CA and serving certificate in (not rendered:
the operator creates it, so no render carries key material). */ -}}
{{- define "korovod.webhookCertSecret" -}}
{{ include "korovod.fullname" . }}-webhook-cert
{{- end -}}

{{- /* The webhook serving certificate's DNS names: the Service's, short to fully qualified. */ -}}
{{- define "korovod.webhookDnsNames" -}}
{{- $svc := include "korovod.webhookService" . -}}
{{- $svc }},{{ $svc }}.{{ .Release.Namespace }},{{ $svc }}.{{ .Release.Namespace }}.svc,{{ $svc }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{- define "korovod.metricsLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: metrics
{{- end -}}
