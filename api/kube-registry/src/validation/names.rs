//! Name rules: RFC 1123 subdomains and labels, RFC 1035 labels, path segments, label keys and values.

/// Which rule a resource's names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// RFC 1035 label (services).
    Dns1035,
    /// Anything that is a valid path segment (RBAC objects).
    PathSegment,
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

/// Checks a name; the error is upstream's message (without the value).
pub fn check(rule: NameRule, name: &str) -> Result<(), String> {
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                return Err("must be no more than 253 characters".into());
            }
            if !is_subdomain(name) {
                return Err(SUBDOMAIN_MSG.into());
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                return Err("must be no more than 63 characters".into());
            }
            if !is_label(name) {
                return Err(LABEL_MSG.into());
            }
        }
        NameRule::Dns1035 => {
            if name.len() > 63 {
                return Err("must be no more than 63 characters".into());
            }
            if !is_label(name) || !name.as_bytes()[0].is_ascii_lowercase() {
                return Err(DNS1035_MSG.into());
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                return Err(format!("may not be '{name}'"));
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    return Err(format!("may not contain '{bad}'"));
                }
            }
        }
    }
    Ok(())
}

/// Checks a label or annotation key (`prefix/name`).
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || !is_subdomain(p) {
            return Err("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
        }
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into())
    }
}

/// Checks a label value.
pub fn check_label_value(v: &str) -> Result<(), String> {
    let ok = v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into())
    }
}

/// Checks a ConfigMap or Secret data key.
pub fn check_data_key(k: &str) -> Result<(), String> {
    let ok = !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".into())
    }
}

/// Upstream's IsValidPortName: every rule a port name breaks (an IANA service name).
pub fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.is_empty() || name.len() > 15 {
        errs.push("must be no more than 15 characters".to_string());
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(check(NameRule::Subdomain, "web.example").is_ok());
        assert!(check(NameRule::Subdomain, "Web").is_err());
        assert!(check(NameRule::Label, "a.b").is_err());
        assert!(check(NameRule::Dns1035, "1abc").is_err());
        assert!(check(NameRule::Dns1035, "abc-1").is_ok());
        assert!(check(NameRule::PathSegment, "system:admin").is_ok());
        assert!(check(NameRule::PathSegment, "a/b").is_err());
        assert!(check_qualified_name("app.kubernetes.io/name").is_ok());
        assert!(check_qualified_name("-bad").is_err());
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("a b").is_err());
        assert!(check_data_key("KEY_1.x").is_ok());
        assert!(check_data_key("a/b").is_err());
        assert!(port_name_errors("http").is_empty());
        assert_eq!(
            port_name_errors("80"),
            ["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            port_name_errors("-a--b"),
            [
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen"
            ]
        );
    }
}
