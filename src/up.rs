//! `keel up`: a local cluster on loopback, one `keel server` process per member on 127.0.0.11,
//! .12, ... with the usual ports, and a worker on this machine (a private containerd and `keel agent`,
//! [`crate::worker`]) unless `--no-worker`; data under one directory; Ctrl-C stops and removes it all.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::UpArgs;
use crate::server::ServerError;

struct Member {
    name: String,
    ip: String,
    child: Child,
}

impl Member {
    fn client_url(&self) -> String {
        format!("http://{}:2379", self.ip)
    }
}

/// Starts the members, waits until they serve, then until Ctrl-C or a member exits.
pub(crate) async fn run(args: UpArgs) -> Result<(), ServerError> {
    let n = args.members as usize;
    if !args.no_worker {
        crate::worker::preflight()?;
    }
    let exe = std::env::current_exe()
        .map_err(|e| ServerError::Config(format!("cannot find the keel binary: {e}")))?;
    let ips: Vec<String> = (0..n).map(|i| format!("127.0.0.{}", 11 + i)).collect();
    let initial: Vec<String> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| format!("m{}=http://{ip}:2380", i + 1))
        .collect();
    let initial = initial.join(",");
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| ServerError::Config(format!("{}: {e}", args.data_dir.display())))?;
    // containerd's config needs absolute paths.
    let mut args = args;
    args.data_dir = std::fs::canonicalize(&args.data_dir)
        .map_err(|e| ServerError::Config(format!("{}: {e}", args.data_dir.display())))?;
    let started = Instant::now();
    eprintln!(
        "keel up: starting {n} member(s), data in {}",
        args.data_dir.display()
    );
    // Secrets are encrypted at rest with one key every local member shares (kept across runs).
    let encryption = args.data_dir.join("encryption-config.yaml");
    if !encryption.exists() {
        let config = keel_kube_api::encryption::generate_config()
            .map_err(|e| ServerError::Config(e.to_string()))?;
        std::fs::create_dir_all(&args.data_dir)
            .and_then(|()| std::fs::write(&encryption, config))
            .and_then(|()| {
                std::fs::set_permissions(
                    &encryption,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
            })
            .map_err(|e| ServerError::Config(format!("{}: {e}", encryption.display())))?;
    }
    let mut members: Vec<Member> = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let name = format!("m{}", i + 1);
        let data = args.data_dir.join(&name);
        let log = std::fs::File::create(args.data_dir.join(format!("{name}.log")))
            .map_err(|e| ServerError::Config(format!("log file: {e}")))?;
        let client = format!("http://{ip}:2379");
        let peer = format!("http://{ip}:2380");
        let kube = format!("https://{ip}:6443");
        let child = Command::new(&exe)
            .arg("server")
            .args(["--name", &name, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--kube-listen", &kube])
            .arg("--encryption-provider-config")
            .arg(&encryption)
            .args(["--log-level", &args.log_level])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn();
        match child {
            Ok(child) => {
                eprintln!(
                    "keel up: [{}/{n}] {name} on {ip} (log: {}/{name}.log)",
                    i + 1,
                    args.data_dir.display()
                );
                members.push(Member {
                    name,
                    ip: ip.clone(),
                    child,
                });
            }
            Err(e) => {
                stop_all(&mut members);
                return Err(ServerError::Config(format!("cannot start {name}: {e}")));
            }
        }
    }
    for m in &mut members {
        if let Err(e) = wait_serving(m).await {
            stop_all(&mut members);
            return Err(e);
        }
    }
    let kubeconfig = args.data_dir.join("m1").join("admin.kubeconfig");
    if let Err(e) = wait_kubeconfig(&kubeconfig, &mut members).await {
        stop_all(&mut members);
        return Err(e);
    }
    let kubeconfig = std::fs::canonicalize(&kubeconfig).unwrap_or(kubeconfig);
    let endpoints: Vec<String> = members.iter().map(Member::client_url).collect();
    let mut worker = None;
    if !args.no_worker {
        eprintln!("keel up: starting the worker (containerd and keel agent) on this machine");
        // The agent gets its own node identity (the Node authorizer and NodeRestriction then apply).
        let node_kubeconfig = args.data_dir.join("worker-node.kubeconfig");
        let minted = crate::server::mint_kubeconfig(
            &args.data_dir.join("m1"),
            &format!("system:node:{}", crate::worker::host_name()),
            &["system:nodes".to_string()],
            None,
        )
        .and_then(|text| {
            std::fs::write(&node_kubeconfig, text)
                .and_then(|()| {
                    std::fs::set_permissions(
                        &node_kubeconfig,
                        std::os::unix::fs::PermissionsExt::from_mode(0o600),
                    )
                })
                .map_err(|e| ServerError::Config(format!("{}: {e}", node_kubeconfig.display())))
        });
        if let Err(e) = minted {
            stop_all(&mut members);
            return Err(e);
        }
        match crate::worker::LocalWorker::start(
            &exe,
            &args.data_dir,
            &node_kubeconfig,
            &args.log_level,
            &args.dns_upstream,
            args.registries.as_deref(),
        )
        .await
        {
            Ok(w) => worker = Some(w),
            Err(e) => {
                stop_all(&mut members);
                return Err(e);
            }
        }
        if let Some(w) = worker.as_mut() {
            if let Err(e) = wait_node_ready(&kubeconfig, w).await {
                w.stop().await;
                stop_all(&mut members);
                return Err(e);
            }
            eprintln!(
                "keel up: node {} Ready at {} (logs: {}/agent.log, {}/containerd.log)",
                w.node(),
                crate::worker::NODE_IP,
                w.dir().display(),
                w.dir().display()
            );
        }
    }
    let pods = if worker.is_some() {
        format!(
            "  kubectl get nodes -o wide
  kubectl create deployment web --image=localhost/busybox:latest --replicas=3 -- httpd -f -p 8080
  kubectl get pods -o wide
  kubectl get events --sort-by=.metadata.creationTimestamp
  kubectl exec deploy/web -- wget -qO- localhost:8080/etc/hostname
  kubectl logs deploy/web && kubectl top pod
  kubectl expose deployment web --port=80 --target-port=8080 --type=NodePort
  kubectl run client --rm -i --restart=Never --image=localhost/busybox:latest -- wget -qO- http://web/etc/hostname
  curl http://{ip}:$(kubectl get service web -o jsonpath='{{.spec.ports[0].nodePort}}')/etc/hostname

The worker node's address is {ip} (on its pod bridge): pods resolve Services through the cluster DNS
(10.96.0.10), and NodePorts answer on {ip} from this machine.
ingress: http://{ip}:80 (the built-in controller, class keel, the default), e.g.
  kubectl create ingress web --rule='web.test/*=web:80'
  curl -H 'Host: web.test' http://{ip}/etc/hostname
",
            ip = crate::worker::NODE_IP
        )
    } else {
        "  kubectl create deployment web --image=localhost/busybox:latest --replicas=2
  (no worker: --no-worker was given, so pods stay Pending)
"
        .to_string()
    };
    eprintln!(
        "keel up: {n} member(s) serving in {} ms\n\n  export ETCDCTL_API=3 ETCDCTL_ENDPOINTS={}\n  etcdctl endpoint status -w table\n  etcdctl member list -w table\n  etcdctl put hello world && etcdctl get hello\n\n  export KUBECONFIG={}\n  kubectl get namespaces\n{pods}\nEvery member serves the Kubernetes API on https://<its address>:6443 (each member's data dir has an admin.kubeconfig).\nPress Ctrl-C to stop (the worker's pods, containerd and network are removed too).",
        started.elapsed().as_millis(),
        endpoints.join(","),
        kubeconfig.display()
    );
    let res = watch_members(&mut members, worker.as_mut()).await;
    if let Some(w) = worker.as_mut() {
        eprintln!("keel up: stopping the worker");
        w.stop().await;
    }
    stop_all(&mut members);
    res
}

/// Waits until the worker's Node is Ready (bounded), through the API like any client.
async fn wait_node_ready(
    kubeconfig: &std::path::Path,
    w: &mut crate::worker::LocalWorker,
) -> Result<(), ServerError> {
    let config = crate::control::load_kubeconfig(kubeconfig).await?;
    let client = kube::Client::try_from(config)
        .map_err(|e| ServerError::Config(format!("cannot make a client: {e}")))?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        w.check()?;
        if let Ok(Some(n)) = nodes.get_opt(w.node()).await {
            let ready = n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(ServerError::Config(format!(
                "node {} was not Ready within 120 s; see {}/agent.log",
                w.node(),
                w.dir().display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the first member has written its admin kubeconfig (bounded).
async fn wait_kubeconfig(
    path: &std::path::Path,
    members: &mut [Member],
) -> Result<(), ServerError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        for m in members.iter_mut() {
            if let Ok(Some(st)) = m.child.try_wait() {
                return Err(ServerError::Config(format!(
                    "{} exited during start ({st}); see its log",
                    m.name
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(ServerError::Config(format!(
                "{} did not appear within 60 s; see the members' logs",
                path.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits until a member accepts connections on its client port (bounded).
async fn wait_serving(m: &mut Member) -> Result<(), ServerError> {
    let addr = format!("{}:2379", m.ip);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(st)) = m.child.try_wait() {
            return Err(ServerError::Config(format!(
                "{} exited during start ({st}); see its log",
                m.name
            )));
        }
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ServerError::Config(format!(
                "{} did not start serving within 30 s",
                m.name
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Returns on Ctrl-C/SIGTERM, or with an error when a member (or the worker) exits by itself.
async fn watch_members(
    members: &mut [Member],
    mut worker: Option<&mut crate::worker::LocalWorker>,
) -> Result<(), ServerError> {
    let signal = crate::server::terminated();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            r = &mut signal => {
                eprintln!("keel up: stopping");
                return r.map_err(ServerError::Signal);
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                for m in members.iter_mut() {
                    if let Ok(Some(st)) = m.child.try_wait() {
                        return Err(ServerError::Config(format!("{} exited ({st}); see its log", m.name)));
                    }
                }
                if let Some(w) = worker.as_mut() {
                    w.check()?;
                }
            }
        }
    }
}

/// SIGTERM every member, then SIGKILL what is still running after a grace period.
fn stop_all(members: &mut [Member]) {
    for m in members.iter() {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(m.child.id() as i32, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for m in members.iter_mut() {
        while Instant::now() < deadline {
            if let Ok(Some(_)) = m.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = m.child.kill();
        let _ = m.child.wait();
    }
}
