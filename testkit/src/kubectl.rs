//! The real kubectl (1.32, from the machine image), always with bounded time and a private `KUBECACHEDIR` per
//! run, so runs never share discovery caches. It is never downloaded: [`require_kubectl`] fails with a clear
//! message when it is not on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::process::{describe, run_bounded, CtlOutput};

/// How long one kubectl invocation may take by default.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one kubectl run printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Exit code 0.
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<CtlOutput> for Run {
    fn from(out: CtlOutput) -> Run {
        Run {
            ok: out.success(),
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }
}

/// The first executable `name` in a directory of `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Panics with a clear message unless `kubectl` is on `PATH` and answers `kubectl version --client` (checked
/// once per process).
pub fn require_kubectl() {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    let res = CHECKED.get_or_init(|| {
        let Some(bin) = find_on_path("kubectl") else {
            return Err(format!(
                "kubectl is not on PATH ({}): the Kubernetes API tests drive the real kubectl 1.32, which comes \
                 with the machine image; the test kit never downloads it",
                std::env::var("PATH").unwrap_or_default()
            ));
        };
        let mut cmd = Command::new(&bin);
        cmd.args(["version", "--client"]);
        let out = run_bounded(cmd, None, Duration::from_secs(30));
        if out.success() {
            Ok(())
        } else {
            Err(format!(
                "{} version --client failed ({:?}): {}{}",
                bin.display(),
                out.code,
                out.stdout,
                out.stderr
            ))
        }
    });
    if let Err(e) = res {
        panic!("{e}");
    }
}

/// A kubectl command with `args`: `KUBECONFIG=kubeconfig`, `KUBECACHEDIR=cache_dir`, `HOME=home`, stdin
/// `/dev/null` (callers that run it through [`run_kubectl`] or a [`crate::Process`] get their stdin there).
pub fn kubectl_command(kubeconfig: &Path, home: &Path, cache_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache_dir)
        .env("HOME", home)
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs a kubectl command with `stdin` (`None`: empty), killed after `limit` (then `ok` is false and stderr
/// says so).
pub fn run_kubectl(cmd: Command, stdin: Option<&[u8]>, limit: Duration) -> Run {
    let line = describe(&cmd);
    let out = run_bounded(cmd, stdin, limit);
    let killed = out.code.is_none();
    let mut run = Run::from(out);
    if killed {
        run.stderr
            .push_str(&format!("\n(testkit: `{line}` killed after {limit:?})"));
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_executables_on_path_only() {
        assert!(find_on_path("sh").is_some_and(|p| p.is_absolute()));
        assert_eq!(find_on_path("no-such-program-keel-testkit"), None);
    }
}
