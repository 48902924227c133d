"""RLS over mutual TLS against the container, as Envoy calls it: OK until the limit of 3, then
OVER_LIMIT; a client without a certificate is refused. argv: grpc_port ca client_cert client_key.
"""
import sys

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

port, ca, cert, key = sys.argv[1:5]
read = lambda p: open(p, "rb").read()
request = rls_pb2.RateLimitRequest(
    domain="contract",
    descriptors=[
        ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="masked_remote_address", value="0.0.0.0/0")]
        )
    ],
)
target = f"localhost:{port}"

creds = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
with grpc.secure_channel(target, creds) as ch:
    stub = rls_pb2_grpc.RateLimitServiceStub(ch)
    codes = [stub.ShouldRateLimit(request, timeout=10).overall_code for _ in range(4)]
want = [rls_pb2.RateLimitResponse.OK] * 3 + [rls_pb2.RateLimitResponse.OVER_LIMIT]
assert codes == want, f"codes {codes}, want {want}"

with grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca))) as ch:
    try:
        rls_pb2_grpc.RateLimitServiceStub(ch).ShouldRateLimit(request, timeout=10)
    except grpc.RpcError:
        pass
    else:
        raise AssertionError("a client without a certificate was answered")
print("RLS over mTLS: OK OK OK OVER_LIMIT; no client certificate refused")
