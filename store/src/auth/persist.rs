//! Where the auth state lives in the backend: Meta entries under `auth/`, `authUsers/` and
//! `authRoles/` followed by etcd's bucket keys, with etcd's value bytes; loading them, and the
//! mapping to and from etcd's buckets for the etcd-format export and import.

use prost::Message;

use super::AuthState;
use crate::backend::{Backend, Pair, Space};
use crate::error::StoreError;
use crate::pb::authpb::{Role, User};

/// Meta prefix of bucket `auth` entries.
pub(crate) const META_AUTH_PREFIX: &[u8] = b"auth/";
/// Meta prefix of bucket `authUsers` entries.
pub(crate) const META_USERS_PREFIX: &[u8] = b"authUsers/";
/// Meta prefix of bucket `authRoles` entries.
pub(crate) const META_ROLES_PREFIX: &[u8] = b"authRoles/";
pub(super) const ENABLED_KEY: &[u8] = b"authEnabled";
pub(super) const REVISION_KEY: &[u8] = b"authRevision";

pub(super) fn meta_key(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(key);
    k
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut e = prefix.to_vec();
    if let Some(last) = e.last_mut() {
        *last += 1;
    }
    e
}

/// The raw entries of etcd's three auth buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AuthBuckets {
    pub auth: Vec<Pair>,
    pub users: Vec<Pair>,
    pub roles: Vec<Pair>,
}

/// Where an etcd auth bucket's entries live in the Meta space.
pub(crate) fn bucket_prefix(bucket: &[u8]) -> Option<&'static [u8]> {
    match bucket {
        b"auth" => Some(META_AUTH_PREFIX),
        b"authUsers" => Some(META_USERS_PREFIX),
        b"authRoles" => Some(META_ROLES_PREFIX),
        _ => None,
    }
}

/// Checks one entry of an etcd auth bucket before it is imported; returns the Meta key.
pub(crate) fn import_key(bucket: &[u8], key: &[u8], value: &[u8]) -> Result<Vec<u8>, String> {
    let prefix = bucket_prefix(bucket).ok_or("not an auth bucket")?;
    match bucket {
        b"authUsers" => {
            User::decode(value).map_err(|e| format!("value is not an authpb.User: {e}"))?;
        }
        b"authRoles" => {
            Role::decode(value).map_err(|e| format!("value is not an authpb.Role: {e}"))?;
        }
        _ => {}
    }
    Ok(meta_key(prefix, key))
}

fn scan_prefix(backend: &dyn Backend, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
    let end = prefix_end(prefix);
    backend
        .scan(Space::Meta, prefix, Some(&end))
        .map(|r| r.map(|(k, v)| (k[prefix.len()..].to_vec(), v)))
        .collect()
}

pub(super) fn load_state(backend: &dyn Backend) -> Result<AuthState, StoreError> {
    let mut st = AuthState::default();
    for (k, v) in scan_prefix(backend, META_AUTH_PREFIX)? {
        match k.as_slice() {
            ENABLED_KEY => {
                st.enabled = v.as_slice() == [1];
                st.flag_written = true;
            }
            REVISION_KEY => {
                let b: [u8; 8] = v.as_slice().try_into().map_err(|_| {
                    StoreError::Corrupt(format!("auth revision has {} bytes", v.len()))
                })?;
                st.revision = u64::from_be_bytes(b);
            }
            _ => {}
        }
    }
    for (_, v) in scan_prefix(backend, META_USERS_PREFIX)? {
        let u = User::decode(v.as_slice())?;
        st.users
            .insert(String::from_utf8_lossy(&u.name).into_owned(), u);
    }
    for (_, v) in scan_prefix(backend, META_ROLES_PREFIX)? {
        let r = Role::decode(v.as_slice())?;
        st.roles
            .insert(String::from_utf8_lossy(&r.name).into_owned(), r);
    }
    st.rebuild_perms();
    Ok(st)
}
