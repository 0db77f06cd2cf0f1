//! Comparing etcdctl outputs of two servers byte for byte: [`Normalizer`] replaces everything that legitimately
//! differs between them (cluster/member/lease IDs, raft term and index, db size, version, ports, timestamps,
//! durations) with placeholders; [`line_diff`] shows what is left; [`Vars`] carries values captured from one
//! output into later commands.

use std::collections::HashMap;

/// Normalizes one piece of etcdctl output with a fresh [`Normalizer`] (no port knowledge: any `127.0.0.1:<port>`
/// becomes `127.0.0.1:<PORT>`).
pub fn normalize(text: &str) -> String {
    Normalizer::new().normalize(text)
}

/// Replaces what legitimately differs between two servers with placeholders.
///
/// IDs (cluster, member, lease; in decimal or in etcdctl's hex) become `<ID1>`, `<ID2>`, … in order of first
/// appearance, and the numbering is kept across calls, so one `Normalizer` per server and scenario keeps relations
/// visible (the lease granted in one step is the same `<IDn>` in a later `lease list`). Zero stays `0`.
/// Raft term → `<TERM>`, raft index → `<INDEX>`, db sizes → `<SIZE>`, server version → `<VERSION>`, durations →
/// `<DURATION>`, log timestamps → `<TS>`, client UUIDs → `<UUID>`. A remaining lease TTL within 3 s below its granted
/// TTL becomes `<REMAINING~G>` (anything else is kept, so a wrong value still shows).
#[derive(Clone, Debug, Default)]
pub struct Normalizer {
    ids: Vec<u64>,
    replacements: Vec<(String, String)>,
}

impl Normalizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an exact textual replacement applied before everything else (e.g. an endpoint → `<CLIENT>`).
    pub fn replace(mut self, from: &str, to: &str) -> Self {
        self.replacements.push((from.to_string(), to.to_string()));
        self
    }

    /// The placeholder for an ID value (`0` stays `0`).
    pub fn id(&mut self, v: u64) -> String {
        if v == 0 {
            return "0".into();
        }
        let n = match self.ids.iter().position(|x| *x == v) {
            Some(i) => i + 1,
            None => {
                self.ids.push(v);
                self.ids.len()
            }
        };
        format!("<ID{n}>")
    }

    fn id_hex(&mut self, s: &str) -> Option<String> {
        if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(s, 16).ok().map(|v| self.id(v))
    }

    fn id_dec(&mut self, s: &str) -> Option<String> {
        s.parse::<u64>().ok().map(|v| self.id(v))
    }

    pub fn normalize(&mut self, text: &str) -> String {
        let mut t = text.to_string();
        for (from, to) in &self.replacements {
            t = t.replace(from.as_str(), to);
        }
        let t = replace_loopback_ports(&t);
        let lines: Vec<&str> = t.split('\n').collect();
        // `-w fields` prints GrantedTTL after TTL: look it up first.
        let granted_field = lines.iter().find_map(|l| {
            l.strip_prefix("\"GrantedTTL\" : ")
                .and_then(|v| v.trim().parse::<i64>().ok())
        });
        let mut table_header: Option<Vec<String>> = None;
        let mut out = Vec::with_capacity(lines.len());
        for line in lines {
            let trimmed = line.trim();
            if trimmed.starts_with('+') && trimmed.ends_with('+') && trimmed.contains('-') {
                out.push("+--+".to_string());
                continue;
            }
            if trimmed.starts_with('|') && trimmed.ends_with('|') && trimmed.len() > 1 {
                let cells: Vec<String> = trimmed[1..trimmed.len() - 1]
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect();
                match &table_header {
                    None => {
                        out.push(format!("| {} |", cells.join(" | ")));
                        table_header = Some(cells);
                    }
                    Some(header) => {
                        let header = header.clone();
                        let cells: Vec<String> = cells
                            .iter()
                            .enumerate()
                            .map(|(i, c)| {
                                self.table_cell(header.get(i).map(String::as_str).unwrap_or(""), c)
                            })
                            .collect();
                        out.push(format!("| {} |", cells.join(" | ")));
                    }
                }
                continue;
            }
            table_header = None;
            if (trimmed.starts_with('{') && trimmed.ends_with('}'))
                || (trimmed.starts_with('[') && trimmed.ends_with(']'))
            {
                if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(trimmed) {
                    self.json(&mut v);
                    out.push(v.to_string());
                    continue;
                }
            }
            if let Some(rest) = trimmed.strip_prefix('"') {
                if let Some((name, value)) = rest.split_once("\" : ") {
                    out.push(format!(
                        "\"{name}\" : {}",
                        self.field(name, value, granted_field)
                    ));
                    continue;
                }
            }
            out.push(self.text_line(line));
        }
        sort_runs_of_key_fields(&mut out);
        out.join("\n")
    }

    fn table_cell(&mut self, column: &str, cell: &str) -> String {
        match column {
            "ID" | "MEMBER ID" | "LEASE" | "LEADER" => {
                self.id_hex(cell).unwrap_or_else(|| cell.to_string())
            }
            "VERSION" => "<VERSION>".into(),
            "DB SIZE" | "DB SIZE IN USE" => "<SIZE>".into(),
            "RAFT TERM" => "<TERM>".into(),
            "RAFT INDEX" | "RAFT APPLIED INDEX" => "<INDEX>".into(),
            "TOOK" => "<DURATION>".into(),
            _ => self.text_line(cell),
        }
    }

    fn field(&mut self, name: &str, value: &str, granted: Option<i64>) -> String {
        let v = value.trim();
        match name {
            "ClusterID" | "MemberID" | "Leader" | "ID" | "Lease" => {
                self.id_dec(v).unwrap_or_else(|| v.to_string())
            }
            "RaftTerm" => "<TERM>".into(),
            "RaftIndex" | "RaftAppliedIndex" => "<INDEX>".into(),
            "DBSize" | "DBSizeInUse" => "<SIZE>".into(),
            "Version" if v.starts_with('"') => "<VERSION>".into(),
            "TTL" => match (v.parse::<i64>(), granted) {
                (Ok(n), Some(g)) => remaining(n, g),
                _ => v.to_string(),
            },
            _ => v.to_string(),
        }
    }

    fn json(&mut self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Object(map) => {
                let granted = map
                    .get("granted-ttl")
                    .or_else(|| map.get("grantedTTL"))
                    .and_then(Value::as_i64);
                for (k, child) in map.iter_mut() {
                    match (k.as_str(), &*child) {
                        (
                            "cluster_id" | "member_id" | "leader" | "ID" | "id" | "lease"
                            | "memberID",
                            Value::Number(n),
                        ) => {
                            if let Some(u) = n.as_u64() {
                                *child = Value::String(self.id(u));
                            }
                        }
                        ("raft_term" | "raftTerm", Value::Number(_)) => {
                            *child = Value::String("<TERM>".into())
                        }
                        ("raftIndex" | "raftAppliedIndex", Value::Number(_)) => {
                            *child = Value::String("<INDEX>".into())
                        }
                        ("dbSize" | "dbSizeInUse", Value::Number(_)) => {
                            *child = Value::String("<SIZE>".into())
                        }
                        ("version", Value::String(_)) => *child = Value::String("<VERSION>".into()),
                        ("ts", Value::String(_)) => *child = Value::String("<TS>".into()),
                        // etcd lists a lease's keys in Go map order (random): compare them as a set.
                        ("keys", Value::Array(items)) if items.iter().all(Value::is_string) => {
                            let mut keys: Vec<String> = items
                                .iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect();
                            keys.sort();
                            *child = Value::Array(keys.into_iter().map(Value::String).collect());
                        }
                        ("took", Value::String(_)) => *child = Value::String("<DURATION>".into()),
                        ("target", Value::String(s)) => {
                            *child = Value::String(replace_client_uuid(s))
                        }
                        ("ttl" | "TTL", Value::Number(n)) => {
                            if let Some(p) = granted
                                .zip(n.as_i64())
                                .and_then(|(g, n)| expected_remaining(n, g))
                            {
                                *child = Value::String(p);
                            }
                        }
                        _ => self.json(child),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.json(item);
                }
            }
            // Other strings (keys and values are base64, error texts) stay as they are.
            _ => {}
        }
    }

    /// Rules for plain text lines (simple output, error messages).
    fn text_line(&mut self, line: &str) -> String {
        let mut l = replace_client_uuid(line);
        // alarms (alarm list, endpoint status errors): "memberID:<decimal id> alarm:NOSPACE "
        if let Some(i) = l.find("memberID:") {
            let start = i + "memberID:".len();
            let digits = l[start..].bytes().take_while(u8::is_ascii_digit).count();
            if let Some(id) = self.id_dec(&l[start..start + digits]) {
                l = format!("{}{id}{}", &l[..start], &l[start + digits..]);
            }
        }
        // endpoint health: "... took = 2.49ms"
        if let Some(i) = l.find("took = ") {
            let end = l[i + 7..]
                .find(|c: char| c.is_whitespace() || c == ',')
                .map(|e| i + 7 + e)
                .unwrap_or(l.len());
            l = format!("{}took = <DURATION>{}", &l[..i], &l[end..]);
        }
        // lease timetolive: "lease X granted with TTL(100s), remaining(99s), attached keys([k1])"
        if let (Some(a), Some(b)) = (l.find("TTL("), l.find("remaining(")) {
            let granted = l[a + 4..]
                .split('s')
                .next()
                .and_then(|s| s.parse::<i64>().ok());
            let rem_str: String = l[b + 10..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            if let (Some(g), Ok(r)) = (granted, rem_str.parse::<i64>()) {
                l = format!(
                    "{}remaining({}{}",
                    &l[..b],
                    remaining(r, g),
                    &l[b + 10 + rem_str.len()..]
                );
            }
        }
        // lease timetolive --keys: "attached keys([k2 k1])" lists keys in Go map order (random): sort them.
        if let Some(a) = l.find("attached keys([") {
            let start = a + "attached keys([".len();
            if let Some(len) = l[start..].find("])") {
                let mut keys: Vec<&str> = l[start..start + len].split(' ').collect();
                keys.sort_unstable();
                l = format!("{}{}{}", &l[..start], keys.join(" "), &l[start + len..]);
            }
        }
        let fields: Vec<&str> = l.split(", ").collect();
        // member list: "<hex id>, started, <name>, <peer urls>, <client urls>, <is learner>"
        if fields.len() >= 6 && (fields[1] == "started" || fields[1] == "unstarted") {
            if let Some(id) = self.id_hex(fields[0]) {
                let mut f: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
                f[0] = id;
                return f.join(", ");
            }
        }
        // endpoint status: "<endpoint>, <hex id>, <version>, <db size>, <leader?>, <learner?>, <term>, <index>,
        // <applied index>, <errors>"
        if fields.len() >= 9
            && (fields[4] == "true" || fields[4] == "false")
            && fields[3].ends_with('B')
        {
            let mut f: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
            if let Some(id) = self.id_hex(fields[1]) {
                f[1] = id;
            }
            f[2] = "<VERSION>".into();
            f[3] = "<SIZE>".into();
            f[6] = "<TERM>".into();
            f[7] = "<INDEX>".into();
            f[8] = "<INDEX>".into();
            return f.join(", ");
        }
        // Any other 16-digit hex word is a lease ID as etcdctl prints it (%016x).
        self.hex16_words(&l)
    }

    fn hex16_words(&mut self, l: &str) -> String {
        let bytes = l.as_bytes();
        let mut out = String::with_capacity(l.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_alphanumeric() {
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let word = &l[start..i];
                let is_id = word.len() == 16
                    && word
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                match is_id.then(|| self.id_hex(word)).flatten() {
                    Some(id) => out.push_str(&id),
                    None => out.push_str(word),
                }
            } else {
                let Some(ch) = l[i..].chars().next() else {
                    break;
                };
                out.push(ch);
                i += ch.len_utf8();
            }
        }
        out
    }
}

/// `lease timetolive --keys -w fields` prints one `"Key" : ...` line per attached key, in Go map order (random):
/// sort every run of consecutive such lines.
fn sort_runs_of_key_fields(lines: &mut [String]) {
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j < lines.len() && lines[j].starts_with("\"Key\" : ") {
            j += 1;
        }
        if j - i > 1 {
            lines[i..j].sort();
        }
        i = j.max(i + 1);
    }
}

/// `n` seconds remaining of a `granted`-second lease: within 3 s below the grant is "as expected".
fn expected_remaining(n: i64, granted: i64) -> Option<String> {
    (n <= granted && n >= granted - 3 && n >= 0).then(|| format!("<REMAINING~{granted}>"))
}

fn remaining(n: i64, granted: i64) -> String {
    expected_remaining(n, granted).unwrap_or_else(|| n.to_string())
}

/// `127.0.0.1:<digits>` → `127.0.0.1:<PORT>` (after the known endpoints were replaced).
fn replace_loopback_ports(s: &str) -> String {
    const P: &str = "127.0.0.1:";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(P) {
        out.push_str(&rest[..i + P.len()]);
        rest = &rest[i + P.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("<PORT>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// etcdctl's grpc target `endpoint://client-<uuid>/…` → `endpoint://client-<UUID>/…`.
fn replace_client_uuid(s: &str) -> String {
    const P: &str = "client-";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(P) {
        out.push_str(&rest[..i + P.len()]);
        rest = &rest[i + P.len()..];
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_hexdigit() || *b == b'-')
            .count();
        if n == 36 {
            out.push_str("<UUID>");
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    out
}

/// A small line diff (LCS) for failure messages: `-` lines only in `a`, `+` only in `b`.
pub fn line_diff(a: &str, b: &str, a_label: &str, b_label: &str) -> String {
    let a: Vec<&str> = a.split('\n').collect();
    let b: Vec<&str> = b.split('\n').collect();
    let mut out = format!("--- {a_label}\n+++ {b_label}\n");
    if a.len() * b.len() > 4_000_000 {
        for l in &a {
            out.push_str(&format!("-{l}\n"));
        }
        for l in &b {
            out.push_str(&format!("+{l}\n"));
        }
        return out;
    }
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        }
    }
    out
}

/// Variables captured from earlier outputs (e.g. lease IDs), substituted as `{NAME}` in later commands.
#[derive(Clone, Debug, Default)]
pub struct Vars(pub HashMap<String, String>);

impl Vars {
    pub fn subst(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (k, v) in &self.0 {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    }

    pub fn get(&self, k: &str) -> &str {
        self.0
            .get(k)
            .unwrap_or_else(|| panic!("variable {k} was never captured"))
    }
}
