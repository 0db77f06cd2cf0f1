#!/usr/bin/env bash
# Installs what keel needs, builds it, and starts a local 3-member keel on loopback (127.0.0.11-13), ready for
# etcdctl (port 2379) and kubectl (port 6443, KUBECONFIG printed). Ctrl-C stops it. Extra arguments go to
# `keel up`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "==> cargo build --release --bin keel"
cargo build --release --bin keel
exec target/release/keel up "$@"
