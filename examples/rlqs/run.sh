#!/usr/bin/env bash
# Starts the RLQS example: sluice (`cargo run -- serve`) with sluice.yaml, then Envoy with
# envoy.yaml (the rate_limit_quota filter), waits until both are ready, and runs until Ctrl-C.
#
#     bash examples/rlqs/run.sh
#
# The same start-up as the front-proxy example (Envoy found or installed the same way, the same
# ports): examples/envoy/run.sh with this folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
EXAMPLE=examples/rlqs TRY="curl -i -H 'x-user: alice' localhost:10000/" exec bash examples/envoy/run.sh
