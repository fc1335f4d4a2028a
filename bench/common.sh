#!/usr/bin/env bash
# Shared by bench/*/run.sh: `run_bench NAME ARGS...` builds and installs the release extension,
# starts a fresh cluster of the benchmark's own under the build folder (stopped on exit) with an
# empty lake directory, and runs bench/NAME/bench.py --port PORT --lake DIR ARGS.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

run_bench() {
  local name=$1
  shift
  # Run on their own (not through `make bench`), benchmarks still find cargo-pgrx and
  # PostgreSQL's headers on a fresh machine.
  "$REPO/scripts/deps.sh" system
  # BENCH_PROFILE: another Cargo profile to measure (the release build by default).
  if [ -n "${BENCH_PROFILE:-}" ]; then
    "$REPO/scripts/install.sh" --profile "$BENCH_PROFILE"
  else
    "$REPO/scripts/install.sh" --release
  fi
  local cluster
  cluster=$(run_dir)/bench-$name
  "$REPO/scripts/cluster.sh" stop "$cluster"
  rm -rf "$cluster"
  local port
  port=$("$REPO/scripts/cluster.sh" start "$cluster")
  trap '"$REPO/scripts/cluster.sh" stop "'"$cluster"'"' EXIT
  mkdir -p "$cluster/lake"
  if is_root; then chown postgres: "$cluster/lake"; fi
  "$BUILD/venv/bin/python" "$REPO/bench/$name/bench.py" --port "$port" --lake "$cluster/lake" "$@"
}
