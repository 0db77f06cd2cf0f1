//! Every request's way in: authentication, impersonation, authorization and request metrics
//! (`route_request`), then the path to its answer (`dispatch`): aggregated groups, pod streams, the
//! non-resource paths, and the resource paths `handler` serves.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::documents::{discovery_answer, openapi_v2, openapi_v3};
use super::health::health;
use super::{App, PeerIdentity};
use crate::authn::{self, Identity};
use crate::body::{respond, MAX_BODY};
use crate::discovery;
use crate::handler::{self};
use crate::metrics::RequestMeasure;
use crate::openapi;
use crate::request_info::RequestInfo;
use crate::status::ApiError;

/// Authenticates, then serves and records the request (as upstream, requests refused by
/// authentication are not in the request metrics).
pub(super) async fn route(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<PeerIdentity>,
    req: Request,
) -> Response {
    // The request is read once here; authorization, audit, metrics and routing take it from here.
    let info = RequestInfo::of(req.method(), req.uri());
    let Some(log) = app.audit.as_ref() else {
        return route_request(app.clone(), peer, req, &info, &mut None).await;
    };
    let received = jiff::Timestamp::now();
    let uri = req.uri().clone();
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let source = peer.1;
    let mut who = Some((None, None));
    let resp = route_request(app.clone(), peer, req, &info, &mut who).await;
    let (authenticated, acting): (Option<Identity>, Option<Identity>) = who.unwrap_or((None, None));
    let subject = acting
        .clone()
        .or_else(|| authenticated.clone())
        .unwrap_or(Identity {
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        });
    let mut attrs = crate::authz::attributes::Attributes::of(subject, &info);
    if let (Some(r), Some(created)) = (
        attrs.resource.as_mut(),
        resp.extensions().get::<crate::audit::CreatedName>(),
    ) {
        if r.name.is_none() {
            r.name = Some(created.0.clone());
        }
    }
    let impersonated = match (&authenticated, &acting) {
        (Some(a), Some(b)) if a != b => Some(b),
        _ => None,
    };
    log.record(&crate::audit::Entry {
        user: authenticated.as_ref(),
        impersonated,
        attrs: &attrs,
        uri: uri.path_and_query().map_or(uri.path(), |p| p.as_str()),
        user_agent: &agent,
        source,
        code: resp.status().as_u16(),
        received,
    });
    resp
}

/// Who a request came from and who it acted as (filled for the audit log).
pub(super) type Who = Option<(Option<Identity>, Option<Identity>)>;

pub(super) async fn route_request(
    app: Arc<App>,
    peer: PeerIdentity,
    req: Request,
    info: &RequestInfo,
    who: &mut Who,
) -> Response {
    let start = std::time::Instant::now();
    let mut identity = peer
        .0
        .clone()
        .or_else(|| app.tokens.from_headers(req.headers()));
    if identity.is_none() {
        if let Some(token) =
            authn::bearer(req.headers()).filter(|t| crate::serviceaccount::token::looks_like_jwt(t))
        {
            identity = match crate::serviceaccount::token::authenticate(
                &app.state.sa_key,
                &app.state.storage,
                token,
            )
            .await
            {
                Some(id) => Some(id),
                None => {
                    crate::serviceaccount::legacy::authenticate(
                        &app.state.sa_key,
                        &app.state.storage,
                        token,
                    )
                    .await
                }
            };
        }
    }
    if identity.is_none() && !authn::is_public(req.uri().path()) {
        return ApiError::Unauthorized.into_response();
    }
    // Every authenticated user is in `system:authenticated`; impersonation then authorization decide the
    // rest (anonymous requests reach only the public paths above).
    let identity = match identity {
        Some(mut id) => {
            if !id.groups.iter().any(|g| g == crate::authz::AUTHENTICATED) {
                id.groups.push(crate::authz::AUTHENTICATED.into());
            }
            if let Some(w) = who.as_mut() {
                w.0 = Some(id.clone());
            }
            let authz = &app.state.authz;
            // Right after start the member's RBAC view may not hold the default roles yet: wait for them
            // (briefly) rather than refuse what the bindings allow.
            let mut waited = 0;
            while !(authz.rbac.loaded()
                && app
                    .state
                    .rbac_ready
                    .load(std::sync::atomic::Ordering::Acquire))
                && waited < 250
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waited += 1;
            }
            let acting =
                crate::authz::impersonate::acting_as(authz, id, req.headers()).and_then(|id| {
                    let attrs = crate::authz::attributes::Attributes::of(id.clone(), info);
                    authz.check(&attrs).map(|()| id)
                });
            match acting {
                Ok(id) => {
                    if let Some(w) = who.as_mut() {
                        w.1 = Some(id.clone());
                    }
                    Some(id)
                }
                Err(e) => return e.into_response(),
            }
        }
        None => None,
    };
    let metrics = app.state.metrics.clone();
    let measure = RequestMeasure::of(&app.state.registry, info, req.method(), req.headers());
    let long_running = measure.as_ref().is_some_and(RequestMeasure::long_running);
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    let in_flight = (!long_running).then(|| metrics.in_flight(read_only));
    let resp = match dispatch(app, identity, req, info).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    drop(in_flight);
    match measure {
        Some(measure) => metrics.finish(measure, resp, start),
        None => resp,
    }
}

pub(super) async fn dispatch(
    app: Arc<App>,
    identity: Option<Identity>,
    req: Request,
    info: &RequestInfo,
) -> Result<Response, ApiError> {
    // A remote APIService's group-version goes to its backend with the request whole (body streamed).
    if let Some(apiservice) = crate::aggregator::proxy::target(&app.state, &info.segments) {
        return crate::aggregator::proxy::serve(
            app.state.clone(),
            apiservice,
            identity.clone(),
            req,
        )
        .await;
    }
    // exec, attach and portforward keep the request whole: its connection is upgraded and relayed.
    if let Some((ns, name, sub)) = pod_stream_target(&info.segments) {
        return handler::pod_stream::serve(app.state.clone(), &ns, &name, &sub, req).await;
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge(format!("limit is {MAX_BODY}")))?;
    let method = parts.method.clone();
    let headers = parts.headers;
    let segs: Vec<&str> = info.segments.iter().map(String::as_str).collect();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let read_only = method == Method::GET || method == Method::HEAD;
    let reg = &app.state.registry;
    match segs.as_slice() {
        ["version"] if read_only => Ok(respond(StatusCode::OK, &discovery::version())),
        ["cacerts"] if read_only => {
            let mut r = (StatusCode::OK, app.state.ca_pem.clone()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            Ok(r)
        }
        ["v1-keel", "apiservers"] if read_only => Ok(respond(
            StatusCode::OK,
            &serde_json::json!({"servers": crate::join::api_urls(&app.state).await}),
        )),
        ["v1-keel", "join"] if method == Method::POST => {
            let answer = crate::join::serve(app.state.clone(), &body).await?;
            Ok(respond(StatusCode::OK, &answer))
        }
        ["metrics"] if read_only => {
            let mut r = (StatusCode::OK, app.state.metrics.render()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            Ok(r)
        }
        [p] | [p, _] if matches!(*p, "healthz" | "livez" | "readyz") && read_only => {
            Ok(health(&app, &path, query.as_deref()).await)
        }
        ["api"] if read_only => Ok(discovery_answer(
            reg,
            &app.state.aggregator.remote(),
            &headers,
            &accept,
            true,
            || discovery::api_versions(&app.state.server_address),
        )),
        ["apis"] if read_only => Ok(discovery_answer(
            reg,
            &app.state.aggregator.remote(),
            &headers,
            &accept,
            false,
            || discovery::api_group_list(reg, &app.state.aggregator.remote()),
        )),
        ["api", "v1"] if read_only => discovery::api_resource_list(reg, "", "v1")
            .map(|v| respond(StatusCode::OK, &v))
            .ok_or(ApiError::NoRoute),
        ["apis", group] if read_only => {
            discovery::api_group(reg, &app.state.aggregator.remote(), group)
                .map(|v| respond(StatusCode::OK, &v))
                .ok_or(ApiError::NoRoute)
        }
        ["apis", "metrics.k8s.io", "v1beta1", rest @ ..] if read_only => {
            crate::metrics_api::serve(app.state.clone(), rest).await
        }
        ["apis", group, version] if read_only => discovery::api_resource_list(reg, group, version)
            .map(|v| respond(StatusCode::OK, &v))
            .ok_or(ApiError::NoRoute),
        ["openapi", "v3"] if read_only => Ok(respond(StatusCode::OK, &openapi::v3_index(reg))),
        ["openapi", "v3", rest @ ..] if read_only => {
            openapi_v3(reg, &rest.join("/"), query.as_deref(), &accept)
        }
        ["openapi", "v2"] if read_only => openapi_v2(reg, &headers, &accept),
        [".well-known", "openid-configuration"] if read_only => Ok(respond(
            StatusCode::OK,
            &crate::serviceaccount::openid_configuration(&app.state.server_address),
        )),
        ["openid", "v1", "jwks"] if read_only => {
            let mut r = respond(StatusCode::OK, &app.state.sa_key.jwks());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/jwk-set+json"),
            );
            Ok(r)
        }
        ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    "",
                    "serviceaccounts",
                    name,
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let out = crate::serviceaccount::request::answer(
                &app.state.storage,
                &app.state.sa_key,
                ns,
                name,
                &obj,
            )
            .await?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    "authentication.k8s.io",
                    "tokenreviews",
                    "",
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let out = crate::serviceaccount::review::answer(
                &app.tokens,
                &app.state.sa_key,
                &app.state.storage,
                &obj,
            )
            .await?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        review @ ["apis", _, "v1", ..] if crate::authz::review::route(review).is_some() => {
            let Some((group, plural, ns)) = crate::authz::review::route(review) else {
                return Err(ApiError::NoRoute);
            };
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    group, plural, "",
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let user = identity.unwrap_or_else(|| Identity {
                user: String::new(),
                groups: Vec::new(),
            });
            let out = crate::authz::review::answer(
                &app.state.authz,
                &user,
                group,
                plural,
                ns.as_deref(),
                &obj,
            )?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        ["api", "v1", rest @ ..] | ["apis", _, _, rest @ ..] => {
            let (group, version) = match segs.as_slice() {
                ["apis", g, v, ..] => (*g, *v),
                _ => ("", "v1"),
            };
            let user = identity.unwrap_or_else(|| Identity {
                user: String::new(),
                groups: Vec::new(),
            });
            handler::serve(
                app.state.clone(),
                method,
                group,
                version,
                rest,
                query.as_deref(),
                headers,
                body,
                user,
            )
            .await
        }
        _ => Err(ApiError::NoRoute),
    }
}

/// `(namespace, pod, subresource)` of an exec, attach or portforward path.
pub(super) fn pod_stream_target(segs: &[String]) -> Option<(String, String, String)> {
    match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", "v1", "namespaces", ns, "pods", name, sub @ ("exec" | "attach" | "portforward")] => {
            Some((ns.to_string(), name.to_string(), sub.to_string()))
        }
        _ => None,
    }
}
