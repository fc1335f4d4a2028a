#!/usr/bin/env bash
# bench/stream: waiting consumers (hudi.consume with wait) and subscriptions (hudi.subscribe):
# how soon a waiter returns a commit of this server, how many timeline listings 100 waiting
# sessions cost, how far a subscribed heap table lags at 10 commits/s, and its initial copy
# against INSERT INTO heap SELECT. Release build, own cluster.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
"$REPO/scripts/deps.sh" venv
# 100 waiting sessions and the benchmark's own.
export PG_HUDI_MAX_CONNECTIONS=130
run_bench stream "$@"
