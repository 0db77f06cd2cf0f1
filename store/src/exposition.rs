//! The encoder's OpenMetrics text as the Prometheus text format 0.0.4 that etcd and kube-apiserver serve
//! (both API front doors share it).

use std::borrow::Cow;

/// OpenMetrics text (what the encoder writes) as the Prometheus text format 0.0.4: counters' `# HELP`
/// and `# TYPE` name the `_total` series, `# UNIT` and `# EOF` go, and bucket bounds read as Go prints
/// them (`le="1"`, not `le="1.0"`), so rules written against etcd's and kube-apiserver's output match.
pub fn prometheus_text(open: &str) -> String {
    let mut out = String::with_capacity(open.len());
    let mut help: Option<&str> = None;
    for line in open.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let name = if kind == "counter" && !name.ends_with("_total") {
                Cow::Owned(format!("{name}_total"))
            } else {
                Cow::Borrowed(name)
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map(|(_, t)| t).unwrap_or("");
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(&go_bound(line));
        out.push('\n');
    }
    out
}

/// A sample line with its `le` bound printed without a needless `.0`.
fn go_bound(line: &str) -> Cow<'_, str> {
    // The encoder puts `le` first in a bucket's labels; a label value cannot hold an unescaped quote, so
    // `{le="` is the bound.
    let Some(at) = line.find("{le=\"") else {
        return Cow::Borrowed(line);
    };
    let start = at + 5;
    let Some(len) = line[start..].find('"') else {
        return Cow::Borrowed(line);
    };
    let value = &line[start..start + len];
    match value.strip_suffix(".0") {
        Some(whole) if whole.chars().all(|c| c.is_ascii_digit()) => {
            Cow::Owned(format!("{}{whole}{}", &line[..start], &line[start + len..]))
        }
        _ => Cow::Borrowed(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_0_0_4() {
        let open = "# HELP apiserver_request Counter of requests.\n# TYPE apiserver_request counter\n\
                    apiserver_request_total{code=\"200\",verb=\"GET\"} 3\n\
                    # HELP d_seconds Latency.\n# TYPE d_seconds histogram\n# UNIT d_seconds seconds\n\
                    d_seconds_bucket{le=\"0.005\",verb=\"GET\"} 1\n\
                    d_seconds_bucket{le=\"1.0\",verb=\"GET\"} 2\n\
                    d_seconds_bucket{le=\"+Inf\",verb=\"{le=\\\"2.0\"} 2\n# EOF\n";
        let text = prometheus_text(open);
        assert_eq!(
            text,
            "# HELP apiserver_request_total Counter of requests.\n# TYPE apiserver_request_total counter\n\
             apiserver_request_total{code=\"200\",verb=\"GET\"} 3\n\
             # HELP d_seconds Latency.\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.005\",verb=\"GET\"} 1\n\
             d_seconds_bucket{le=\"1\",verb=\"GET\"} 2\n\
             d_seconds_bucket{le=\"+Inf\",verb=\"{le=\\\"2.0\"} 2\n"
        );
    }

    #[test]
    fn counters_and_bounds_read_as_etcd_prints_them() {
        let open = "# HELP a_b Help text.\n# TYPE a_b counter\na_b_total 3\n\
                    # TYPE h histogram\nh_bucket{le=\"1.0\"} 2\nh_bucket{le=\"0.5\"} 1\n# EOF\n";
        assert_eq!(
            prometheus_text(open),
            "# HELP a_b_total Help text.\n# TYPE a_b_total counter\na_b_total 3\n\
             # TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"0.5\"} 1\n"
        );
    }
}
