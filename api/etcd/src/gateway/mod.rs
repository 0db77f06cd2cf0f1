//! etcd's JSON gateway on the client port: `POST /v3/kv/put` and the rest, JSON in the proto3
//! mapping (proto field names, int64 as strings, bytes as base64), on the `/v3/` and `/v3beta/`
//! prefixes as etcd 3.4 serves them.
//!
//! Each call is handed, in process, to the member's own gRPC router, as etcd's gateway dials
//! its own gRPC server: authentication, limits, errors and metrics are the gRPC path's, once.

mod frames;
mod routes;
mod status;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use axum::response::Response;
use futures::StreamExt;
use tonic::Code;

use frames::{GrpcReader, RequestValues};
use routes::{Route, Shape};

/// Largest JSON body taken for one call: etcd's largest request in base64 (4/3 of it) with room
/// for field names; what gRPC then refuses as too large gets its own answer.
const MAX_JSON_BODY: usize = 4 * keel_store::MAX_REQUEST_BYTES;

/// The gateway's routes, each call passed to `grpc` (the member's gRPC router).
pub fn routes(grpc: axum::Router) -> axum::Router {
    axum::Router::new()
        .route("/v3/{*path}", axum::routing::any(handle))
        .route("/v3beta/{*path}", axum::routing::any(handle))
        .with_state(grpc)
}

async fn handle(State(grpc): State<axum::Router>, req: Request) -> Response {
    let path = req.uri().path();
    let rest = path
        .strip_prefix("/v3/")
        .or_else(|| path.strip_prefix("/v3beta/"))
        .unwrap_or_default();
    let Some(route) = routes::find(rest) else {
        return plain(StatusCode::NOT_FOUND);
    };
    if req.method() == Method::OPTIONS {
        return with_cors(Response::new(Body::empty()));
    }
    if req.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED);
    }
    let call = Call::new(grpc, route, &req);
    let body = req.into_body();
    match route.shape {
        Shape::Unary => unary(call, body).await,
        Shape::ServerStream => server_stream(call, body).await,
        Shape::BidiStream => bidi_stream(call, body).await,
    }
}

/// One gRPC call the gateway makes for a request.
struct Call {
    grpc: axum::Router,
    route: Route,
    /// The metadata passed on: `Authorization` and `Grpc-Metadata-*` headers.
    metadata: HeaderMap,
    /// The connection's address, for services that tell connections apart (watch IDs).
    extensions: axum::http::Extensions,
}

impl Call {
    fn new(grpc: axum::Router, route: Route, req: &Request) -> Call {
        let mut metadata = HeaderMap::new();
        for (name, value) in req.headers() {
            if name == header::AUTHORIZATION {
                metadata.append(header::AUTHORIZATION, value.clone());
            } else if let Some(key) = name.as_str().strip_prefix("grpc-metadata-") {
                if let Ok(key) = HeaderName::from_bytes(key.as_bytes()) {
                    metadata.append(key, value.clone());
                }
            }
        }
        let mut extensions = axum::http::Extensions::new();
        if let Some(info) = req
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
        {
            extensions.insert(info.clone());
        }
        Call {
            grpc,
            route,
            metadata,
            extensions,
        }
    }

    /// Starts the call with `body` (gRPC frames) and returns its response messages.
    async fn start(self, body: Body) -> GrpcReader {
        let mut req = axum::http::Request::new(body);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = axum::http::Uri::from_static(self.route.grpc);
        *req.version_mut() = Version::HTTP_2;
        *req.extensions_mut() = self.extensions;
        let headers = req.headers_mut();
        headers.extend(self.metadata);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
        let resp = match tower::ServiceExt::oneshot(self.grpc, req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        };
        GrpcReader::new(resp)
    }
}

async fn unary(call: Call, body: Body) -> Response {
    let request = match read_request(call.route, body).await {
        Ok(frame) => frame,
        Err(resp) => return resp,
    };
    let to_json = call.route.response;
    let mut reader = call.start(Body::from(request)).await;
    let answer = match reader.next().await {
        Ok(Some(msg)) => reader.finish().await.map(|()| msg),
        Ok(None) => Err(tonic::Status::internal(
            "gateway: call ended without a response",
        )),
        Err(status) => Err(status),
    };
    match answer.map(|msg| to_json(&msg)) {
        Ok(Ok(json)) => json_response(StatusCode::OK, Body::from(json)),
        Ok(Err(e)) => error_response(Code::Internal, &e.to_string()),
        Err(status) => error_response(status.code(), status.message()),
    }
}

async fn server_stream(call: Call, body: Body) -> Response {
    let request = match read_request(call.route, body).await {
        Ok(frame) => frame,
        Err(resp) => return resp,
    };
    let route = call.route;
    let reader = call.start(Body::from(request)).await;
    stream_response(route, reader).await
}

async fn bidi_stream(call: Call, body: Body) -> Response {
    let route = call.route;
    let mut values = RequestValues::new(body, MAX_JSON_BODY);
    // A first request that is not JSON fails the whole call, as etcd's gateway answers it.
    let first = match values.next().await {
        Ok(first) => first,
        Err(e) => return error_response(Code::Unknown, &e.to_string()),
    };
    let first = match first.map(|v| (route.request)(&v)).transpose() {
        Ok(first) => first,
        Err(e) => return error_response(Code::Unknown, &e.to_string()),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    if let Some(first) = first {
        // The receiver is alive: it is consumed below.
        let _ = tx.send(Ok(frames::encode(&first))).await;
    }
    // Later requests are passed on as they arrive; one that does not parse ends the sending
    // side (etcd's gateway stops sending too) while responses keep flowing.
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                next = values.next() => next,
                _ = tx.closed() => return,
            };
            let frame = match next {
                Ok(Some(v)) => match (route.request)(&v) {
                    Ok(pb) => frames::encode(&pb),
                    Err(e) => {
                        tracing::debug!(error = %e, "gateway: request in stream does not parse");
                        return;
                    }
                },
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "gateway: request stream ended");
                    return;
                }
            };
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
    let reader = call.start(Body::from_stream(requests)).await;
    stream_response(route, reader).await
}

/// A streamed answer: one `{"result":…}` line per response. The status waits for the first
/// response, so a call that fails at once gets its own HTTP status.
async fn stream_response(route: Route, mut reader: GrpcReader) -> Response {
    let first = match reader.next().await {
        Ok(first) => first,
        Err(status) => {
            let mut line = status::stream_error_line(status.code(), status.message());
            line.push(b'\n');
            return json_response(status::http_status(status.code()), Body::from(line));
        }
    };
    let Some(first) = first else {
        return json_response(StatusCode::OK, Body::empty());
    };
    let to_json = route.response;
    let head = futures::stream::iter([Ok(first)]);
    let lines = futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        match reader.next().await {
            Ok(Some(msg)) => Some((Ok(msg), Some(reader))),
            Ok(None) => None,
            Err(status) => Some((Err(status), None)),
        }
    });
    let body = head.chain(lines).map(move |item| {
        let mut line = match item {
            Ok(msg) => match to_json(&msg) {
                Ok(json) => result_line(&json),
                Err(e) => status::stream_error_line(Code::Internal, &e.to_string()),
            },
            Err(status) => status::stream_error_line(status.code(), status.message()),
        };
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(Bytes::from(line))
    });
    json_response(StatusCode::OK, Body::from_stream(body))
}

fn result_line(json: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(json.len() + 11);
    line.extend_from_slice(b"{\"result\":");
    line.extend_from_slice(json);
    line.push(b'}');
    line
}

/// Reads a unary or server-streaming request body and encodes it as one gRPC frame; a body
/// that is not the route's JSON is InvalidArgument, as etcd's gateway answers it.
async fn read_request(route: Route, body: Body) -> Result<Bytes, Response> {
    let json = match axum::body::to_bytes(body, MAX_JSON_BODY).await {
        Ok(json) => json,
        Err(e) => {
            let message =
                format!("gateway: request body not read (limit {MAX_JSON_BODY} bytes): {e}");
            return Err(error_response(Code::ResourceExhausted, &message));
        }
    };
    match (route.request)(&json) {
        Ok(pb) => Ok(frames::encode(&pb)),
        Err(e) => Err(error_response(Code::InvalidArgument, &e.to_string())),
    }
}

fn error_response(code: Code, message: &str) -> Response {
    json_response(
        status::http_status(code),
        Body::from(status::error_body(code, message)),
    )
}

fn json_response(status: StatusCode, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // etcd's gateway passes the gRPC response's headers on as Grpc-Metadata-*.
    headers.insert(
        HeaderName::from_static("grpc-metadata-content-type"),
        HeaderValue::from_static("application/grpc"),
    );
    with_cors(resp)
}

/// Go's `http.Error` answer: the status text and a newline, as plain text.
fn plain(status: StatusCode) -> Response {
    let text = format!("{}\n", status.canonical_reason().unwrap_or_default());
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    set_all(
        resp.headers_mut(),
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    );
    with_cors(resp)
}

/// etcd's client port allows cross-origin calls to the gateway.
fn with_cors(mut resp: Response) -> Response {
    set_all(
        resp.headers_mut(),
        [
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "accept, content-type, authorization",
            ),
            (
                header::ACCESS_CONTROL_ALLOW_METHODS,
                "POST, GET, OPTIONS, PUT, DELETE",
            ),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
    );
    resp
}

fn set_all<const N: usize>(headers: &mut HeaderMap, values: [(HeaderName, &'static str); N]) {
    for (name, value) in values {
        headers.insert(name, HeaderValue::from_static(value));
    }
}
