# grpc.health.v1.Health/Check for the service "ratelimit", framed by hand: a gRPC message is a
# 0 byte (not compressed), a 4-byte big-endian length, then the protobuf HealthCheckRequest
# {service (field 1, string) = "ratelimit"} = 0x0a 0x09 "ratelimit".
# A SERVING answer is the message 00 00000002 08 01 ({status (field 1) = SERVING (1)}).
want=00000000020801
got=$(printf '\000\000\000\000\013\012\011ratelimit' |
  curl -sS --fail --max-time 5 --http2-prior-knowledge \
    -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- \
    "http://$SLUICE_HOST:$SLUICE_GRPC_PORT/grpc.health.v1.Health/Check" | od -An -v -tx1 | tr -d ' \n')
if [ "$got" != "$want" ]; then
  echo "grpc.health.v1 Check(ratelimit): want bytes $want, got '$got'" >&2
  exit 1
fi
echo "grpc.health.v1 Check(ratelimit): SERVING"
curl -sS --fail --max-time 5 "http://$SLUICE_HOST:$SLUICE_HTTP_PORT/healthcheck"
echo
