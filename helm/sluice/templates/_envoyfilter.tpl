{{/*
An Istio EnvoyFilter that inserts Envoy's ratelimit HTTP filter before the router and adds the
rate_limits actions to every route. Arguments (dict): root (chart context), f (istio.gateway or
istio.sidecar values), name, context (GATEWAY or SIDECAR_INBOUND), local (call 127.0.0.1).
*/}}
{{- define "sluice.envoyFilter" -}}
{{- $root := .root }}
{{- $f := .f }}
{{- $svc := printf "%s.%s.svc.%s" (include "sluice.fullname" $root) $root.Release.Namespace $root.Values.istio.clusterDomain }}
{{- $cluster := printf "outbound|%d||%s" (int $root.Values.ports.grpc) $svc }}
{{- if .local }}{{ $cluster = "sluice_local" }}{{ end }}
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: {{ .name }}
  namespace: {{ $f.namespace }}
  labels:
    {{- include "sluice.labels" $root | nindent 4 }}
spec:
  {{- with $f.workloadSelector }}
  workloadSelector:
    labels:
      {{- toYaml . | nindent 6 }}
  {{- end }}
  configPatches:
    {{- if .local }}
    # The sluice container in the same pod.
    - applyTo: CLUSTER
      match:
        context: {{ .context }}
      patch:
        operation: ADD
        value:
          {{- include "sluice.sidecar.envoyCluster" $root | nindent 10 }}
    {{- end }}
    - applyTo: HTTP_FILTER
      match:
        context: {{ .context }}
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager
              subFilter:
                name: envoy.filters.http.router
      patch:
        operation: INSERT_BEFORE
        value:
          {{- if eq ($f.api | default "rls") "rlqs" }}
          {{- include "sluice.rlqsFilter" (dict "f" $f "cluster" $cluster "authority" (ternary "" $svc .local)) | nindent 10 }}
          {{- else }}
          name: envoy.filters.http.ratelimit
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domain: {{ $f.domain | quote }}
            failure_mode_deny: {{ $f.failureModeDeny }}
            timeout: {{ $f.timeout | quote }}
            {{- if $f.enableXRatelimitHeaders }}
            enable_x_ratelimit_headers: DRAFT_VERSION_03
            {{- end }}
            rate_limit_service:
              transport_api_version: V3
              grpc_service:
                envoy_grpc:
                  cluster_name: {{ $cluster | quote }}
                  {{- if not .local }}
                  authority: {{ $svc | quote }}
                  {{- end }}
          {{- end }}
    {{- if ne ($f.api | default "rls") "rlqs" }}
    - applyTo: VIRTUAL_HOST
      match:
        context: {{ .context }}
        routeConfiguration:
          vhost:
            route:
              action: ANY
      patch:
        operation: MERGE
        value:
          rate_limits:
            {{- toYaml $f.rateLimits | nindent 12 }}
    {{- end }}
{{- end }}

{{/*
Envoy's rate_limit_quota HTTP filter (RLQS) calling sluice on the cluster .cluster (with
.authority unless empty), for the settings .f: its domain, and .f.rlqs: the bucket id (each entry
a literal `value` or a request `header`; requests missing one of the headers fall into no
bucket), the reporting interval, the behaviours without or with an expired assignment, and the
status of a denied request. sluice matches a bucket as the descriptor of its entries sorted by key.
*/}}
{{- define "sluice.rlqsFilter" -}}
{{- $q := .f.rlqs }}
{{- $headers := list }}
{{- range $k, $v := $q.bucketId }}{{ if $v.header }}{{ $headers = append $headers $v.header }}{{ end }}{{ end }}
{{- if not $headers }}{{ $headers = list ":path" }}{{ end -}}
name: envoy.filters.http.rate_limit_quota
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
  domain: {{ .f.domain | quote }}
  rlqs_server:
    envoy_grpc:
      cluster_name: {{ .cluster | quote }}
      {{- with .authority }}
      authority: {{ . | quote }}
      {{- end }}
  bucket_matchers:
    matcher_list:
      matchers:
        - predicate:
            {{- if eq (len $headers) 1 }}
            single_predicate:
              {{- include "sluice.rlqsHeaderPresent" (first $headers) | nindent 14 }}
            {{- else }}
            and_matcher:
              predicate:
                {{- range $headers }}
                - single_predicate:
                    {{- include "sluice.rlqsHeaderPresent" . | nindent 20 }}
                {{- end }}
            {{- end }}
          on_match:
            action:
              name: rate_limit_quota
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                bucket_id_builder:
                  bucket_id_builder:
                    {{- range $k, $v := $q.bucketId }}
                    {{ $k }}:
                      {{- if $v.header }}
                      custom_value:
                        name: {{ $v.header | quote }}
                        typed_config:
                          "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                          header_name: {{ $v.header | quote }}
                      {{- else }}
                      string_value: {{ $v.value | quote }}
                      {{- end }}
                    {{- end }}
                reporting_interval: {{ $q.reportingInterval | quote }}
                deny_response_settings:
                  http_status:
                    code: {{ $q.denyStatus }}
                no_assignment_behavior:
                  fallback_rate_limit:
                    blanket_rule: {{ $q.noAssignment }}
                expired_assignment_behavior:
                  fallback_rate_limit:
                    blanket_rule: {{ $q.expired }}
                  expired_assignment_behavior_timeout: {{ $q.expiredTimeout | quote }}
{{- end }}

{{/* The input and value match of "request header NAME is present and not empty". */}}
{{- define "sluice.rlqsHeaderPresent" -}}
input:
  name: {{ . | quote }}
  typed_config:
    "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
    header_name: {{ . | quote }}
value_match:
  safe_regex:
    google_re2: {}
    regex: ".+"
{{- end }}
