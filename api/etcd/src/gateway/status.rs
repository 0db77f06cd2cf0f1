//! gRPC statuses as the gateway answers them: etcd 3.4's gateway maps codes to HTTP statuses
//! with grpc-gateway v1's table and writes `{"error","message","code"}` bodies.

use axum::http::StatusCode;
use tonic::Code;

/// The HTTP status etcd's gateway answers for a gRPC code.
pub(super) fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        // grpc-gateway v1 (etcd 3.4's) still maps this one to 412.
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The body of a failed call: `{"error":M,"message":M,"code":N}`, keys in etcd's order.
pub(super) fn error_body(code: Code, message: &str) -> Vec<u8> {
    let m = quoted(message);
    format!(r#"{{"error":{m},"message":{m},"code":{}}}"#, code as i32).into_bytes()
}

/// The line a stream ends with when its call fails after it started:
/// `{"error":{"grpc_code":N,"http_code":N,"message":M,"http_status":TEXT}}`.
pub(super) fn stream_error_line(code: Code, message: &str) -> Vec<u8> {
    let http = http_status(code);
    format!(
        r#"{{"error":{{"grpc_code":{},"http_code":{},"message":{},"http_status":{}}}}}"#,
        code as i32,
        http.as_u16(),
        quoted(message),
        quoted(http.canonical_reason().unwrap_or("")),
    )
    .into_bytes()
}

/// `s` as a JSON string literal.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_as_etcd_34_gateway() {
        assert_eq!(http_status(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(
            http_status(Code::FailedPrecondition),
            StatusCode::PRECONDITION_FAILED
        );
        assert_eq!(
            http_status(Code::Unknown),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn error_bodies_carry_message_twice_and_the_code() {
        let body = error_body(Code::InvalidArgument, "etcdserver: key is not provided");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["error"], "etcdserver: key is not provided");
        assert_eq!(v["message"], "etcdserver: key is not provided");
        assert_eq!(v["code"], 3);
    }
}
