//! POST (create), PUT (update, `/status`, `/finalize`) and PATCH (JSON patch, merge patch): admission
//! (defaulting, the Priority plugin, validation), optimistic concurrency on the key's mod revision,
//! server-owned metadata. What differs by kind
//! (status resets, generation bumps, allocations, subresource rules) is the kind's strategy's.

use axum::http::StatusCode;
use axum::response::Response;
use rand::Rng;
use serde_json::{json, Value};

use super::read::respond_object;
use super::Call;
use crate::admission::chain;
use crate::alloc::Reallocation;
use crate::apply::managed::{self, Owner};
use crate::apply::shape::Shape;
use crate::body::{self, media_type};
use crate::convert::storage_def;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};
use crate::storage::{Stored, WriteOutcome};
use crate::validation::validate;
use crate::{convert, lifecycle, strategy};

/// How many times a write retries after losing a race it may retry (no client resourceVersion).
const RETRIES: usize = 8;

/// Metadata fields only the server sets.
const SERVER_META: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// Checks `apiVersion`/`kind` of a body against the URL (missing ones are filled in).
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let want_av = def.api_version();
    let av = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !kind.is_empty() && kind != def.kind {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind:?}) does not match the expected kind ({:?})",
            def.kind
        )));
    }
    if !av.is_empty() && av != want_av {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_av})"
        )));
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(want_av));
        m.insert("kind".into(), json!(def.kind));
    }
    Ok(())
}

/// Drops unknown fields as upstream's decoder does; `fieldValidation=Strict` refuses them, `Warn` (the
/// default) returns one warning per field.
pub fn field_validation(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    field_validation_with(call, def, obj, &[])
}

/// [`field_validation`] for a JSON body: duplicate keys count as problems too.
fn field_validation_body(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    let dups = if matches!(ct.as_str(), "" | "application/json") {
        crate::validation::prune::duplicate_fields(&call.body)
    } else {
        Vec::new()
    };
    field_validation_with(call, def, obj, &dups)
}

fn field_validation_with(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
    duplicates: &[String],
) -> Result<Vec<String>, ApiError> {
    let mode = call.params.get("fieldValidation").unwrap_or("Warn");
    if !["Strict", "Warn", "Ignore"].contains(&mode) {
        return Err(ApiError::BadRequest(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let unknown = strategy::of(def).prune_unknown(def, obj);
    let mut msgs: Vec<String> = duplicates
        .iter()
        .map(|f| format!("duplicate field \"{f}\""))
        .collect();
    msgs.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
    match mode {
        "Strict" if !msgs.is_empty() => Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            def.version,
            def.kind,
            msgs.join(", ")
        ))),
        "Warn" => Ok(msgs),
        _ => Ok(Vec::new()),
    }
}

/// Adds `Warning: 299 - "..."` headers, as kubectl prints them.
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// Decodes, type-checks and converts a create/update body into its stored form, with its warnings.
fn incoming(call: &Call) -> Result<(Value, Vec<String>), ApiError> {
    let def = &call.route.def;
    let mut obj = body::decode(&call.headers, &call.body)?;
    check_type(def, &mut obj)?;
    let warnings = field_validation_body(call, def, &mut obj)?;
    validate::shape(def, &mut obj)?;
    let mut obj = convert::to_storage(def, obj);
    let body_ns = object::namespace(&obj).to_string();
    match call.ns() {
        Some(ns) => {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            object::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
        }
        None => {
            object::meta_mut(&mut obj).remove("namespace");
        }
    }
    Ok((obj, warnings))
}

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
fn prepare_create(def: &ResourceDef, obj: &mut Value) {
    let meta = object::meta_mut(obj);
    for f in SERVER_META {
        meta.remove(*f);
    }
    meta.remove("managedFields");
    meta.insert("uid".into(), json!(object::new_uid()));
    meta.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
    strategy::of(def).prepare_for_create(def, obj);
}

/// How a write records field ownership in `metadata.managedFields`.
pub enum Tracking {
    /// A create, update or non-apply patch by this owner.
    Update(Owner),
    /// A server-side apply: the written object already carries its managedFields.
    Applied,
}

/// The field manager of a non-apply write: `fieldManager`, else the User-Agent up to its first `/`.
/// `options` names the options kind in the 422 (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
pub fn owner(call: &Call, options: &str) -> Result<Owner, ApiError> {
    let name = match call.params.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => {
            check_field_manager(m, options)?;
            m.to_string()
        }
        None => {
            let ua = call
                .headers
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let prefix: String = ua
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(128)
                .collect();
            if prefix.is_empty() {
                "unknown".to_string()
            } else {
                prefix
            }
        }
    };
    Ok(Owner {
        manager: name,
        api_version: call.route.def.api_version(),
        subresource: call.route.subresource.clone().unwrap_or_default(),
    })
}

/// Upstream's limits on `fieldManager`: at most 128 bytes, printable characters only.
pub fn check_field_manager(m: &str, options: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if m.len() > 128 {
        causes.push(crate::status::Cause {
            reason: "FieldValueTooLong",
            message: "Too long: may not be more than 128 bytes".into(),
            field: "fieldManager".into(),
        });
    }
    if let Some((i, c)) = m.char_indices().find(|(_, c)| c.is_control()) {
        causes.push(crate::status::Cause::invalid(
            "fieldManager",
            &json!(m),
            &format!("invalid character U+{:04X} (at position {i})", c as u32),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            target: Target::new("meta.k8s.io", options, ""),
            causes,
        })
    }
}

/// POST: create an object.
pub async fn create(call: Call) -> Result<Response, ApiError> {
    let tracking = Tracking::Update(owner(&call, "CreateOptions")?);
    let (obj, warnings) = incoming(&call)?;
    create_object(&call, obj, &warnings, tracking).await
}

/// Creates a decoded object (from a POST, a PUT to a missing object, or an apply that creates).
pub async fn create_object(
    call: &Call,
    mut obj: Value,
    warnings: &[String],
    tracking: Tracking,
) -> Result<Response, ApiError> {
    let def = &call.route.def;
    let sdef = &storage_def(def);
    let strategy = strategy::of(sdef);
    let dry_run = call.params.dry_run()?;
    if let Some(message) = strategy.create_forbidden(def) {
        return Err(ApiError::NotAllowed {
            target: call.target(),
            message: message.into(),
        });
    }
    let generate = object::meta_str(&obj, "generateName").to_string();
    // Upstream's storage refuses a POST whose object carries a resourceVersion (one that parses as a
    // non-zero number; others are ignored), after admission, and not in a dry run.
    let sent_version = call.route.name.is_none()
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
    crate::strategy::of(sdef).set_defaults(sdef, &mut obj);
    // The field manager sees the decoded and defaulted object, as upstream's: what mutating admission
    // and the create strategy set afterwards (a pod's service account, tolerations and priority, a
    // Node's not-ready taint, status resets) is nobody's field.
    if let Tracking::Update(o) = &tracking {
        let shape = Shape::of_kind(&sdef.api_version(), &sdef.kind);
        managed::record_create(&mut obj, shape, o, sdef.status);
    }
    let admission = admission_attributes(
        call,
        sdef,
        chain::Operation::Create,
        &admission_name,
        dry_run,
    );
    chain::mutate(&admission, &mut obj).await?;
    let recorded = object::meta_mut(&mut obj).remove("managedFields");
    prepare_create(sdef, &mut obj);
    if let Some(mf) = recorded {
        object::meta_mut(&mut obj).insert("managedFields".into(), mf);
    }
    let name = object::name(&obj).to_string();
    validate::invalid(def, &name, strategy::validate_object(sdef, &obj))?;
    if sdef.gk() == ("certificates.k8s.io", "CertificateSigningRequest") {
        crate::csr::admit_create(
            &call.state.storage,
            &call.state.authz,
            &call.identity,
            Some((&call.state.ca_pem, &call.state.ca_key_pem)),
            &mut obj,
        )
        .await?;
    }
    let mut warnings = warnings.to_vec();
    warnings.extend(strategy.warnings_on_create(sdef, &obj));
    warnings.extend(chain::validate(&admission, &obj).await?);
    let warnings = warnings.as_slice();
    strategy.canonicalize(&mut obj);
    crate::encode::as_stored(&sdef.api_version(), &sdef.kind, &mut obj);
    if let Some(ns) = call.ns() {
        lifecycle::check_namespace_open(&call.state.storage, ns).await?;
    }
    if sent_version && !dry_run {
        return Err(ApiError::Unknown(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    // Allocation fills in values the client left out; a retry after a lost claim starts again from
    // what the client sent, so a value picked for it is never mistaken for a request.
    let sent = obj.clone();
    for attempt in 0..RETRIES {
        let claims = strategy
            .allocate(&call.state.storage, sdef, &mut obj)
            .await?;
        if dry_run {
            let out = convert::from_storage(def, obj);
            return respond_created(call, out).map(|r| with_warnings(r, warnings));
        }
        let key = sdef.key(call.ns(), object::name(&obj));
        let lease = call.state.ttl_lease(&sdef.storage).await?;
        let written = if lease != 0 {
            call.state
                .storage
                .put_if_leased(&key, &obj, 0, lease)
                .await?
        } else {
            call.state
                .storage
                .put_claiming(&key, &obj, 0, &claims)
                .await?
        };
        match written {
            WriteOutcome::Done(rev) => {
                object::set_resource_version(&mut obj, rev);
                let out = convert::from_storage(def, obj);
                return respond_created(call, out).map(|r| with_warnings(r, warnings));
            }
            WriteOutcome::Lost(Some(_)) => {
                if generated && attempt + 1 < RETRIES && call.route.name.is_none() {
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

fn respond_created(call: &Call, obj: Value) -> Result<Response, ApiError> {
    let name = crate::audit::CreatedName(object::name(&obj).to_string());
    let mut r = respond_object(call, obj)?;
    *r.status_mut() = StatusCode::CREATED;
    // A create's URL names no object; the audit log takes the name from here.
    r.extensions_mut().insert(name);
    Ok(r)
}

/// Whether two objects differ other than in resourceVersion/managedFields.
fn same(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        object::clear_resource_version(&mut v);
        v
    };
    strip(a) == strip(b)
}

/// Builds the object an update stores from the stored one and the client's: a subresource's rules take
/// what it owns from the client; an update of the object itself keeps the server-owned metadata, then
/// follows the kind's rules (status kept, generation bumped).
fn merge_update(def: &ResourceDef, sub: Option<&str>, old: &Value, mut new: Value) -> Value {
    let strategy = strategy::of(def);
    if let Some(rules) = sub.and_then(|s| strategy.subresource(s)) {
        return rules.prepare_for_update(def, old, new);
    }
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = object::meta_mut(&mut new);
    for f in SERVER_META {
        meta.remove(*f);
        if let Some(v) = old_meta.get(*f) {
            meta.insert((*f).to_string(), v.clone());
        }
    }
    if !meta.contains_key("managedFields") {
        if let Some(mf) = old_meta.get("managedFields") {
            meta.insert("managedFields".into(), mf.clone());
        }
    }
    strategy.prepare_for_update(def, old, &mut new);
    new
}

/// What an update did.
pub enum Updated {
    /// Stored (or unchanged) object, RV set.
    Object(Value),
    /// The last finalizer of a deleting object was removed: the object is gone.
    Deleted(Value),
}

/// Applies `change` to the current object and writes it, retrying lost races unless the client pinned a
/// resourceVersion. `change` gets the stored object and returns the client's new version of it.
pub async fn guaranteed_update<F>(
    call: &Call,
    dry_run: bool,
    change: F,
) -> Result<Updated, ApiError>
where
    F: FnMut(&Stored) -> Result<(Value, Option<String>), ApiError>,
{
    let tracking = Tracking::Update(owner(call, "UpdateOptions").unwrap_or_else(|_| Owner {
        manager: "unknown".into(),
        api_version: call.route.def.api_version(),
        subresource: call.route.subresource.clone().unwrap_or_default(),
    }));
    guaranteed_update_tracked(call, dry_run, tracking, change).await
}

/// [`guaranteed_update`] with an explicit way of recording field ownership.
pub async fn guaranteed_update_tracked<F>(
    call: &Call,
    dry_run: bool,
    tracking: Tracking,
    mut change: F,
) -> Result<Updated, ApiError>
where
    F: FnMut(&Stored) -> Result<(Value, Option<String>), ApiError>,
{
    let def = &storage_def(&call.route.def);
    let strategy = strategy::of(def);
    let shape = Shape::of_kind(&def.api_version(), &def.kind);
    let key = call.key();
    let sub = call.route.subresource.as_deref();
    let sub_rules = sub.and_then(|s| strategy.subresource(s));
    let mut current = call.state.storage.get(&key, true).await?;
    for _ in 0..RETRIES {
        let Some(cur) = current.take() else {
            return Err(ApiError::NotFound(call.target()));
        };
        let (new, client_rv) = change(&cur)?;
        if let Some(rv) = &client_rv {
            if rv.parse::<i64>().ok() != Some(cur.mod_revision) {
                return Err(conflict(call));
            }
        }
        let applied_fields = match tracking {
            Tracking::Applied => object::path(&new, "metadata.managedFields").cloned(),
            Tracking::Update(_) => None,
        };
        let mut new = merge_update(def, sub, &cur.object, new);
        if sub.is_none() {
            crate::strategy::of(def).set_defaults(def, &mut new);
        }
        // Mutating plugins run before the change is known; none of them looks at `changed`.
        let update = chain::Operation::Update {
            old: &cur.object,
            changed: true,
        };
        let admission = admission_attributes(call, def, update, call.name(), dry_run);
        chain::mutate(&admission, &mut new).await?;
        match &tracking {
            Tracking::Update(o) => {
                managed::record_update(&cur.object, &mut new, shape, o, def.status)
            }
            Tracking::Applied => {
                let meta = object::meta_mut(&mut new);
                match applied_fields {
                    Some(mf) => meta.insert("managedFields".into(), mf),
                    None => meta.remove("managedFields"),
                };
            }
        }
        // Allocations first, as upstream's BeginUpdate: validation then sees the values they fill in
        // and the fields they clear. Nothing is claimed until the Txn below writes the object.
        let realloc = match sub {
            None => {
                strategy
                    .allocate_update(&call.state.storage, def, &cur.object, &mut new)
                    .await?
            }
            Some(_) => Reallocation::default(),
        };
        let causes = match sub_rules {
            Some(rules) => rules.validate_update(def, &cur.object, &new),
            None => strategy::validate_update(def, &cur.object, &new),
        };
        validate::invalid(&call.route.def, call.name(), causes)?;
        if sub == Some("approval") {
            crate::csr::sign_approved(Some((&call.state.ca_pem, &call.state.ca_key_pem)), &mut new);
        }
        let update = chain::Operation::Update {
            old: &cur.object,
            changed: !same(&new, &cur.object),
        };
        let admission = admission_attributes(call, def, update, call.name(), dry_run);
        let raised = chain::validate(&admission, &new).await?;
        if !raised.is_empty() {
            let mut kept = call.warnings.lock().unwrap_or_else(|e| e.into_inner());
            for w in raised {
                if !kept.contains(&w) {
                    kept.push(w);
                }
            }
        }
        if object::is_deleting(&cur.object) {
            let added = object::finalizers(&new)
                .into_iter()
                .any(|f| !object::finalizers(&cur.object).contains(&f));
            if added {
                return Err(ApiError::Invalid {
                    target: Target::new(&call.route.def.group, &call.route.def.kind, call.name()),
                    causes: vec![crate::status::Cause::forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )],
                });
            }
        }
        strategy.canonicalize(&mut new);
        crate::encode::as_stored(&def.api_version(), &def.kind, &mut new);
        if same(&new, &cur.object) {
            return Ok(Updated::Object(cur.object));
        }
        if dry_run {
            return Ok(Updated::Object(new));
        }
        // As upstream's ShouldDeleteDuringUpdate, an update removes the object only once its grace
        // period is over: a pod in graceful deletion takes its agent's final status and stays until the
        // agent deletes it.
        let grace_over = object::path(&cur.object, "metadata.deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(0);
        if object::is_deleting(&new)
            && grace_over
            && object::finalizers(&new).is_empty()
            && !strategy.kept_after_finalizers(&new)
        {
            // What the stored object holds is what goes; the update's own allocations are never made.
            let release = strategy.claims(&cur.object);
            match call
                .state
                .storage
                .delete_if(&key, cur.mod_revision, &release)
                .await?
            {
                WriteOutcome::Done(_) => return Ok(Updated::Deleted(new)),
                WriteOutcome::Lost(now) => {
                    if client_rv.is_some() {
                        return Err(conflict(call));
                    }
                    current = now;
                    continue;
                }
            }
        }
        let lease = call.state.ttl_lease(&def.storage).await?;
        match call
            .state
            .storage
            .update_claiming(
                &key,
                &new,
                cur.mod_revision,
                &realloc.take,
                &realloc.release,
                lease,
            )
            .await?
        {
            WriteOutcome::Done(rev) => {
                object::set_resource_version(&mut new, rev);
                return Ok(Updated::Object(new));
            }
            WriteOutcome::Lost(now) => {
                // The object unchanged means a claim was taken by another write meanwhile: allocate
                // again even for a client that pinned the resourceVersion, which is still current.
                let claim_lost = now
                    .as_ref()
                    .is_some_and(|n| n.mod_revision == cur.mod_revision);
                if client_rv.is_some() && !claim_lost {
                    return Err(conflict(call));
                }
                current = now;
            }
        }
    }
    Err(conflict(call))
}

/// The admission chain's view of `call` writing an object of `def`.
fn admission_attributes<'a>(
    call: &'a Call,
    def: &'a ResourceDef,
    op: chain::Operation<'a>,
    name: &'a str,
    dry_run: bool,
) -> chain::Attributes<'a> {
    chain::Attributes {
        storage: &call.state.storage,
        authz: &call.state.authz,
        identity: &call.identity,
        def,
        subresource: call.route.subresource.as_deref(),
        op,
        name,
        dry_run,
        sa_key: &call.state.sa_key,
        ca_pem: &call.state.ca_pem,
    }
}

/// The 409 for a stale resourceVersion.
pub fn conflict(call: &Call) -> ApiError {
    ApiError::Conflict {
        target: call.target(),
        detail: "the object has been modified; please apply your changes to the latest version and try again".into(),
    }
}

pub fn respond_updated(call: &Call, u: Updated) -> Result<Response, ApiError> {
    let obj = match u {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    let warnings = std::mem::take(&mut *call.warnings.lock().unwrap_or_else(|e| e.into_inner()));
    respond_object(call, convert::from_storage(&call.route.def, obj))
        .map(|r| with_warnings(r, &warnings))
}

/// PUT: replace an object (or its status, or a namespace's finalizers).
pub async fn update(call: Call) -> Result<Response, ApiError> {
    let tracking = Tracking::Update(owner(&call, "UpdateOptions")?);
    let dry_run = call.params.dry_run()?;
    let (new, warnings) = incoming(&call)?;
    let body_name = object::name(&new).to_string();
    if body_name != call.name() {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            call.name()
        )));
    }
    let client_rv = object::resource_version(&new).map(str::to_string);
    let updated = guaranteed_update_tracked(&call, dry_run, tracking, |_| {
        Ok((new.clone(), client_rv.clone()))
    })
    .await;
    match updated {
        Ok(u) => respond_updated(&call, u).map(|r| with_warnings(r, &warnings)),
        Err(ApiError::NotFound(_))
            if call.route.def.create_on_update && call.route.subresource.is_none() =>
        {
            let tracking = Tracking::Update(owner(&call, "CreateOptions")?);
            create_object(&call, new, &warnings, tracking).await
        }
        Err(e) => Err(e),
    }
}

/// PATCH with `application/json-patch+json`, `application/merge-patch+json` or
/// `application/strategic-merge-patch+json` (server-side apply is [`super::apply`]'s).
pub async fn patch(call: Call) -> Result<Response, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    if call.params.get("force").is_some() {
        return Err(ApiError::Invalid {
            target: Target::new("meta.k8s.io", "PatchOptions", ""),
            causes: vec![crate::status::Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        });
    }
    let tracking = Tracking::Update(owner(&call, "PatchOptions")?);
    let dry_run = call.params.dry_run()?;
    let def = &call.route.def;
    let patch_body = call.body.clone();
    let mut warnings = Vec::new();
    let u = guaranteed_update_tracked(&call, dry_run, tracking, |cur| {
        let current = convert::from_storage(def, cur.object.clone());
        let patched = apply_patch(&ct, current, &patch_body, def)?;
        let client_rv = object::resource_version(&patched)
            .filter(|rv| *rv != object::meta_str(&cur.object, "resourceVersion"))
            .map(str::to_string);
        let mut patched = patched;
        check_type(def, &mut patched)?;
        warnings = field_validation(&call, def, &mut patched)?;
        validate::shape(def, &mut patched)?;
        if object::name(&patched) != object::name(&cur.object) {
            return Err(ApiError::BadRequest(
                "metadata.name: the name of the object cannot be changed by a patch".into(),
            ));
        }
        // A patch that carries a stale resourceVersion is a conflict; otherwise the current one is kept.
        Ok((convert::to_storage(def, patched), client_rv))
    })
    .await?;
    respond_updated(&call, u).map(|r| with_warnings(r, &warnings))
}

/// Applies one patch document of a given media type.
pub fn apply_patch(
    ct: &str,
    mut current: Value,
    body: &[u8],
    def: &ResourceDef,
) -> Result<Value, ApiError> {
    match ct {
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("the server rejected our request due to an error in our request: {e}")))?;
            json_patch::patch(&mut current, &ops).map_err(|e| ApiError::Invalid {
                target: Target::new(&def.group, &def.kind, object::name(&current)),
                causes: vec![crate::status::Cause {
                    reason: "FieldValueInvalid",
                    message: format!("the server rejected our request due to an error in our request: {e}"),
                    field: String::new(),
                }],
            })?;
            Ok(current)
        }
        "application/merge-patch+json" => {
            let p = body::json(body)?;
            if !p.is_object() {
                return Err(ApiError::BadRequest("a merge patch must be a JSON object".into()));
            }
            json_patch::merge(&mut current, &p);
            Ok(current)
        }
        "application/strategic-merge-patch+json" => {
            strategy::of(def).strategic_merge(def, current, body)
        }
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, \
             application/apply-patch+yaml (got {other:?})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn generated_names_use_upstream_alphabet() {
        let n = generated_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n[4..].bytes().all(|b| GENERATE_CHARS.contains(&b)));
    }

    #[test]
    fn main_resource_update_keeps_status_and_bumps_generation() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let old = json!({"metadata": {"name": "d", "uid": "u1", "generation": 1}, "spec": {"replicas": 1},
                         "status": {"replicas": 1}});
        let new = json!({"metadata": {"name": "d", "uid": "evil"}, "spec": {"replicas": 2}, "status": {"replicas": 9}});
        let out = merge_update(def, None, &old, new);
        assert_eq!(out["metadata"]["uid"], "u1");
        assert_eq!(out["metadata"]["generation"], 2);
        assert_eq!(out["status"]["replicas"], 1);
        let st = merge_update(
            def,
            Some("status"),
            &old,
            json!({"spec": {"replicas": 5}, "status": {"replicas": 3}}),
        );
        assert_eq!(st["spec"]["replicas"], 1);
        assert_eq!(st["status"]["replicas"], 3);
    }

    #[test]
    fn merge_and_json_patches() {
        let def = &resource::find("", "v1", "configmaps").expect("cm");
        let cur = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}});
        let p = apply_patch(
            "application/merge-patch+json",
            cur.clone(),
            br#"{"metadata":{"labels":{"x":null,"y":"2"}}}"#,
            def,
        )
        .expect("merge");
        assert_eq!(p["metadata"]["labels"], json!({"y": "2"}));
        let j = apply_patch(
            "application/json-patch+json",
            cur.clone(),
            br#"[{"op":"replace","path":"/data/k","value":"w"}]"#,
            def,
        )
        .expect("json patch");
        assert_eq!(j["data"]["k"], "w");
        let bad = apply_patch(
            "application/json-patch+json",
            cur,
            br#"[{"op":"test","path":"/data/k","value":"no"}]"#,
            def,
        );
        assert!(matches!(bad, Err(ApiError::Invalid { .. })));
    }
}
