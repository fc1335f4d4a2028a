#!/usr/bin/env bash
# bench/lookup: lookup joins through a table's lookup cache against a heap table with a primary
# key and against the lake without a cache; bulk load, hits and misses, refresh, backend memory
# with 100 connections, probe latency during a refresh. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
export PG_HUDI_MAX_CONNECTIONS=120
run_bench lookup "$@"
