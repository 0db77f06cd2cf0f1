//! Kubernetes' CEL URL library: `url(s)` (an absolute URI or an absolute path, as Go's
//! `url.ParseRequestURI` takes), `isURL(s)`, and on a URL `getScheme()`, `getHost()`, `getHostname()`,
//! `getPort()`, `getEscapedPath()` and `getQuery()` (a map of lists).

use std::collections::HashMap;
use std::sync::Arc;

use cel::extractors::This;
use cel::objects::{Key, Map};
use cel::{Context, FunctionContext, Value};

use super::typed;

type Result<T> = std::result::Result<T, cel::ExecutionError>;

const KIND: &str = "kubernetes.URL";

/// Whether `s` is what `url()` accepts: an absolute URL, or a path starting with `/`.
fn parses(s: &str) -> bool {
    if s.starts_with('/') {
        return url::Url::parse(&format!("http://x{s}")).is_ok();
    }
    url::Url::parse(s).is_ok()
}

fn make(ftx: &FunctionContext, s: Arc<String>) -> Result<Value> {
    if !parses(&s) {
        return Err(ftx.error(format!(
            "URL parse error during conversion from string: parse {s:?}: invalid URI for request"
        )));
    }
    Ok(typed::make(
        KIND,
        vec![("value", typed::string(s.as_str()))],
    ))
}

fn is_url(s: Arc<String>) -> bool {
    parses(&s)
}

/// The pieces of a URL value, split the way Go's url.URL keeps them.
struct Parts {
    scheme: String,
    host: String,
    hostname: String,
    port: String,
    path: String,
    query: Option<String>,
}

fn parts(ftx: &FunctionContext, v: &Value) -> Result<Parts> {
    let f = typed::receiver(ftx, v, KIND)?;
    let raw = typed::text(f, "value");
    if raw.starts_with('/') {
        let u = url::Url::parse(&format!("http://x{raw}")).map_err(|e| ftx.error(e))?;
        return Ok(Parts {
            scheme: String::new(),
            host: String::new(),
            hostname: String::new(),
            port: String::new(),
            path: u.path().to_string(),
            query: u.query().map(str::to_string),
        });
    }
    let u = url::Url::parse(&raw).map_err(|e| ftx.error(e))?;
    let hostname = u.host_str().unwrap_or("").to_string();
    // Go keeps the port as written, while the url crate drops a scheme's default port: read it back.
    let port = raw
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .map(|authority| authority.rsplit_once('@').map_or(authority, |(_, h)| h))
        .and_then(|h| {
            let after = h.rfind(']').map_or(h, |i| &h[i..]);
            after.rsplit_once(':').map(|(_, p)| p.to_string())
        })
        .unwrap_or_default();
    let host = if port.is_empty() {
        hostname.clone()
    } else {
        format!("{hostname}:{port}")
    };
    Ok(Parts {
        scheme: u.scheme().to_string(),
        hostname: hostname
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        host,
        port,
        path: u.path().to_string(),
        query: u.query().map(str::to_string),
    })
}

fn get_scheme(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    Ok(typed::string(parts(ftx, &u)?.scheme))
}

fn get_host(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    Ok(typed::string(parts(ftx, &u)?.host))
}

fn get_hostname(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    Ok(typed::string(parts(ftx, &u)?.hostname))
}

fn get_port(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    Ok(typed::string(parts(ftx, &u)?.port))
}

fn get_escaped_path(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    Ok(typed::string(parts(ftx, &u)?.path))
}

fn get_query(ftx: &FunctionContext, This(u): This<Value>) -> Result<Value> {
    let mut out: HashMap<Key, Vec<Value>> = HashMap::new();
    if let Some(q) = parts(ftx, &u)?.query {
        for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
            out.entry(Key::String(Arc::new(k.into_owned())))
                .or_default()
                .push(typed::string(v.into_owned()));
        }
    }
    let map = out
        .into_iter()
        .map(|(k, v)| (k, Value::List(Arc::new(v))))
        .collect();
    Ok(Value::Map(Map { map: Arc::new(map) }))
}

/// Adds the library to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("url", make);
    ctx.add_function("isURL", is_url);
    ctx.add_function("getScheme", get_scheme);
    ctx.add_function("getHost", get_host);
    ctx.add_function("getHostname", get_hostname);
    ctx.add_function("getPort", get_port);
    ctx.add_function("getEscapedPath", get_escaped_path);
    ctx.add_function("getQuery", get_query);
}
