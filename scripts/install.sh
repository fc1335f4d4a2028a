#!/usr/bin/env bash
# Builds pg_hudi and installs it into the system PostgreSQL 15 (library, control file, SQL).
#   install.sh                 a debug build (what the tests use)
#   install.sh --release       an optimised build (benchmarks)
#   install.sh --profile NAME  a build of Cargo profile NAME (bench/common.sh's BENCH_PROFILE)
# Each file is written beside its destination and renamed over it, never overwritten in
# place: a running server keeps the library it mapped (overwriting a mapped pg_hudi.so made a
# running launcher die by SIGSEGV), and its new processes load the new one.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO"
profile=(--debug)
while [ $# -gt 0 ]; do
  case $1 in
    --release) profile=() ;;
    --profile) profile=(--profile "${2:?install: --profile needs a name}"); shift ;;
    *) echo "install: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
staging=$CARGO_TARGET_DIR/pg_hudi-install
rm -rf "$staging"
# A failed build fails the install (pipefail); the filter alone may find nothing to print.
cargo pgrx package --pg-config "$PG_CONFIG" "${profile[@]}" --out-dir "$staging" 2>&1 \
  | { grep -vE '^\s+(Compiling|Installing|Copying|Writing|Discovered|Finished|Building)' || true; }
# Every released version's install script (sql/versions/), beside the current one: CREATE
# EXTENSION ... VERSION of an older one, and upgrades from it, stay possible (the library
# serves them all). Upgrade scripts (sql/pg_hudi--<from>--<to>.sql) pgrx copies itself.
control=$(find "$staging" -name pg_hudi.control -print -quit)
cp sql/versions/pg_hudi--*.sql "$(dirname "$control")/"
sudo=()
is_root || sudo=(sudo)
installed=0
while IFS= read -r -d '' file; do
  target=/${file#"$staging"/}
  "${sudo[@]}" mkdir -p "$(dirname "$target")"
  mode=644
  [[ $file == *.so ]] && mode=755
  "${sudo[@]}" install -m "$mode" "$file" "$target.new.$$"
  "${sudo[@]}" mv -f "$target.new.$$" "$target"
  installed=$((installed + 1))
done < <(find "$staging" -type f -print0)
rm -rf "$staging"
[ "$installed" -gt 0 ] || { echo "install: the package had no files" >&2; exit 1; }
test -f "$("$PG_CONFIG" --pkglibdir)/pg_hudi.so" || { echo "install: pg_hudi.so was not installed" >&2; exit 1; }
