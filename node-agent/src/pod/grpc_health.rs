//! The gRPC health checking protocol (`grpc.health.v1.Health/Check`), as a `grpc` probe calls it:
//! SERVING is healthy, anything else or an error is not. The two messages are declared here (one field
//! each: `service` = 1 in the request, the `status` enum = 1 in the response).

use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `SERVING` in the response's status enum.
const SERVING: i32 = 1;

fn status_name(s: i32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNRECOGNIZED",
    }
}

/// Checks `service` (empty: the whole server) at `addr` (`host:port`); Err holds the probe's message.
pub async fn check(addr: &str, service: &str) -> Result<(), String> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("invalid address {addr}: {e}"))?
        .connect_timeout(Duration::from_secs(10));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("failed to connect service {addr:?} within the timeout: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| format!("service {addr:?} not ready: {e}"))?;
    let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let request = tonic::Request::new(HealthCheckRequest {
        service: service.to_string(),
    });
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    match grpc.unary(request, path, codec).await {
        Ok(r) if r.get_ref().status == SERVING => Ok(()),
        Ok(r) => Err(format!(
            "service unhealthy (responded with {:?})",
            status_name(r.get_ref().status)
        )),
        Err(s) if s.code() == tonic::Code::Unimplemented => Err(format!(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        )),
        Err(s) => Err(format!("health rpc failed: {}", s.message())),
    }
}
