#!/usr/bin/env bash
# keel's whole test suite: every crate, every target (unit tests, integration tests, examples, benches built as
# tests), the test binaries run two at a time. Runs scripts/setup.sh first (etcd/etcdctl 3.4 and the other packages). Exits non-zero on any failure; the runner's summary
# says how many tests passed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
    export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi

echo "==> setup: scripts/setup.sh"
scripts/setup.sh

echo "==> prerequisites"
command -v cargo >/dev/null 2>&1 || { echo "cargo not found; install a Rust toolchain" >&2; exit 1; }
for bin in /usr/bin/etcd /usr/bin/etcdctl protoc; do
    command -v "$bin" >/dev/null 2>&1 || { echo "$bin not found; run scripts/setup.sh first" >&2; exit 1; }
done
echo "$(cargo --version), $(/usr/bin/etcd --version | head -n1)"

echo "==> lint: cargo fmt --check, cargo clippy --workspace --all-targets -- -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

# No module of the API server's crate imports one that imports it back; elsewhere a cycle may not grow.
echo "==> import cycles: scripts/import-cycles.py"
for limit in api/kube:0 api/kube-registry:0 api/kube-model:0 raft:0 client-kit:0 netprog:0 store:2 node-agent:2 scheduler:4 controllers:5 api/etcd:5; do
    python3 scripts/import-cycles.py "${limit%%:*}" --max "${limit##*:}"
done
# Counted by top-level module too (what a split into crates needs acyclic): none in the API server's crates.
# keel-kube-api's modules in their declared layers, lowest first (the crates below it are the compiler's to
# keep apart): no module imports one above it, and a new module has to be given a place.
python3 scripts/import-cycles.py api/kube-model --top --max 0
python3 scripts/import-cycles.py api/kube-registry --top --max 0
python3 scripts/import-cycles.py api/kube --top --max 0 --layers \
    "dial, leader, metrics, pki | authn, authz, serviceaccount, csr, audit | admission, priority, lifecycle \
    | metrics_api, aggregator, discovery | handler, certs | compaction, kubernetes_service, crd_controller, join \
    | server"

echo "==> build: cargo build --workspace --all-targets"
cargo build --workspace --all-targets

# The same binaries cargo test --workspace --all-targets runs, two at a time (scripts/run-tests.py says why).
echo "==> test: every test binary of cargo test --workspace --all-targets, in two lanes"
python3 scripts/run-tests.py

# keel and real etcd side by side, the quick subset: fails only if it cannot run, never on a timing. It runs
# the debug binaries the build step made: a second, optimised build of every crate would cost CI minutes for
# figures it does not keep (docs/benchmarks.md comes from `cargo run --release -p keel-benches`).
echo "==> benchmarks: target/debug/keel-benches --quick (debug build; published figures are release runs)"
target/debug/keel-benches --quick --keel target/debug/keel
