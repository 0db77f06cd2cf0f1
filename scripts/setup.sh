#!/usr/bin/env bash
# Installs what keel's build and tests need on a Debian 12 (bookworm) machine.
#
# Idempotent: `apt-get update` always runs first (a failure is tolerated only when nothing needs installing, so a
# prepared machine also works offline), then only missing packages are installed. Run it as root; it uses sudo when run as another user and sudo exists.
# It never downloads anything outside apt (kubectl and the Rust toolchain are expected on the machine image).
set -euo pipefail

PACKAGES=(
    etcd-server                 # etcd 3.4: reference server for differential tests
    etcd-client                 # etcdctl 3.4
    protobuf-compiler           # protoc, for tonic/prost code generation
    containerd                  # container runtime driven by the node agent (CRI)
    runc
    containernetworking-plugins # CNI plugins in /usr/lib/cni
    busybox-static              # /bin/busybox: the pause and busybox images the node agent runs without a registry
    nftables                    # nft, for netprog
    iproute2                    # ip, for network namespaces in tests
    curl                        # tests/node_agent.rs calls the agent's API with chosen credentials; tests/up.rs checks the Ingress TLS with --cacert
    docker-registry             # a real registry (distribution) that tests/node_agent.rs pulls from with imagePullSecrets
    apache2-utils               # htpasswd, the registry's bcrypt password file
    python3                     # the official Kubernetes Python client's test (pip-installed into a venv)
    python3-venv
    nginx-light                 # the peer proxy of the ingress benchmark (never started as a service)
    wrk                         # the ingress benchmark's load generator
)

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        die "run this script as root (not root, and no sudo available)"
    fi
fi

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = "installed" ]
}

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian-based systems only"

missing=()
for p in "${PACKAGES[@]}"; do
    is_installed "$p" || missing+=("$p")
done

log "apt-get update"
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null; then
    [ "${#missing[@]}" -eq 0 ] || die "apt-get update failed and packages are missing: ${missing[*]}"
    log "apt-get update failed; every package is already installed, going on"
fi

if [ "${#missing[@]}" -eq 0 ]; then
    log "all packages already installed: ${PACKAGES[*]}"
else
    log "missing packages: ${missing[*]}"
    log "apt-get install ${missing[*]}"
        # Packages such as nginx and etcd start a system service when installed. A policy-rc.d that
    # answers 101 ("action forbidden") keeps them stopped; it is removed again if this script made it.
    made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
        trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    if [ -n "$made_policy" ]; then
        "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
    for p in "${missing[@]}"; do
        is_installed "$p" || die "package $p is still not installed after apt-get install"
    done
fi

# What the tests call by path or by name.
for bin in /usr/bin/etcd /usr/bin/etcdctl protoc containerd ctr runc nft ip /bin/busybox docker-registry htpasswd nginx wrk; do
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found although its package is installed"
done
[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge not found (containernetworking-plugins)"

log "etcd: $(/usr/bin/etcd --version 2>/dev/null | head -n1)"
log "etcdctl: $(ETCDCTL_API=3 /usr/bin/etcdctl version 2>/dev/null | head -n1)"
log "protoc: $(protoc --version)"

if command -v kubectl >/dev/null 2>&1; then
    log "kubectl: $(kubectl version --client 2>/dev/null | head -n1)"
else
    printf '[setup] WARNING: kubectl is not on PATH. Tests that drive keel with kubectl will fail.\n' >&2
    printf '[setup] WARNING: kubectl 1.32 is expected on the machine image; this script does not download it.\n' >&2
fi

if command -v cargo >/dev/null 2>&1; then
    log "cargo: $(cargo --version)"
elif [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
    log "cargo: $("${HOME:-/root}/.cargo/bin/cargo" --version) (in ~/.cargo/bin, not on PATH)"
else
    die "cargo not found (neither on PATH nor in ~/.cargo/bin); install a Rust toolchain (rust-version 1.88 or newer)"
fi

log "done"
