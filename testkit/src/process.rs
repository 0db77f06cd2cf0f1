//! Child processes that cannot outlive their test.
//!
//! - A [`Process`] is SIGKILLed and reaped when it is dropped (also while the test panics); reaping is bounded
//!   by [`REAP_TIMEOUT`] (a process that will not die is reported and left, never waited for forever).
//! - Every wait is bounded: [`Process::wait_timeout`], [`Process::stop`] (SIGTERM, a grace period, SIGKILL),
//!   [`run_bounded`] (kills the command when its time is up).
//! - stdout and stderr go to files, never to pipes that someone must drain: one log file per server in its temp
//!   dir ([`Capture::Log`]), a pair of named files ([`Capture::Files`]), or unnamed temp files for short commands
//!   ([`Capture::Temp`]). They can be read while the process runs and after it died.
//! - stdin is `/dev/null`, or the given bytes (from an unnamed temp file, so nothing blocks on a full pipe).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a SIGKILLed process may take to be reaped before the kit gives up on it (with a warning).
pub const REAP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between two polls of a waiting loop (the first ones are shorter).
const MAX_POLL: Duration = Duration::from_millis(20);

/// Where a process's stdout and stderr go.
#[derive(Clone, Debug)]
pub enum Capture {
    /// Both streams appended to one file in the order they were written (a server's log: each start of a member
    /// appends to it). [`Process::stdout`] reads what this start appended.
    Log(PathBuf),
    /// `<dir>/<name>.stdout` and `<dir>/<name>.stderr`, created (truncated) at spawn.
    Files { dir: PathBuf, name: String },
    /// Unnamed temporary files, gone with the [`Process`].
    Temp,
}

/// What a bounded command run produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtlOutput {
    pub stdout: String,
    pub stderr: String,
    /// Exit code; `None` if it was killed (by a signal, or by the kit when its time was up).
    pub code: Option<i32>,
}

impl CtlOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// One output file of a process: a read handle and where this process's output starts in it.
#[derive(Debug)]
struct Sink {
    file: File,
    start: u64,
}

impl Sink {
    fn read(&self) -> Vec<u8> {
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut buf = vec![0u8; len.saturating_sub(self.start) as usize];
        let mut done = 0;
        while done < buf.len() {
            match self
                .file
                .read_at(&mut buf[done..], self.start + done as u64)
            {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        buf.truncate(done);
        buf
    }
}

/// A running (or finished, not yet dropped) child process. See the module documentation.
#[derive(Debug)]
pub struct Process {
    child: Child,
    exit: Option<ExitStatus>,
    cmdline: String,
    stdout: Sink,
    /// `None`: stderr goes to the stdout file ([`Capture::Log`]).
    stderr: Option<Sink>,
    log: Option<PathBuf>,
}

/// `program arg arg …`, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn create_rw(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

impl Process {
    /// Starts `cmd` with its output captured as `capture` and `stdin` as its input (`None`: `/dev/null`).
    pub fn start(
        cmd: &mut Command,
        capture: Capture,
        stdin: Option<&[u8]>,
    ) -> std::io::Result<Process> {
        let cmdline = describe(cmd);
        let (stdout, stderr, log) = match capture {
            Capture::Log(path) => {
                let file = OpenOptions::new().create(true).append(true).open(&path)?;
                let start = file.metadata()?.len();
                cmd.stdout(Stdio::from(file.try_clone()?))
                    .stderr(Stdio::from(file));
                let read = File::open(&path)?;
                (Sink { file: read, start }, None, Some(path))
            }
            Capture::Files { dir, name } => {
                let out = create_rw(&dir.join(format!("{name}.stdout")))?;
                let err = create_rw(&dir.join(format!("{name}.stderr")))?;
                cmd.stdout(Stdio::from(out.try_clone()?))
                    .stderr(Stdio::from(err.try_clone()?));
                (
                    Sink {
                        file: out,
                        start: 0,
                    },
                    Some(Sink {
                        file: err,
                        start: 0,
                    }),
                    None,
                )
            }
            Capture::Temp => {
                let out = tempfile::tempfile()?;
                let err = tempfile::tempfile()?;
                cmd.stdout(Stdio::from(out.try_clone()?))
                    .stderr(Stdio::from(err.try_clone()?));
                (
                    Sink {
                        file: out,
                        start: 0,
                    },
                    Some(Sink {
                        file: err,
                        start: 0,
                    }),
                    None,
                )
            }
        };
        match stdin {
            None => {
                cmd.stdin(Stdio::null());
            }
            Some(bytes) => {
                let mut input = tempfile::tempfile()?;
                input.write_all(bytes)?;
                input.seek(SeekFrom::Start(0))?;
                cmd.stdin(Stdio::from(input));
            }
        }
        let child = cmd.spawn()?;
        Ok(Process {
            child,
            exit: None,
            cmdline,
            stdout,
            stderr,
            log,
        })
    }

    /// [`Process::start`] with [`Capture::Temp`], panicking with the command line if it cannot start.
    pub fn spawn(cmd: &mut Command, stdin: Option<&[u8]>) -> Process {
        Process::start(cmd, Capture::Temp, stdin)
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", describe(cmd)))
    }

    /// The command line it was started with.
    pub fn cmdline(&self) -> &str {
        &self.cmdline
    }

    /// The log file of a [`Capture::Log`] process.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// The process id until it is reaped.
    pub fn pid(&self) -> Option<u32> {
        self.exit.is_none().then(|| self.child.id())
    }

    /// How it ended, once it has been reaped.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// Reaps it if it has exited; how it ended, if it has.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Whether it has exited (reaping it).
    pub fn has_exited(&mut self) -> bool {
        self.try_wait().is_some()
    }

    /// Whether it still runs (reaping it if not).
    pub fn is_running(&mut self) -> bool {
        !self.has_exited()
    }

    /// Waits until it exits or `limit` passes; how it ended, `None` if it still runs.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            let elapsed = start.elapsed();
            if elapsed >= limit {
                return None;
            }
            thread::sleep(nap.min(limit - elapsed));
            nap = (nap * 2).min(MAX_POLL);
        }
    }

    /// Waits until it exits or `limit` passes; true if it exited.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        self.wait_timeout(limit).is_some()
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP`) unless it has been reaped; false if it was not sent.
    pub fn signal(&self, signal: libc::c_int) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        // SAFETY: kill(2) on the pid of a child we own and have not reaped, so the pid is not reused.
        unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
    }

    /// SIGKILL, then reap (bounded by [`REAP_TIMEOUT`]). How it ended; `None` if it could not be reaped in time.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if let Some(st) = self.try_wait() {
            return Some(st);
        }
        let _ = self.child.kill();
        let st = self.wait_timeout(REAP_TIMEOUT);
        if st.is_none() {
            eprintln!(
                "warning: process {} ({}) survived SIGKILL for {REAP_TIMEOUT:?}; leaving it",
                self.child.id(),
                self.cmdline
            );
        }
        st
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. The exit status and whether SIGKILL was needed; `None` if it
    /// had already been reaped, or could not be.
    pub fn stop(&mut self, grace: Duration) -> Option<(ExitStatus, bool)> {
        if self.exit.is_some() {
            return None;
        }
        if let Some(st) = self.try_wait() {
            return Some((st, false));
        }
        self.signal(libc::SIGTERM);
        if let Some(st) = self.wait_timeout(grace) {
            return Some((st, false));
        }
        self.kill().map(|st| (st, true))
    }

    /// What it wrote to stdout so far ([`Capture::Log`]: both streams, from this start on).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.read()).into_owned()
    }

    /// What it wrote to stderr so far (empty for [`Capture::Log`], where stderr is in [`Process::stdout`]).
    pub fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .map(|s| String::from_utf8_lossy(&s.read()).into_owned())
            .unwrap_or_default()
    }

    /// Number of complete lines on stdout so far.
    pub fn stdout_lines(&self) -> usize {
        self.stdout.read().iter().filter(|b| **b == b'\n').count()
    }

    /// Waits until stdout has at least `lines` lines, the process exits, or `limit` passes.
    pub fn wait_lines(&mut self, lines: usize, limit: Duration) {
        let start = Instant::now();
        while self.stdout_lines() < lines && !self.has_exited() && start.elapsed() < limit {
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills it if it still runs and returns what it printed; `code` is `None` if it had to be killed.
    pub fn finish(mut self) -> CtlOutput {
        let exited = self.try_wait();
        if exited.is_none() {
            self.kill();
        }
        CtlOutput {
            stdout: self.stdout(),
            stderr: self.stderr(),
            code: exited.and_then(|st| st.code()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.kill();
        }
    }
}

/// Runs a command to completion with `stdin` as its input (`None`: empty), killing it after `limit`.
pub fn run_bounded(mut cmd: Command, stdin: Option<&[u8]>, limit: Duration) -> CtlOutput {
    let mut p = Process::spawn(&mut cmd, stdin);
    p.wait_exit(limit);
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn captures_stdout_stderr_stdin_and_the_exit_code() {
        let out = run_bounded(
            sh("cat; echo err >&2; exit 3"),
            Some(b"in\n"),
            Duration::from_secs(10),
        );
        assert_eq!(out.stdout, "in\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.code, Some(3));
        assert!(!out.success());
    }

    #[test]
    fn a_command_past_its_limit_is_killed_without_a_code() {
        let start = Instant::now();
        let out = run_bounded(
            sh("echo started; exec sleep 30"),
            None,
            Duration::from_millis(300),
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(out.stdout, "started\n");
        assert_eq!(out.code, None);
    }

    #[test]
    fn drop_kills_and_reaps() {
        let p = Process::spawn(&mut sh("exec sleep 30"), None);
        let pid = p.pid().unwrap();
        drop(p);
        // Reaped, not a zombie: the pid is gone from /proc.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn stop_escalates_to_sigkill_when_sigterm_is_ignored() {
        let mut p = Process::spawn(
            &mut sh("trap '' TERM; echo ready; while :; do sleep 1; done"),
            None,
        );
        p.wait_lines(1, Duration::from_secs(10));
        let (st, killed) = p.stop(Duration::from_millis(300)).unwrap();
        assert!(killed && !st.success());
        assert_eq!(p.stop(Duration::from_millis(300)), None, "already stopped");
        let mut q = Process::spawn(&mut sh("exec sleep 30"), None);
        let (_, killed) = q.stop(Duration::from_secs(10)).unwrap();
        assert!(!killed, "sleep exits on SIGTERM");
    }

    #[test]
    fn log_capture_appends_and_reads_this_start_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let mut a = Process::start(
            &mut sh("echo one; echo two >&2"),
            Capture::Log(log.clone()),
            None,
        )
        .unwrap();
        assert!(a.wait_exit(Duration::from_secs(10)));
        let mut b = Process::start(&mut sh("echo three"), Capture::Log(log.clone()), None).unwrap();
        assert!(b.wait_exit(Duration::from_secs(10)));
        assert_eq!(b.stdout(), "three\n");
        assert_eq!(b.stderr(), "");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nthree\n");
        assert_eq!(b.log_path(), Some(log.as_path()));
    }

    #[test]
    fn named_files_hold_each_stream() {
        let dir = tempfile::tempdir().unwrap();
        let capture = Capture::Files {
            dir: dir.path().to_path_buf(),
            name: "tool".into(),
        };
        let mut p = Process::start(&mut sh("echo o; echo e >&2"), capture, None).unwrap();
        assert!(p.wait_exit(Duration::from_secs(10)));
        let out = p.finish();
        assert_eq!(out.code, Some(0));
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("tool.stdout"), "o\n");
        assert_eq!(read("tool.stderr"), "e\n");
    }
}
