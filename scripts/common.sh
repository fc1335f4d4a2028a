# Sourced by the other scripts: paths and helpers shared by `make run` and `make test`.
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
BUILD=${BUILD:-$REPO/build}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pg_hudi/target}
export HUDI_FIXTURES=${HUDI_FIXTURES:-$REPO/tests/fixtures/hudi}

pg_bin() { echo "$("$PG_CONFIG" --bindir)/$1"; }

is_root() { [ "$(id -u)" = 0 ]; }

# Runs a command as the OS user that owns clusters: postgres when we are root (PostgreSQL
# refuses to run as root), ourselves otherwise.
as_pg() {
  if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The folder for clusters and warehouses: $BUILD when the postgres user can reach it, else a
# folder under /tmp named after it (a clone under /root is not traversable by postgres).
run_dir() {
  local dir=$BUILD
  mkdir -p "$dir"
  if is_root && ! runuser -u postgres -- test -x "$dir" 2>/dev/null; then
    dir=/tmp/pg_hudi-$(printf %s "$BUILD" | md5sum | cut -c1-12)
    mkdir -p "$dir"
  fi
  is_root && chown postgres: "$dir"
  echo "$dir"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
