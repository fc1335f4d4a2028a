#!/usr/bin/env bash
# bench/ingest: pgbench clients of single-row INSERT transactions into a heap table with a
# primary key, a Hudi table with write_mode 'buffered' and one with direct writes: throughput,
# latency, and how long the buffered rows take to reach the lake. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
run_bench ingest "$@"
