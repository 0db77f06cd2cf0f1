//! Which HTTP path reaches which gRPC method, and the JSON mapping of its messages, as the HTTP
//! bindings of etcd 3.4's service definitions draw them.

use keel_store::pb::etcdserverpb as pb;
use prost::Message;
use serde::{de::DeserializeOwned, Serialize};

use crate::{v3electionpb as election, v3lockpb as lock};

/// How a method's messages flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// One request, one response.
    Unary,
    /// One request, a stream of responses (snapshot, observe).
    ServerStream,
    /// A stream each way (watch, lease keep-alive).
    BidiStream,
}

/// One gateway route.
#[derive(Clone, Copy)]
pub(super) struct Route {
    /// The gRPC path the call is passed to.
    pub grpc: &'static str,
    pub shape: Shape,
    /// One JSON request (empty input is the empty message) to its protobuf encoding.
    pub request: fn(&[u8]) -> Result<Vec<u8>, serde_json::Error>,
    /// One protobuf response to its JSON.
    pub response: fn(&[u8]) -> Result<Vec<u8>, DecodeFailure>,
}

/// A response from our own services that did not decode or encode (a bug, reported as Internal).
#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeFailure {
    #[error("gateway: undecodable response: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("gateway: response not encodable as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

fn request<M: Message + DeserializeOwned + Default>(
    json: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    let msg: M = if json.iter().all(u8::is_ascii_whitespace) {
        M::default()
    } else {
        serde_json::from_slice(json)?
    };
    Ok(msg.encode_to_vec())
}

fn response<M: Message + Serialize + Default>(bytes: &[u8]) -> Result<Vec<u8>, DecodeFailure> {
    Ok(serde_json::to_vec(&M::decode(bytes)?)?)
}

macro_rules! route {
    ($grpc:literal, $shape:ident, $req:ty, $resp:ty) => {
        Route {
            grpc: $grpc,
            shape: Shape::$shape,
            request: request::<$req>,
            response: response::<$resp>,
        }
    };
}

/// The route for `path` (below the `/v3/` or `/v3beta/` prefix), if etcd 3.4 serves one there.
pub(super) fn find(path: &str) -> Option<Route> {
    Some(match path {
        "kv/range" => route!(
            "/etcdserverpb.KV/Range",
            Unary,
            pb::RangeRequest,
            pb::RangeResponse
        ),
        "kv/put" => route!(
            "/etcdserverpb.KV/Put",
            Unary,
            pb::PutRequest,
            pb::PutResponse
        ),
        "kv/deleterange" => route!(
            "/etcdserverpb.KV/DeleteRange",
            Unary,
            pb::DeleteRangeRequest,
            pb::DeleteRangeResponse
        ),
        "kv/txn" => route!(
            "/etcdserverpb.KV/Txn",
            Unary,
            pb::TxnRequest,
            pb::TxnResponse
        ),
        "kv/compaction" => route!(
            "/etcdserverpb.KV/Compact",
            Unary,
            pb::CompactionRequest,
            pb::CompactionResponse
        ),
        "watch" => route!(
            "/etcdserverpb.Watch/Watch",
            BidiStream,
            pb::WatchRequest,
            pb::WatchResponse
        ),
        "lease/grant" => route!(
            "/etcdserverpb.Lease/LeaseGrant",
            Unary,
            pb::LeaseGrantRequest,
            pb::LeaseGrantResponse
        ),
        "lease/revoke" | "kv/lease/revoke" => route!(
            "/etcdserverpb.Lease/LeaseRevoke",
            Unary,
            pb::LeaseRevokeRequest,
            pb::LeaseRevokeResponse
        ),
        "lease/keepalive" => route!(
            "/etcdserverpb.Lease/LeaseKeepAlive",
            BidiStream,
            pb::LeaseKeepAliveRequest,
            pb::LeaseKeepAliveResponse
        ),
        "lease/timetolive" | "kv/lease/timetolive" => route!(
            "/etcdserverpb.Lease/LeaseTimeToLive",
            Unary,
            pb::LeaseTimeToLiveRequest,
            pb::LeaseTimeToLiveResponse
        ),
        "lease/leases" | "kv/lease/leases" => route!(
            "/etcdserverpb.Lease/LeaseLeases",
            Unary,
            pb::LeaseLeasesRequest,
            pb::LeaseLeasesResponse
        ),
        "cluster/member/add" => route!(
            "/etcdserverpb.Cluster/MemberAdd",
            Unary,
            pb::MemberAddRequest,
            pb::MemberAddResponse
        ),
        "cluster/member/remove" => route!(
            "/etcdserverpb.Cluster/MemberRemove",
            Unary,
            pb::MemberRemoveRequest,
            pb::MemberRemoveResponse
        ),
        "cluster/member/update" => route!(
            "/etcdserverpb.Cluster/MemberUpdate",
            Unary,
            pb::MemberUpdateRequest,
            pb::MemberUpdateResponse
        ),
        "cluster/member/list" => route!(
            "/etcdserverpb.Cluster/MemberList",
            Unary,
            pb::MemberListRequest,
            pb::MemberListResponse
        ),
        "cluster/member/promote" => route!(
            "/etcdserverpb.Cluster/MemberPromote",
            Unary,
            pb::MemberPromoteRequest,
            pb::MemberPromoteResponse
        ),
        "maintenance/alarm" => route!(
            "/etcdserverpb.Maintenance/Alarm",
            Unary,
            pb::AlarmRequest,
            pb::AlarmResponse
        ),
        "maintenance/status" => route!(
            "/etcdserverpb.Maintenance/Status",
            Unary,
            pb::StatusRequest,
            pb::StatusResponse
        ),
        "maintenance/defragment" => route!(
            "/etcdserverpb.Maintenance/Defragment",
            Unary,
            pb::DefragmentRequest,
            pb::DefragmentResponse
        ),
        // etcd 3.4 binds HashKV to this path too; Hash is the one that answers there.
        "maintenance/hash" => route!(
            "/etcdserverpb.Maintenance/Hash",
            Unary,
            pb::HashRequest,
            pb::HashResponse
        ),
        "maintenance/snapshot" => route!(
            "/etcdserverpb.Maintenance/Snapshot",
            ServerStream,
            pb::SnapshotRequest,
            pb::SnapshotResponse
        ),
        "maintenance/transfer-leadership" => route!(
            "/etcdserverpb.Maintenance/MoveLeader",
            Unary,
            pb::MoveLeaderRequest,
            pb::MoveLeaderResponse
        ),
        "auth/enable" => route!(
            "/etcdserverpb.Auth/AuthEnable",
            Unary,
            pb::AuthEnableRequest,
            pb::AuthEnableResponse
        ),
        "auth/disable" => route!(
            "/etcdserverpb.Auth/AuthDisable",
            Unary,
            pb::AuthDisableRequest,
            pb::AuthDisableResponse
        ),
        "auth/authenticate" => route!(
            "/etcdserverpb.Auth/Authenticate",
            Unary,
            pb::AuthenticateRequest,
            pb::AuthenticateResponse
        ),
        "auth/user/add" => route!(
            "/etcdserverpb.Auth/UserAdd",
            Unary,
            pb::AuthUserAddRequest,
            pb::AuthUserAddResponse
        ),
        "auth/user/get" => route!(
            "/etcdserverpb.Auth/UserGet",
            Unary,
            pb::AuthUserGetRequest,
            pb::AuthUserGetResponse
        ),
        "auth/user/list" => route!(
            "/etcdserverpb.Auth/UserList",
            Unary,
            pb::AuthUserListRequest,
            pb::AuthUserListResponse
        ),
        "auth/user/delete" => route!(
            "/etcdserverpb.Auth/UserDelete",
            Unary,
            pb::AuthUserDeleteRequest,
            pb::AuthUserDeleteResponse
        ),
        "auth/user/changepw" => route!(
            "/etcdserverpb.Auth/UserChangePassword",
            Unary,
            pb::AuthUserChangePasswordRequest,
            pb::AuthUserChangePasswordResponse
        ),
        "auth/user/grant" => route!(
            "/etcdserverpb.Auth/UserGrantRole",
            Unary,
            pb::AuthUserGrantRoleRequest,
            pb::AuthUserGrantRoleResponse
        ),
        "auth/user/revoke" => route!(
            "/etcdserverpb.Auth/UserRevokeRole",
            Unary,
            pb::AuthUserRevokeRoleRequest,
            pb::AuthUserRevokeRoleResponse
        ),
        "auth/role/add" => route!(
            "/etcdserverpb.Auth/RoleAdd",
            Unary,
            pb::AuthRoleAddRequest,
            pb::AuthRoleAddResponse
        ),
        "auth/role/get" => route!(
            "/etcdserverpb.Auth/RoleGet",
            Unary,
            pb::AuthRoleGetRequest,
            pb::AuthRoleGetResponse
        ),
        "auth/role/list" => route!(
            "/etcdserverpb.Auth/RoleList",
            Unary,
            pb::AuthRoleListRequest,
            pb::AuthRoleListResponse
        ),
        "auth/role/delete" => route!(
            "/etcdserverpb.Auth/RoleDelete",
            Unary,
            pb::AuthRoleDeleteRequest,
            pb::AuthRoleDeleteResponse
        ),
        "auth/role/grant" => route!(
            "/etcdserverpb.Auth/RoleGrantPermission",
            Unary,
            pb::AuthRoleGrantPermissionRequest,
            pb::AuthRoleGrantPermissionResponse
        ),
        "auth/role/revoke" => route!(
            "/etcdserverpb.Auth/RoleRevokePermission",
            Unary,
            pb::AuthRoleRevokePermissionRequest,
            pb::AuthRoleRevokePermissionResponse
        ),
        "lock/lock" => route!(
            "/v3lockpb.Lock/Lock",
            Unary,
            lock::LockRequest,
            lock::LockResponse
        ),
        "lock/unlock" => route!(
            "/v3lockpb.Lock/Unlock",
            Unary,
            lock::UnlockRequest,
            lock::UnlockResponse
        ),
        "election/campaign" => route!(
            "/v3electionpb.Election/Campaign",
            Unary,
            election::CampaignRequest,
            election::CampaignResponse
        ),
        "election/proclaim" => route!(
            "/v3electionpb.Election/Proclaim",
            Unary,
            election::ProclaimRequest,
            election::ProclaimResponse
        ),
        "election/leader" => route!(
            "/v3electionpb.Election/Leader",
            Unary,
            election::LeaderRequest,
            election::LeaderResponse
        ),
        "election/observe" => route!(
            "/v3electionpb.Election/Observe",
            ServerStream,
            election::LeaderRequest,
            election::LeaderResponse
        ),
        "election/resign" => route!(
            "/v3electionpb.Election/Resign",
            Unary,
            election::ResignRequest,
            election::ResignResponse
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_proto_names_camel_case_and_int64_strings() {
        let r = find("kv/range")
            .map(|r| r.request)
            .unwrap_or_else(|| panic!("no kv/range"));
        let a = r(br#"{"key":"Zm9v","range_end":"Zm9w","limit":"5","sort_order":"DESCEND"}"#);
        let b = r(br#"{"key":"Zm9v","rangeEnd":"Zm9w","limit":5,"sortOrder":2,"bogus":true}"#);
        let want = pb::RangeRequest {
            key: "foo".into(),
            range_end: "fop".into(),
            limit: 5,
            sort_order: 2,
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(a.ok(), Some(want.clone()));
        assert_eq!(b.ok(), Some(want));
        assert_eq!(r(b"  ").ok(), Some(Vec::new()));
        assert!(r(b"{\"key\":").is_err());
    }

    #[test]
    fn responses_use_proto_names_and_omit_defaults() {
        let resp = pb::LeaseGrantResponse {
            header: Some(pb::ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 3,
                raft_term: 0,
            }),
            id: 7,
            ttl: 30,
            error: String::new(),
        };
        let json = (find("lease/grant")
            .map(|r| r.response)
            .unwrap_or_else(|| panic!("no route")))(&resp.encode_to_vec())
        .map(String::from_utf8);
        assert_eq!(
            json.ok().and_then(Result::ok).as_deref(),
            Some(
                r#"{"header":{"cluster_id":"1","member_id":"2","revision":"3"},"ID":"7","TTL":"30"}"#
            )
        );
    }

    #[test]
    fn unknown_paths_have_no_route() {
        assert!(find("maintenance/hashkv").is_none());
        assert!(find("auth/status").is_none());
        assert!(find("").is_none());
    }
}
