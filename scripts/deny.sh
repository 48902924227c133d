#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (deny.toml): licences, bans and sources, and advisories
# when the RustSec database can be fetched. Installs cargo-deny once with
# `cargo install --locked` (a few minutes of compiling). Not part of scripts/test.sh, to keep
# CI short; run it before releases and when dependencies change.
#
#   bash scripts/deny.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo deny --version >/dev/null 2>&1; then
    echo "==> installing cargo-deny (cargo install --locked)"
    cargo install cargo-deny --locked
fi

echo "==> cargo deny check licenses bans sources"
cargo deny check licenses bans sources

echo "==> cargo deny check advisories"
if cargo deny fetch db >/dev/null 2>&1; then
    cargo deny check advisories
else
    echo "the RustSec advisory database cannot be fetched from here: advisories not checked"
fi
