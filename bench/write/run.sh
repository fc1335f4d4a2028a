#!/usr/bin/env bash
# bench/write: upserts into a Hudi table from SQL against a heap table's INSERT ... ON CONFLICT,
# and aggregate throughput of 1, 2 and 4 concurrent writers. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
"$REPO/scripts/install.sh" --release
RUN=$(run_dir)
CLUSTER=$RUN/bench-write
"$REPO/scripts/cluster.sh" stop "$CLUSTER"
rm -rf "$CLUSTER"
port=$("$REPO/scripts/cluster.sh" start "$CLUSTER")
trap '"$REPO/scripts/cluster.sh" stop "$CLUSTER"' EXIT
mkdir -p "$CLUSTER/lake"
is_root && chown postgres: "$CLUSTER/lake"
"$BUILD/venv/bin/python" "$REPO/bench/write/bench.py" --port "$port" --lake "$CLUSTER/lake" "$@"
