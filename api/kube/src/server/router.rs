//! Every request's way in, as tower layers ([`router`]): the request read once, audit,
//! authentication, impersonation and authorization, request metrics; then the path to its answer
//! (`dispatch`): aggregated groups, pod streams, the non-resource paths, and the resource paths
//! `handler` serves.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

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

/// The layers every request passes, outermost first: read it once ([`RequestInfo`]), audit it,
/// authenticate, impersonate and authorize, count it, then [`serve`] routes it. As upstream, a
/// request refused by authentication is not in the request metrics.
pub(super) fn router(app: Arc<App>) -> Router {
    Router::new()
        .fallback(serve)
        .layer(from_fn_with_state(app.clone(), measure))
        .layer(from_fn_with_state(app.clone(), authorize))
        .layer(from_fn_with_state(app.clone(), authenticate))
        .layer(from_fn_with_state(app.clone(), audit))
        .layer(from_fn(read_request))
        .with_state(app)
}

/// Who the request authenticated as (request and response extension).
#[derive(Clone)]
struct Authenticated(Identity);

/// Who the request acts as after impersonation, authorized (request and response extension).
#[derive(Clone)]
struct Acting(Identity);

/// Reads the request once; every later layer takes it from the extensions.
async fn read_request(mut req: Request, next: Next) -> Response {
    let info = Arc::new(RequestInfo::of(req.method(), req.uri()));
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// The request's parsed form (inserted by [`read_request`], which every request passes first).
fn info_of(req: &Request) -> Arc<RequestInfo> {
    req.extensions()
        .get::<Arc<RequestInfo>>()
        .cloned()
        .unwrap_or_else(|| Arc::new(RequestInfo::of(req.method(), req.uri())))
}

/// Records the request in the audit log once it is answered, with who it came from and acted as.
async fn audit(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let Some(log) = app.audit.as_ref() else {
        return next.run(req).await;
    };
    let received = jiff::Timestamp::now();
    let info = info_of(&req);
    let uri = req.uri().clone();
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let source = req.extensions().get::<PeerIdentity>().and_then(|p| p.1);
    let (resp, annotations) = crate::audit::collecting(next.run(req)).await;
    let authenticated = resp.extensions().get::<Authenticated>().map(|a| &a.0);
    let acting = resp.extensions().get::<Acting>().map(|a| &a.0);
    let subject = acting.or(authenticated).cloned().unwrap_or(Identity {
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
    let impersonated = match (authenticated, acting) {
        (Some(a), Some(b)) if a != b => Some(b),
        _ => None,
    };
    log.record(&crate::audit::Entry {
        user: authenticated,
        impersonated,
        attrs: &attrs,
        uri: uri.path_and_query().map_or(uri.path(), |p| p.as_str()),
        user_agent: &agent,
        source,
        code: resp.status().as_u16(),
        received,
        annotations: &annotations,
    });
    resp
}

/// Who the request comes from: the client certificate, a static token, or a service-account
/// token (bound JWT, then a legacy token Secret). Anonymous requests reach only the public paths.
async fn authenticate(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let mut identity = req
        .extensions()
        .get::<PeerIdentity>()
        .and_then(|p| p.0.clone())
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
    let Some(mut id) = identity else {
        if authn::is_public(req.uri().path()) {
            return next.run(req).await;
        }
        return ApiError::Unauthorized.into_response();
    };
    // Every authenticated user is in `system:authenticated`.
    if !id.groups.iter().any(|g| g == crate::authz::AUTHENTICATED) {
        id.groups.push(crate::authz::AUTHENTICATED.into());
    }
    req.extensions_mut().insert(Authenticated(id.clone()));
    let mut resp = next.run(req).await;
    resp.extensions_mut().insert(Authenticated(id));
    resp
}

/// Impersonation (`Impersonate-User`/`-Group`), then authorization of what the request asks as
/// the user it acts as.
async fn authorize(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let Some(Authenticated(id)) = req.extensions().get::<Authenticated>().cloned() else {
        // Only public paths get here unauthenticated.
        return next.run(req).await;
    };
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
    let info = info_of(&req);
    let acting = crate::authz::impersonate::acting_as(authz, id, req.headers()).and_then(|id| {
        let attrs = crate::authz::attributes::Attributes::of(id.clone(), &info);
        authz.check(&attrs).map(|()| id)
    });
    match acting {
        Ok(id) => {
            req.extensions_mut().insert(Acting(id.clone()));
            let mut resp = next.run(req).await;
            resp.extensions_mut().insert(Acting(id));
            resp
        }
        Err(e) => e.into_response(),
    }
}

/// The request metrics: in-flight counts and, once answered, `apiserver_request_*`.
async fn measure(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let start = std::time::Instant::now();
    let info = info_of(&req);
    let metrics = app.state.metrics.clone();
    let measure = RequestMeasure::of(&app.state.registry, &info, req.method(), req.headers());
    let long_running = measure.as_ref().is_some_and(RequestMeasure::long_running);
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    let in_flight = (!long_running).then(|| metrics.in_flight(read_only));
    let resp = next.run(req).await;
    drop(in_flight);
    match measure {
        Some(measure) => metrics.finish(measure, resp, start),
        None => resp,
    }
}

/// The innermost step: routes the request, as the user it acts as.
async fn serve(State(app): State<Arc<App>>, req: Request) -> Response {
    let identity = req.extensions().get::<Acting>().map(|a| a.0.clone());
    let info = info_of(&req);
    match dispatch(app, identity, req, &info).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

pub(super) async fn dispatch(
    app: Arc<App>,
    identity: Option<Identity>,
    req: Request,
    info: &RequestInfo,
) -> Result<Response, ApiError> {
    // A remote APIService's group-version goes to its backend with the request whole (body streamed).
    if let Some(apiservice) =
        crate::aggregator::proxy::target(&app.state.registry, &app.state.storage, &info.segments)
    {
        return crate::aggregator::proxy::serve(
            &app.state.storage,
            &app.state.aggregator,
            apiservice,
            identity.clone(),
            req,
        )
        .await;
    }
    // exec, attach and portforward keep the request whole: its connection is upgraded and relayed.
    if let Some((ns, name, sub)) = pod_stream_target(&info.segments) {
        return handler::pod_stream::serve(app.state.clone(), identity, &ns, &name, &sub, req)
            .await;
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
            crate::metrics_api::serve(
                &app.state.storage,
                app.state.kubelet_tls(),
                rest,
                query.as_deref(),
            )
            .await
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
