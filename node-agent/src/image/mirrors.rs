//! Registry mirrors for sites without the internet, configured as k3s's `registries.yaml`: `mirrors`
//! names, per registry, the endpoints to pull from instead (`docker.io` → a site registry), and
//! `configs` gives an endpoint its credentials and TLS. The agent renders the mirrors into containerd's
//! own `hosts.toml` files (in the directory containerd reads them from, its CRI `config_path`), so a
//! pod naming `nginx:1.27` is pulled from the mirror and still stored and shown under its own name.
//! containerd's `hosts.toml` has no credentials; the agent hands an endpoint's to `PullImage`, bound
//! to that endpoint's host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_cri::v1::AuthConfig;
use serde::Deserialize;
use thiserror::Error;

/// The first line of every `hosts.toml` the agent writes: how it tells its own files from others'.
const HEADER: &str =
    "# Written by keel's node agent from its registries file; replaced at each start.";
/// Docker Hub's name in image references, and where it is served.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_ENDPOINT: &str = "https://registry-1.docker.io";

/// Why a registries file cannot be used.
#[derive(Debug, Error)]
pub enum MirrorError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the expected YAML.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A value is not usable.
    #[error("{path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The field, as a YAML path.
        field: String,
        /// Why.
        message: String,
    },
    /// containerd reads no `hosts.toml` directory.
    #[error(
        "{path} names registry mirrors, but containerd reads no hosts.toml directory: set \
         [plugins.\"io.containerd.grpc.v1.cri\".registry] config_path (for example \
         \"/etc/containerd/certs.d\") in its config.toml and restart it"
    )]
    NoConfigPath {
        /// The registries file.
        path: String,
    },
    /// A `hosts.toml` cannot be written.
    #[error("{path}: {source}")]
    Write {
        /// The file or directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// `registries.yaml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    /// Per registry name (`docker.io`, `registry.example:5000`, `"*"` for any other): its mirrors.
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Per endpoint host (`mirror.example:5000`, `"*"`): credentials and TLS.
    #[serde(default)]
    pub configs: BTreeMap<String, EndpointConfig>,
}

/// The mirrors of one registry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// Endpoint URLs, tried in order before the registry itself.
    #[serde(default)]
    pub endpoint: Vec<String>,
    /// Repository rewrites: k3s needs its patched containerd for them; refused here.
    #[serde(default)]
    pub rewrite: BTreeMap<String, String>,
}

/// Credentials and TLS of one endpoint.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Credentials.
    pub auth: Option<Auth>,
    /// TLS.
    pub tls: Option<Tls>,
}

/// An endpoint's credentials.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// User name.
    #[serde(default)]
    pub username: String,
    /// Password.
    #[serde(default)]
    pub password: String,
    /// base64 of `user:password`.
    #[serde(default)]
    pub auth: String,
    /// A bearer identity token.
    #[serde(default)]
    pub identity_token: String,
}

/// An endpoint's TLS.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// The CA bundle that signs the endpoint's certificate.
    pub ca_file: Option<PathBuf>,
    /// A client certificate.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// Do not verify the endpoint's certificate.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// An endpoint URL split as containerd uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// `scheme://host[:port]`.
    base: String,
    /// `host[:port]`: the key of its `configs` entry and the host credentials are bound to.
    host: String,
    /// A path other than `/v2`, kept as written (`override_path`).
    path: Option<String>,
}

impl Endpoint {
    /// The URL as a `[host."…"]` key.
    fn url(&self) -> String {
        match &self.path {
            Some(p) => format!("{}{p}", self.base),
            None => self.base.clone(),
        }
    }
}

fn is_loopback(host: &str) -> bool {
    let name = host
        .rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h);
    name == "localhost"
        || name
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Parses an endpoint; without a scheme it is https, except a loopback host with a port, which is
/// http (containerd's and k3s's rule).
fn parse_endpoint(raw: &str) -> Result<Endpoint, String> {
    let (scheme, rest) = match raw.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => (String::new(), raw),
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains(['@', '?', '#', ' ']) {
        return Err(format!("{raw:?} is not a registry URL"));
    }
    let scheme = match scheme.as_str() {
        "" if is_loopback(host) && host.contains(':') && !host.ends_with(":443") => "http",
        "" => "https",
        "http" | "https" => scheme.as_str(),
        other => return Err(format!("{raw:?}: scheme {other:?} is not http or https")),
    }
    .to_string();
    let path = match path.trim_end_matches('/') {
        "" | "/v2" => None,
        p => Some(p.to_string()),
    };
    Ok(Endpoint {
        base: format!("{scheme}://{host}"),
        host: host.to_ascii_lowercase(),
        path,
    })
}

/// The registry's own endpoint: where it is pulled from with no mirror.
fn default_endpoint(registry: &str) -> Option<Endpoint> {
    match registry {
        "*" => None,
        DOCKER_HUB => parse_endpoint(DOCKER_HUB_ENDPOINT).ok(),
        r => parse_endpoint(r).ok(),
    }
}

/// containerd's directory name for a registry: `_default` stands for any registry without its own.
fn dir_name(registry: &str) -> &str {
    if registry == "*" {
        "_default"
    } else {
        registry
    }
}

/// A TOML basic string (JSON's escapes are all valid in TOML).
fn toml_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

impl Registries {
    /// Reads and checks a registries file.
    pub fn load(path: &Path) -> Result<Registries, MirrorError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MirrorError::Read {
            path: p.clone(),
            source,
        })?;
        Registries::parse(&text, &p)
    }

    /// Parses and checks `text` (named `path` in errors).
    pub fn parse(text: &str, path: &str) -> Result<Registries, MirrorError> {
        let r: Registries = if text.trim().is_empty() {
            Registries::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| MirrorError::Parse {
                path: path.to_string(),
                message: e.to_string(),
            })?
        };
        let invalid = |field: String, message: String| MirrorError::Invalid {
            path: path.to_string(),
            field,
            message,
        };
        for (name, m) in &r.mirrors {
            if name.is_empty() || name.contains(['/', ' ']) {
                return Err(invalid(
                    format!("mirrors.{name:?}"),
                    "a registry name is a host, with an optional port".into(),
                ));
            }
            if !m.rewrite.is_empty() {
                return Err(invalid(
                    format!("mirrors.{name}.rewrite"),
                    "repository rewrites need a patched containerd; use an endpoint path instead \
                     (https://mirror.example/v2/project)"
                        .into(),
                ));
            }
            for (i, e) in m.endpoint.iter().enumerate() {
                parse_endpoint(e)
                    .map_err(|msg| invalid(format!("mirrors.{name}.endpoint[{i}]"), msg))?;
            }
        }
        for (host, c) in &r.configs {
            let Some(tls) = &c.tls else { continue };
            for (field, file) in [
                ("ca_file", &tls.ca_file),
                ("cert_file", &tls.cert_file),
                ("key_file", &tls.key_file),
            ] {
                let Some(file) = file else { continue };
                if !file.is_absolute() {
                    return Err(invalid(
                        format!("configs.{host}.tls.{field}"),
                        format!("{} is not an absolute path", file.display()),
                    ));
                }
                std::fs::metadata(file).map_err(|e| {
                    invalid(
                        format!("configs.{host}.tls.{field}"),
                        format!("{}: {e}", file.display()),
                    )
                })?;
            }
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err(invalid(
                    format!("configs.{host}.tls"),
                    "cert_file and key_file go together".into(),
                ));
            }
        }
        Ok(r)
    }

    /// Whether there is anything to render.
    pub fn is_empty(&self) -> bool {
        self.mirrors.is_empty() && self.configs.is_empty()
    }

    /// Whether pulls from `registry` go to a mirror of its own (not the `"*"` one).
    pub fn mirrors(&self, registry: &str) -> bool {
        self.mirrors
            .get(registry)
            .is_some_and(|m| !m.endpoint.is_empty())
    }

    /// The `configs` entry of an endpoint host (`"*"` when it has none of its own).
    fn config_of(&self, host: &str) -> Option<&EndpointConfig> {
        self.configs.get(host).or_else(|| self.configs.get("*"))
    }

    /// The mirror endpoints of `registry` (the `"*"` entry's when it has none of its own).
    fn endpoints_of(&self, registry: &str) -> Vec<Endpoint> {
        let m = self.mirrors.get(registry).or_else(|| self.mirrors.get("*"));
        m.map(|m| {
            m.endpoint
                .iter()
                .filter_map(|e| parse_endpoint(e).ok())
                .collect()
        })
        .unwrap_or_default()
    }

    /// The `hosts.toml` of each registry: (directory name, content).
    pub fn render(&self) -> Vec<(String, String)> {
        // A registry with mirrors, and a host with a config but no mirror (its TLS applies to direct pulls).
        let mut registries: BTreeSet<&str> = self.mirrors.keys().map(String::as_str).collect();
        registries.extend(self.configs.keys().map(String::as_str));
        registries
            .into_iter()
            .map(|registry| (dir_name(registry).to_string(), self.hosts_toml(registry)))
            .collect()
    }

    fn host_table(&self, e: &Endpoint, mirror: bool) -> String {
        let mut t = format!("\n[host.{}]\n", toml_str(&e.url()));
        let caps = if mirror {
            r#"["pull", "resolve"]"#
        } else {
            r#"["pull", "resolve", "push"]"#
        };
        t.push_str(&format!("  capabilities = {caps}\n"));
        if e.path.is_some() {
            t.push_str("  override_path = true\n");
        }
        if let Some(tls) = self.config_of(&e.host).and_then(|c| c.tls.as_ref()) {
            if let Some(ca) = &tls.ca_file {
                t.push_str(&format!(
                    "  ca = [{}]\n",
                    toml_str(&ca.display().to_string())
                ));
            }
            if let (Some(c), Some(k)) = (&tls.cert_file, &tls.key_file) {
                t.push_str(&format!(
                    "  client = [[{}, {}]]\n",
                    toml_str(&c.display().to_string()),
                    toml_str(&k.display().to_string())
                ));
            }
            if tls.insecure_skip_verify {
                t.push_str("  skip_verify = true\n");
            }
        }
        t
    }

    fn hosts_toml(&self, registry: &str) -> String {
        let mut out = format!("{HEADER}\n");
        let mut upstream = default_endpoint(registry);
        // TLS settings for a registry mean it speaks TLS, loopback or not.
        if let Some(u) = upstream.as_mut() {
            if self.configs.get(registry).is_some_and(|c| c.tls.is_some()) {
                u.base = format!("https://{}", u.host);
            }
        }
        if let Some(u) = &upstream {
            out.push_str(&format!("server = {}\n", toml_str(&u.url())));
        }
        let mirrors: Vec<Endpoint> = self
            .mirrors
            .get(registry)
            .map(|m| {
                m.endpoint
                    .iter()
                    .filter_map(|e| parse_endpoint(e).ok())
                    .collect()
            })
            .unwrap_or_default();
        let mut tables = 0;
        for e in mirrors.iter().filter(|e| Some(*e) != upstream.as_ref()) {
            out.push_str(&self.host_table(e, true));
            tables += 1;
        }
        // containerd 1.6 ignores a hosts.toml without any [host] table; the registry's own endpoint,
        // with its TLS, is then the one.
        if tables == 0 {
            if let Some(u) = &upstream {
                out.push_str(&self.host_table(u, false));
            }
        }
        out
    }

    /// The credentials the `configs` give for pulling `image`: each mirror endpoint's, then the
    /// registry's own, each bound to its endpoint (containerd sends it to that host only).
    pub fn credentials_for(&self, image: &str) -> Vec<AuthConfig> {
        let registry = super::credentials::registry_of(image);
        let mut endpoints = self.endpoints_of(&registry);
        endpoints.extend(default_endpoint(&registry));
        let mut seen = BTreeSet::new();
        endpoints
            .into_iter()
            .filter(|e| seen.insert(e.base.clone()))
            .filter_map(|e| {
                let a = self.config_of(&e.host)?.auth.as_ref()?;
                Some(AuthConfig {
                    username: a.username.clone(),
                    password: a.password.clone(),
                    auth: a.auth.clone(),
                    identity_token: a.identity_token.clone(),
                    registry_token: String::new(),
                    server_address: e.base,
                })
            })
            .collect()
    }

    /// Writes the `hosts.toml` files under `dir` and removes the ones the agent wrote before for
    /// registries no longer named; files of anyone else are left alone. The names written.
    pub fn write(&self, dir: &Path) -> Result<Vec<String>, MirrorError> {
        let werr = |p: &Path, source| MirrorError::Write {
            path: p.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
        let rendered = self.render();
        let names: BTreeSet<&str> = rendered.iter().map(|(n, _)| n.as_str()).collect();
        for entry in std::fs::read_dir(dir).map_err(|e| werr(dir, e))?.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let file = entry.path().join("hosts.toml");
            let ours = std::fs::read_to_string(&file).is_ok_and(|t| t.starts_with(HEADER));
            if ours && !names.contains(name.as_str()) {
                std::fs::remove_file(&file).map_err(|e| werr(&file, e))?;
                // Only when nothing else is left in it.
                let _ = std::fs::remove_dir(entry.path());
            }
        }
        for (name, content) in &rendered {
            let sub = dir.join(name);
            std::fs::create_dir_all(&sub).map_err(|e| werr(&sub, e))?;
            let tmp = sub.join(".hosts.toml.keel");
            std::fs::write(&tmp, content).map_err(|e| werr(&tmp, e))?;
            let file = sub.join("hosts.toml");
            std::fs::rename(&tmp, &file).map_err(|e| werr(&file, e))?;
        }
        Ok(rendered.into_iter().map(|(n, _)| n).collect())
    }
}

/// The `hosts.toml` directory containerd reads: the first of its CRI `config_path` list.
pub fn hosts_dir(config_path: &str) -> Option<PathBuf> {
    config_path
        .split(':')
        .find(|p| !p.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<Registries, MirrorError> {
        Registries::parse(y, "registries.yaml")
    }

    #[test]
    fn docker_hub_mirror_renders_hosts_toml_with_tls() {
        let r = parse(
            "mirrors:\n  docker.io:\n    endpoint: [\"https://127.0.0.1:5443\", mirror.example/v2/hub]\n\
             configs:\n  \"127.0.0.1:5443\":\n    auth: {username: u, password: p}\n    \
             tls: {ca_file: /etc/hostname, insecure_skip_verify: true}\n",
        )
        .unwrap();
        let files = r.render();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["127.0.0.1:5443", "docker.io"]);
        let hub = &files[1].1;
        assert!(hub.starts_with(HEADER), "{hub}");
        assert!(
            hub.contains("server = \"https://registry-1.docker.io\""),
            "{hub}"
        );
        let first = hub.find("[host.\"https://127.0.0.1:5443\"]").unwrap();
        let second = hub
            .find("[host.\"https://mirror.example/v2/hub\"]")
            .unwrap();
        assert!(first < second, "{hub}");
        assert!(hub.contains("ca = [\"/etc/hostname\"]"), "{hub}");
        assert!(hub.contains("skip_verify = true"), "{hub}");
        assert!(hub.contains("override_path = true"), "{hub}");
        assert!(
            hub.contains("capabilities = [\"pull\", \"resolve\"]"),
            "{hub}"
        );
        // A config-only host still gets a [host] table (containerd 1.6 ignores a file without one).
        let own = &files[0].1;
        assert!(own.contains("server = \"https://127.0.0.1:5443\""), "{own}");
        assert!(own.contains("[host.\"https://127.0.0.1:5443\"]"), "{own}");
    }

    #[test]
    fn endpoints_default_to_https_but_loopback_ports_to_http() {
        let e = |s: &str| parse_endpoint(s).unwrap();
        assert_eq!(e("mirror.example").base, "https://mirror.example");
        assert_eq!(e("127.0.0.1:5000").base, "http://127.0.0.1:5000");
        assert_eq!(e("localhost:5000/v2/").path, None);
        assert_eq!(
            e("http://m.example:80/v2/x/").path.as_deref(),
            Some("/v2/x")
        );
        assert!(parse_endpoint("ftp://m.example").is_err());
        assert!(parse_endpoint("user@m.example").is_err());
    }

    #[test]
    fn credentials_are_bound_to_their_endpoint() {
        let r = parse(
            "mirrors:\n  docker.io:\n    endpoint: [\"https://127.0.0.1:5443\"]\n  \"*\":\n    endpoint: [\"http://127.0.0.1:5001\"]\n\
             configs:\n  \"127.0.0.1:5443\":\n    auth: {username: u, password: p}\n  \"*\":\n    auth: {auth: dTpw}\n",
        )
        .unwrap();
        let c = r.credentials_for("nginx:1.27");
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].server_address, "https://127.0.0.1:5443");
        assert_eq!(c[0].username, "u");
        // Docker Hub itself falls under the "*" config.
        assert_eq!(c[1].server_address, "https://registry-1.docker.io");
        let q = r.credentials_for("quay.io/x/y:1");
        assert_eq!(
            q.iter()
                .map(|a| a.server_address.as_str())
                .collect::<Vec<_>>(),
            ["http://127.0.0.1:5001", "https://quay.io"]
        );
        assert!(r.render().iter().any(|(n, _)| n == "_default"));
    }

    #[test]
    fn bad_files_are_refused_with_the_field() {
        let msg = |y: &str| parse(y).unwrap_err().to_string();
        assert!(
            msg("mirrors:\n  docker.io:\n    rewrite: {\"^a/(.*)\": b/$1}\n")
                .contains("mirrors.docker.io.rewrite")
        );
        assert!(
            msg("mirrors:\n  docker.io:\n    endpoint: [\"ftp://x\"]\n").contains("endpoint[0]")
        );
        assert!(msg("configs:\n  m:\n    tls: {ca_file: relative.pem}\n").contains("absolute"));
        assert!(
            msg("configs:\n  m:\n    tls: {ca_file: /nonexistent/ca.pem}\n")
                .contains("/nonexistent/ca.pem")
        );
        assert!(msg("mirror:\n  docker.io: {}\n").contains("unknown field"));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn stale_files_of_the_agent_go_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("old.example");
        let theirs = dir.path().join("theirs.example");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&theirs).unwrap();
        std::fs::write(
            mine.join("hosts.toml"),
            format!("{HEADER}\nserver = \"x\"\n"),
        )
        .unwrap();
        std::fs::write(theirs.join("hosts.toml"), "server = \"y\"\n").unwrap();
        let r =
            parse("mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\"]\n").unwrap();
        assert_eq!(r.write(dir.path()).unwrap(), ["docker.io"]);
        assert!(!mine.exists());
        assert!(theirs.join("hosts.toml").exists());
        assert!(dir.path().join("docker.io/hosts.toml").exists());
        assert_eq!(
            hosts_dir(":/a/certs.d:/b").as_deref(),
            Some(Path::new("/a/certs.d"))
        );
        assert_eq!(hosts_dir(""), None);
    }
}
