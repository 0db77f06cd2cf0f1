//! `/healthz`, `/livez` and `/readyz` with their checks, as kube-apiserver answers them.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::App;
use crate::lifecycle;

pub(super) fn plain(code: StatusCode, text: &str) -> Response {
    let mut r = (code, text.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

pub(super) async fn health(app: &App, path: &str, query: Option<&str>) -> Response {
    let readyz = path.starts_with("/readyz");
    let ready = app.state.storage.has_leader() && lifecycle::bootstrapped(&app.state.storage).await;
    // As upstream's, readiness waits for the post-start hook that creates the built-in PriorityClasses.
    let hooks = [
        (
            crate::authz::ensure::HOOK,
            app.state
                .rbac_ready
                .load(std::sync::atomic::Ordering::Acquire),
        ),
        (
            crate::priority::HOOK,
            app.state
                .priority_classes_ready
                .load(std::sync::atomic::Ordering::Acquire),
        ),
    ];
    let hook = hooks.iter().all(|(_, done)| *done);
    let check = !readyz || (ready && hook);
    let verbose = query.is_some_and(|q| q.contains("verbose"));
    let hook_line: String = if !readyz {
        String::new()
    } else {
        hooks
            .iter()
            .map(|(name, done)| {
                if *done {
                    format!("[+]{name} ok\n")
                } else {
                    format!("[-]{name} failed: reason withheld\n")
                }
            })
            .collect()
    };
    match (check, verbose) {
        (true, false) => plain(StatusCode::OK, "ok"),
        (true, true) => plain(
            StatusCode::OK,
            &format!(
                "[+]ping ok\n[+]etcd ok\n{hook_line}{} check passed\n",
                &path[1..]
            ),
        ),
        (false, _) => {
            let bootstrap = if ready {
                "[+]etcd ok\n"
            } else {
                "[-]bootstrap failed: no Raft leader yet, or the default namespaces are not created yet\n"
            };
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "[+]ping ok\n{bootstrap}{hook_line}{} check failed\n",
                    &path[1..]
                ),
            )
        }
    }
}
