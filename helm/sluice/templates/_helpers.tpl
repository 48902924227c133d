{{/*
Names, labels and the pieces shared by the Deployment and the sidecar templates. Every template
here takes the sluice chart's own context: `.` inside this chart, `.Subcharts.sluice` from a
parent chart.
*/}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
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

{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "sluice.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (toString (default .appVersion .image.tag)) }}
{{- end }}
{{- end }}

{{- define "sluice.image" -}}
{{- include "sluice.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) }}
{{- end }}

{{- define "sluice.configMapName" -}}
{{- default (printf "%s-config" (include "sluice.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* True when the chart creates a Secret for Redis (a password or a CA given in values). */}}
{{- define "sluice.createRedisSecret" -}}
{{- $r := .Values.store.redis }}
{{- if and (eq .Values.store.backend "redis") (not $r.existingSecret) (or $r.password $r.tls.ca) }}true{{ end }}
{{- end }}

{{- define "sluice.redisSecretName" -}}
{{- default (printf "%s-redis" (include "sluice.fullname" .)) .Values.store.redis.existingSecret }}
{{- end }}

{{/* True when a CA bundle is mounted: from the chart's Secret or from existingSecret. */}}
{{- define "sluice.redisCaKey" -}}
{{- $r := .Values.store.redis }}
{{- if eq .Values.store.backend "redis" }}
{{- if $r.existingSecret }}{{ $r.tls.existingSecretCaKey }}{{ else if $r.tls.ca }}ca.crt{{ end }}
{{- end }}
{{- end }}

{{- define "sluice.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount }}
{{- if eq .Values.store.backend "redis" }}2{{ else }}1{{ end }}
{{- else }}
{{- .Values.replicaCount }}
{{- end }}
{{- end }}

{{/* Checks that span several values (types are checked by values.schema.json). */}}
{{- define "sluice.validate" -}}
{{- $v := .Values }}
{{- if and (eq $v.store.backend "redis") (not $v.store.redis.url) }}
{{- fail "store.redis.url is required with store.backend=redis" }}
{{- end }}
{{- if and $v.store.redis.url (regexMatch "^[a-z-]+://[^/@]*@" $v.store.redis.url) }}
{{- fail "store.redis.url must not hold credentials (they would be stored in the pod spec): use store.redis.password or store.redis.existingSecret" }}
{{- end }}
{{- if and (eq $v.mode "deployment") (eq $v.store.backend "memory") (not $v.store.memory.allowMultipleReplicas) }}
{{- if $v.autoscaling.enabled }}
{{- fail "autoscaling with store.backend=memory: every pod would enforce each limit on its own (N pods allow N times the limit). Use store.backend=redis, or set store.memory.allowMultipleReplicas=true if that is what you want." }}
{{- end }}
{{- if gt (int (include "sluice.replicas" .)) 1 }}
{{- fail "replicaCount > 1 with store.backend=memory: every pod would enforce each limit on its own (N pods allow N times the limit). Use store.backend=redis, or set store.memory.allowMultipleReplicas=true if that is what you want." }}
{{- end }}
{{- end }}
{{- if and (eq $v.config.reload "rollout") $v.config.existingConfigMap }}
{{- /* Allowed, but the checksum cannot see an external ConfigMap: NOTES.txt says so. */}}
{{- end }}
{{- if and $v.istio.sidecar.enabled (not $v.istio.sidecar.namespace) }}
{{- fail "istio.sidecar.namespace is required with istio.sidecar.enabled (the namespace of the application's pods)" }}
{{- end }}
{{- end }}

{{/*
checkov exceptions for the Deployment, each only where it applies, with its reason.
*/}}
{{- define "sluice.checkovSkips" -}}
{{- $n := 0 }}
{{- if not .Values.image.digest }}
{{- $n = add1 $n }}
checkov.io/skip{{ $n }}: "CKV_K8S_43=The image is built by the user from the repository's Dockerfile, so the chart cannot know its digest; set image.digest to pin it (CI renders that too)."
{{- if ne .Values.image.pullPolicy "Always" }}
{{- $n = add1 $n }}
checkov.io/skip{{ $n }}: "CKV_K8S_15=IfNotPresent with a fixed release tag (never latest); set image.digest, or set image.pullPolicy to Always for mutable tags."
{{- end }}
{{- end }}
{{- if not .Values.networkPolicy.enabled }}
{{- $n = add1 $n }}
checkov.io/skip{{ $n }}: "CKV2_K8S_6=networkPolicy.enabled is opt-in: who may call sluice (gateway namespaces, meshes) and where Redis lives are cluster-specific, and a wrong default policy would cut Envoy off its rate limits."
{{- end }}
{{- $r := .Values.store.redis }}
{{- if and (eq .Values.store.backend "redis") (or $r.existingSecret $r.password) }}
{{- $n = add1 $n }}
checkov.io/skip{{ $n }}: "CKV_K8S_35=sluice reads the Redis password only from SLUICE_REDIS_PASSWORD; it comes from a Secret through secretKeyRef and is never in the pod spec."
{{- end }}
{{- end }}

{{/* The sluice container's environment: every setting as its SLUICE_* variable. */}}
{{- define "sluice.env" -}}
{{- $v := .Values }}
- name: SLUICE_GRPC_ADDR
  value: {{ printf "0.0.0.0:%d" (int $v.ports.grpc) | quote }}
- name: SLUICE_HTTP_ADDR
  value: {{ printf "0.0.0.0:%d" (int $v.ports.http) | quote }}
- name: SLUICE_BACKEND
  value: {{ $v.store.backend | quote }}
{{- with $v.store.keyPrefix }}
- name: SLUICE_KEY_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- if eq $v.store.backend "memory" }}
- name: SLUICE_MEMORY_MAX_ENTRIES
  value: {{ $v.store.memory.maxEntries | int64 | toString | quote }}
{{- else }}
{{- $r := $v.store.redis }}
- name: SLUICE_REDIS_URL
  value: {{ $r.url | quote }}
{{- if or $r.existingSecret $r.password }}
- name: SLUICE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "sluice.redisSecretName" . }}
      key: {{ if $r.existingSecret }}{{ $r.existingSecretPasswordKey }}{{ else }}password{{ end }}
{{- end }}
{{- with include "sluice.redisCaKey" . }}
- name: SLUICE_REDIS_TLS_CA
  value: /etc/sluice/redis-tls/{{ . }}
{{- end }}
{{- if not (kindIs "invalid" $r.poolSize) }}
- name: SLUICE_REDIS_POOL_SIZE
  value: {{ $r.poolSize | int64 | toString | quote }}
{{- end }}
{{- with $r.connectTimeout }}
- name: SLUICE_REDIS_CONNECT_TIMEOUT
  value: {{ . | quote }}
{{- end }}
{{- with $r.commandTimeout }}
- name: SLUICE_REDIS_COMMAND_TIMEOUT
  value: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $r.breakerFailures) }}
- name: SLUICE_REDIS_BREAKER_FAILURES
  value: {{ $r.breakerFailures | int64 | toString | quote }}
{{- end }}
{{- with $r.breakerBackoff }}
- name: SLUICE_REDIS_BREAKER_BACKOFF
  value: {{ . | quote }}
{{- end }}
{{- with $r.clock }}
- name: SLUICE_CLOCK
  value: {{ . | quote }}
{{- end }}
{{- with $r.onStoreError }}
- name: SLUICE_ON_STORE_ERROR
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- $s := $v.settings }}
- name: SLUICE_MERGE_DOMAINS
  value: {{ $s.mergeDomains | toString | quote }}
- name: SLUICE_SHADOW_MODE
  value: {{ $s.shadowMode | toString | quote }}
- name: SLUICE_QUOTA_MODE
  value: {{ $s.quotaMode | toString | quote }}
- name: SLUICE_CHARGE_REJECTED
  value: {{ $s.chargeRejected | toString | quote }}
- name: SLUICE_RESPONSE_HEADERS
  value: {{ $s.responseHeaders | toString | quote }}
{{- with $s.responseHeadersFormat }}
- name: SLUICE_RESPONSE_HEADERS_FORMAT
  value: {{ . | quote }}
{{- end }}
- name: SLUICE_DRAIN_TIMEOUT
  value: {{ $s.drainTimeout | quote }}
- name: SLUICE_LOG_LEVEL
  value: {{ $s.logLevel | quote }}
- name: SLUICE_LOG_FORMAT
  value: {{ $s.logFormat | quote }}
{{- $h := $v.hardening }}
- name: SLUICE_MAX_REQUEST_BYTES
  value: {{ $h.maxRequestBytes | toString | quote }}
- name: SLUICE_MAX_DESCRIPTORS
  value: {{ $h.maxDescriptors | toString | quote }}
- name: SLUICE_MAX_ENTRIES
  value: {{ $h.maxEntries | toString | quote }}
- name: SLUICE_MAX_KEY_BYTES
  value: {{ $h.maxKeyBytes | toString | quote }}
- name: SLUICE_MAX_VALUE_BYTES
  value: {{ $h.maxValueBytes | toString | quote }}
- name: SLUICE_MAX_DOMAIN_BYTES
  value: {{ $h.maxDomainBytes | toString | quote }}
- name: SLUICE_MAX_IN_FLIGHT
  value: {{ $h.maxInFlight | toString | quote }}
- name: SLUICE_GRPC_REQUEST_READ_TIMEOUT
  value: {{ $h.grpcRequestReadTimeout | toString | quote }}
- name: SLUICE_GRPC_MAX_CONCURRENT_STREAMS
  value: {{ $h.grpcMaxConcurrentStreams | toString | quote }}
- name: SLUICE_GRPC_KEEPALIVE_INTERVAL
  value: {{ $h.grpcKeepaliveInterval | toString | quote }}
- name: SLUICE_GRPC_KEEPALIVE_TIMEOUT
  value: {{ $h.grpcKeepaliveTimeout | toString | quote }}
- name: SLUICE_GRPC_MAX_CONNECTION_AGE
  value: {{ $h.grpcMaxConnectionAge | toString | quote }}
- name: SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE
  value: {{ $h.grpcMaxConnectionAgeGrace | toString | quote }}
- name: SLUICE_GRPC_MAX_CONNECTIONS
  value: {{ $h.grpcMaxConnections | toString | quote }}
- name: SLUICE_GRPC_IDLE_TIMEOUT
  value: {{ $h.grpcIdleTimeout | toString | quote }}
- name: SLUICE_GRPC_PREFACE_TIMEOUT
  value: {{ $h.grpcPrefaceTimeout | toString | quote }}
- name: SLUICE_HTTP_MAX_CONNECTIONS
  value: {{ $h.httpMaxConnections | toString | quote }}
- name: SLUICE_HTTP_IDLE_TIMEOUT
  value: {{ $h.httpIdleTimeout | toString | quote }}
- name: SLUICE_HTTP_HEADER_READ_TIMEOUT
  value: {{ $h.httpHeaderReadTimeout | toString | quote }}
- name: SLUICE_HTTP_BODY_TIMEOUT
  value: {{ $h.httpBodyTimeout | toString | quote }}
{{- $q := $v.rlqs }}
- name: SLUICE_RLQS_ASSIGNMENT_TTL
  value: {{ $q.assignmentTtl | toString | quote }}
- name: SLUICE_RLQS_MAX_STREAMS
  value: {{ $q.maxStreams | int64 | toString | quote }}
- name: SLUICE_RLQS_MAX_BUCKETS_PER_STREAM
  value: {{ $q.maxBucketsPerStream | int64 | toString | quote }}
- name: SLUICE_RLQS_MAX_REPORT_BYTES
  value: {{ $q.maxReportBytes | int64 | toString | quote }}
- name: SLUICE_RLQS_MAX_BYTES_PER_STREAM
  value: {{ $q.maxBytesPerStream | int64 | toString | quote }}
- name: SLUICE_RLQS_MAX_BYTES
  value: {{ $q.maxBytes | int64 | toString | quote }}
{{- if $v.tls.enabled }}
- name: SLUICE_GRPC_TLS_CERT
  value: /etc/sluice/grpc-tls/tls.crt
- name: SLUICE_GRPC_TLS_KEY
  value: /etc/sluice/grpc-tls/tls.key
{{- if $v.tls.mutual }}
- name: SLUICE_GRPC_TLS_CLIENT_CA
  value: /etc/sluice/grpc-tls/ca.crt
{{- with $v.tls.allowedSans }}
- name: SLUICE_GRPC_TLS_ALLOWED_SAN
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
- name: SLUICE_GRPC_TLS_RELOAD_INTERVAL
  value: {{ $v.tls.reloadInterval | quote }}
{{- end }}
{{- with $v.xds.server }}
- name: SLUICE_CONFIG_XDS
  value: {{ . | quote }}
- name: SLUICE_XDS_NODE_ID
  value: {{ $v.xds.nodeId | quote }}
- name: SLUICE_START_WITHOUT_CONFIG
  value: {{ $v.xds.startWithoutConfig | toString | quote }}
- name: SLUICE_XDS_MAX_MESSAGE_BYTES
  value: {{ $v.xds.maxMessageBytes | int64 | toString | quote }}
{{- if $v.xds.tls.enabled }}
- name: SLUICE_XDS_TLS
  value: "true"
- name: SLUICE_XDS_TLS_CA
  value: /etc/sluice/xds-tls/ca.crt
{{- if $v.xds.tls.clientCertificate }}
- name: SLUICE_XDS_TLS_CERT
  value: /etc/sluice/xds-tls/tls.crt
- name: SLUICE_XDS_TLS_KEY
  value: /etc/sluice/xds-tls/tls.key
{{- end }}
{{- with $v.xds.tls.serverName }}
- name: SLUICE_XDS_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.tracing.otlpEndpoint }}
- name: SLUICE_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The sluice container (one list item), for the Deployment and for sidecar use. */}}
{{- define "sluice.container" -}}
{{- $v := .Values }}
- name: sluice
  image: {{ include "sluice.image" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - serve
    {{- if not $v.xds.server }}
    - --config
    - {{ $v.config.mountPath }}
    {{- end }}
    {{- with $v.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    {{- include "sluice.env" . | trim | nindent 4 }}
  ports:
    - name: grpc
      containerPort: {{ $v.ports.grpc }}
      protocol: TCP
    - name: http
      containerPort: {{ $v.ports.http }}
      protocol: TCP
  startupProbe:
    {{- include "sluice.healthProbe" . | nindent 4 }}
    {{- toYaml $v.probes.startup | nindent 4 }}
  readinessProbe:
    {{- include "sluice.healthProbe" . | nindent 4 }}
    {{- toYaml $v.probes.readiness | nindent 4 }}
  livenessProbe:
    tcpSocket:
      port: grpc
    {{- toYaml $v.probes.liveness | nindent 4 }}
  {{- if and (gt (int $v.preStopSleepSeconds) 0) (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ $v.preStopSleepSeconds }}
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    {{- if not $v.xds.server }}
    - name: sluice-config
      mountPath: {{ $v.config.mountPath }}
      readOnly: true
    {{- end }}
    {{- if and $v.xds.server $v.xds.tls.enabled }}
    - name: sluice-xds-tls
      mountPath: /etc/sluice/xds-tls
      readOnly: true
    {{- end }}
    {{- if $v.tls.enabled }}
    - name: sluice-grpc-tls
      mountPath: /etc/sluice/grpc-tls
      readOnly: true
    {{- end }}
    {{- if include "sluice.redisCaKey" . }}
    - name: sluice-redis-tls
      mountPath: /etc/sluice/redis-tls
      readOnly: true
    {{- end }}
{{- end }}

{{/* The volumes the container mounts (list items). */}}
{{- define "sluice.volumes" -}}
{{- if not .Values.xds.server }}
- name: sluice-config
  configMap:
    name: {{ include "sluice.configMapName" . }}
{{- end }}
{{- if and .Values.xds.server .Values.xds.tls.enabled }}
- name: sluice-xds-tls
  secret:
    secretName: {{ required "xds.tls.secretName is required with xds.tls.enabled" .Values.xds.tls.secretName }}
{{- end }}
{{- if .Values.tls.enabled }}
- name: sluice-grpc-tls
  secret:
    secretName: {{ required "tls.secretName is required with tls.enabled" .Values.tls.secretName }}
{{- end }}
{{- with include "sluice.redisCaKey" . }}
- name: sluice-redis-tls
  secret:
    secretName: {{ include "sluice.redisSecretName" $ }}
    items:
      - key: {{ . }}
        path: {{ . }}
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when the rules change (config.reload "rollout"). */}}
{{- define "sluice.podAnnotations" -}}
{{- if and (eq .Values.config.reload "rollout") (not .Values.config.existingConfigMap) (not .Values.xds.server) }}
checksum/sluice-config: {{ include "sluice.configFiles" . | sha256sum }}
{{- end }}
{{- if include "sluice.createRedisSecret" . }}
checksum/sluice-redis: {{ include "sluice.redisSecretData" . | sha256sum }}
{{- end }}
{{- end }}

{{/* ConfigMap data: each file as given, a map rendered as YAML. */}}
{{- define "sluice.configFiles" -}}
{{- range $name, $body := .Values.config.files }}
{{ $name }}: |
  {{- if kindIs "string" $body }}
  {{- $body | trimSuffix "\n" | nindent 2 }}
  {{- else }}
  {{- toYaml $body | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{- define "sluice.redisSecretData" -}}
{{- with .Values.store.redis.password }}
password: {{ . | b64enc }}
{{- end }}
{{- with .Values.store.redis.tls.ca }}
ca.crt: {{ . | b64enc }}
{{- end }}
{{- end }}

{{/*
Public: the sluice container for another chart's pod (mode "sidecar"). From a parent chart that
depends on sluice:  containers: {{- include "sluice.sidecar.container" .Subcharts.sluice | nindent 8 }}
*/}}
{{- define "sluice.sidecar.container" -}}
{{- include "sluice.validate" . }}
{{- include "sluice.container" . }}
{{- end }}

{{/* Public: the volumes of the sidecar container (list items). */}}
{{- define "sluice.sidecar.volumes" -}}
{{- include "sluice.volumes" . }}
{{- end }}

{{/* Public: pod annotations that roll the parent's pods when the sluice rules change. */}}
{{- define "sluice.sidecar.podAnnotations" -}}
{{- include "sluice.podAnnotations" . }}
{{- end }}

{{/*
Public: the Envoy cluster (v3) for a plain Envoy in the same pod: gRPC (HTTP/2) to the sluice
container at 127.0.0.1. Reference it from the ratelimit filter as cluster_name "sluice_local".
*/}}
{{- define "sluice.sidecar.envoyCluster" -}}
name: sluice_local
type: STATIC
connect_timeout: 0.25s
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
load_assignment:
  cluster_name: sluice_local
  endpoints:
    - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: 127.0.0.1
                port_value: {{ .Values.ports.grpc }}
{{- end }}

{{/* The startup and readiness check: gRPC health, or /healthcheck when gRPC speaks TLS. */}}
{{- define "sluice.healthProbe" -}}
{{- if .Values.tls.enabled }}
httpGet:
  path: /healthcheck
  port: {{ .Values.ports.http }}
{{- else }}
grpc:
  port: {{ .Values.ports.grpc }}
  service: ratelimit
{{- end }}
{{- end }}
