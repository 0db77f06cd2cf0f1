//! WATCH: a chunked stream of `{"type":..,"object":..}` lines fed by the store's watch hub.
//!
//! - `resourceVersion` unset or `0`: synthetic ADDED events for the current objects, then changes.
//!   `N`: every change after N, or one ERROR event (410 Expired) when N is compacted away.
//! - Selectors apply to both sides of a change: an object that starts matching is ADDED, one that stops
//!   matching is DELETED, as upstream's watch cache does.
//! - `allowWatchBookmarks`: a BOOKMARK about once a minute, from a progress request to the hub, so its
//!   revision never runs ahead of delivered events. `timeoutSeconds` ends the stream; without it a
//!   random 30-60 minutes as kube-apiserver.
//! - Table Accept: each event carries a one-row Table, column definitions only in the first.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use keel_store::pb::mvccpb::{event::EventType, Event};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::read::{header_str, list_objects, not_acceptable};
use super::Call;
use crate::body::accepts_json;
use crate::convert;
use crate::encryption::Encryption;
use crate::object;
use crate::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::storage::{decode, prefix_end, WatchBatch};
use crate::table::{self, IncludeObject};

/// How often an idle watch with bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// How often a watch of custom objects checks that its CRD is still served unchanged.
const CRD_RECHECK: Duration = Duration::from_secs(1);
/// Events buffered towards a slow client before the producer waits.
const OUT_QUEUE: usize = 256;

struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(object::labels(obj)) && self.fields.matches(obj)
    }

    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

/// Renders events as lines: JSON objects or one-row Tables.
struct Encoder {
    def: Arc<ResourceDef>,
    table: Option<IncludeObject>,
    sent_columns: bool,
}

impl Encoder {
    fn line(&mut self, kind: &str, obj: Value) -> Bytes {
        let object = match self.table {
            Some(include) if kind != "ERROR" => {
                let rv = object::meta_str(&obj, "resourceVersion").to_string();
                let with_columns = !self.sent_columns;
                self.sent_columns = true;
                if kind == "BOOKMARK" {
                    obj
                } else {
                    table::table(
                        &self.def,
                        &[obj],
                        json!({"resourceVersion": rv}),
                        include,
                        with_columns,
                    )
                }
            }
            _ => obj,
        };
        let mut v = crate::encode::watch_event(kind, &object);
        v.push(b'\n');
        Bytes::from(v)
    }
}

fn bookmark(def: &ResourceDef, rev: i64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rev.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
}

fn expired(rev: i64, compacted: i64) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("too old resource version: {rev} ({compacted})"),
        "reason": "Expired", "code": 410,
    })
}

/// Turns one store event into a watch event, or None when the filter hides it.
fn translate(
    def: &ResourceDef,
    filter: &Filter,
    encryption: Option<&Encryption>,
    ev: &Event,
) -> Result<Option<(&'static str, Value)>, ApiError> {
    let decode = |kv| decode(encryption, kv);
    let Some(kv) = &ev.kv else { return Ok(None) };
    let deleted = ev.r#type == EventType::Delete as i32;
    let prev_kv = ev.prev_kv.as_ref().filter(|p| !p.key.is_empty());
    // The previous state is decoded only when it is needed: a delete's last state, or a selector that may
    // have stopped or started matching. An unfiltered watch of puts decodes each event once.
    if !deleted && filter.is_empty() {
        let kind = if prev_kv.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        return Ok(Some((kind, convert::from_storage(def, decode(kv)?.object))));
    }
    let prev = prev_kv.map(|p| decode(p).map(|s| s.object)).transpose()?;
    let prev_match = prev.as_ref().is_some_and(|p| filter.matches(p));
    if deleted {
        let Some(mut last) = prev else {
            return Ok(None);
        };
        if !prev_match {
            return Ok(None);
        }
        object::set_resource_version(&mut last, kv.mod_revision);
        return Ok(Some(("DELETED", convert::from_storage(def, last))));
    }
    let cur = decode(kv)?.object;
    let cur_match = filter.matches(&cur);
    let kind = match (prev.is_some() && prev_match, cur_match) {
        (false, true) => "ADDED",
        (true, true) => "MODIFIED",
        (true, false) => "DELETED",
        (false, false) => return Ok(None),
    };
    Ok(Some((kind, convert::from_storage(def, cur))))
}

/// GET with `watch=true` (or a legacy `/watch/` path).
pub async fn watch(call: Call) -> Result<Response, ApiError> {
    let def = call.route.def.clone();
    let accept = header_str(&call, header::ACCEPT);
    let as_table = table::wants_table(&accept);
    if !as_table && !accepts_json(&call.headers) {
        return Err(not_acceptable());
    }
    let include =
        IncludeObject::parse(call.params.get("includeObject")).map_err(ApiError::BadRequest)?;
    let mut fields_text = call.params.get("fieldSelector").unwrap_or("").to_string();
    if let Some(name) = &call.route.name {
        // `GET .../pods/x?watch=true` is a watch of that one object.
        if !fields_text.is_empty() {
            fields_text.push(',');
        }
        fields_text.push_str(&format!("metadata.name={name}"));
    }
    let filter = Filter {
        labels: LabelSelector::parse(call.params.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
        fields: FieldSelector::parse(&fields_text, &def)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
    };
    let bookmarks = call.params.flag("allowWatchBookmarks");
    let send_initial = call.params.flag("sendInitialEvents");
    let timeout = match call.params.int("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => Duration::from_secs(rand::thread_rng().gen_range(1800..3600)),
    };
    let requested = call.params.resource_version()?;
    let storage = call.state.storage.clone();

    // The starting point: current objects (synthetic ADDED) or a revision to resume after.
    let mut initial = Vec::new();
    let start_after = match requested {
        Some(n) if n > 0 && !send_initial => n,
        _ => {
            // List at one revision with the same selectors (no paging), then watch after it.
            let mut list_call_params = call.params.clone();
            list_call_params.remove_paging();
            let list_call = super::Call {
                state: call.state.clone(),
                route: call.route.clone(),
                params: list_call_params,
                headers: call.headers.clone(),
                body: Bytes::new(),
                user: call.user.clone(),
                identity: call.identity.clone(),
                warnings: Default::default(),
            };
            let mut listed = list_objects(&list_call).await?;
            if call.route.name.is_some() {
                listed.items.retain(|s| filter.matches(&s.object));
            }
            initial = super::versions::served(
                &call.state,
                &def,
                listed.items.into_iter().map(|s| s.object).collect(),
            )
            .await?;
            listed.revision
        }
    };
    let prefix = match (&call.route.name, call.ns()) {
        (Some(name), ns) => def.key(ns, name),
        (None, Some(ns)) => def.ns_prefix(ns),
        (None, None) => def.prefix(),
    };
    let range_end = if call.route.name.is_some() {
        Vec::new()
    } else {
        prefix_end(prefix.as_bytes())
    };

    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(OUT_QUEUE);
    let mut enc = Encoder {
        def: def.clone(),
        table: as_table.then_some(include),
        sent_columns: false,
    };
    let storage = storage.clone();
    let compacted = storage.compact_revision();
    let mut shutdown = call.state.shutdown.clone();
    let registry = call.state.registry.clone();
    let state = call.state.clone();
    tokio::spawn(async move {
        if start_after + 1 < compacted {
            let _ = tx
                .send(Ok(enc.line("ERROR", expired(start_after, compacted))))
                .await;
            return;
        }
        for obj in initial {
            if tx.send(Ok(enc.line("ADDED", obj))).await.is_err() {
                return;
            }
        }
        if send_initial && bookmarks {
            let _ = tx
                .send(Ok(enc.line("BOOKMARK", bookmark(&def, start_after, true))))
                .await;
        }
        let Ok(mut watch) = storage
            .watch(prefix.as_bytes(), &range_end, start_after + 1, true)
            .await
        else {
            return;
        };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        // A watch of custom objects ends when its CRD is deleted or changed, as upstream's does.
        let mut recheck = tokio::time::interval(CRD_RECHECK);
        recheck.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = shutdown.changed() => break,
                _ = recheck.tick(), if def.custom.is_some() => {
                    let now = registry.find(&def.group, &def.version, &def.plural);
                    let same = match (now.as_ref().and_then(|d| d.custom.as_ref()), def.custom.as_ref()) {
                        (Some(a), Some(b)) => a.same_definition(b),
                        _ => false,
                    };
                    if !same {
                        break;
                    }
                }
                _ = tick.tick(), if bookmarks => {
                    if watch.request_progress().await.is_err() {
                        break;
                    }
                }
                batch = watch.next() => {
                    let events = match batch {
                        WatchBatch::Events(events) => events,
                        WatchBatch::Progress(revision) => {
                            if bookmarks
                                && tx.send(Ok(enc.line("BOOKMARK", bookmark(&def, revision, false)))).await.is_err()
                            {
                                break;
                            }
                            continue;
                        }
                        WatchBatch::Compacted(revision) => {
                            let _ = tx.send(Ok(enc.line("ERROR", expired(start_after, revision)))).await;
                            break;
                        }
                        WatchBatch::Ended => break,
                    };
                    for ev in &events {
                        let translated = match translate(&def, &filter, storage.encryption(), ev) {
                            // A CRD converted by webhook: an object stored in another version is
                            // converted before it is sent.
                            Ok(Some((kind, obj))) if super::versions::by_webhook(&def).is_some() => {
                                super::versions::served_one(&state, &def, obj)
                                    .await
                                    .map(|o| Some((kind, o)))
                            }
                            other => other,
                        };
                        match translated {
                            Ok(Some((kind, obj))) => {
                                if tx.send(Ok(enc.line(kind, obj))).await.is_err() {
                                    return;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => {
                                let _ = tx.send(Ok(enc.line("ERROR", e.status()))).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
    });

    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = (StatusCode::OK, body).into_response();
    let ct = if as_table {
        table::CONTENT_TYPE
    } else {
        "application/json"
    };
    if let Ok(v) = HeaderValue::from_str(ct) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;
    use keel_store::pb::mvccpb::KeyValue;

    fn kv(name: &str, labels: Value, create: i64, rev: i64) -> KeyValue {
        let v = json!({"metadata": {"name": name, "namespace": "d", "labels": labels}});
        KeyValue {
            key: Bytes::from(format!("/registry/configmaps/d/{name}")),
            create_revision: create,
            mod_revision: rev,
            version: 1,
            value: Bytes::from(serde_json::to_vec(&v).expect("json")),
            lease: 0,
        }
    }

    #[test]
    fn selector_transitions() {
        let def = &resource::find("", "v1", "configmaps").expect("cm");
        let filter = Filter {
            labels: LabelSelector::parse("app=web").expect("sel"),
            fields: FieldSelector::default(),
        };
        let put = |prev: Option<KeyValue>, cur: KeyValue| Event {
            r#type: EventType::Put as i32,
            kv: Some(cur),
            prev_kv: prev,
        };
        let created = put(None, kv("a", json!({"app": "web"}), 5, 5));
        assert_eq!(
            translate(def, &filter, None, &created)
                .expect("ok")
                .map(|e| e.0),
            Some("ADDED")
        );
        let left = put(
            Some(kv("a", json!({"app": "web"}), 5, 5)),
            kv("a", json!({"app": "db"}), 5, 6),
        );
        assert_eq!(
            translate(def, &filter, None, &left)
                .expect("ok")
                .map(|e| e.0),
            Some("DELETED")
        );
        let joined = put(
            Some(kv("a", json!({"app": "db"}), 5, 6)),
            kv("a", json!({"app": "web"}), 5, 7),
        );
        assert_eq!(
            translate(def, &filter, None, &joined)
                .expect("ok")
                .map(|e| e.0),
            Some("ADDED")
        );
        let del = Event {
            r#type: EventType::Delete as i32,
            kv: Some(KeyValue {
                key: Bytes::from("/registry/configmaps/d/a"),
                mod_revision: 9,
                ..Default::default()
            }),
            prev_kv: Some(kv("a", json!({"app": "web"}), 5, 7)),
        };
        let (kind, obj) = translate(def, &filter, None, &del)
            .expect("ok")
            .expect("event");
        assert_eq!(kind, "DELETED");
        assert_eq!(obj["metadata"]["resourceVersion"], "9");
    }
}
