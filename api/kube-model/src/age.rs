//! Human durations as kubectl prints ages: `45s`, `5m10s`, `3h`, `2d4h`, `1y200d`.

use serde_json::Value;

use crate::object;

/// Formats a duration in seconds the way upstream's `HumanDuration` does.
pub fn human(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_string();
    }
    let secs = secs.max(0);
    let minutes = secs / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let years = days / 365;
    if secs < 120 {
        return format!("{secs}s");
    }
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        let d = days % 365;
        return if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        };
    }
    format!("{years}y")
}

/// The age of a timestamp string, or `<unknown>`.
pub fn since(ts: Option<&Value>) -> String {
    match ts.and_then(Value::as_str).and_then(object::parse_time) {
        Some(t) => human(jiff::Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn upstream_buckets() {
        assert_eq!(human(5), "5s");
        assert_eq!(human(119), "119s");
        assert_eq!(human(310), "5m10s");
        assert_eq!(human(600), "10m");
        assert_eq!(human(3 * 3600 + 60), "3h1m");
        assert_eq!(human(20 * 3600), "20h");
        assert_eq!(human(2 * 86400 + 4 * 3600), "2d4h");
        assert_eq!(human(30 * 86400), "30d");
        assert_eq!(human(3 * 365 * 86400 + 86400), "3y1d");
        assert_eq!(human(-5), "<invalid>");
    }
}
