//! Registry credentials from a pod's `imagePullSecrets`, matched to an image as the kubelet's keyring
//! matches them: a `.dockerconfigjson` (`{"auths": {KEY: …}}`) or legacy `.dockercfg` (`{KEY: …}`) entry
//! applies when its key's host matches the image's registry label by label (`*` globs a label), its
//! port is the same, and its path is a prefix of the image's repository. More specific keys come first;
//! the agent tries each in turn, and pulls anonymously when none applies.

use k8s_cri::v1::AuthConfig;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use kube::Client;
use serde_json::Value;

/// The registries Docker Hub answers for, all one for matching.
const DOCKER_HUB: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// A registry location: host labels, port, path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    host: String,
    port: String,
    path: String,
}

fn split_host_port(hostport: &str) -> (String, String) {
    match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h.to_ascii_lowercase(), p.to_string())
        }
        _ => (hostport.to_ascii_lowercase(), String::new()),
    }
}

/// Where an image lives: its registry (Docker Hub for a name without one) and repository path.
fn image_location(image: &str) -> Location {
    let name = image.split('@').next().unwrap_or(image);
    let (first, rest) = name.split_once('/').unwrap_or(("", name));
    let has_registry =
        !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let (host, repo) = if has_registry {
        (first.to_string(), rest.to_string())
    } else if name.contains('/') {
        ("docker.io".to_string(), name.to_string())
    } else {
        ("docker.io".to_string(), format!("library/{name}"))
    };
    // The tag is not part of the path.
    let repo = match repo.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => r.to_string(),
        _ => repo,
    };
    let (host, port) = split_host_port(&host);
    Location {
        host,
        port,
        path: format!("/{repo}"),
    }
}

/// The registry of an image as a registries file names it: `host[:port]`, Docker Hub as `docker.io`.
pub fn registry_of(image: &str) -> String {
    let l = image_location(image);
    let host = if DOCKER_HUB.contains(&l.host.as_str()) {
        "docker.io"
    } else {
        &l.host
    };
    if l.port.is_empty() {
        host.to_string()
    } else {
        format!("{host}:{}", l.port)
    }
}

/// A key of a docker config as a location (scheme dropped, `/v1/`-style Docker Hub URLs included).
fn key_location(key: &str) -> Location {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (hostport, path) = match k.find('/') {
        Some(i) => (&k[..i], &k[i..]),
        None => (k, ""),
    };
    let (host, port) = split_host_port(hostport);
    // Docker Hub's legacy key names an API version, not a repository.
    let path = if DOCKER_HUB.contains(&host.as_str()) && path.starts_with("/v1") {
        String::new()
    } else {
        path.trim_end_matches('/').to_string()
    };
    Location { host, port, path }
}

/// `*` in a label matches any run of characters within it.
fn label_matches(glob: &str, label: &str) -> bool {
    match glob.split_once('*') {
        None => glob == label,
        Some((pre, post)) => {
            label.len() >= pre.len() + post.len()
                && label.starts_with(pre)
                && label_matches_suffix(post, &label[pre.len()..])
        }
    }
}

fn label_matches_suffix(glob: &str, rest: &str) -> bool {
    if !glob.contains('*') {
        return rest.ends_with(glob);
    }
    (0..=rest.len()).any(|i| rest.is_char_boundary(i) && label_matches(glob, &rest[i..]))
}

fn matches(key: &Location, image: &Location) -> bool {
    let same_host = if DOCKER_HUB.contains(&key.host.as_str()) {
        DOCKER_HUB.contains(&image.host.as_str())
    } else {
        let k: Vec<&str> = key.host.split('.').collect();
        let i: Vec<&str> = image.host.split('.').collect();
        k.len() == i.len() && k.iter().zip(&i).all(|(g, l)| label_matches(g, l))
    };
    same_host && key.port == image.port && image.path.starts_with(&key.path)
}

/// One credential of a docker config.
fn auth_of(entry: &Value) -> Option<AuthConfig> {
    let s = |k: &str| entry[k].as_str().unwrap_or_default().to_string();
    let (mut username, mut password) = (s("username"), s("password"));
    let auth = s("auth");
    if username.is_empty() && !auth.is_empty() {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&auth)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (u, p) = text.split_once(':')?;
        username = u.to_string();
        password = p.to_string();
    }
    Some(AuthConfig {
        username,
        password,
        auth,
        // containerd reads this as a URL and drops credentials whose host is not the one it pulls
        // from; a `host:port` key is no URL, and Docker Hub's keys name another host. The key already
        // matched the image, so none is named.
        server_address: String::new(),
        identity_token: s("identitytoken"),
        registry_token: s("registrytoken"),
    })
}

/// The entries of one secret's docker config: (key, credential).
pub fn secret_entries(secret: &Secret) -> Vec<(String, AuthConfig)> {
    let data = secret.data.clone().unwrap_or_default();
    let parsed = |k: &str| {
        data.get(k)
            .and_then(|b| serde_json::from_slice::<Value>(&b.0).ok())
    };
    let entries = if let Some(v) = parsed(".dockerconfigjson") {
        v["auths"].as_object().cloned().unwrap_or_default()
    } else if let Some(v) = parsed(".dockercfg") {
        v.as_object().cloned().unwrap_or_default()
    } else {
        Default::default()
    };
    entries
        .iter()
        .filter_map(|(k, e)| auth_of(e).map(|a| (k.clone(), a)))
        .collect()
}

/// The credentials among `entries` that apply to `image`, most specific key first.
pub fn for_image(image: &str, entries: &[(String, AuthConfig)]) -> Vec<AuthConfig> {
    let target = image_location(image);
    let mut hits: Vec<(String, AuthConfig)> = entries
        .iter()
        .filter(|(k, _)| matches(&key_location(k), &target))
        .cloned()
        .collect();
    // Longer (more specific) keys first, as the kubelet's keyring sorts them.
    hits.sort_by(|a, b| b.0.cmp(&a.0));
    hits.into_iter().map(|(_, a)| a).collect()
}

/// Reads the pod's `imagePullSecrets`; returns their entries and the names that could not be read.
pub async fn pod_entries(client: &Client, pod: &Pod) -> (Vec<(String, AuthConfig)>, Vec<String>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    for r in pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
    {
        match api.get_opt(&r.name).await {
            Ok(Some(s)) => entries.extend(secret_entries(&s)),
            _ => missing.push(r.name.clone()),
        }
    }
    (entries, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn entries(config: Value) -> Vec<(String, AuthConfig)> {
        let s = Secret {
            data: Some(
                [(
                    ".dockerconfigjson".to_string(),
                    ByteString(config.to_string().into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        secret_entries(&s)
    }

    #[test]
    fn keys_match_registry_port_and_path_prefix() {
        let e = entries(json!({"auths": {
            "registry.example.com": {"username": "a", "password": "1"},
            "registry.example.com/team": {"username": "b", "password": "2"},
            "*.corp.example": {"auth": "YzozCg=="},
            "127.0.0.1:5000": {"username": "d", "password": "4"},
            "https://index.docker.io/v1/": {"username": "e", "password": "5"},
        }}));
        let users = |image: &str| -> Vec<String> {
            for_image(image, &e)
                .into_iter()
                .map(|a| a.username)
                .collect()
        };
        assert_eq!(users("registry.example.com/team/app:1"), ["b", "a"]);
        assert_eq!(users("registry.example.com/other/app"), ["a"]);
        assert_eq!(users("eu.corp.example/app"), ["c"]);
        assert!(users("a.eu.corp.example/app").is_empty());
        assert_eq!(users("127.0.0.1:5000/busybox:latest"), ["d"]);
        assert!(users("127.0.0.1/busybox").is_empty());
        assert_eq!(users("nginx:1.27"), ["e"]);
        assert_eq!(users("docker.io/me/app"), ["e"]);
        assert!(users("quay.io/x/y").is_empty());
        // `auth` alone gives the user and password.
        let c = for_image("x.corp.example/app", &e);
        assert_eq!(
            (c[0].username.as_str(), c[0].password.as_str()),
            ("c", "3\n")
        );
    }

    #[test]
    fn legacy_dockercfg_is_read() {
        let s = Secret {
            data: Some(
                [(
                    ".dockercfg".to_string(),
                    ByteString(
                        json!({"r.example": {"username": "u", "password": "p"}})
                            .to_string()
                            .into_bytes(),
                    ),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let e = secret_entries(&s);
        assert_eq!(for_image("r.example/app", &e)[0].password, "p");
    }
}
