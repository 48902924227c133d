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
