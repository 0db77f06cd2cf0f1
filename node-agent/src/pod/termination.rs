//! The termination message of an exited container, as the kubelet reads it: the host file mounted at the
//! container's `terminationMessagePath` (its last 4 KiB), or, with `terminationMessagePolicy:
//! FallbackToLogsOnError`, an error exit and an empty or missing file, the tail of the container's log
//! (its last 80 lines, at most their last 2 KiB). Path and policy are read from the container's
//! annotations, so a restarted agent reads them as the one that created the container.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use k8s_cri::v1::ContainerStatus;

use crate::cri::labels;
use crate::server::logs::parse_record;

/// Upstream's `MaxContainerTerminationMessageLength`: the most of the file that is read (its end).
pub const MAX_MESSAGE: usize = 4 * 1024;
/// Upstream's `MaxContainerTerminationMessageLogLength`: the most of the log that is used (its end).
pub const MAX_LOG_BYTES: usize = 2 * 1024;
/// Upstream's `MaxContainerTerminationMessageLogLines`.
pub const MAX_LOG_LINES: usize = 80;
/// How much of the end of the log file is read to find its last lines.
const LOG_READ: u64 = 64 * 1024;

/// The message of the exited container `st` ("" for none).
pub fn message(st: &ContainerStatus) -> String {
    let policy = st
        .annotations
        .get(labels::TERMINATION_MESSAGE_POLICY)
        .map(String::as_str);
    // A container that could not even start has no log to fall back to.
    let fallback = policy == Some("FallbackToLogsOnError")
        && st.exit_code != 0
        && st.reason != "ContainerCannotRun";
    let path = st
        .annotations
        .get(labels::TERMINATION_MESSAGE_PATH)
        .filter(|p| !p.is_empty());
    let file = path.and_then(|p| st.mounts.iter().find(|m| &m.container_path == p));
    let (text, check_logs) = match file {
        None => (String::new(), fallback),
        Some(m) => match read_tail(Path::new(&m.host_path), MAX_MESSAGE as u64) {
            Ok(data) => {
                let empty = data.is_empty();
                (
                    String::from_utf8_lossy(&data).into_owned(),
                    fallback && empty,
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
            Err(e) => (
                format!("Error on reading termination log {}: {e}", m.host_path),
                false,
            ),
        },
    };
    if !check_logs {
        return text;
    }
    match read_tail(Path::new(&st.log_path), LOG_READ) {
        Ok(data) => log_tail(&data),
        Err(e) => format!("Error on reading termination message from logs: {e}"),
    }
}

/// The last `max` bytes of the file at `path`.
fn read_tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut out = Vec::new();
    f.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// What the container wrote, from the end of its CRI log file (`data`, which may start mid-line): the
/// last [`MAX_LOG_LINES`] lines, then at most their last [`MAX_LOG_BYTES`] bytes.
pub fn log_tail(data: &[u8]) -> String {
    // The first line may be cut by the read; only whole records count.
    let data = match data.iter().position(|b| *b == b'\n') {
        Some(i) if data.len() as u64 >= LOG_READ => &data[i + 1..],
        _ => data,
    };
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for raw in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(r) = parse_record(raw) else { continue };
        pending.extend_from_slice(r.content);
        if !r.partial {
            pending.push(b'\n');
            lines.push(std::mem::take(&mut pending));
        }
    }
    let skip = lines.len().saturating_sub(MAX_LOG_LINES);
    let out: Vec<u8> = lines[skip..].concat();
    let start = out.len().saturating_sub(MAX_LOG_BYTES);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

/// The terminated state's message: the runtime's, then `": "` and the termination message, as upstream.
pub fn join(runtime: &str, termination: &str) -> String {
    match (runtime.is_empty(), termination.is_empty()) {
        (_, true) => runtime.to_string(),
        (true, false) => termination.to_string(),
        (false, false) => format!("{runtime}: {termination}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::Mount;
    use std::collections::HashMap;

    fn record(s: &str) -> String {
        format!("2026-12-04T10:00:00.000000001Z stderr F {s}\n")
    }

    #[test]
    fn log_tail_keeps_the_last_lines_and_bytes() {
        let log: String = (0..100).map(|i| record(&format!("line {i}"))).collect();
        let t = log_tail(log.as_bytes());
        assert!(t.starts_with("line 20\n"), "{t}");
        assert!(t.ends_with("line 99\n"), "{t}");
        let partial = "2026-12-04T10:00:00Z stdout P he\n2026-12-04T10:00:00Z stdout F llo\n";
        assert_eq!(log_tail(partial.as_bytes()), "hello\n");
        let long: String = (0..10).map(|_| record(&"x".repeat(500))).collect();
        assert_eq!(log_tail(long.as_bytes()).len(), MAX_LOG_BYTES);
    }

    fn status(dir: &Path, policy: &str, exit_code: i32) -> ContainerStatus {
        ContainerStatus {
            exit_code,
            annotations: HashMap::from([
                (
                    labels::TERMINATION_MESSAGE_PATH.to_string(),
                    "/dev/termination-log".to_string(),
                ),
                (
                    labels::TERMINATION_MESSAGE_POLICY.to_string(),
                    policy.to_string(),
                ),
            ]),
            mounts: vec![Mount {
                container_path: "/dev/termination-log".into(),
                host_path: dir.join("tlog").display().to_string(),
                ..Default::default()
            }],
            log_path: dir.join("0.log").display().to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn file_first_then_the_log_on_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, data: &[u8]| {
            std::fs::write(dir.path().join(name), data).unwrap_or_else(|e| panic!("{e}"))
        };
        write("0.log", record("from the log").as_bytes());
        write("tlog", b"bye");
        assert_eq!(message(&status(dir.path(), "File", 1)), "bye");
        assert_eq!(
            message(&status(dir.path(), "FallbackToLogsOnError", 1)),
            "bye"
        );
        write("tlog", b"");
        assert_eq!(message(&status(dir.path(), "File", 1)), "");
        assert_eq!(message(&status(dir.path(), "FallbackToLogsOnError", 0)), "");
        assert_eq!(
            message(&status(dir.path(), "FallbackToLogsOnError", 1)),
            "from the log\n"
        );
        write("tlog", "y".repeat(5000).as_bytes());
        assert_eq!(message(&status(dir.path(), "File", 0)).len(), MAX_MESSAGE);
        assert_eq!(join("", "bye"), "bye");
        assert_eq!(join("OOM", "bye"), "OOM: bye");
        assert_eq!(join("OOM", ""), "OOM");
    }
}
