//! Time fields as upstream's JSON decoder reads them: `metav1.Time` with Go's `time.Parse(time.RFC3339)`
//! (a fraction of any length is accepted), `metav1.MicroTime` with `time.Parse` of
//! `2006-01-02T15:04:05.000000Z07:00` (exactly six fraction digits). A value Go cannot parse fails the
//! whole decode with Go's `time.ParseError` text, which the API server answers as a 400.

use serde_json::{Map, Value};

use crate::encode::layout::{Field, Layout, Type};

/// Go's `time.RFC3339`.
const RFC3339: &str = "2006-01-02T15:04:05Z07:00";
/// apimachinery's `RFC3339Micro`.
const RFC3339_MICRO: &str = "2006-01-02T15:04:05.000000Z07:00";

/// The first time field of `obj` (a built-in kind by its apiVersion and kind) that upstream's decoder
/// refuses, as Go's error text. Kinds without a layout are not checked.
pub fn check(obj: &Value) -> Result<(), String> {
    let Value::Object(m) = obj else {
        return Ok(());
    };
    let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    match Layout::get().root(av, kind) {
        Some(root) => structure(root, m),
        None => Ok(()),
    }
}

fn structure(name: &str, m: &Map<String, Value>) -> Result<(), String> {
    let Some(fields) = Layout::get().fields(name) else {
        return Ok(());
    };
    for f in fields {
        match f {
            Field::Inline(s) => structure(s, m)?,
            Field::Named { name, ty, .. } => {
                if let Some(v) = m.get(name.as_str()) {
                    value(ty, v)?;
                }
            }
        }
    }
    Ok(())
}

fn value(ty: &Type, v: &Value) -> Result<(), String> {
    match (ty, v) {
        // Other shapes than a string are the type check's to refuse.
        (Type::Time, Value::String(s)) => parse(RFC3339, s),
        (Type::MicroTime, Value::String(s)) => parse(RFC3339_MICRO, s),
        (Type::Struct(s), Value::Object(m)) => structure(s, m),
        (Type::Pointer(inner), _) => value(inner, v),
        (Type::Slice(inner), Value::Array(a)) => a.iter().try_for_each(|e| value(inner, e)),
        (Type::Map(inner), Value::Object(m)) => m.values().try_for_each(|e| value(inner, e)),
        _ => Ok(()),
    }
}

/// Go's `time.quote`: ASCII printable as is (`"` and `\` escaped), other bytes as `\xNN`.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        if ch.is_ascii() && ch >= ' ' {
            if ch == '"' || ch == '\\' {
                out.push('\\');
            }
            out.push(ch);
        } else {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out.push('"');
    out
}

/// Go's `cannot parse` error.
fn cannot(layout: &str, value: &str, elem_value: &str, elem_layout: &str) -> String {
    format!(
        "parsing time {} as {}: cannot parse {} as {}",
        quote(value),
        quote(layout),
        quote(elem_value),
        quote(elem_layout)
    )
}

/// Go's error with a message of its own (`: month out of range`, `: extra text: …`).
fn message(value: &str, msg: &str) -> String {
    format!("parsing time {}{msg}", quote(value))
}

fn digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (`fixed`: exactly two).
fn getnum(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    if !digit(s, 0) {
        return None;
    }
    if !digit(s, 1) {
        if fixed {
            return None;
        }
        return Some((i64::from(s[0] - b'0'), &s[1..]));
    }
    Some((
        i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'),
        &s[2..],
    ))
}

/// Go's `atoi`: an optional sign, then only digits.
fn atoi(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: i64 = 0;
    for d in digits {
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -n } else { n })
}

/// Go's `parseNanoseconds` of the first `n` bytes (`.` or `,`, then digits): whether they parse, and
/// whether the value is negative (a range error).
fn nanoseconds(s: &[u8], n: usize) -> Result<(), &'static str> {
    if !matches!(s.first(), Some(b'.' | b',')) {
        return Err("");
    }
    let n = n.min(10);
    match s.get(1..n).and_then(atoi) {
        None => Err(""),
        Some(ns) if ns < 0 => Err("fractional second"),
        Some(_) => Ok(()),
    }
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// One element of the two layouts, in order.
enum Elem {
    Lit(&'static str),
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Micros,
    Zone,
}

/// Go's `time.Parse(layout, value)` for [`RFC3339`] and [`RFC3339_MICRO`]: Ok when Go accepts `value`,
/// else Go's error text.
fn parse(layout: &str, value: &str) -> Result<(), String> {
    use Elem::*;
    let micro = layout == RFC3339_MICRO;
    let mut elems = vec![
        (Year, "2006"),
        (Lit("-"), "-"),
        (Month, "01"),
        (Lit("-"), "-"),
        (Day, "02"),
        (Lit("T"), "T"),
        (Hour, "15"),
        (Lit(":"), ":"),
        (Minute, "04"),
        (Lit(":"), ":"),
        (Second, "05"),
    ];
    if micro {
        elems.push((Micros, ".000000"));
    }
    elems.push((Zone, "Z07:00"));
    let (mut year, mut month, mut day) = (0, 0, 0);
    let mut rest = value.as_bytes();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (elem, std) in elems {
        let hold = rest;
        let mut range: Option<&str> = None;
        let ok = match elem {
            Lit(l) => {
                // Go's `skip`: the error names what is left at the first byte that differs.
                let mut r = rest;
                for b in l.bytes() {
                    if r.first() != Some(&b) {
                        return Err(cannot(layout, value, &text(r), l));
                    }
                    r = &r[1..];
                }
                rest = r;
                true
            }
            Year => {
                if rest.len() < 4 || !digit(rest, 0) {
                    false
                } else {
                    let y = atoi(&rest[..4]);
                    rest = &rest[4..];
                    y.map(|y| year = y).is_some()
                }
            }
            Month | Day | Minute | Hour => match getnum(rest, !matches!(elem, Hour)) {
                None => false,
                Some((n, r)) => {
                    rest = r;
                    match elem {
                        Month => {
                            month = n;
                            if !(1..=12).contains(&n) {
                                range = Some("month");
                            }
                        }
                        Day => day = n,
                        Hour if n >= 24 => range = Some("hour"),
                        Minute if n >= 60 => range = Some("minute"),
                        _ => {}
                    }
                    true
                }
            },
            Second => match getnum(rest, true) {
                None => false,
                Some((n, r)) => {
                    rest = r;
                    if n >= 60 {
                        range = Some("second");
                    } else if !micro
                        && rest.len() >= 2
                        && matches!(rest[0], b'.' | b',')
                        && digit(rest, 1)
                    {
                        // A fraction the layout does not name is accepted, of any length.
                        let mut n = 2;
                        while digit(rest, n) {
                            n += 1;
                        }
                        if let Err(r) = nanoseconds(rest, n) {
                            if r.is_empty() {
                                return Err(cannot(layout, value, &text(hold), std));
                            }
                            range = Some(r);
                        }
                        rest = &rest[n..];
                    }
                    true
                }
            },
            Micros => {
                if rest.len() < 7 {
                    false
                } else {
                    let r = nanoseconds(rest, 7);
                    rest = &rest[7..];
                    match r {
                        Ok(()) => true,
                        Err("") => false,
                        Err(r) => {
                            range = Some(r);
                            true
                        }
                    }
                }
            }
            Zone => {
                if rest.first() == Some(&b'Z') {
                    rest = &rest[1..];
                    true
                } else if rest.len() < 6 || rest[3] != b':' {
                    false
                } else {
                    let (sign, hh, mm) = (rest[0], &rest[1..3], &rest[4..6]);
                    rest = &rest[6..];
                    match (getnum(hh, true), getnum(mm, true)) {
                        (Some((h, _)), Some((m, _))) => {
                            if h > 24 {
                                range = Some("time zone offset hour");
                            }
                            if m > 60 {
                                range = Some("time zone offset minute");
                            }
                            range.is_some() || matches!(sign, b'+' | b'-')
                        }
                        _ => false,
                    }
                }
            }
        };
        if let Some(r) = range {
            return Err(message(value, &format!(": {r} out of range")));
        }
        if !ok {
            return Err(cannot(layout, value, &text(hold), std));
        }
    }
    if !rest.is_empty() {
        let extra = text(rest);
        return Err(message(value, &format!(": extra text: {}", quote(&extra))));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(message(value, ": day out of range"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn micro_times_need_exactly_six_fraction_digits() {
        assert!(parse(RFC3339_MICRO, "2024-01-01T00:00:00.000000Z").is_ok());
        assert!(parse(RFC3339_MICRO, "2024-01-01T02:00:00.123456+02:00").is_ok());
        assert!(parse(RFC3339_MICRO, "2024-01-01T02:00:00,123456Z").is_ok());
        assert_eq!(
            parse(RFC3339_MICRO, "2024-01-01T00:00:00Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
        );
        assert_eq!(
            parse(RFC3339_MICRO, "2024-01-01T00:00:00.123Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00.123Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse ".123Z" as ".000000""#
        );
        assert_eq!(
            parse(RFC3339_MICRO, "2024-01-01T00:00:00.123456789Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00.123456789Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "789Z" as "Z07:00""#
        );
    }

    #[test]
    fn times_take_any_fraction_and_check_ranges() {
        assert!(parse(RFC3339, "2024-01-01T00:00:00Z").is_ok());
        assert!(parse(RFC3339, "2024-01-01T00:00:00.5Z").is_ok());
        assert!(parse(RFC3339, "2024-01-01T00:00:00.123456789123-01:30").is_ok());
        assert!(parse(RFC3339, "2024-02-29T00:00:00Z").is_ok());
        assert_eq!(
            parse(RFC3339, "2024-13-01T00:00:00Z").unwrap_err(),
            r#"parsing time "2024-13-01T00:00:00Z": month out of range"#
        );
        assert_eq!(
            parse(RFC3339, "2023-02-29T00:00:00Z").unwrap_err(),
            r#"parsing time "2023-02-29T00:00:00Z": day out of range"#
        );
        assert_eq!(
            parse(RFC3339, "2024-01-01 00:00:00Z").unwrap_err(),
            r#"parsing time "2024-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T""#
        );
        assert_eq!(
            parse(RFC3339, "2024-01-01T00:00:00Zjunk").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00Zjunk": extra text: "junk""#
        );
        assert_eq!(
            parse(RFC3339, "yesterday").unwrap_err(),
            r#"parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006""#
        );
    }

    #[test]
    fn objects_are_checked_by_their_layout() {
        let lease = |t: &str| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "l"}, "spec": {"renewTime": t}})
        };
        assert!(check(&lease("2024-01-01T00:00:00.000000Z")).is_ok());
        assert!(check(&lease("2024-01-01T00:00:00Z")).is_err());
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                        "firstTimestamp": "2024-01-01T00:00:00.5Z"});
        assert!(check(&ev).is_ok());
        let unknown = json!({"apiVersion": "x/v1", "kind": "Y", "spec": {"renewTime": "bad"}});
        assert!(check(&unknown).is_ok());
    }
}
