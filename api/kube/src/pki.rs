//! The cluster PKI: one CA and one admin identity per cluster, a serving certificate per member.
//!
//! The first member that finds no PKI in the store creates the CA, the admin client certificate and the
//! admin bearer token, and writes them through Raft under [`PKI_KEY`] with a create-only Txn, so every
//! member of a cluster shares them and an `admin.kubeconfig` from any member works against all of them.
//! Each member then signs its own serving certificate (its addresses and every member's as SANs) and writes
//! the files under `<data-dir>/pki/` plus `<data-dir>/admin.kubeconfig`.
//!
//! Like kubeadm's etcd, whoever can read the etcd keyspace can read the CA key. A cluster made with
//! `keel server --init`/`--join` therefore asks for a client certificate of this CA on the etcd port and
//! speaks mutual TLS between members ([`MemberTls`], made here, kept in `<data-dir>/tls/`); a member given
//! explicit `http://` URLs must keep its etcd port reachable only by the cluster's operators.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use serde::{Deserialize, Serialize};

/// Where the shared PKI lives in the store (outside `/registry`, like k3s's bootstrap data).
pub const PKI_KEY: &str = "/keel/bootstrap/pki";
/// Subject of the admin client certificate: CN = user, O = group.
pub const ADMIN_USER: &str = "kubernetes-admin";
/// The user the API server is to node agents.
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";
/// The user the API server is to aggregated API servers (kubeadm's front-proxy client name).
pub const FRONT_PROXY_CLIENT_USER: &str = "front-proxy-client";
/// The group that may do everything (RBAC comes later; today every authenticated user may).
pub const ADMIN_GROUP: &str = "system:masters";

/// Why the PKI could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{0}")]
    Invalid(String),
    #[error("stored PKI is not valid JSON: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The cluster-wide part: CA and admin credentials, stored through Raft.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClusterPki {
    /// CA certificate (PEM).
    pub ca_cert: String,
    /// CA private key (PEM, PKCS#8).
    pub ca_key: String,
    /// Admin client certificate (PEM), CN=[`ADMIN_USER`], O=[`ADMIN_GROUP`].
    pub admin_cert: String,
    /// Admin client key (PEM).
    pub admin_key: String,
    /// A bearer token that authenticates as the admin.
    pub admin_token: String,
}

/// A member's serving certificate and key (PEM).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServingCert {
    pub cert: String,
    pub key: String,
}

/// How long the leaf certificates a member makes for itself live (its serving certificate and its client
/// certificates to agents and aggregated APIs): a year, renewed online 90 days before the end.
pub const LEAF_DAYS: u32 = 365;

fn validity(params: &mut CertificateParams, years: i32) {
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let (y, m, d) = (now.year() as i32, now.month() as u8, now.day() as u8);
    // Back-date a day so members whose clocks differ slightly accept each other's certificates.
    let start = now.checked_sub(jiff::Span::new().days(1)).unwrap_or(now);
    params.not_before = date_time_ymd(start.year() as i32, start.month() as u8, start.day() as u8);
    params.not_after = date_time_ymd(y + years, m, d.min(28));
}

/// Valid from yesterday (clock skew between members) for `days` days from today.
fn validity_days(params: &mut CertificateParams, days: u32) {
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let start = now
        .checked_sub(jiff::Span::new().days(1))
        .unwrap_or(now.clone());
    let end = now
        .checked_add(jiff::Span::new().days(i64::from(days)))
        .unwrap_or(now);
    params.not_before = date_time_ymd(start.year() as i32, start.month() as u8, start.day() as u8);
    params.not_after = date_time_ymd(end.year() as i32, end.month() as u8, end.day() as u8);
}

impl ClusterPki {
    /// A fresh CA (10 years), admin certificate (10 years) and admin token.
    pub fn generate() -> Result<Self, PkiError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, "keel-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut ca, 10);
        let ca_cert = ca.self_signed(&ca_key)?;
        let ca_cert_pem = ca_cert.pem();
        let issuer = Issuer::new(ca, ca_key);

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin
            .distinguished_name
            .push(DnType::CommonName, ADMIN_USER);
        admin
            .distinguished_name
            .push(DnType::OrganizationName, ADMIN_GROUP);
        admin.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut admin, 10);
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;

        let mut token = [0u8; 24];
        rand::Rng::fill(&mut rand::thread_rng(), &mut token[..]);
        let admin_token = token.iter().map(|b| format!("{b:02x}")).collect();
        Ok(ClusterPki {
            ca_cert: ca_cert_pem,
            ca_key: issuer.key().serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            admin_token,
        })
    }

    /// Signs a serving certificate for `hosts` (IP addresses and DNS names).
    pub fn serving_cert(&self, hosts: &[String]) -> Result<ServingCert, PkiError> {
        self.serving_cert_for(hosts, LEAF_DAYS)
    }

    /// [`ClusterPki::serving_cert`] valid for `days` days.
    pub fn serving_cert_for(&self, hosts: &[String], days: u32) -> Result<ServingCert, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let mut sans = Vec::new();
        for h in hosts {
            let san = match h.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(h.clone().try_into()?),
            };
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
        params.subject_alt_names = sans;
        self.sign(params, ExtendedKeyUsagePurpose::ServerAuth, days)
    }

    /// Signs `params` with the cluster CA for `usage`, with a fresh key, valid for `days` days.
    fn sign(
        &self,
        params: CertificateParams,
        usage: ExtendedKeyUsagePurpose,
        days: u32,
    ) -> Result<ServingCert, PkiError> {
        self.sign_for(params, vec![usage], days)
    }

    /// The certificates of a member's etcd side, signed by the cluster CA: its peer certificate
    /// (serverAuth and clientAuth, for `peer_hosts`), the etcd client port's serving certificate (for
    /// `client_hosts`, `localhost` and `127.0.0.1`) and a client certificate for tools (etcdctl,
    /// `keel status`, `keel snapshot save`).
    pub fn member_tls(
        &self,
        peer_hosts: &[String],
        client_hosts: &[String],
        days: u32,
    ) -> Result<MemberTls, PkiError> {
        let named = |cn: &str, hosts: &[String]| -> Result<CertificateParams, PkiError> {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.subject_alt_names = sans(hosts)?;
            Ok(params)
        };
        let mut local: Vec<String> = client_hosts.to_vec();
        local.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
        Ok(MemberTls {
            ca_cert: self.ca_cert.clone(),
            peer: self.sign_for(
                named("keel-peer", peer_hosts)?,
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ],
                days,
            )?,
            etcd_server: self.sign_for(
                named("keel-etcd-server", &local)?,
                vec![ExtendedKeyUsagePurpose::ServerAuth],
                days,
            )?,
            etcd_client: self.sign_for(
                named(ETCD_CLIENT_USER, &[])?,
                vec![ExtendedKeyUsagePurpose::ClientAuth],
                days,
            )?,
        })
    }

    /// Signs `params` with the cluster CA for `usages`, with a fresh key, valid for `days` days.
    fn sign_for(
        &self,
        mut params: CertificateParams,
        usages: Vec<ExtendedKeyUsagePurpose>,
        days: u32,
    ) -> Result<ServingCert, PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert, ca_key)?;
        let key = KeyPair::generate()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages;
        validity_days(&mut params, days);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(ServingCert {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// Signs the client certificate this member's API server shows node agents when it proxies
    /// `kubectl logs` to them (CN `kube-apiserver-kubelet-client`, O [`ADMIN_GROUP`], as kubeadm names it).
    pub fn kubelet_client_cert(&self, days: u32) -> Result<ServingCert, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, KUBELET_CLIENT_USER);
        params
            .distinguished_name
            .push(DnType::OrganizationName, ADMIN_GROUP);
        self.sign(params, ExtendedKeyUsagePurpose::ClientAuth, days)
    }

    /// Signs the client certificate this member's API server shows aggregated API servers when it relays
    /// to them (CN [`FRONT_PROXY_CLIENT_USER`]). Upstream uses a separate front-proxy CA; keel has one
    /// cluster CA, which `extension-apiserver-authentication` publishes as the request-header CA, and the
    /// CN is what aggregated servers check (`requestheader-allowed-names`).
    pub fn front_proxy_client_cert(&self, days: u32) -> Result<ServingCert, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, FRONT_PROXY_CLIENT_USER);
        self.sign(params, ExtendedKeyUsagePurpose::ClientAuth, days)
    }

    /// A kubeconfig for the admin pointing at `server` (an `https://host:port` URL).
    pub fn admin_kubeconfig(&self, server: &str) -> String {
        kubeconfig_text(
            server,
            &self.ca_cert,
            ADMIN_USER,
            &self.admin_cert,
            &self.admin_key,
        )
    }

    /// Writes `pki/{ca.crt,ca.key,apiserver.crt,apiserver.key,admin.crt,admin.key,admin.token}` and
    /// `admin.kubeconfig` under `data_dir`; private keys get mode 0600.
    pub fn write_files(
        &self,
        data_dir: &Path,
        serving: &ServingCert,
        server_url: &str,
    ) -> Result<PathBuf, PkiError> {
        let dir = data_dir.join("pki");
        std::fs::create_dir_all(&dir).map_err(|source| PkiError::Io {
            path: dir.clone(),
            source,
        })?;
        let files: [(&str, &str, bool); 7] = [
            ("ca.crt", &self.ca_cert, false),
            ("ca.key", &self.ca_key, true),
            ("apiserver.crt", &serving.cert, false),
            ("apiserver.key", &serving.key, true),
            ("admin.crt", &self.admin_cert, false),
            ("admin.key", &self.admin_key, true),
            ("admin.token", &self.admin_token, true),
        ];
        for (name, body, secret) in files {
            write_file(&dir.join(name), body.as_bytes(), secret)?;
        }
        let kubeconfig = data_dir.join("admin.kubeconfig");
        write_file(
            &kubeconfig,
            self.admin_kubeconfig(server_url).as_bytes(),
            true,
        )?;
        Ok(kubeconfig)
    }
}

/// Subject alternative names for host names and IP addresses, without repeats.
fn sans(hosts: &[String]) -> Result<Vec<SanType>, PkiError> {
    let mut sans = Vec::new();
    for h in hosts {
        let san = match h.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(h.clone().try_into()?),
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// The CN of the etcd client certificate [`ClusterPki::member_tls`] makes.
pub const ETCD_CLIENT_USER: &str = "keel-etcd-client";

/// Where a member keeps its etcd-side TLS files, under its data directory.
pub const MEMBER_TLS_DIR: &str = "tls";

/// A member's etcd-side certificates (see [`ClusterPki::member_tls`]); a joining server gets them in
/// the join answer.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberTls {
    /// The cluster CA (PEM): it signs every member's peer certificate and the etcd certificates.
    pub ca_cert: String,
    /// The peer certificate (serverAuth and clientAuth).
    pub peer: ServingCert,
    /// The etcd client port's serving certificate.
    pub etcd_server: ServingCert,
    /// A client certificate for etcd clients.
    pub etcd_client: ServingCert,
}

// The keys must never reach a log (a join answer is `Debug`).
impl std::fmt::Debug for MemberTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberTls").finish_non_exhaustive()
    }
}

impl MemberTls {
    /// The files [`MemberTls::write`] writes, under `<data-dir>/tls/`.
    pub const FILES: [&'static str; 7] = [
        "ca.crt",
        "peer.crt",
        "peer.key",
        "etcd-server.crt",
        "etcd-server.key",
        "etcd-client.crt",
        "etcd-client.key",
    ];

    /// Writes [`MemberTls::FILES`] into `dir` (keys with mode 0600), each atomically.
    pub fn write(&self, dir: &Path) -> Result<(), PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let files: [(&str, &str, bool); 7] = [
            ("ca.crt", &self.ca_cert, false),
            ("peer.crt", &self.peer.cert, false),
            ("peer.key", &self.peer.key, true),
            ("etcd-server.crt", &self.etcd_server.cert, false),
            ("etcd-server.key", &self.etcd_server.key, true),
            ("etcd-client.crt", &self.etcd_client.cert, false),
            ("etcd-client.key", &self.etcd_client.key, true),
        ];
        for (name, body, secret) in files {
            write_file(&dir.join(name), body.as_bytes(), secret)?;
        }
        Ok(())
    }
}

/// The host of `scheme://host:port[/...]` (brackets of an IPv6 literal removed), unless it is a
/// wildcard address, which no certificate can name.
pub fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hostport = rest.split('/').next()?;
    let host = match hostport.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => hostport,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host == "0.0.0.0" || host == "::" {
        return None;
    }
    Some(host.to_string())
}

fn write_file(path: &Path, body: &[u8], secret: bool) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(err)?;
    f.write_all(body).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// A kubeconfig for `user` in `groups` against `server`, with a client certificate (1 year) signed by the
/// CA in `ca_cert`/`ca_key` (PEM): what `keel kubeconfig` writes, e.g. `system:node:<name>` in
/// `system:nodes` for an agent.
pub fn user_kubeconfig(
    ca_cert: &str,
    ca_key: &str,
    server: &str,
    user: &str,
    groups: &[String],
) -> Result<String, PkiError> {
    let issuer = Issuer::from_ca_cert_pem(ca_cert, KeyPair::from_pem(ca_key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, user);
    // The certificate library keeps one value per name type, so a certificate carries one group.
    match groups {
        [] => {}
        [g] => params
            .distinguished_name
            .push(DnType::OrganizationName, g.as_str()),
        _ => {
            return Err(PkiError::Invalid(
                "a client certificate made here carries at most one group".into(),
            ))
        }
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    validity(&mut params, 1);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(kubeconfig_text(
        server,
        ca_cert,
        user,
        &cert.pem(),
        &key.serialize_pem(),
    ))
}

/// A kubeconfig with one cluster (`server`, trusting `ca`) and one user with a client certificate.
fn kubeconfig_text(server: &str, ca: &str, user: &str, cert: &str, key: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user:?}\n  user:\n    \
         client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: keel\n  context:\n    \
         cluster: keel\n    user: {user:?}\ncurrent-context: keel\npreferences: {{}}\n",
        ca = b64(ca),
        cert = b64(cert),
        key = b64(key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_cert_chains_to_ca() {
        let pki = ClusterPki::generate().expect("generate");
        let s = pki
            .serving_cert(&["127.0.0.1".into(), "localhost".into()])
            .expect("serving");
        assert!(s.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        let der = rustls::pki_types::CertificateDer::from(
            x509_parser::pem::parse_x509_pem(s.cert.as_bytes())
                .expect("pem")
                .1
                .contents,
        );
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
        let ca = x509_parser::pem::parse_x509_pem(pki.ca_cert.as_bytes())
            .expect("ca pem")
            .1;
        let (_, ca) = x509_parser::parse_x509_certificate(&ca.contents).expect("ca");
        assert_eq!(cert.issuer(), ca.subject());
        let kc = pki.admin_kubeconfig("https://127.0.0.1:6443");
        assert!(kc.contains("server: https://127.0.0.1:6443"));
    }

    #[test]
    fn member_tls_has_the_usages_and_names_peers_need() {
        let pki = ClusterPki::generate().expect("generate");
        let tls = pki
            .member_tls(&["10.0.0.1".into()], &["m1.example".into()], 30)
            .expect("member tls");
        let parse = |pem: &str| {
            let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
                .expect("pem")
                .1
                .contents;
            let (_, c) = x509_parser::parse_x509_certificate(&der).expect("x509");
            let eku = c
                .extended_key_usage()
                .expect("eku")
                .map(|e| (e.value.server_auth, e.value.client_auth));
            let sans: Vec<String> = c
                .subject_alternative_name()
                .expect("san")
                .map(|s| {
                    s.value
                        .general_names
                        .iter()
                        .map(|n| n.to_string())
                        .collect()
                })
                .unwrap_or_default();
            (eku, sans)
        };
        let (eku, sans) = parse(&tls.peer.cert);
        assert_eq!(eku, Some((true, true)), "peer: serverAuth and clientAuth");
        // x509-parser shows IP addresses in hex.
        assert!(sans.iter().any(|s| s.contains("0a:00:00:01")), "{sans:?}");
        let (eku, sans) = parse(&tls.etcd_server.cert);
        assert_eq!(eku, Some((true, false)));
        for want in ["m1.example", "localhost", "7f:00:00:01"] {
            assert!(sans.iter().any(|s| s.contains(want)), "{want}: {sans:?}");
        }
        let (eku, _) = parse(&tls.etcd_client.cert);
        assert_eq!(eku, Some((false, true)));
        assert_eq!(tls.ca_cert, pki.ca_cert);
    }

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://10.0.0.1:2380").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(url_host("http://[::1]:2379/").as_deref(), Some("::1"));
        assert_eq!(
            url_host("https://m1.example:2379").as_deref(),
            Some("m1.example")
        );
        assert_eq!(url_host("https://0.0.0.0:2379"), None);
        assert_eq!(url_host("m1:2380").as_deref(), Some("m1"));
    }
}
