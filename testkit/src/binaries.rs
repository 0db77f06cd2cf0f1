//! Where the programs under test are: etcd and etcdctl 3.4 from Debian, the `keel` binary cargo built (or
//! `$KEEL_BIN`), and which of keel and etcd a test's "keel" side is.

use std::path::{Path, PathBuf};

/// Real etcd 3.4 (Debian's `etcd-server`).
pub const ETCD_BIN: &str = "/usr/bin/etcd";
/// etcdctl 3.4 (Debian's `etcd-client`).
pub const ETCDCTL_BIN: &str = "/usr/bin/etcdctl";
/// Env var: path of the `keel` binary to test (overrides the one cargo built).
pub const KEEL_BIN_ENV: &str = "KEEL_BIN";
/// Env var: when set to `1`, the "keel" side of a test is a second real etcd.
pub const AGAINST_ETCD_ENV: &str = "KEEL_DIFF_AGAINST_ETCD";

/// The `keel` binary cargo built for the calling test target, or `$KEEL_BIN` when that is set.
///
/// Expands `env!("CARGO_BIN_EXE_keel")` where it is used, so it compiles only in the tests of the package that
/// owns the `keel` binary (the root package). Other crates use [`keel_bin()`](crate::keel_bin()).
#[macro_export]
macro_rules! keel_bin {
    () => {
        $crate::binaries::keel_bin_or(env!("CARGO_BIN_EXE_keel"))
    };
}

/// `$KEEL_BIN` if set, else `built` (what [`keel_bin!`] passes: the path cargo built).
pub fn keel_bin_or(built: impl AsRef<Path>) -> PathBuf {
    std::env::var_os(KEEL_BIN_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| built.as_ref().to_path_buf())
}

/// The `keel` binary for crates that do not own it (jepsen-tests): `$KEEL_BIN`, else `keel` in the directory the
/// running executable was built into (`target/<profile>/`, also from `target/<profile>/deps/`), else — when
/// cargo's build dir is not its target dir — `target/<profile>/keel` under `$CARGO_TARGET_DIR` or under the
/// running package's directory or one of its parents (cargo sets `CARGO_MANIFEST_DIR` when it runs a test).
/// Panics with what to do if there is none.
pub fn keel_bin() -> PathBuf {
    if let Some(p) = std::env::var_os(KEEL_BIN_ENV) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| {
        panic!("cannot find the running executable to look for keel beside it: {e}")
    });
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let mut candidates = vec![dir.join("keel")];
    if let Some(profile) = dir.file_name() {
        let mut target_dirs: Vec<PathBuf> = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        if let Some(manifest) = std::env::var_os("CARGO_MANIFEST_DIR") {
            target_dirs.extend(Path::new(&manifest).ancestors().map(|a| a.join("target")));
        }
        candidates.extend(target_dirs.iter().map(|t| t.join(profile).join("keel")));
    }
    match candidates.iter().find(|c| c.is_file()) {
        Some(bin) => bin.clone(),
        None => panic!(
            "keel binary not found (looked at {}): set {KEEL_BIN_ENV} or run `cargo build --bin keel` first",
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Panics with a clear message if etcd or etcdctl is missing.
pub fn require_etcd_tools() {
    for bin in [ETCD_BIN, ETCDCTL_BIN] {
        if !Path::new(bin).exists() {
            panic!(
                "{bin} is missing: these tests need etcd 3.4 and etcdctl 3.4 from Debian's etcd-server and \
                 etcd-client packages; run scripts/setup.sh (as root) first"
            );
        }
    }
}

/// True when the "keel" side should be a second real etcd (self-check mode, `KEEL_DIFF_AGAINST_ETCD=1`).
pub fn against_etcd() -> bool {
    matches!(
        std::env::var(AGAINST_ETCD_ENV).as_deref(),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

/// Which server a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Etcd,
    Keel,
}

impl Kind {
    /// `"etcd"` or `"keel"`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Keel => "keel",
        }
    }
}
