#!/usr/bin/env bash
# bench/update: the backend's peak memory and the time of an UPDATE of every row, for tables of
# growing size whose file slices stay the same size, against a heap table. Release build, own
# cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
run_bench update "$@"
