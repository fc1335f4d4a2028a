#!/usr/bin/env bash
# Installs what building and testing pg_hudi needs, skipping what is already there:
# Debian packages, cargo-pgrx 0.18.0 (initialised against the system PostgreSQL 15), and
# (with `deps.sh venv`) the Python venv for the interoperability tests and the npm packages
# they start (Azure's storage emulator Azurite).
set -euo pipefail
source "$(dirname "$0")/common.sh"

PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang pkg-config libssl-dev
          librocksdb-dev sudo python3-venv)
PGRX_VERSION=0.18.0

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "deps: installing ${missing[*]}"
  local sudo=; is_root || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_pgrx() {
  if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    echo "deps: installing cargo-pgrx $PGRX_VERSION (takes a few minutes once)"
    # --debug: it only drives cargo and pg_config, and builds in 2.6 min instead of 6.5 (2 cores).
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet --debug
  fi
  local config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
  if ! grep -q '^pg15' "$config" 2>/dev/null; then
    cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
  fi
}

install_venv() {
  local venv=$BUILD/venv stamp=$BUILD/venv/.requirements
  if [ ! -f "$stamp" ] || ! cmp -s "$REPO/tests/requirements.txt" "$stamp"; then
    echo "deps: creating Python venv in $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$REPO/tests/requirements.txt"
    cp "$REPO/tests/requirements.txt" "$stamp"
  fi
}

AZURITE_VERSION=3.35.0

install_node_packages() {
  if ! command -v npm >/dev/null; then
    echo "deps: installing nodejs and npm"
    local sudo=; is_root || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
  fi
  if ! grep -qs "\"version\": \"$AZURITE_VERSION\"" "$BUILD/node/node_modules/azurite/package.json"; then
    echo "deps: installing azurite $AZURITE_VERSION"
    npm install --silent --no-audit --no-fund --prefix "$BUILD/node" "azurite@$AZURITE_VERSION" >/dev/null
  fi
}

case ${1:-all} in
system) install_packages; install_pgrx ;;
venv) install_venv; install_node_packages ;;
all) install_packages; install_pgrx; install_venv; install_node_packages ;;
esac
