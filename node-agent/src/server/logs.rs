//! `kubectl logs` on the agent: container log files in the CRI format the runtime writes (one record per
//! line: `<RFC 3339 nano time> <stdout|stderr> <P|F> <content>`, `P` for a fragment of a longer line),
//! read back as the kubelet does: fragments joined, `timestamps`, `tailLines`, `sinceSeconds`/`sinceTime`,
//! `limitBytes`, and `follow` until the container stops.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// How often a followed log is polled for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// What the client asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep streaming while the container runs.
    pub follow: bool,
    /// Prefix every line with its time.
    pub timestamps: bool,
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only records at or after this time (ns since the epoch).
    pub since_ns: Option<i128>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
}

impl LogOptions {
    /// Reads the query string (`follow`, `timestamps`, `tailLines`, `sinceSeconds`, `sinceTime`,
    /// `limitBytes`); Err names the bad parameter.
    pub fn parse(query: &str, now_ns: i128) -> Result<LogOptions, String> {
        let mut o = LogOptions::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let flag = || parse_bool(&v).ok_or_else(|| format!("invalid value {v:?} for {k}"));
            match k.as_ref() {
                "follow" => o.follow = flag()?,
                "timestamps" => o.timestamps = flag()?,
                "tailLines" => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid tailLines {v:?}"))?;
                    o.tail_lines = Some(n.max(0) as usize);
                }
                "limitBytes" => {
                    let n: i64 = v.parse().map_err(|_| format!("invalid limitBytes {v:?}"))?;
                    if n < 1 {
                        return Err("limitBytes must be greater than zero".into());
                    }
                    o.limit_bytes = Some(n as usize);
                }
                "sinceSeconds" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| format!("invalid sinceSeconds {v:?}"))?;
                    if n < 1 {
                        return Err("sinceSeconds must be greater than zero".into());
                    }
                    o.since_ns = Some(now_ns - i128::from(n) * 1_000_000_000);
                }
                "sinceTime" => {
                    let t: jiff::Timestamp =
                        v.parse().map_err(|_| format!("invalid sinceTime {v:?}"))?;
                    o.since_ns = Some(t.as_nanosecond());
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The time as written.
    pub time: &'a str,
    /// ns since the epoch (0 if the time does not parse).
    pub ns: i128,
    /// Whether a later record continues this line.
    pub partial: bool,
    /// The content, without the line break.
    pub content: &'a [u8],
}

/// Parses one line (without its `\n`); None for a malformed one.
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or_default();
    let ns = time
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_nanosecond())
        .unwrap_or(0);
    Some(Record {
        time,
        ns,
        partial: tag == b"P",
        content,
    })
}

/// Turns whole lines of the file into what the client sees, given the options (not tail or limit).
struct Renderer {
    opts: LogOptions,
    /// A line continued by `P` records, held until its `F` record.
    pending: Vec<u8>,
    pending_time: Option<String>,
}

impl Renderer {
    fn new(opts: LogOptions) -> Renderer {
        Renderer {
            opts,
            pending: Vec::new(),
            pending_time: None,
        }
    }

    /// Feeds one file line; a complete output line when it ends one.
    fn line(&mut self, raw: &[u8]) -> Option<Vec<u8>> {
        let r = parse_record(raw)?;
        if self.opts.since_ns.is_some_and(|s| r.ns < s) {
            return None;
        }
        if self.pending_time.is_none() {
            self.pending_time = Some(r.time.to_string());
        }
        self.pending.extend_from_slice(r.content);
        if r.partial {
            return None;
        }
        let mut out = Vec::with_capacity(self.pending.len() + 40);
        if self.opts.timestamps {
            out.extend_from_slice(self.pending_time.take().unwrap_or_default().as_bytes());
            out.push(b' ');
        }
        self.pending_time = None;
        out.append(&mut self.pending);
        out.push(b'\n');
        Some(out)
    }
}

/// Whether the container still writes to its log (checked while following).
pub type StillRunning = Box<dyn Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

/// Streams the log at `path` into `tx` as the options say; ends at EOF, or with `follow` once
/// `running` says the container stopped and nothing more was written (or the receiver is gone).
pub async fn stream(
    path: PathBuf,
    opts: LogOptions,
    running: StillRunning,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    let mut r = Renderer::new(opts.clone());
    let mut budget = opts.limit_bytes.unwrap_or(usize::MAX);
    // The existing content first: all of it is read so that tailLines counts whole output lines.
    let mut buf = Vec::new();
    if let Err(e) = file.read_to_end(&mut buf).await {
        let _ = tx.send(Err(e)).await;
        return;
    }
    let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut lines: Vec<Vec<u8>> = buf[..complete]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| r.line(l))
        .collect();
    if let Some(n) = opts.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut carry: Vec<u8> = buf[complete..].to_vec();
    let mut offset = buf.len() as u64;
    for l in lines {
        if !send(&tx, l, &mut budget).await {
            return;
        }
    }
    if !opts.follow {
        return;
    }
    loop {
        let mut more = Vec::new();
        if file.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
            return;
        }
        match file.read_to_end(&mut more).await {
            Ok(0) => {
                if !running().await {
                    // One last look: the runtime may have flushed after the container stopped.
                    let mut last = Vec::new();
                    let _ = file.read_to_end(&mut last).await;
                    if last.is_empty() {
                        return;
                    }
                    more = last;
                } else {
                    if tx.is_closed() {
                        return;
                    }
                    // Rotated (the path now names another file): everything of the old one was read,
                    // so go on from the start of the new one.
                    if let Some(next) = reopened(&path, &file).await {
                        file = next;
                        offset = 0;
                        continue;
                    }
                    tokio::time::sleep(FOLLOW_POLL).await;
                    continue;
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
        offset += more.len() as u64;
        carry.extend_from_slice(&more);
        let complete = carry.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let done: Vec<u8> = carry.drain(..complete).collect();
        for l in done.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Some(out) = r.line(l) {
                if !send(&tx, out, &mut budget).await {
                    return;
                }
            }
        }
    }
}

/// The file now at `path` when it is not `open` any more (the log was rotated), opened.
async fn reopened(path: &Path, open: &tokio::fs::File) -> Option<tokio::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let now = tokio::fs::metadata(path).await.ok()?;
    let was = open.metadata().await.ok()?;
    if (now.dev(), now.ino()) == (was.dev(), was.ino()) {
        return None;
    }
    tokio::fs::File::open(path).await.ok()
}

/// Sends within the byte budget; false when the stream must end.
async fn send(
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut l: Vec<u8>,
    budget: &mut usize,
) -> bool {
    if *budget == 0 {
        return false;
    }
    if l.len() > *budget {
        l.truncate(*budget);
    }
    *budget -= l.len();
    tx.send(Ok(Bytes::from(l))).await.is_ok() && *budget > 0
}

/// The log file of a container from its sandbox's log directory and its own log path.
pub fn log_file(sandbox_log_dir: &Path, container_log_path: &str) -> PathBuf {
    sandbox_log_dir.join(container_log_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "2026-12-04T10:00:00.000000001Z stdout F one\n\
2026-12-04T10:00:01.000000000Z stderr P tw\n\
2026-12-04T10:00:01.500000000Z stderr F o\n\
2026-12-04T10:00:02.000000000Z stdout F three\n";

    async fn read(opts: LogOptions) -> String {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("0.log");
        std::fs::write(&p, FILE).unwrap_or_else(|e| panic!("{e}"));
        let (tx, mut rx) = mpsc::channel(16);
        let running: StillRunning = Box::new(|| Box::pin(async { false }));
        stream(p, opts, running, tx).await;
        let mut out = Vec::new();
        while let Some(Ok(b)) = rx.recv().await {
            out.extend_from_slice(&b);
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn fragments_join_and_options_apply() {
        assert_eq!(read(LogOptions::default()).await, "one\ntwo\nthree\n");
        let tail = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(read(tail).await, "two\nthree\n");
        let ts = LogOptions {
            timestamps: true,
            tail_lines: Some(1),
            ..Default::default()
        };
        assert_eq!(read(ts).await, "2026-12-04T10:00:02.000000000Z three\n");
        let since = LogOptions::parse("sinceTime=2026-12-04T10:00:01Z", 0).unwrap_or_default();
        assert_eq!(read(since).await, "two\nthree\n");
        let limit = LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(read(limit).await, "one\ntw");
    }

    #[test]
    fn query_is_checked() {
        assert!(LogOptions::parse("follow=maybe", 0).is_err());
        assert!(LogOptions::parse("limitBytes=0", 0).is_err());
        assert!(LogOptions::parse("sinceSeconds=-1", 0).is_err());
        let o = LogOptions::parse("follow=True&tailLines=3&sinceSeconds=2", 5_000_000_000)
            .unwrap_or_default();
        assert!(o.follow);
        assert_eq!(o.tail_lines, Some(3));
        assert_eq!(o.since_ns, Some(3_000_000_000));
    }
}
