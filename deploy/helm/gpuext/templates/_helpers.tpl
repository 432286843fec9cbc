{{/* Common labels. */}}
{{- define "gpuext.labels" -}}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
{{ include "gpuext.selectorLabels" . }}
{{- end -}}

{{/* Selector labels. */}}
{{- define "gpuext.selectorLabels" -}}
app.kubernetes.io/name: gpuext
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image reference. */}}
{{- define "gpuext.image" -}}
{{ .Values.image.name }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
Host paths the agent names to the runtime, with the agent's defaults
(internal/config: Default). The chart mounts each at the same path.
*/}}
{{- define "gpuext.pinDir" -}}{{ .Values.config.pinDir | default "/sys/fs/bpf/gpuext" | clean }}{{- end -}}
{{- define "gpuext.stateDir" -}}{{ .Values.config.stateDir | default "/run/gpuext" | clean }}{{- end -}}
{{- define "gpuext.devrtDir" -}}{{ .Values.config.devrtDir | default "/opt/gpuext/devrt" | clean }}{{- end -}}
{{- define "gpuext.agentSocketDir" -}}{{ .Values.config.agentSocket | default "/run/gpuext-agent/agent.sock" | dir }}{{- end -}}
{{- define "gpuext.nriSocketDir" -}}{{ .Values.nri.socket | dir }}{{- end -}}

{{/*
Where a bpf filesystem is mounted for pinDir (bpf.EnsureBPFFS): /sys/fs/bpf
for a pin dir under it, else the pin dir itself.
*/}}
{{- define "gpuext.bpffsDir" -}}
{{- $pin := include "gpuext.pinDir" . -}}
{{- if or (eq $pin "/sys/fs/bpf") (hasPrefix "/sys/fs/bpf/" $pin) -}}/sys/fs/bpf{{- else -}}{{ $pin }}{{- end -}}
{{- end -}}

{{/* The agent's config file: values.config plus what the chart manages. */}}
{{- define "gpuext.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- range $key := list "pinDir" "stateDir" "devrtDir" "agentSocket" "hostRoot" -}}
{{- $v := get $c $key -}}
{{- if and $v (not (isAbs $v)) -}}
{{- fail (printf "config.%s %q: must be an absolute host path" $key $v) -}}
{{- end -}}
{{- end -}}
{{- if or (not $c.hostRoot) (eq (clean $c.hostRoot) "/") -}}
{{- fail "config.hostRoot: the agent runs in a container, and the chart mounts the node's /proc and /sys/fs/cgroup under hostRoot: set a directory such as /host" -}}
{{- end -}}
{{- range $key := list "metricsAddress" "devicePlugin" "constraintsFile" "catalogDir" -}}
{{- if hasKey $c $key -}}
{{- fail (printf "config.%s is set by the chart: use the values %s" $key (get (dict "metricsAddress" "metrics.*" "devicePlugin" "devicePlugin.*" "constraintsFile" "constraints" "catalogDir" "catalog") $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.metrics.enabled -}}
{{- $_ := set $c "metricsAddress" (printf "%s:%d" .Values.metrics.bindAddress (int .Values.metrics.port)) -}}
{{- end -}}
{{- if .Values.devicePlugin.enabled -}}
{{- $dp := omit .Values.devicePlugin "enabled" -}}
{{- $_ := set $dp "kubeletDir" (clean .Values.kubeletDir) -}}
{{- $_ := set $c "devicePlugin" $dp -}}
{{- end -}}
{{- if .Values.constraints -}}
{{- $_ := set $c "constraintsFile" "/etc/gpuext/constraints.json" -}}
{{- end -}}
{{- if .Values.catalog -}}
{{- $_ := set $c "catalogDir" "/etc/gpuext/catalog" -}}
{{- end -}}
{{- toPrettyJson $c -}}
{{- end -}}
