#!/usr/bin/env bash
# `make run`: install what is missing, build and install pg_hudi, start a throwaway cluster
# with it preloaded, run sql/demo.sql on an embedded file:// warehouse, and leave it running.
# `run.sh stop` stops that cluster.
set -euo pipefail
source "$(dirname "$0")/common.sh"

RUN=$(run_dir)
CLUSTER=$RUN/cluster
if [ "${1:-}" = stop ]; then
  "$REPO/scripts/cluster.sh" stop "$CLUSTER"
  echo "stopped the cluster in $CLUSTER/data"
  exit 0
fi

"$REPO/scripts/deps.sh" system
# The release build: a newcomer's first queries run as the benchmarks' do; built cold it took
# no longer than an optimised build without link-time optimisation (bench/README.md, "make
# run's build").
"$REPO/scripts/install.sh" --release

# Restart so that a freshly installed library is the one loaded.
"$REPO/scripts/cluster.sh" stop "$CLUSTER"
# Prefer the default port and socket so that a bare `psql` reaches the cluster.
port=5432 sockets=/var/run/postgresql
if ! python3 -c 'import socket; socket.create_server(("127.0.0.1", 5432)).close()' 2>/dev/null \
   || ! as_pg test -w "$sockets" 2>/dev/null; then
  port=$(free_port) sockets=
fi
port=$("$REPO/scripts/cluster.sh" start "$CLUSTER" "$port" "$sockets")

user=$(id -un)
psql_pg() { "$(pg_bin psql)" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
if [ "$(psql_pg -d postgres -Atc "SELECT count(*) FROM pg_roles WHERE rolname = '$user'")" = 0 ]; then
  psql_pg -d postgres -c "CREATE ROLE \"$user\" SUPERUSER LOGIN"
fi
if [ "$(psql_pg -d postgres -Atc "SELECT count(*) FROM pg_database WHERE datname = '$user'")" = 0 ]; then
  psql_pg -d postgres -c "CREATE DATABASE \"$user\" OWNER \"$user\""
fi

warehouse=$RUN/warehouse
mkdir -p "$warehouse"
# Two Spark-written tables for the demo to read.
for zip in quickstart_trips_table/mor/avro/v6_trips_8i1u sample_table/mor/avro/v9_txns_simple_nometa; do
  table=$(basename "$zip")
  if [ ! -d "$warehouse/$table" ] && [ -f "$HUDI_FIXTURES/$zip.zip" ]; then
    python3 -m zipfile -e "$HUDI_FIXTURES/$zip.zip" "$warehouse"
  fi
done
rm -rf "$warehouse/__MACOSX" "$warehouse/customers"
is_root && chown -R postgres: "$warehouse"
echo "== sql/demo.sql (warehouse file://$warehouse)"
PATH=$("$PG_CONFIG" --bindir):$PATH PGHOST=127.0.0.1 PGPORT=$port PGUSER=$user PGDATABASE=$user \
  psql -X -v ON_ERROR_STOP=1 -v warehouse="file://$warehouse" -f "$REPO/sql/demo.sql"

env_line="PGHOST=127.0.0.1 PGPORT=$port"
[ -n "$sockets" ] && env_line=""
cat <<MSG

pg_hudi is running: PostgreSQL 15 on port $port, data directory $CLUSTER/data
(server log: $CLUSTER/server.log, warehouse: file://$warehouse).
Connect:  ${env_line:+$env_line }psql            (role and database "$user", or -U postgres)
Try:      ${env_line:+$env_line }psql -c 'SELECT hudi.version()'
Stop:     make stop
MSG
