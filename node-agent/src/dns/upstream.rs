//! Forwarding to the node's own resolvers, for every name outside the cluster domain.
//!
//! Model: a question is sent as the client wrote it (its EDNS options included) under a fresh
//! random ID, from a fresh socket, to each upstream in turn until one answers: over UDP first,
//! then over TCP when the UDP answer is truncated. Each attempt has its own timeout. An answer
//! counts only when it carries our ID and the same question, so a stray or spoofed datagram is
//! ignored rather than relayed. The caller restores the client's ID.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tracing::debug;

/// How long one upstream gets to answer over one transport.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest DNS message (the TCP length prefix is 16 bits).
const MAX_MESSAGE: usize = 65535;

/// Why no upstream answered.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No upstream is configured.
    #[error("no upstream resolvers configured")]
    NoUpstreams,
    /// The query is too short to carry a DNS header.
    #[error("query too short to forward")]
    BadQuery,
    /// Every upstream failed; the last failure.
    #[error("no upstream answered; last: {0}")]
    Failed(String),
}

/// The resolvers names outside the cluster are forwarded to.
#[derive(Debug, Clone)]
pub struct Upstream {
    servers: Vec<SocketAddr>,
    timeout: Duration,
}

impl Upstream {
    /// Forwards to `servers` in order, giving each `timeout` per transport.
    pub fn new(servers: Vec<SocketAddr>, timeout: Duration) -> Upstream {
        Upstream { servers, timeout }
    }

    /// The upstream resolvers.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// Sends `query` (a whole DNS message whose question is `question`) upstream and returns the
    /// first valid answer, with the upstream's ID (not the client's).
    pub async fn forward(&self, query: &[u8], question: &Query) -> Result<Vec<u8>, UpstreamError> {
        if self.servers.is_empty() {
            return Err(UpstreamError::NoUpstreams);
        }
        if query.len() < 12 || query.len() > MAX_MESSAGE {
            return Err(UpstreamError::BadQuery);
        }
        let mut last = String::new();
        for server in &self.servers {
            let id: u16 = rand::random();
            let mut packet = query.to_vec();
            packet[..2].copy_from_slice(&id.to_be_bytes());
            let udp =
                tokio::time::timeout(self.timeout, udp_exchange(*server, &packet, id, question));
            let answer = match udp.await {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => {
                    debug!(%server, error = %e, "upstream failed over UDP");
                    last = format!("{server}: {e}");
                    continue;
                }
                Err(_) => {
                    debug!(%server, "upstream timed out over UDP");
                    last = format!("{server}: timed out");
                    continue;
                }
            };
            if !truncated(&answer) {
                return Ok(answer);
            }
            let tcp =
                tokio::time::timeout(self.timeout, tcp_exchange(*server, &packet, id, question));
            match tcp.await {
                Ok(Ok(full)) => return Ok(full),
                // The truncated answer still tells the client to retry over TCP itself.
                Ok(Err(e)) => debug!(%server, error = %e, "upstream failed over TCP"),
                Err(_) => debug!(%server, "upstream timed out over TCP"),
            }
            return Ok(answer);
        }
        Err(UpstreamError::Failed(last))
    }
}

/// The TC bit of a message.
fn truncated(message: &[u8]) -> bool {
    message.get(2).is_some_and(|b| b & 0x02 != 0)
}

/// Whether `answer` answers our query `id` about `question`.
fn answers(answer: &[u8], id: u16, question: &Query) -> bool {
    if answer.len() < 12 || answer[..2] != id.to_be_bytes() {
        return false;
    }
    match Message::from_vec(answer) {
        Ok(m) => {
            m.metadata.message_type == MessageType::Response
                && m.queries.len() == 1
                && m.queries.first() == Some(question)
        }
        Err(_) => false,
    }
}

fn unspecified_for(server: SocketAddr) -> SocketAddr {
    match server.ip() {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

async fn udp_exchange(
    server: SocketAddr,
    packet: &[u8],
    id: u16,
    question: &Query,
) -> std::io::Result<Vec<u8>> {
    let socket = UdpSocket::bind(unspecified_for(server)).await?;
    // Connected, so the kernel drops datagrams from anyone else and reports ICMP refusals.
    socket.connect(server).await?;
    socket.send(packet).await?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let n = socket.recv(&mut buf).await?;
        let answer = &buf[..n];
        if answers(answer, id, question) {
            return Ok(answer.to_vec());
        }
        debug!(%server, "ignoring a datagram that does not answer our query");
    }
}

async fn tcp_exchange(
    server: SocketAddr,
    packet: &[u8],
    id: u16,
    question: &Query,
) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(server).await?;
    let len = u16::try_from(packet.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "query too long"))?;
    let mut framed = Vec::with_capacity(packet.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(packet);
    stream.write_all(&framed).await?;
    let len = usize::from(stream.read_u16().await?);
    let mut answer = vec![0u8; len];
    stream.read_exact(&mut answer).await?;
    if answers(&answer, id, question) {
        Ok(answer)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the TCP answer does not match the query",
        ))
    }
}

/// The `nameserver` lines of a resolv.conf, as resolvers on port 53.
pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next() != Some("nameserver") {
                return None;
            }
            // An IPv6 address may carry a zone (`fe80::1%eth0`), which SocketAddr cannot hold.
            let ip: IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::OpCode;
    use hickory_proto::rr::{Name, RecordType};

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# generated\nsearch example.org\nnameserver 192.0.2.1\nnameserver ::1\n\
                    nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:2\n";
        assert_eq!(
            parse_resolv_conf(text),
            vec![
                "192.0.2.1:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse::<SocketAddr>().unwrap()
            ]
        );
    }

    #[test]
    fn answers_must_carry_our_id_and_question() {
        let q = Query::query(Name::from_ascii("example.org.").unwrap(), RecordType::A);
        let mut m = Message::response(7, OpCode::Query);
        m.add_query(q.clone());
        let bytes = m.to_vec().unwrap();
        assert!(answers(&bytes, 7, &q));
        assert!(!answers(&bytes, 8, &q));
        // Names compare without regard to case (resolvers may randomise it).
        let upper = Query::query(Name::from_ascii("EXAMPLE.org.").unwrap(), RecordType::A);
        assert!(answers(&bytes, 7, &upper));
        let other = Query::query(Name::from_ascii("example.com.").unwrap(), RecordType::A);
        assert!(!answers(&bytes, 7, &other));
        let mut query = Message::query();
        query.metadata.id = 7;
        query.add_query(q.clone());
        assert!(
            !answers(&query.to_vec().unwrap(), 7, &q),
            "a query is no answer"
        );
        assert!(!answers(&bytes[..5], 7, &q));
    }

    #[tokio::test]
    async fn no_upstreams_is_an_error() {
        let q = Query::query(Name::from_ascii("example.org.").unwrap(), RecordType::A);
        let up = Upstream::new(vec![], UPSTREAM_TIMEOUT);
        assert!(matches!(
            up.forward(&[0u8; 20], &q).await,
            Err(UpstreamError::NoUpstreams)
        ));
    }
}
