//! Create: name, defaults, field ownership, mutating admission, the create strategy, validation, the
//! completion step, validating admission, the stored form, allocation and a Txn that the key is new.

use rand::Rng;
use serde_json::{json, Value};

use super::{Admitted, Operation, Tracking, Write, RETRIES, SERVER_META};
use crate::apply::managed;
use crate::apply::shape::Shape;
use crate::convert::storage_def;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};
use crate::storage::WriteOutcome;
use crate::strategy::{self, Strategy};
use crate::validation::validate;

const GENERATE_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated_name(prefix: &str) -> String {
    let mut rng = rand::thread_rng();
    let base: String = prefix.chars().take(58).collect();
    let suffix: String = (0..5)
        .map(|_| GENERATE_CHARS[rng.gen_range(0..GENERATE_CHARS.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Sets what a fresh object gets from the server, then lets the kind reset what a create may not set.
fn prepare_create(strategy: &dyn Strategy, def: &ResourceDef, obj: &mut Value) {
    let meta = object::meta_mut(obj);
    for f in SERVER_META {
        meta.remove(*f);
    }
    meta.remove("managedFields");
    meta.insert("uid".into(), json!(object::new_uid()));
    meta.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
    strategy.prepare_for_create(def, obj);
}

/// Creates a decoded object (in its stored form, namespace set from the URL). Returns the stored object
/// with its resourceVersion (or, in a dry run, the object that would be stored) and the warnings of the
/// strategy and admission.
pub async fn create(
    w: &Write<'_>,
    mut obj: Value,
    tracking: Tracking,
) -> Result<(Value, Vec<String>), ApiError> {
    let def = w.def;
    let sdef = &storage_def(def);
    let strategy = strategy::of(sdef);
    if let Some(message) = strategy.create_forbidden(def) {
        return Err(ApiError::NotAllowed {
            target: w.target(),
            message: message.into(),
        });
    }
    let generate = object::meta_str(&obj, "generateName").to_string();
    // Upstream's storage refuses a POST whose object carries a resourceVersion (one that parses as a
    // non-zero number; others are ignored), after admission, and not in a dry run.
    let sent_version = w.name.is_empty()
        && object::meta_str(&obj, "resourceVersion")
            .parse::<u64>()
            .is_ok_and(|v| v != 0);
    // Admission names a server-named object by its prefix, as upstream's (which picks names after it).
    let admission_name = match object::name(&obj) {
        "" => generate.clone(),
        n => n.to_string(),
    };
    // generateName counts only when no name was given (upstream's BeforeCreate): a client that resends an
    // answer (name and generateName both set) must get AlreadyExists, not a second object.
    let generated = object::name(&obj).is_empty() && !generate.is_empty();
    if generated {
        object::meta_mut(&mut obj).insert("name".into(), json!(generated_name(&generate)));
    }
    strategy.set_defaults(sdef, &mut obj);
    // The field manager sees the decoded and defaulted object, as upstream's: what mutating admission
    // and the create strategy set afterwards (a pod's service account, tolerations and priority, a
    // Node's not-ready taint, status resets) is nobody's field.
    if let Tracking::Update(o) = &tracking {
        let shape = Shape::of_kind(&sdef.api_version(), &sdef.kind);
        managed::record_create(&mut obj, shape, o, sdef.status);
    }
    let admitted = Admitted {
        def: sdef,
        requested: def,
        namespace: w.namespace,
        subresource: w.subresource,
        op: Operation::Create,
        name: &admission_name,
        dry_run: w.dry_run,
    };
    w.admission.mutate(&admitted, &mut obj).await?;
    let recorded = object::meta_mut(&mut obj).remove("managedFields");
    prepare_create(strategy, sdef, &mut obj);
    if let Some(mf) = recorded {
        object::meta_mut(&mut obj).insert("managedFields".into(), mf);
    }
    let name = object::name(&obj).to_string();
    validate::invalid(def, &name, strategy::validate_object(sdef, &obj))?;
    w.admission.complete(&admitted, &mut obj).await?;
    let mut warnings = strategy.warnings_on_create(sdef, &obj);
    warnings.extend(w.admission.validate(&admitted, &obj).await?);
    strategy.canonicalize(&mut obj);
    crate::encode::as_stored(&sdef.api_version(), &sdef.kind, &mut obj);
    if sent_version && !w.dry_run {
        return Err(ApiError::Unknown(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    // Allocation fills in values the client left out; a retry after a lost claim starts again from
    // what the client sent, so a value picked for it is never mistaken for a request.
    let sent = obj.clone();
    for attempt in 0..RETRIES {
        let claims = strategy.allocate(w.storage, sdef, &mut obj).await?;
        if w.dry_run {
            return Ok((obj, warnings));
        }
        let key = sdef.key(w.namespace, object::name(&obj));
        let lease = w.ttl_lease(&sdef.storage).await?;
        let written = if lease != 0 {
            w.storage.put_if_leased(&key, &obj, 0, lease).await?
        } else {
            w.storage.put_claiming(&key, &obj, 0, &claims).await?
        };
        match written {
            WriteOutcome::Done(rev) => {
                object::set_resource_version(&mut obj, rev);
                return Ok((obj, warnings));
            }
            WriteOutcome::Lost(Some(_)) => {
                if generated && attempt + 1 < RETRIES && w.name.is_empty() {
                    object::meta_mut(&mut obj)
                        .insert("name".into(), json!(generated_name(&generate)));
                    continue;
                }
                let target = Target::new(&def.group, &def.plural, object::name(&obj));
                // Upstream's CheckGeneratedNameError: any create carrying generateName says so.
                return Err(if generate.is_empty() {
                    ApiError::AlreadyExists(target)
                } else {
                    ApiError::GenerateNameConflict(target)
                });
            }
            // A claim was taken by a concurrent create: allocate again.
            WriteOutcome::Lost(None) => {
                let name = object::name(&obj).to_string();
                obj = sent.clone();
                object::meta_mut(&mut obj).insert("name".into(), json!(name));
                continue;
            }
        }
    }
    Err(ApiError::Internal(
        "could not allocate a unique address for the object; try again".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_use_upstream_alphabet() {
        let n = generated_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n[4..].bytes().all(|b| GENERATE_CHARS.contains(&b)));
    }
}
