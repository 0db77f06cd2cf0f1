#!/usr/bin/env bash
# Installs what keel needs, builds it, and starts a local 3-member keel on loopback (127.0.0.11-13), ready for
# etcdctl (port 2379) and kubectl (port 6443, KUBECONFIG printed), plus a worker on this machine (a private
# containerd under keel-data/worker and `keel agent` registered as a Node, so pods run; needs root). Ctrl-C stops
# it all and removes the worker's pods, containerd, bridge and routes. Extra arguments go to `keel up`
# (`--no-worker` for the control plane alone). See docs/node-agent.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The `up` profile (Cargo.toml) builds faster than --release on a fresh machine: no debug info, no LTO, opt-level 2.
echo "==> cargo build --profile up --bin keel"
cargo build --profile up --bin keel
exec target/up/keel up "$@"
