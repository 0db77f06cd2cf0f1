//! The listener: DNS over UDP and TCP on one address, each question answered by the [`Resolver`].
//!
//! Model: the resolver reads the current [`RecordTable`] from a watch channel (the table is swapped
//! whole, so a query sees one consistent snapshot) and turns one packet into at most one reply:
//! - a name under the cluster domain is answered from the table, authoritatively, never forwarded
//!   (SERVFAIL until the table has been built from synced caches);
//! - an ExternalName CNAME is followed to its target, through the table or the upstreams;
//! - anything else goes to the [`Upstream`] resolvers, SERVFAIL when none answers;
//! - the A records of an answer come in a random order each time (CoreDNS's `loadbalance`);
//! - a packet that is not a query is dropped; one that does not decode gets FORMERR when its header
//!   is readable and is dropped otherwise. Nothing the client sends can make it panic.
//!
//! UDP replies larger than the client can take (512 bytes, or its EDNS size up to 1232) are cut
//! to the question with TC set, and the client retries over TCP. Each UDP query and each TCP
//! connection runs in its own task, bounded in number; they all end when [`Listener::serve`] is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::CNAME;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use rand::seq::SliceRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::debug;

use super::records::{Lookup, RecordTable};
use super::stats::DnsStats;
use super::upstream::Upstream;
use crate::error::{Error, Result};

/// The EDNS UDP payload size we advertise and the most we send over UDP (the DNS flag day value,
/// which avoids IP fragmentation).
const UDP_PAYLOAD: u16 = 1232;
/// UDP queries being answered at once; more are dropped (the client retries).
const MAX_UDP_IN_FLIGHT: usize = 1024;
/// TCP connections open at once; more are closed at once.
const MAX_TCP_CONNECTIONS: usize = 256;
/// How long a TCP connection may sit idle, or take to send one query or receive one reply.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// How many CNAMEs an answer follows.
const MAX_CNAME_CHAIN: usize = 8;

/// The transport a query came over, which bounds the size of its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: 512 bytes, or the client's EDNS size (at most 1232).
    Udp,
    /// TCP: up to 64 KiB.
    Tcp,
}

/// Answers DNS packets from the record table and the upstream resolvers.
#[derive(Debug)]
pub struct Resolver {
    table: watch::Receiver<Arc<RecordTable>>,
    upstream: Upstream,
    stats: Arc<DnsStats>,
}

impl Resolver {
    /// A resolver over the tables sent on `table`, forwarding to `upstream`, counting into `stats`.
    pub fn new(
        table: watch::Receiver<Arc<RecordTable>>,
        upstream: Upstream,
        stats: Arc<DnsStats>,
    ) -> Resolver {
        Resolver {
            table,
            upstream,
            stats,
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<DnsStats> {
        &self.stats
    }

    /// The reply to one packet received over `transport`, or `None` when it gets none.
    pub async fn answer(&self, packet: &[u8], transport: Transport) -> Option<Vec<u8>> {
        DnsStats::bump(&self.stats.queries);
        let request = match Message::from_vec(packet) {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, "undecodable DNS packet");
                let reply = formerr_from_header(packet);
                match &reply {
                    Some(r) => self.stats.count_reply(r),
                    None => DnsStats::bump(&self.stats.dropped),
                }
                return reply;
            }
        };
        if request.metadata.message_type != MessageType::Query {
            DnsStats::bump(&self.stats.dropped);
            return None;
        }
        let mut reply = self.reply(&request, packet).await;
        let limit = match transport {
            Transport::Udp => usize::from(request.max_payload().min(UDP_PAYLOAD)),
            Transport::Tcp => usize::from(u16::MAX),
        };
        if reply.len() > limit {
            DnsStats::bump(&self.stats.truncated);
            let mut cut = response(&request, ResponseCode::NoError, false);
            cut.metadata.truncation = true;
            reply = encode(&cut);
        }
        self.stats.count_reply(&reply);
        Some(reply)
    }

    async fn reply(&self, request: &Message, raw: &[u8]) -> Vec<u8> {
        if request.metadata.op_code != OpCode::Query {
            return encode(&response(request, ResponseCode::NotImp, false));
        }
        let [question] = request.queries.as_slice() else {
            return encode(&response(request, ResponseCode::FormErr, false));
        };
        let table = self.table.borrow().clone();
        let name = question.name();
        let qtype = question.query_type();
        let class_in = matches!(question.query_class(), DNSClass::IN | DNSClass::ANY);
        if table.zone().contains(name) {
            if !class_in || matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
                return encode(&response(request, ResponseCode::Refused, false));
            }
            if !table.is_synced() {
                debug!(%name, "cluster records not synced yet");
                return encode(&response(request, ResponseCode::ServFail, false));
            }
        }
        let lookup = if class_in {
            table.lookup(name, qtype)
        } else {
            Lookup::Outside
        };
        debug!(%name, ?qtype, ?lookup, "query");
        let mut msg = match lookup {
            Lookup::Outside => return self.forward(request, raw, question).await,
            Lookup::Found {
                answers,
                additionals,
            } => {
                let mut msg = response(request, ResponseCode::NoError, true);
                let answers = self.follow_cname(&table, qtype, answers).await;
                msg.add_answers(shuffle_addresses(answers));
                msg.add_additionals(additionals);
                msg
            }
            Lookup::NoData { soa } => {
                let mut msg = response(request, ResponseCode::NoError, true);
                msg.add_authority(soa);
                msg
            }
            Lookup::NxDomain { soa } => {
                let mut msg = response(request, ResponseCode::NXDomain, true);
                msg.add_authority(soa);
                msg
            }
        };
        msg.metadata.recursion_available = true;
        encode(&msg)
    }

    /// Sends the client's packet upstream; the reply carries the client's ID.
    async fn forward(&self, request: &Message, raw: &[u8], question: &Query) -> Vec<u8> {
        DnsStats::bump(&self.stats.forwarded);
        match self.upstream.forward(raw, question).await {
            Ok(mut answer) => {
                if let Some(id) = answer.get_mut(..2) {
                    id.copy_from_slice(&request.metadata.id.to_be_bytes());
                }
                answer
            }
            Err(e) => {
                DnsStats::bump(&self.stats.upstream_failures);
                debug!(name = %question.name(), error = %e, "upstream failed");
                encode(&response(request, ResponseCode::ServFail, false))
            }
        }
    }

    /// Follows a CNAME at the end of `answers` (ExternalName Services) to the records of the
    /// asked type, from the table or upstream, as CoreDNS does; the CNAME alone when that fails.
    async fn follow_cname(
        &self,
        table: &RecordTable,
        qtype: RecordType,
        mut answers: Vec<Record>,
    ) -> Vec<Record> {
        if matches!(qtype, RecordType::CNAME | RecordType::ANY) {
            return answers;
        }
        let mut seen: Vec<Name> = Vec::new();
        for _ in 0..MAX_CNAME_CHAIN {
            let Some(Record {
                data: RData::CNAME(CNAME(target)),
                ..
            }) = answers.last()
            else {
                break;
            };
            let target = target.clone();
            if seen.contains(&target) {
                break;
            }
            seen.push(target.clone());
            if table.zone().contains(&target) {
                match table.lookup(&target, qtype) {
                    Lookup::Found { answers: more, .. } => answers.extend(more),
                    _ => break,
                }
                continue;
            }
            let mut query = Message::query();
            query.metadata.recursion_desired = true;
            let question = Query::query(target, qtype);
            query.add_query(question.clone());
            let Ok(bytes) = query.to_vec() else { break };
            DnsStats::bump(&self.stats.forwarded);
            match self.upstream.forward(&bytes, &question).await {
                Ok(reply) => {
                    if let Ok(m) = Message::from_vec(&reply) {
                        if m.metadata.response_code == ResponseCode::NoError {
                            answers.extend(m.answers);
                        }
                    }
                }
                Err(e) => {
                    DnsStats::bump(&self.stats.upstream_failures);
                    debug!(name = %question.name(), error = %e, "CNAME target not resolved");
                }
            }
            break;
        }
        answers
    }
}

/// The answers with their A records in random order after the rest (CNAMEs), as CoreDNS's
/// `loadbalance` does, so that clients taking the first address spread over a headless Service.
fn shuffle_addresses(answers: Vec<Record>) -> Vec<Record> {
    let (mut addresses, mut rest): (Vec<Record>, Vec<Record>) = answers
        .into_iter()
        .partition(|r| matches!(r.data, RData::A(_)));
    addresses.shuffle(&mut rand::thread_rng());
    rest.extend(addresses);
    rest
}

/// A reply to `request` with `rcode`, echoing its question and EDNS.
fn response(request: &Message, rcode: ResponseCode, authoritative: bool) -> Message {
    let mut msg = Message::response(request.metadata.id, request.metadata.op_code);
    msg.metadata = Metadata::response_from_request(&request.metadata);
    msg.metadata.response_code = rcode;
    msg.metadata.authoritative = authoritative;
    msg.metadata.recursion_available = true;
    msg.add_queries(request.queries.iter().cloned());
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(UDP_PAYLOAD);
        msg.set_edns(edns);
    }
    msg
}

/// The wire form of `msg`; a bare SERVFAIL header if it cannot be encoded.
fn encode(msg: &Message) -> Vec<u8> {
    match msg.to_vec() {
        Ok(bytes) => bytes,
        Err(e) => {
            debug!(error = %e, "reply not encodable");
            let id = msg.metadata.id.to_be_bytes();
            let mut header = vec![0u8; 12];
            header[..2].copy_from_slice(&id);
            header[2] = 0x80; // QR
            header[3] = 0x80 | 2; // RA, SERVFAIL
            header
        }
    }
}

/// FORMERR for a packet whose body does not decode but whose header is a query's.
fn formerr_from_header(packet: &[u8]) -> Option<Vec<u8>> {
    let header = packet.get(..12)?;
    if header[2] & 0x80 != 0 {
        return None; // a response: never answer one, or two servers could loop
    }
    let mut reply = vec![0u8; 12];
    reply[..2].copy_from_slice(&header[..2]);
    reply[2] = 0x80 | (header[2] & 0x78) | (header[2] & 0x01); // QR, the opcode, RD
    reply[3] = 0x80 | 1; // RA, FORMERR
    Some(reply)
}

/// A UDP socket and a TCP listener on the same address and port.
#[derive(Debug)]
pub struct Listener {
    udp: UdpSocket,
    tcp: TcpListener,
}

impl Listener {
    /// Binds UDP and TCP on `addr`; with port 0, on one free port for both.
    pub async fn bind(addr: SocketAddr) -> Result<Listener> {
        let mut tries = 0;
        loop {
            let udp = UdpSocket::bind(addr)
                .await
                .map_err(|e| Error::io(format!("dns udp {addr}"), e))?;
            let bound = udp
                .local_addr()
                .map_err(|e| Error::io(format!("dns udp {addr}"), e))?;
            match TcpListener::bind(bound).await {
                Ok(tcp) => return Ok(Listener { udp, tcp }),
                // The free UDP port may be taken for TCP: pick another pair.
                Err(e) if addr.port() == 0 && tries < 16 => {
                    tries += 1;
                    debug!(%bound, error = %e, "TCP port taken; trying another");
                }
                Err(e) => return Err(Error::io(format!("dns tcp {bound}"), e)),
            }
        }
    }

    /// The address both sockets are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp
            .local_addr()
            .or_else(|_| self.udp.local_addr())
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves queries until dropped.
    pub async fn serve(self, resolver: Arc<Resolver>) {
        let udp = serve_udp(Arc::new(self.udp), resolver.clone());
        let tcp = serve_tcp(self.tcp, resolver);
        tokio::join!(udp, tcp);
    }
}

/// Binds `addr` (UDP and TCP) and serves queries with `resolver` until dropped.
pub async fn serve(addr: SocketAddr, resolver: Arc<Resolver>) -> Result<()> {
    Listener::bind(addr).await?.serve(resolver).await;
    Ok(())
}

async fn serve_udp(socket: Arc<UdpSocket>, resolver: Arc<Resolver>) {
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; 65535];
    loop {
        tokio::select! {
            received = socket.recv_from(&mut buf) => {
                let (n, peer) = match received {
                    Ok(r) => r,
                    Err(e) => {
                        debug!(error = %e, "UDP receive failed");
                        // Do not spin on an error that repeats.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if tasks.len() >= MAX_UDP_IN_FLIGHT {
                    DnsStats::bump(&resolver.stats.queries);
                    DnsStats::bump(&resolver.stats.dropped);
                    continue;
                }
                let packet = buf[..n].to_vec();
                let socket = socket.clone();
                let resolver = resolver.clone();
                tasks.spawn(async move {
                    if let Some(reply) = resolver.answer(&packet, Transport::Udp).await {
                        if let Err(e) = socket.send_to(&reply, peer).await {
                            debug!(%peer, error = %e, "UDP reply not sent");
                        }
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

async fn serve_tcp(listener: TcpListener, resolver: Arc<Resolver>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors, most likely: wait for some to close.
                        debug!(error = %e, "TCP accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if connections.len() >= MAX_TCP_CONNECTIONS {
                    debug!(%peer, "too many DNS connections; closing");
                    continue;
                }
                connections.spawn(connection(stream, peer, resolver.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One TCP client: length-prefixed queries answered in order until it closes or idles.
async fn connection(mut stream: TcpStream, peer: SocketAddr, resolver: Arc<Resolver>) {
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, stream.read_u16()).await {
            Ok(Ok(len)) => usize::from(len),
            _ => return,
        };
        let mut packet = vec![0u8; len];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut packet)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Some(reply) = resolver.answer(&packet, Transport::Tcp).await else {
            continue;
        };
        let Ok(reply_len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&reply_len.to_be_bytes());
        framed.extend_from_slice(&reply);
        match tokio::time::timeout(TCP_IDLE, stream.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => {
                debug!(%peer, "TCP reply not sent");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::records::Zone;
    use crate::dns::upstream::UPSTREAM_TIMEOUT;
    use hickory_proto::rr::rdata::A;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;
    use std::net::Ipv4Addr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// How long a test client waits before declaring the server hung (a guard, not a threshold).
    const GUARD: Duration = Duration::from_secs(20);

    fn table() -> RecordTable {
        let services: Vec<Service> = vec![
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"clusterIP": "10.96.0.20",
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
            }))
            .unwrap(),
            serde_json::from_value(json!({
                "metadata": {"name": "many", "namespace": "default"},
                "spec": {"clusterIP": "None"}
            }))
            .unwrap(),
            serde_json::from_value(json!({
                "metadata": {"name": "ext", "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "example.org."}
            }))
            .unwrap(),
        ];
        // 50 endpoints: more than 512 bytes of answers, less than 1232.
        let endpoints: Vec<serde_json::Value> = (1..=50)
            .map(|i| json!({"addresses": [format!("10.42.0.{i}")]}))
            .collect();
        let slices: Vec<EndpointSlice> = vec![serde_json::from_value(json!({
            "metadata": {"name": "many-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "many"}},
            "addressType": "IPv4",
            "endpoints": endpoints
        }))
        .unwrap()];
        RecordTable::build(
            Zone::new("cluster.local").unwrap(),
            services.iter(),
            slices.iter(),
            1,
        )
    }

    struct Running {
        addr: SocketAddr,
        resolver: Arc<Resolver>,
        _server: tokio::task::JoinHandle<()>,
        _table: watch::Sender<Arc<RecordTable>>,
    }

    async fn start(table: RecordTable, upstreams: Vec<SocketAddr>) -> Running {
        let (tx, rx) = watch::channel(Arc::new(table));
        let upstream = Upstream::new(upstreams, UPSTREAM_TIMEOUT);
        let resolver = Arc::new(Resolver::new(rx, upstream, Arc::new(DnsStats::default())));
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr();
        assert_ne!(addr.port(), 0);
        let server = tokio::spawn(listener.serve(resolver.clone()));
        Running {
            addr,
            resolver,
            _server: server,
            _table: tx,
        }
    }

    fn query(name: &str, qtype: RecordType) -> Message {
        let mut m = Message::query();
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        m
    }

    async fn udp_exchange(server: SocketAddr, packet: &[u8]) -> Vec<u8> {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.send_to(packet, server).await.unwrap();
        let mut buf = vec![0u8; 65535];
        let (n, _) = tokio::time::timeout(GUARD, sock.recv_from(&mut buf))
            .await
            .expect("no UDP reply")
            .unwrap();
        buf.truncate(n);
        buf
    }

    async fn udp(server: SocketAddr, q: &Message) -> Message {
        let reply = Message::from_vec(&udp_exchange(server, &q.to_vec().unwrap()).await).unwrap();
        assert_eq!(reply.metadata.id, q.metadata.id);
        assert_eq!(reply.metadata.message_type, MessageType::Response);
        reply
    }

    async fn tcp(server: SocketAddr, q: &Message) -> Message {
        let mut stream = TcpStream::connect(server).await.unwrap();
        let bytes = q.to_vec().unwrap();
        stream
            .write_all(&(bytes.len() as u16).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(&bytes).await.unwrap();
        let len = tokio::time::timeout(GUARD, stream.read_u16())
            .await
            .expect("no TCP reply")
            .unwrap();
        let mut buf = vec![0u8; usize::from(len)];
        stream.read_exact(&mut buf).await.unwrap();
        let reply = Message::from_vec(&buf).unwrap();
        assert_eq!(reply.metadata.id, q.metadata.id);
        reply
    }

    fn a_records(m: &Message) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = m
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }

    /// A stand-in for the node's resolver: `example.org.` A 192.0.2.7 over UDP and TCP;
    /// `big.example.org.` truncated over UDP and three addresses over TCP; NXDOMAIN otherwise.
    struct FakeUpstream {
        addr: SocketAddr,
        received: Arc<AtomicUsize>,
        _tasks: JoinSet<()>,
    }

    fn fake_reply(packet: &[u8], over_tcp: bool) -> Option<Vec<u8>> {
        let q = Message::from_vec(packet).ok()?;
        let question = q.queries.first()?.clone();
        let mut m = Message::response(q.metadata.id, OpCode::Query);
        m.metadata.recursion_available = true;
        m.add_query(question.clone());
        let name = question.name().to_ascii().to_ascii_lowercase();
        let owner = question.name().clone();
        match name.as_str() {
            "example.org." if question.query_type() == RecordType::A => {
                m.add_answer(Record::from_rdata(
                    owner,
                    60,
                    RData::A(A::new(192, 0, 2, 7)),
                ));
            }
            "big.example.org." if over_tcp => {
                for i in 1..=3 {
                    m.add_answer(Record::from_rdata(
                        owner.clone(),
                        60,
                        RData::A(A::new(192, 0, 2, i)),
                    ));
                }
            }
            "big.example.org." => m.metadata.truncation = true,
            _ => m.metadata.response_code = ResponseCode::NXDomain,
        }
        m.to_vec().ok()
    }

    async fn fake_upstream() -> FakeUpstream {
        // The UDP port the kernel picks may be taken on TCP by another test: pick again until both bind.
        let mut bound = None;
        for _ in 0..50 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let addr = udp.local_addr().unwrap();
            if let Ok(tcp) = TcpListener::bind(addr).await {
                bound = Some((udp, addr, tcp));
                break;
            }
        }
        let (udp, addr, tcp) = bound.expect("no loopback port free on both UDP and TCP");
        let received = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let count = received.clone();
        tasks.spawn(async move {
            let mut buf = vec![0u8; 65535];
            while let Ok((n, peer)) = udp.recv_from(&mut buf).await {
                count.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = fake_reply(&buf[..n], false) {
                    let _ = udp.send_to(&reply, peer).await;
                }
            }
        });
        let count = received.clone();
        tasks.spawn(async move {
            while let Ok((mut s, _)) = tcp.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(len) = s.read_u16().await else {
                    continue;
                };
                let mut buf = vec![0u8; usize::from(len)];
                if s.read_exact(&mut buf).await.is_err() {
                    continue;
                }
                if let Some(reply) = fake_reply(&buf, true) {
                    let _ = s.write_all(&(reply.len() as u16).to_be_bytes()).await;
                    let _ = s.write_all(&reply).await;
                }
            }
        });
        FakeUpstream {
            addr,
            received,
            _tasks: tasks,
        }
    }

    #[tokio::test]
    async fn answers_cluster_names_over_udp_and_tcp() {
        let srv = start(table(), vec![]).await;
        let q = query("web.default.svc.cluster.local.", RecordType::A);
        for reply in [udp(srv.addr, &q).await, tcp(srv.addr, &q).await] {
            assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
            assert!(reply.metadata.authoritative);
            assert_eq!(a_records(&reply), vec![Ipv4Addr::new(10, 96, 0, 20)]);
            assert_eq!(reply.answers[0].ttl, 5);
            assert_eq!(reply.queries, q.queries);
        }

        let q = query("nope.default.svc.cluster.local.", RecordType::A);
        let reply = udp(srv.addr, &q).await;
        assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
        assert!(reply.answers.is_empty());
        assert!(matches!(reply.authorities[0].data, RData::SOA(_)));

        let q = query("web.default.svc.cluster.local.", RecordType::AAAA);
        let reply = tcp(srv.addr, &q).await;
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert!(reply.answers.is_empty());
        assert!(matches!(reply.authorities[0].data, RData::SOA(_)));

        let q = query("_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
        let reply = udp(srv.addr, &q).await;
        assert!(matches!(&reply.answers[0].data, RData::SRV(s) if s.port == 80));
        assert_eq!(reply.additionals.len(), 1);
        assert!(
            matches!(&reply.additionals[0].data, RData::A(a) if a.0 == Ipv4Addr::new(10, 96, 0, 20))
        );

        // No upstream is configured: a cluster name never needed one.
        assert_eq!(srv.resolver.stats().forwarded.load(Ordering::Relaxed), 0);
        assert_eq!(srv.resolver.stats().nxdomain.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn large_udp_answers_are_truncated_and_complete_over_tcp() {
        let srv = start(table(), vec![]).await;
        let q = query("many.default.svc.cluster.local.", RecordType::A);
        let reply = udp(srv.addr, &q).await;
        assert!(reply.metadata.truncation);
        assert!(reply.answers.is_empty());
        assert_eq!(reply.queries, q.queries);
        let reply = tcp(srv.addr, &q).await;
        assert!(!reply.metadata.truncation);
        assert_eq!(reply.answers.len(), 50);
        // With EDNS the client takes up to 1232 bytes over UDP, which is enough here.
        let mut q = q;
        q.set_edns(Edns::new().set_max_payload(1232).clone());
        let reply = udp(srv.addr, &q).await;
        assert!(!reply.metadata.truncation);
        assert_eq!(reply.answers.len(), 50);
        assert!(reply.edns.is_some());
        assert_eq!(srv.resolver.stats().truncated.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn outside_names_are_forwarded_and_cluster_names_are_not() {
        let up = fake_upstream().await;
        let srv = start(table(), vec![up.addr]).await;
        let q = query("Example.org.", RecordType::A);
        for reply in [udp(srv.addr, &q).await, tcp(srv.addr, &q).await] {
            assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
            assert_eq!(a_records(&reply), vec![Ipv4Addr::new(192, 0, 2, 7)]);
        }
        assert_eq!(up.received.load(Ordering::SeqCst), 2);
        assert_eq!(srv.resolver.stats().forwarded.load(Ordering::Relaxed), 2);

        // A name under the cluster domain stays here even when it does not exist.
        let reply = udp(
            srv.addr,
            &query("example.org.cluster.local.", RecordType::A),
        )
        .await;
        assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(up.received.load(Ordering::SeqCst), 2);

        // The upstream's NXDOMAIN is relayed.
        let reply = udp(srv.addr, &query("nope.example.net.", RecordType::A)).await;
        assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    }

    #[tokio::test]
    async fn truncated_upstream_answers_are_retried_over_tcp() {
        let up = fake_upstream().await;
        let srv = start(table(), vec![up.addr]).await;
        let reply = udp(srv.addr, &query("big.example.org.", RecordType::A)).await;
        assert!(!reply.metadata.truncation);
        assert_eq!(
            a_records(&reply),
            vec![
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(192, 0, 2, 2),
                Ipv4Addr::new(192, 0, 2, 3)
            ]
        );
        // One UDP attempt and one TCP retry.
        assert_eq!(up.received.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn external_name_is_followed_upstream() {
        let up = fake_upstream().await;
        let srv = start(table(), vec![up.addr]).await;
        let reply = udp(
            srv.addr,
            &query("ext.default.svc.cluster.local.", RecordType::A),
        )
        .await;
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert!(
            matches!(&reply.answers[0].data, RData::CNAME(c) if c.0 == Name::from_ascii("example.org.").unwrap())
        );
        assert_eq!(a_records(&reply), vec![Ipv4Addr::new(192, 0, 2, 7)]);
        // Asked for the CNAME itself, the target is not chased.
        let reply = udp(
            srv.addr,
            &query("ext.default.svc.cluster.local.", RecordType::CNAME),
        )
        .await;
        assert_eq!(reply.answers.len(), 1);
        assert_eq!(up.received.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn unreachable_upstream_gives_servfail() {
        // A port nobody listens on: bind one and let it go.
        let dead = UdpSocket::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let srv = start(table(), vec![dead]).await;
        let reply = udp(srv.addr, &query("example.org.", RecordType::A)).await;
        assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
        let stats = srv.resolver.stats();
        assert_eq!(stats.upstream_failures.load(Ordering::Relaxed), 1);
        assert_eq!(stats.servfail.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn unsynced_table_gives_servfail_for_cluster_names() {
        let zone = Zone::new("cluster.local").unwrap();
        let srv = start(RecordTable::unsynced(zone), vec![]).await;
        let reply = udp(
            srv.addr,
            &query("web.default.svc.cluster.local.", RecordType::A),
        )
        .await;
        assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
    }

    #[tokio::test]
    async fn bad_packets_are_dropped_or_formerr() {
        let srv = start(table(), vec![]).await;
        let r = &srv.resolver;
        // Too short for a header: dropped.
        assert_eq!(r.answer(&[1, 2, 3], Transport::Udp).await, None);
        // A header announcing a question that is not there: FORMERR with the same ID.
        let mut header = [0u8; 12];
        header[..2].copy_from_slice(&0xbeefu16.to_be_bytes());
        header[2] = 0x01; // RD
        header[5] = 1; // QDCOUNT = 1
        let reply = r.answer(&header, Transport::Udp).await.unwrap();
        assert_eq!(&reply[..2], &[0xbe, 0xef]);
        assert_eq!(reply[2] & 0x80, 0x80);
        assert_eq!(reply[3] & 0x0f, 1);
        // A response sent to us is never answered.
        let mut resp = query("web.default.svc.cluster.local.", RecordType::A);
        resp.metadata.message_type = MessageType::Response;
        assert_eq!(
            r.answer(&resp.to_vec().unwrap(), Transport::Udp).await,
            None
        );
        header[2] |= 0x80;
        assert_eq!(r.answer(&header, Transport::Udp).await, None);
        // Two questions: FORMERR.
        let mut two = query("web.default.svc.cluster.local.", RecordType::A);
        two.add_query(Query::query(Name::from_ascii("x.").unwrap(), RecordType::A));
        let reply = Message::from_vec(
            &r.answer(&two.to_vec().unwrap(), Transport::Udp)
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
        // Another opcode: NOTIMP.
        let mut notify = query("web.default.svc.cluster.local.", RecordType::A);
        notify.metadata.op_code = OpCode::Notify;
        let reply = Message::from_vec(
            &r.answer(&notify.to_vec().unwrap(), Transport::Udp)
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::NotImp);
        // Random bytes of every length never panic.
        let mut seed = 0x2545f491u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            let _ = r.answer(&bytes, Transport::Udp).await;
        }

        // Garbage over the sockets leaves the server serving.
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.send_to(&[0xff; 7], srv.addr).await.unwrap();
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(&[0, 3, 1, 2, 3]).await.unwrap();
        drop(s);
        let q = query("web.default.svc.cluster.local.", RecordType::A);
        assert_eq!(
            a_records(&udp(srv.addr, &q).await),
            vec![Ipv4Addr::new(10, 96, 0, 20)]
        );
        assert_eq!(
            a_records(&tcp(srv.addr, &q).await),
            vec![Ipv4Addr::new(10, 96, 0, 20)]
        );
    }

    #[test]
    fn shuffled_answers_keep_cnames_first_and_every_address() {
        let owner = Name::from_ascii("ext.default.svc.cluster.local.").unwrap();
        let target = Name::from_ascii("example.org.").unwrap();
        let mut answers = vec![Record::from_rdata(
            owner,
            5,
            RData::CNAME(CNAME(target.clone())),
        )];
        for i in 1..=20 {
            answers.push(Record::from_rdata(
                target.clone(),
                5,
                RData::A(A::new(192, 0, 2, i)),
            ));
        }
        let mut m = Message::response(1, OpCode::Query);
        m.add_answers(shuffle_addresses(answers));
        assert!(matches!(m.answers[0].data, RData::CNAME(_)));
        let want: Vec<Ipv4Addr> = (1..=20).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect();
        assert_eq!(a_records(&m), want);
    }

    #[tokio::test]
    async fn tcp_connection_answers_several_queries() {
        let srv = start(table(), vec![]).await;
        let mut stream = TcpStream::connect(srv.addr).await.unwrap();
        for name in [
            "web.default.svc.cluster.local.",
            "nope.default.svc.cluster.local.",
        ] {
            let q = query(name, RecordType::A);
            let bytes = q.to_vec().unwrap();
            stream
                .write_all(&(bytes.len() as u16).to_be_bytes())
                .await
                .unwrap();
            stream.write_all(&bytes).await.unwrap();
        }
        let mut codes = Vec::new();
        for _ in 0..2 {
            let len = tokio::time::timeout(GUARD, stream.read_u16())
                .await
                .unwrap()
                .unwrap();
            let mut buf = vec![0u8; usize::from(len)];
            stream.read_exact(&mut buf).await.unwrap();
            codes.push(Message::from_vec(&buf).unwrap().metadata.response_code);
        }
        assert_eq!(codes, vec![ResponseCode::NoError, ResponseCode::NXDomain]);
    }
}
