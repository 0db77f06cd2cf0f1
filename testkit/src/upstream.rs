//! A DNS resolver a test starts to stand in for a node's upstream (so no query leaves the machine):
//! it knows [`NAME`] (an A record at [`ADDR`], a documentation address never contacted) and answers
//! NXDOMAIN for anything else.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};

/// The one name the resolver knows.
pub const NAME: &str = "upstream.example.";
/// Its address.
pub const ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

/// Starts the resolver on `ip` (a free UDP port) for the rest of the test process; its address.
pub fn start(ip: IpAddr) -> SocketAddr {
    let socket = UdpSocket::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    let addr = socket
        .local_addr()
        .unwrap_or_else(|e| panic!("upstream address: {e}"));
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            if let Some(bytes) = answer(&buf[..n]) {
                let _ = socket.send_to(&bytes, from);
            }
        }
    });
    addr
}

/// The response to one query packet (None: not a query it can answer at all).
fn answer(packet: &[u8]) -> Option<Vec<u8>> {
    let q = Message::from_vec(packet).ok()?;
    let question = q.queries.first().cloned()?;
    let mut m = Message::response(q.metadata.id, OpCode::Query);
    m.metadata.recursion_available = true;
    m.add_query(question.clone());
    let name = question.name().to_ascii().to_ascii_lowercase();
    if name == NAME && question.query_type() == RecordType::A {
        m.add_answer(Record::from_rdata(
            question.name().clone(),
            60,
            RData::A(A(ADDR)),
        ));
    } else if name != NAME {
        m.metadata.response_code = ResponseCode::NXDomain;
    }
    m.to_vec().ok()
}
