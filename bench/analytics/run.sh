#!/usr/bin/env bash
# bench/analytics: 20 analytic queries (TPC-H / SSB style: filters with expression aggregates,
# 2- to 6-way joins, GROUP BY ... HAVING, top-N, EXISTS / IN / scalar and correlated subqueries,
# CASE in aggregates, count(DISTINCT)) over a star schema of its own (a 16-column fact table of
# 5M rows and four dimensions), on pg_hudi foreign tables against the same rows in heap tables
# with primary keys and indexes: compacted, and with 10% of the fact rows updated into log
# files; DuckDB over the base files for context. Every pg_hudi result is checked against the
# heap's. Release build, own cluster.
#   bash bench/analytics/run.sh [--rows N] [--queries q1,q5] [--states compacted,updated]
#                               [--timeout SECONDS] [--runs N] [--no-duckdb] [--plans]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
"$BUILD/venv/bin/python" -c 'import duckdb' 2>/dev/null || "$BUILD/venv/bin/pip" install --quiet duckdb==1.4.2
run_bench analytics "$@"
