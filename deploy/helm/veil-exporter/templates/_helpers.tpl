{{/* The chart name, or nameOverride: app.kubernetes.io/name and the job label of the targets. */}}
{{- define "veil-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of every object: the release name, with the chart name appended unless it holds it. */}}
{{- define "veil-exporter.fullname" -}}
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

{{- define "veil-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "veil-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "veil-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "veil-exporter.labels" -}}
helm.sh/chart: {{ include "veil-exporter.chart" . }}
{{ include "veil-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: veil-exporter
app.kubernetes.io/component: metrics
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* High availability: 2 or more replicas share the controllers through NATS leases. */}}
{{- define "veil-exporter.ha" -}}
{{- if ge (int .Values.replicas) 2 }}true{{ end }}
{{- end }}

{{- define "veil-exporter.configMapName" -}}
{{- printf "%s-config" (include "veil-exporter.fullname" .) }}
{{- end }}

{{- define "veil-exporter.secretName" -}}
{{- default (printf "%s-tokens" (include "veil-exporter.fullname" .)) .Values.existingSecret }}
{{- end }}

{{- define "veil-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "veil-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "veil-exporter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The daemon's configuration: config, with the controllers (each reading its token from the
mounted Secret), nats.url and, in HA mode, ha.enabled and ha.instance set by the chart.
*/}}
{{- define "veil-exporter.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $controllers := list }}
{{- range .Values.controllers }}
{{- $controllers = append $controllers (merge (dict "token_file" (printf "/etc/veil-exporter/tokens/%s.token" .name)) .) }}
{{- end }}
{{- $_ := set $cfg "controllers" $controllers }}
{{- $_ = set $cfg "nats" (merge (dict "url" .Values.nats.url) (default dict $cfg.nats)) }}
{{- if include "veil-exporter.ha" . }}
{{- $events := default dict $cfg.events }}
{{- $store := dig "checkpoint" "store" "file" $events }}
{{- if and (ne (toString (dig "enabled" true $events)) "false") (ne $store "nats_kv") }}
{{- fail (printf "replicas: %d needs config.events.checkpoint.store: nats_kv (it is %s): the next owner of a controller resumes from the position in NATS" (int .Values.replicas) $store) }}
{{- end }}
{{- $_ = set $cfg "ha" (merge (dict "enabled" true) (default dict $cfg.ha) (dict "instance" "${POD_NAME}")) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}
