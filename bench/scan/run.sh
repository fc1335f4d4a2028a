#!/usr/bin/env bash
# bench/scan: SELECT sum(...) over a 5M-row, 10-column Hudi table, compacted and then with 10%
# of its keys updated in log files, against a heap table, DuckDB over the base files and the
# reference reader, in one run. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
"$BUILD/venv/bin/python" -c 'import duckdb' 2>/dev/null || "$BUILD/venv/bin/pip" install --quiet duckdb==1.4.2
run_bench scan "$@"
