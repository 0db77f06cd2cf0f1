#!/usr/bin/env bash
# Installs what keel needs, builds it, and starts a local keel on loopback (today one member on
# 127.0.0.11), ready for etcdctl. Ctrl-C stops it. Extra arguments go to `keel up`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "==> cargo build --release --bin keel"
cargo build --release --bin keel
exec target/release/keel up "$@"
