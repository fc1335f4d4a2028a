#!/usr/bin/env bash
# Builds pg_hudi and installs it into the system PostgreSQL 15 (library, control file, SQL).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO"
sudo=; is_root || sudo=--sudo
# A failed build fails the install (pipefail), even with an older pg_hudi.so installed; the
# filter alone may find nothing to print.
cargo pgrx install --pg-config "$PG_CONFIG" $sudo "$@" 2>&1 | { grep -vE '^\s+(Compiling|Installing|Copying|Writing|Discovered|Finished|Building)' || true; }
test -f "$("$PG_CONFIG" --pkglibdir)/pg_hudi.so" || { echo "install: pg_hudi.so was not installed" >&2; exit 1; }
