#!/usr/bin/env bash
# The image contract Envoy Gateway relies on when it runs the ratelimit container: command
# `/bin/ratelimit` with no arguments, uid/gid 65534, a read-only root filesystem, configured only
# by its environment (resource.go) and its volumes (/data/ratelimit/config, /certs,
# /etc/statsd-exporter). An image is assembled here without pulling a base (the release binary
# as /bin/ratelimit, the libraries ldd lists, /etc/passwd and /etc/group) and run with podman
# (offline: vfs storage, runc, cgroupfs, host network); then health, the debug port, the
# Prometheus names and RLS over mutual TLS are checked, and SIGTERM must exit 0.
# Run by scripts/test.sh after the main tests; needs root (apt-get, podman).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.tools/venv

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    echo "installing: podman runc"
    env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc >/dev/null
fi

cargo build --release --locked --bin sluice
bin=target/release/sluice

work=$(mktemp -d)
name="sluice-contract-$$"
export CONTAINERS_CONF="$work/containers.conf"
cat >"$CONTAINERS_CONF" <<'CONF'
[containers]
default_ulimits = []
[engine]
events_logger = "file"
CONF
pm() {
    podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs \
        --runtime runc --cgroup-manager cgroupfs "$@"
}
cleanup() {
    pm rm -f "$name" >/dev/null 2>&1 || true
    pm rmi -f localhost/sluice-contract >/dev/null 2>&1 || true
    rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT
fail() {
    echo "image contract: $*" >&2
    pm logs "$name" >&2 2>/dev/null || true
    exit 1
}

# The image: the binary and what it links, nothing else (no shell, no package manager).
root="$work/rootfs"
mkdir -p "$root/bin" "$root/etc" "$root/data" "$root/certs" "$root/etc/statsd-exporter"
cp "$bin" "$root/bin/ratelimit"
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
tar -C "$root" -c . | pm import - localhost/sluice-contract >"$work/import.log" 2>&1 ||
    { cat "$work/import.log" >&2; exit 1; }

# The volumes Envoy Gateway mounts: rules, certificates (made here), the statsd mapping.
vol="$work/volumes"
mkdir -p "$vol/data/ratelimit/config" "$vol/certs" "$vol/statsd"
cat >"$vol/data/ratelimit/config/contract.yaml" <<'YAML'
domain: contract
descriptors:
  - key: masked_remote_address
    value: 0.0.0.0/0
    rate_limit: {unit: hour, requests_per_unit: 3}
YAML
cp tests/fixtures/envoy-gateway-statsd-mapper.yaml "$vol/statsd/conf.yaml"
c="$vol/certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=envoy-gateway \
    -keyout "$c/ca.key" -out "$c/ca.crt" 2>/dev/null
leaf() { # name, extension lines
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$c/$1.key" -out "$c/$1.csr" 2>/dev/null
    printf '%b' "$2" >"$c/$1.ext"
    openssl x509 -req -in "$c/$1.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
        -days 2 -extfile "$c/$1.ext" -out "$c/$1.crt" 2>/dev/null
}
leaf tls 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'
leaf envoy 'extendedKeyUsage=clientAuth\n'
# Secret volumes are world-readable files (defaultMode 0644, as Envoy Gateway sets).
chmod 0644 "$c"/*.key "$c"/*.crt

# Free ports instead of 8081, 8080, 6070 and 19001: the network is the host's.
read -r grpc http debug prom < <("$VENV/bin/python" - <<'PY'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
)

pm run -d --name "$name" --user 65534:65534 --read-only --network host \
    --cap-drop ALL --security-opt no-new-privileges \
    -v "$vol/data:/data:ro" -v "$vol/certs:/certs:ro" -v "$vol/statsd:/etc/statsd-exporter:ro" \
    -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_IGNOREDOTFILES=true \
    -e RUNTIME_WATCH_ROOT=false -e LOG_LEVEL=info -e USE_STATSD=false \
    -e GRPC_SERVER_USE_TLS=true -e GRPC_SERVER_TLS_CERT=/certs/tls.crt \
    -e GRPC_SERVER_TLS_KEY=/certs/tls.key -e GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt \
    -e USE_PROMETHEUS=true -e PROMETHEUS_ADDR="127.0.0.1:$prom" \
    -e PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml \
    -e GRPC_HOST=127.0.0.1 -e GRPC_PORT="$grpc" -e HOST=127.0.0.1 -e PORT="$http" \
    -e DEBUG_HOST=127.0.0.1 -e DEBUG_PORT="$debug" \
    localhost/sluice-contract /bin/ratelimit >/dev/null

# Health, polled (bounded): the startup probe's `GET :8080/healthcheck`.
for _ in $(seq 1 300); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/healthcheck")" = 200 ]; then
        break
    fi
    [ "$(pm inspect -f '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
    sleep 0.1
done
[ "$(curl -s "http://127.0.0.1:$http/healthcheck")" = OK ] || fail "no healthy answer"
echo "healthcheck: OK"

pid=$(pm inspect -f '{{.State.Pid}}' "$name")
grep -q $'^Uid:\t65534\t65534\t65534\t65534' "/proc/$pid/status" || fail "not running as uid 65534"
grep -q $'^Gid:\t65534\t65534\t65534\t65534' "/proc/$pid/status" || fail "not running as gid 65534"
[ "$(pm inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$name")" = true ] || fail "root filesystem writable"
echo "uid/gid 65534, read-only root filesystem, /bin/ratelimit with no arguments"

GRPC_VERBOSITY=NONE "$VENV/bin/python" scripts/image-contract/check.py "$grpc" "$c/ca.crt" "$c/envoy.crt" "$c/envoy.key" \
    || fail "RLS over mutual TLS"
curl -sf "http://127.0.0.1:$debug/rlconfig" | grep -q masked_remote_address || fail "no /rlconfig on the debug port"
echo "debug port: /rlconfig"
curl -sf "http://127.0.0.1:$prom/metrics" |
    grep -q '^ratelimit_service_rate_limit_over_limit{domain="contract",key1="masked_remote_address_0_0_0_0/0"} 1$' ||
    fail "no Envoy Gateway metric names on PROMETHEUS_ADDR"
echo "prometheus: Envoy Gateway's names"

pm stop -t 20 "$name" >/dev/null
code=$(pm inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "exit code $code after SIGTERM"
echo "image contract: passed"
