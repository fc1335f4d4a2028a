#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster with pg_hudi preloaded.
#   cluster.sh start DIR [PORT] [SOCKET_DIR]   init (once) and start; prints the port
#   cluster.sh stop DIR                        fast shutdown, if running
# Without SOCKET_DIR the cluster listens on 127.0.0.1 only (no Unix socket).
# PG_HUDI_WORKER_DATABASES, when set, is the cluster's hudi.worker_databases (the tests' clusters
# serve no database until a test asks for it).
set -euo pipefail
source "$(dirname "$0")/common.sh"

cmd=${1:?usage: cluster.sh start|stop DIR [PORT] [SOCKET_DIR]}
dir=${2:?cluster directory}
data=$dir/data

case $cmd in
start)
  mkdir -p "$dir"
  is_root && chown postgres: "$dir"
  if [ ! -f "$data/PG_VERSION" ]; then
    as_pg "$(pg_bin initdb)" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log"
  fi
  if as_pg "$(pg_bin pg_ctl)" -D "$data" status >/dev/null 2>&1; then
    cat "$dir/port"
    exit 0
  fi
  port=${3:-$(free_port)}
  sockets=${4:-}
  cat >"$data/postgresql.auto.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockets'
shared_preload_libraries = 'pg_hudi'
fsync = off
wal_level = logical
full_page_writes = off
max_connections = ${PG_HUDI_MAX_CONNECTIONS:-50}
log_line_prefix = '%m [%p] %b '
CONF
  # Minor releases from 15.20 on restrict logical decoding to trusted output plugins.
  if grep -q '^output_plugin_libraries' <<<"$("$(pg_bin postgres)" --describe-config 2>/dev/null)"; then
    echo "output_plugin_libraries = 'pgoutput, test_decoding, pg_hudi'" >>"$data/postgresql.auto.conf"
  fi
  if [ -n "${PG_HUDI_WORKER_DATABASES:-}" ]; then
    echo "hudi.worker_databases = '${PG_HUDI_WORKER_DATABASES}'" >>"$data/postgresql.auto.conf"
  fi
  echo "$port" >"$dir/port"
  is_root && chown postgres: "$dir/port"
  as_pg "$(pg_bin pg_ctl)" -D "$data" -l "$dir/server.log" -w -t 60 start >/dev/null
  echo "$port"
  ;;
stop)
  if [ -f "$data/PG_VERSION" ] && as_pg "$(pg_bin pg_ctl)" -D "$data" status >/dev/null 2>&1; then
    as_pg "$(pg_bin pg_ctl)" -D "$data" -m "${3:-fast}" -w stop >/dev/null
  fi
  ;;
*)
  echo "unknown command $cmd" >&2
  exit 2
  ;;
esac
