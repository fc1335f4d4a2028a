#!/usr/bin/env bash
# bench/scan: SELECT sum(...) over a 5M-row, 10-column Hudi table, compacted and then with 10%
# of its keys updated in log files, against a heap table, DuckDB over the base files and the
# reference reader, in one run. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
"$REPO/scripts/deps.sh" venv
"$BUILD/venv/bin/python" -c 'import duckdb' 2>/dev/null || "$BUILD/venv/bin/pip" install --quiet duckdb==1.4.2
"$REPO/scripts/install.sh" --release
RUN=$(run_dir)
CLUSTER=$RUN/bench-scan
"$REPO/scripts/cluster.sh" stop "$CLUSTER"
rm -rf "$CLUSTER"
port=$("$REPO/scripts/cluster.sh" start "$CLUSTER")
trap '"$REPO/scripts/cluster.sh" stop "$CLUSTER"' EXIT
mkdir -p "$CLUSTER/lake"
is_root && chown postgres: "$CLUSTER/lake"
"$BUILD/venv/bin/python" "$REPO/bench/scan/bench.py" --port "$port" --lake "$CLUSTER/lake" "$@"
