#!/usr/bin/env bash
# `make test`: every test layer, in order, each reported; non-zero exit when any fails.
#   test.sh all | engine | pg | regress | interop ...
set -uo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO"

layers=("$@")
[ ${#layers[@]} -eq 0 ] || [ "${layers[0]}" = all ] && layers=(engine pg regress interop)

"$REPO/scripts/deps.sh" system || exit 1
case " ${layers[*]} " in *" interop "*) "$REPO/scripts/deps.sh" venv || exit 1 ;; esac
RUN=$(run_dir)

layer_engine() {
  cargo test -p engine 2>&1 | grep -vE '^\s+(Compiling|Downloaded|Downloading)'
}

layer_pg() {
  local runas=()
  if is_root; then
    mkdir -p "$RUN/pgrx-data" && chown postgres: "$RUN/pgrx-data"
    runas=(--runas postgres --pgdata "$RUN/pgrx-data")
  fi
  cargo pgrx test pg15 "${runas[@]}" 2>&1 | grep -vE '^\s+(Compiling|Downloaded|Downloading)'
}

layer_regress() {
  "$REPO/scripts/install.sh" || return 1
  local cluster=$RUN/regress out=$RUN/regress-out port status
  "$REPO/scripts/cluster.sh" stop "$cluster"
  rm -rf "$cluster" "$out"
  mkdir -p "$out"
  port=$("$REPO/scripts/cluster.sh" start "$cluster") || return 1
  "$(pg_bin createdb)" -h 127.0.0.1 -p "$port" -U postgres regression
  # A small lake of fixture tables for the read tests, found through regress.lake.
  local lake=$cluster/lake zip
  for zip in quickstart_trips_table/mor/avro/v6_trips_8i1u sample_table/mor/avro/v9_txns_simple_nometa; do
    python3 -m zipfile -e "$HUDI_FIXTURES/$zip.zip" "$lake" || return 1
  done
  rm -rf "$lake/__MACOSX"
  is_root && chown -R postgres: "$lake"
  "$(pg_bin psql)" -X -q -h 127.0.0.1 -p "$port" -U postgres -d regression \
    -c "ALTER DATABASE regression SET regress.lake = '$lake'"
  local tests
  tests=$(cd pg_test/sql && ls *.sql | sed 's/\.sql$//')
  "$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
    --host=127.0.0.1 --port="$port" --user=postgres --use-existing --dbname=regression \
    --bindir="$("$PG_CONFIG" --bindir)" --inputdir=pg_test --outputdir="$out" $tests
  status=$?
  [ $status -ne 0 ] && [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"
  "$REPO/scripts/cluster.sh" stop "$cluster"
  return $status
}

layer_interop() {
  "$REPO/scripts/install.sh" || return 1
  # Three test files at a time (each file's tests in order, on one worker: module clusters are
  # shared within a file): the tests mostly wait on servers, so two cores run three of them.
  PG_HUDI_RUN_DIR=$RUN "$BUILD/venv/bin/python" -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --durations=30 tests
}

passed=0 failed=0 summary=()
for layer in "${layers[@]}"; do
  echo "=== layer: $layer"
  start=$SECONDS
  if "layer_$layer"; then
    passed=$((passed + 1)); summary+=("  $layer: passed ($((SECONDS - start)) s)")
  else
    failed=$((failed + 1)); summary+=("  $layer: FAILED ($((SECONDS - start)) s)")
  fi
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "layers: $passed passed, $failed failed"
[ $failed -eq 0 ]
