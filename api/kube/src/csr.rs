//! CertificateSigningRequests (`certificates.k8s.io/v1`): the requester recorded on create, and the
//! `kubernetes.io/kubelet-serving` signer.
//!
//! Upstream leaves approving kubelet serving certificates to an administrator or an external approver
//! and signs approved requests in kube-controller-manager's `csrsigning` controller. keel's API server
//! holds the cluster CA itself, so it signs in the write that approves: a kubelet-serving request is
//! approved on create (condition `Approved`, reason `AutoApproved`) when an agent asks for itself (the
//! requester is `system:node:<n>` in `system:nodes`) or the requester may approve requests anyway (an
//! agent run with an admin's credentials), the subject is `CN=system:node:<n>, O=system:nodes`, the usages
//! are upstream's kubelet-serving ones, and every SAN is an address or host name the Node `<n>` reports
//! (or its name); a request that passes the signer's checks but not these stays
//! pending, and is signed when someone approves it through `/approval` (`kubectl certificate approve`).
//! Other signers' requests are stored and can be approved or denied, but nothing signs them.

use base64::Engine;
use rcgen::{
    CertificateSigningRequestParams, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};
use serde_json::{json, Value};

use crate::authn::Identity;
use crate::authz::node::{node_name, NODES_GROUP, NODE_USER_PREFIX};
use crate::object;
use crate::status::ApiError;
use crate::storage::Storage;
use crate::strategy::csr::{has_condition, parse_request};

/// The signer of kubelet serving certificates.
pub(crate) const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// Usages a kubelet serving certificate may ask for (upstream's `ValidateKubeletServingCSR`).
const SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
/// Signed certificates' lifetime when the request does not ask for less (upstream's
/// `--cluster-signing-duration`, one year).
const DEFAULT_SECONDS: i64 = 365 * 24 * 3600;
/// The shortest lifetime a request may ask for (upstream: 10 minutes).
const MIN_SECONDS: i64 = 600;

/// Why a request cannot be signed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CsrError {
    #[error("{0}")]
    Invalid(String),
    #[error("signing failed: {0}")]
    Sign(#[from] rcgen::Error),
}

fn dn_text(v: &DnValue) -> Option<String> {
    match v {
        DnValue::PrintableString(s) => Some(s.as_str().to_string()),
        DnValue::Utf8String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The kubelet-serving signer's checks of a request (upstream's `ValidateKubeletServingCSR`): subject
/// `O=system:nodes`, `CN=system:node:<name>`, only DNS and IP SANs and at least one, usages among the
/// serving ones with `server auth`. Returns the node's name and the SANs.
fn kubelet_serving(
    obj: &Value,
    req: &CertificateSigningRequestParams,
) -> Result<(String, Vec<SanType>), CsrError> {
    let dn = &req.params.distinguished_name;
    let orgs: Vec<String> = dn
        .iter()
        .filter(|(t, _)| **t == DnType::OrganizationName)
        .filter_map(|(_, v)| dn_text(v))
        .collect();
    if orgs != [NODES_GROUP] {
        return Err(CsrError::Invalid(format!(
            "subject organization is not {NODES_GROUP}"
        )));
    }
    let cn = dn
        .get(&DnType::CommonName)
        .and_then(dn_text)
        .unwrap_or_default();
    let Some(node) = cn.strip_prefix(NODE_USER_PREFIX).filter(|n| !n.is_empty()) else {
        return Err(CsrError::Invalid(format!(
            "subject common name does not begin with {NODE_USER_PREFIX}"
        )));
    };
    let sans = req.params.subject_alt_names.clone();
    if sans.is_empty() {
        return Err(CsrError::Invalid(
            "DNS or IP subjectAltName is required".into(),
        ));
    }
    if sans
        .iter()
        .any(|s| !matches!(s, SanType::DnsName(_) | SanType::IpAddress(_)))
    {
        return Err(CsrError::Invalid(
            "only DNS and IP subjectAltNames are allowed".into(),
        ));
    }
    let usages = object::strings(object::path(obj, "spec.usages"));
    if !usages.iter().any(|u| u == "server auth") {
        return Err(CsrError::Invalid(
            "missing required usages: server auth".into(),
        ));
    }
    if let Some(u) = usages
        .iter()
        .find(|u| !SERVING_USAGES.contains(&u.as_str()))
    {
        return Err(CsrError::Invalid(format!("usage not allowed: {u}")));
    }
    Ok((node.to_string(), sans))
}

/// Whether every SAN is the node's name or an address its Node reports.
async fn sans_are_the_nodes(storage: &Storage, node: &str, sans: &[SanType]) -> bool {
    let key = format!("/registry/minions/{node}");
    let Ok(Some(stored)) = storage.get(&key, false).await else {
        return false;
    };
    let mut known: Vec<String> = vec![node.to_string()];
    if let Some(addrs) = object::path(&stored.object, "status.addresses").and_then(Value::as_array)
    {
        known.extend(
            addrs
                .iter()
                .filter_map(|a| a.get("address").and_then(Value::as_str))
                .map(str::to_string),
        );
    }
    sans.iter().all(|s| match s {
        SanType::DnsName(d) => known.iter().any(|k| k == d.as_str()),
        SanType::IpAddress(ip) => known
            .iter()
            .any(|k| k.parse::<std::net::IpAddr>().ok() == Some(*ip)),
        _ => false,
    })
}

/// Signs the request with the cluster CA: the subject and SANs asked for, the usages of the spec, for
/// `spec.expirationSeconds` (at least 10 minutes) or a year, never past the CA's own end.
fn sign(
    obj: &Value,
    req: &CertificateSigningRequestParams,
    ca_cert: &str,
    ca_key: &str,
) -> Result<String, CsrError> {
    let key = KeyPair::from_pem(ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, key)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = req.params.distinguished_name.clone();
    params.subject_alt_names = req.params.subject_alt_names.clone();
    params.is_ca = IsCa::ExplicitNoCa;
    let usages = object::strings(object::path(obj, "spec.usages"));
    for u in &usages {
        match u.as_str() {
            "digital signature" => params.key_usages.push(KeyUsagePurpose::DigitalSignature),
            "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
            "server auth" => params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth),
            _ => {}
        }
    }
    let asked = object::path(obj, "spec.expirationSeconds").and_then(Value::as_i64);
    let seconds = asked.map_or(DEFAULT_SECONDS, |s| s.clamp(MIN_SECONDS, DEFAULT_SECONDS));
    let now = jiff::Timestamp::now();
    // Back-dated as upstream's signer does, for clocks a little behind.
    let start = now.as_second() - 300;
    params.not_before = time::OffsetDateTime::from_unix_timestamp(start)
        .map_err(|e| CsrError::Invalid(e.to_string()))?;
    params.not_after = time::OffsetDateTime::from_unix_timestamp(now.as_second() + seconds)
        .map_err(|e| CsrError::Invalid(e.to_string()))?;
    let mut serial = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut serial[..]);
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let cert = req_with(params, req).signed_by(&issuer)?;
    Ok(cert.pem())
}

fn req_with(
    params: rcgen::CertificateParams,
    req: &CertificateSigningRequestParams,
) -> CertificateSigningRequestParams {
    CertificateSigningRequestParams {
        params,
        public_key: req.public_key.clone(),
    }
}

fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = object::now_rfc3339();
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

/// Fills in the requester on a new request (`spec.username`, `uid`, `groups`), as upstream's create
/// strategy does, then approves and signs it when it is a kubelet's request for itself (module
/// documentation).
/// The CSR steps of a write once the object's own validation passed (the generic store's completion
/// step): a new request gets its requester and, when it qualifies, approval and a certificate; an approval
/// of a kubelet-serving request gets its certificate. Other kinds and writes pass untouched.
pub(crate) async fn complete(
    storage: &Storage,
    authz: &crate::authz::Authorizer,
    user: &Identity,
    ca: (&str, &str),
    a: &keel_kube_registry::generic::Admitted<'_>,
    obj: &mut Value,
) -> Result<(), ApiError> {
    use keel_kube_registry::generic::Operation;
    if a.def.gk() != ("certificates.k8s.io", "CertificateSigningRequest") {
        return Ok(());
    }
    match a.op {
        Operation::Create => admit_create(storage, authz, user, Some(ca), obj).await,
        Operation::Update { .. } if a.subresource == Some("approval") => {
            sign_approved(Some(ca), obj);
            Ok(())
        }
        Operation::Update { .. } => Ok(()),
    }
}

pub(crate) async fn admit_create(
    storage: &Storage,
    authz: &crate::authz::Authorizer,
    user: &Identity,
    ca: Option<(&str, &str)>,
    obj: &mut Value,
) -> Result<(), ApiError> {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("username".into(), json!(user.user));
        spec.insert("groups".into(), json!(user.groups));
        spec.remove("uid");
        spec.remove("extra");
    }
    if object::path(obj, "spec.signerName").and_then(Value::as_str) != Some(KUBELET_SERVING) {
        return Ok(());
    }
    let Ok(req) = parse_request(obj) else {
        return Ok(());
    };
    let Ok((node, sans)) = kubelet_serving(obj, &req) else {
        return Ok(());
    };
    // The node itself, or someone who may approve requests anyway (an agent run with an admin's
    // credentials), asking for names the Node reports.
    let itself = node_name(user) == Some(node.as_str());
    if !(itself || may_approve(authz, user)) || !sans_are_the_nodes(storage, &node, &sans).await {
        return Ok(());
    }
    let message = if itself {
        "Auto approving self kubelet serving certificate: the SANs are the node's own addresses"
    } else {
        "Auto approving kubelet serving certificate requested by a user allowed to approve it"
    };
    let approved = condition("Approved", "AutoApproved", message);
    obj["status"] = json!({"conditions": [approved]});
    sign_approved(ca, obj);
    Ok(())
}

/// Whether `user` may approve requests (`update` of `certificatesigningrequests/approval`).
fn may_approve(authz: &crate::authz::Authorizer, user: &Identity) -> bool {
    use crate::authz::attributes::{Attributes, ResourceAttributes};
    authz
        .authorize(&Attributes {
            user: user.clone(),
            verb: "update".into(),
            resource: Some(ResourceAttributes {
                group: "certificates.k8s.io".into(),
                version: "v1".into(),
                resource: "certificatesigningrequests".into(),
                subresource: Some("approval".into()),
                namespace: String::new(),
                name: None,
            }),
            path: "/apis/certificates.k8s.io/v1/certificatesigningrequests".into(),
        })
        .allowed
}

/// Signs an approved kubelet-serving request that has no certificate yet (after an approval, or the
/// automatic one); a request the signer refuses gets the `Failed` condition instead.
pub(crate) fn sign_approved(ca: Option<(&str, &str)>, obj: &mut Value) {
    if object::path(obj, "spec.signerName").and_then(Value::as_str) != Some(KUBELET_SERVING)
        || !has_condition(obj, "Approved")
        || has_condition(obj, "Failed")
        || object::path(obj, "status.certificate")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty())
    {
        return;
    }
    let Some((cert, key)) = ca else {
        return;
    };
    let signed = parse_request(obj)
        .map_err(CsrError::Invalid)
        .and_then(|req| {
            kubelet_serving(obj, &req)?;
            sign(obj, &req, cert, key)
        });
    let status = obj
        .as_object_mut()
        .map(|m| m.entry("status").or_insert_with(|| json!({})));
    let Some(Value::Object(status)) = status else {
        return;
    };
    match signed {
        Ok(pem) => {
            status.insert(
                "certificate".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(pem)),
            );
        }
        Err(e) => {
            let failed = condition("Failed", "SignerValidationFailure", &e.to_string());
            match status.get_mut("conditions").and_then(Value::as_array_mut) {
                Some(cs) => cs.push(failed),
                None => {
                    status.insert("conditions".into(), json!([failed]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, org: &str, sans: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut p =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.distinguished_name.push(DnType::OrganizationName, org);
        let pem = p.serialize_request(&key).unwrap().pem().unwrap();
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn csr(req: String, usages: &[&str]) -> Value {
        json!({"spec": {"request": req, "signerName": KUBELET_SERVING, "usages": usages}})
    }

    #[test]
    fn kubelet_serving_requests_are_checked() {
        let good = csr(
            request("system:node:w1", "system:nodes", &["w1", "10.0.0.5"]),
            &SERVING_USAGES,
        );
        assert!(crate::strategy::csr::validate(&good).is_empty());
        let req = parse_request(&good).unwrap();
        let (node, sans) = kubelet_serving(&good, &req).unwrap();
        assert_eq!(node, "w1");
        assert_eq!(sans.len(), 2);
        let client = csr(
            request("system:node:w1", "system:nodes", &["w1"]),
            &["client auth"],
        );
        let req = parse_request(&client).unwrap();
        assert!(kubelet_serving(&client, &req).is_err());
        let other = csr(request("alice", "system:nodes", &["w1"]), &SERVING_USAGES);
        let req = parse_request(&other).unwrap();
        assert!(kubelet_serving(&other, &req).is_err());
        let bad = json!({"spec": {"request": "eA==", "signerName": "x", "usages": ["nope"]}});
        assert_eq!(crate::strategy::csr::validate(&bad).len(), 3);
    }

    #[test]
    fn approved_requests_are_signed_by_the_ca() {
        use rustls::pki_types::pem::PemObject;
        let pki = crate::pki::ClusterPki::generate().unwrap();
        let mut obj = csr(
            request("system:node:w1", "system:nodes", &["w1", "10.0.0.5"]),
            &SERVING_USAGES,
        );
        sign_approved(Some((&pki.ca_cert, &pki.ca_key)), &mut obj);
        assert!(obj.get("status").is_none(), "not approved: not signed");
        obj["status"] = json!({"conditions": [condition("Approved", "A", "")]});
        sign_approved(Some((&pki.ca_cert, &pki.ca_key)), &mut obj);
        let b64 = obj["status"]["certificate"].as_str().unwrap();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            cert.subject().to_string(),
            "CN=system:node:w1, O=system:nodes"
        );
        assert_eq!(cert.issuer().to_string(), "CN=keel-ca");
    }
}
