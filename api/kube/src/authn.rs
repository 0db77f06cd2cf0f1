//! Authentication: a client certificate signed by the cluster CA (CN = user, O = groups) or a bearer token
//! (the admin token, or a `--token-auth-file` line). Anything else is anonymous and gets 401, except the
//! version and health endpoints that kube-apiserver also leaves public.

use std::collections::HashMap;
use std::path::Path;

use axum::http::{header, HeaderMap};

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User name.
    pub user: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// Paths anyone may read.
pub fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/version"
            | "/healthz"
            | "/livez"
            | "/readyz"
            | "/cacerts"
            | "/v1-keel/join"
            | "/v1-keel/apiservers"
    ) || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// Identity of a verified client certificate (DER).
pub fn from_certificate(der: &[u8]) -> Option<Identity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(Identity { user, groups })
}

/// The token of an `Authorization: Bearer` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(
        v.strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))?
            .trim(),
    )
}

/// Known bearer tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_token: HashMap<String, Identity>,
}

/// Why a token file does not load.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{file}:{line}: expected token,user,uid[,\"group1,group2\"]")]
    Line { file: String, line: usize },
}

impl Tokens {
    /// Adds one token.
    pub fn insert(&mut self, token: &str, identity: Identity) {
        self.by_token.insert(token.to_string(), identity);
    }

    /// Loads kube-apiserver's static token file format: `token,user,uid[,"group1,group2"]` per line.
    pub fn load_file(&mut self, path: &Path) -> Result<(), TokenFileError> {
        let name = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| TokenFileError::Io(name.clone(), e))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (head, groups) = match line.split_once(",\"") {
                Some((h, g)) => (h, g.trim_end_matches('"')),
                None => (line, ""),
            };
            let parts: Vec<&str> = head.split(',').collect();
            if parts.len() < 3 || parts[0].is_empty() || parts[1].is_empty() {
                return Err(TokenFileError::Line {
                    file: name,
                    line: i + 1,
                });
            }
            let mut groups: Vec<String> = groups
                .split(',')
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect();
            if parts.len() > 3 && groups.is_empty() {
                groups = parts[3..].iter().map(|g| g.to_string()).collect();
            }
            self.insert(
                parts[0],
                Identity {
                    user: parts[1].to_string(),
                    groups,
                },
            );
        }
        Ok(())
    }

    /// The identity of a request's `Authorization: Bearer` header, if it names a known token.
    pub fn from_headers(&self, headers: &HeaderMap) -> Option<Identity> {
        self.lookup(bearer(headers)?)
    }

    /// The identity of a static token.
    pub fn lookup(&self, token: &str) -> Option<Identity> {
        self.by_token.get(token).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lines() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("tokens.csv");
        std::fs::write(&f, "abc,alice,1,\"dev,ops\"\n# comment\nxyz,bob,2\n").expect("write");
        let mut t = Tokens::default();
        t.load_file(&f).expect("load");
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().expect("hv"));
        let id = t.from_headers(&h).expect("alice");
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["dev", "ops"]);
        h.insert(header::AUTHORIZATION, "Bearer nope".parse().expect("hv"));
        assert!(t.from_headers(&h).is_none());
        std::fs::write(&f, "onlytoken\n").expect("write");
        assert!(Tokens::default().load_file(&f).is_err());
    }
}
