//! Container probes as the kubelet runs them: startup, liveness and readiness, each with its handler
//! (`exec` through CRI's ExecSync, `httpGet` over HTTP or HTTPS to the pod IP with 200–399 as success
//! ([`super::http_probe`]), `tcpSocket`, `grpc`
//! with the standard health service), `initialDelaySeconds`, `periodSeconds`, `timeoutSeconds` and the
//! success and failure thresholds (defaults 0, 10, 1, 1, 3).
//!
//! Semantics kept: a startup probe, until it succeeds, holds the other two back and the container is
//! not `started`; a container with a readiness probe is unready until the probe passes; one without
//! is ready once it runs (and has started); startup or liveness failing `failureThreshold` times in a
//! row means the container is killed and restarted under the pod's restart policy. State is per
//! container instance: a restarted container starts over.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::http_probe::{self, join_host_port, Scheme};
use crate::cri::Cri;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `startupProbe`.
    Startup,
    /// `livenessProbe`.
    Liveness,
    /// `readinessProbe`.
    Readiness,
}

impl Kind {
    /// The word upstream's messages use (`Liveness probe failed: …`).
    pub fn word(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => c.startup_probe.as_ref(),
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
        }
    }
}

#[derive(Debug, Clone)]
struct State {
    container_id: String,
    next: Instant,
    successes: i32,
    failures: i32,
    /// The probe's standing result (after its thresholds).
    ok: Option<bool>,
}

/// What one round of probing asks the worker to do.
#[derive(Debug, Default)]
pub struct Round {
    /// Warning events to record: (reason, message).
    pub events: Vec<(String, String)>,
    /// Kill the container (and why): startup or liveness gave up on it.
    pub kill: Option<String>,
    /// When the next probe of this container is due.
    pub next: Option<Duration>,
}

/// Where probes go.
pub struct Target<'a> {
    /// The runtime, for exec probes.
    pub cri: &'a Cri,
    /// The container's CRI id.
    pub container_id: &'a str,
    /// The pod's IP (the default host of httpGet, tcpSocket and grpc).
    pub pod_ip: &'a str,
}

/// Probe state of one pod's containers.
#[derive(Debug, Default)]
pub struct Probes {
    states: HashMap<(String, Kind), State>,
}

fn params(p: &Probe) -> (Duration, Duration, Duration, i32, i32) {
    let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
    (
        secs(p.initial_delay_seconds, 0),
        secs(p.period_seconds, 10).max(Duration::from_secs(1)),
        secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
        p.success_threshold.unwrap_or(1).max(1),
        p.failure_threshold.unwrap_or(3).max(1),
    )
}

impl Probes {
    fn state(&self, name: &str, kind: Kind, id: &str) -> Option<&State> {
        self.states
            .get(&(name.to_string(), kind))
            .filter(|s| s.container_id == id)
    }

    /// Whether the container instance `id` has started (no startup probe, or it passed).
    pub fn started(&self, c: &Container, id: &str) -> bool {
        c.startup_probe.is_none()
            || self.state(&c.name, Kind::Startup, id).and_then(|s| s.ok) == Some(true)
    }

    /// Whether the container instance `id` (running) is ready.
    pub fn ready(&self, c: &Container, id: &str) -> bool {
        if !self.started(c, id) {
            return false;
        }
        c.readiness_probe.is_none()
            || self.state(&c.name, Kind::Readiness, id).and_then(|s| s.ok) == Some(true)
    }

    /// Forgets containers no longer in the pod.
    pub fn retain(&mut self, names: &[&str]) {
        self.states.retain(|(n, _), _| names.contains(&n.as_str()));
    }

    /// Runs the probes of running container `c` that are due at `now` (started at `started`).
    pub async fn run_due(
        &mut self,
        c: &Container,
        t: &Target<'_>,
        started: Instant,
        now: Instant,
    ) -> Round {
        let mut round = Round::default();
        for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
            let Some(probe) = kind.of(c) else { continue };
            if kind != Kind::Startup && !self.started(c, t.container_id) {
                continue;
            }
            let (delay, period, timeout, success_threshold, failure_threshold) = params(probe);
            let key = (c.name.clone(), kind);
            let st = self.states.entry(key).or_insert_with(|| State {
                container_id: String::new(),
                next: now,
                successes: 0,
                failures: 0,
                ok: None,
            });
            if st.container_id != t.container_id {
                *st = State {
                    container_id: t.container_id.to_string(),
                    next: started + delay,
                    successes: 0,
                    failures: 0,
                    ok: None,
                };
            }
            if kind == Kind::Startup && st.ok == Some(true) {
                continue;
            }
            if st.next > now {
                let wait = st.next - now;
                round.next = Some(round.next.map_or(wait, |n| n.min(wait)));
                continue;
            }
            let result = check(probe, c, t, timeout).await;
            st.next = now + period;
            round.next = Some(round.next.map_or(period, |n| n.min(period)));
            match result {
                Ok(()) => {
                    st.failures = 0;
                    st.successes += 1;
                    if st.successes >= success_threshold {
                        st.ok = Some(true);
                    }
                }
                Err(msg) => {
                    st.successes = 0;
                    st.failures += 1;
                    round.events.push((
                        "Unhealthy".into(),
                        format!("{} probe failed: {msg}", kind.word()),
                    ));
                    if st.failures >= failure_threshold {
                        st.ok = Some(false);
                        match kind {
                            Kind::Liveness => {
                                round.kill = Some(format!(
                                    "Container {} failed liveness probe, will be restarted",
                                    c.name
                                ));
                            }
                            Kind::Startup => {
                                round.kill = Some(format!(
                                    "Container {} failed startup probe, will be restarted",
                                    c.name
                                ));
                            }
                            Kind::Readiness => {}
                        }
                    }
                }
            }
            if round.kill.is_some() {
                break;
            }
        }
        round
    }
}

fn port_of(port: &IntOrString, c: &Container) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .or_else(|| name.parse().ok())
            .ok_or_else(|| format!("port {name:?} is not a named port of the container"))?,
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port {n}"))
}

/// One probe attempt: Ok, or the message upstream would put after "probe failed: ".
async fn check(p: &Probe, c: &Container, t: &Target<'_>, timeout: Duration) -> Result<(), String> {
    if let Some(e) = &p.exec {
        let cmd = e.command.clone().unwrap_or_default();
        return match t.cri.exec_sync(t.container_id, cmd, timeout).await {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => {
                let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
                out.push_str(&String::from_utf8_lossy(&r.stderr));
                Err(if out.trim().is_empty() {
                    format!(
                        "command {:?} exited with {}",
                        e.command.clone().unwrap_or_default().join(" "),
                        r.exit_code
                    )
                } else {
                    out.trim_end().to_string()
                })
            }
            Err(e) => Err(e.runtime_message()),
        };
    }
    if let Some(h) = &p.http_get {
        let port = port_of(&h.port, c)?;
        let host = h
            .host
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| t.pod_ip.to_string());
        let scheme = if h.scheme.as_deref() == Some("HTTPS") {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let path = h
            .path
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = h
            .http_headers
            .iter()
            .flatten()
            .map(|hh| (hh.name.clone(), hh.value.clone()))
            .collect();
        let url = format!("{}://{}{path}", scheme.word(), join_host_port(&host, port));
        let got = http_probe::get(scheme, &host, port, &path, &headers);
        return match tokio::time::timeout(timeout, got).await {
            Ok(Ok(code)) if (200..400).contains(&code) => Ok(()),
            Ok(Ok(code)) => Err(format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(e)) => Err(format!("Get \"{url}\": {e}")),
            Err(_) => Err(format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if let Some(s) = &p.tcp_socket {
        let port = port_of(&s.port, c)?;
        let host = s
            .host
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| t.pod_ip.to_string());
        let addr = join_host_port(&host, port);
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {addr}: connect: {}", short_io(&e))),
            Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if let Some(g) = &p.grpc {
        let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
        let addr = join_host_port(t.pod_ip, port);
        let service = g.service.clone().unwrap_or_default();
        return match tokio::time::timeout(timeout, super::grpc_health::check(&addr, &service)).await
        {
            Ok(r) => r,
            Err(_) => Err(format!(
                "timeout: health rpc did not complete within {timeout:?}"
            )),
        };
    }
    Err("probe has no handler".into())
}

fn short_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

/// GET `path` over plain HTTP/1.1 (same-host redirects followed); the status code.
pub(crate) async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<u16> {
    http_probe::get(Scheme::Http, host, port, path, headers)
        .await
        .map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn named_ports_resolve() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("web".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(port_of(&IntOrString::String("web".into()), &c), Ok(8080));
        assert_eq!(port_of(&IntOrString::Int(81), &c), Ok(81));
        assert!(port_of(&IntOrString::String("nope".into()), &c).is_err());
        assert!(port_of(&IntOrString::Int(0), &c).is_err());
    }

    #[tokio::test]
    async fn http_status_codes_are_read() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = l.local_addr().map(|a| a.port()).unwrap_or_default();
        tokio::spawn(async move {
            for code in [200, 503] {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut b = [0u8; 512];
                let _ = s.read(&mut b).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        assert_eq!(http_get("127.0.0.1", port, "/", &[]).await.ok(), Some(200));
        assert_eq!(http_get("127.0.0.1", port, "/", &[]).await.ok(), Some(503));
    }
}
