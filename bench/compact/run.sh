#!/usr/bin/env bash
# bench/compact: compaction of a table whose file slices have a tenth of their keys updated in
# logs, against a plain arrow-rs read and rewrite of the same base files (no merge) in the same
# run, with the compacting backend's peak memory. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
cargo build --quiet --release -p engine --example rewrite_parquet
run_bench compact "$@"
