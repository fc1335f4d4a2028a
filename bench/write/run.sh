#!/usr/bin/env bash
# bench/write: upserts into a Hudi table from SQL against a heap table's INSERT ... ON CONFLICT,
# and aggregate throughput of 1, 2 and 4 concurrent writers. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
run_bench write "$@"
