//! Command-line interface. Server flags mirror etcd's where users already know them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// keel: a Kubernetes control plane with its etcd-compatible datastore built in.
#[derive(Debug, Parser)]
#[command(name = "keel", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one member (the etcd v3 API on its client URLs).
    Server(Box<ServerArgs>),
    /// Start a local cluster on loopback, ready for etcdctl; Ctrl-C stops it.
    Up(UpArgs),
    /// Run the controller manager against any API server (it leads through the kube-system Lease).
    Controllers(ControllersArgs),
    /// Run the scheduler against any API server (it leads through the kube-system Lease).
    Scheduler(SchedulerArgs),
    /// Run a node agent: register this machine as a Node and run the pods bound to it through containerd's CRI.
    Agent(Box<AgentArgs>),
    /// Write the built-in OCI image archives (busybox and the pause image) for `keel agent --image-dir`,
    /// or push them into a registry (a site mirror).
    Images(ImagesArgs),
    /// Save or restore etcd-format snapshots (the files `etcdctl snapshot` reads and writes).
    Snapshot(SnapshotArgs),
    /// Renew a member's serving certificate now, or show when its certificates end.
    Certificate(CertificateArgs),
    /// Create, list or revoke the tokens servers and agents join the cluster with.
    Token(TokenArgs),
    /// After a quorum loss: turn this stopped member's data directory into a new one-member cluster with
    /// everything it knew committed (etcd's --force-new-cluster); the old directory is kept aside.
    Recover(RecoverArgs),
    /// Write a kubeconfig for a user, with a client certificate signed by the cluster CA of a member's data
    /// dir (e.g. `--user system:node:w1 --group system:nodes` for an agent).
    Kubeconfig(KubeconfigArgs),
    /// Print the environment etcdctl needs to reach this member's etcd client port (endpoints, CA,
    /// client certificate); `eval "$(keel etcdctl-env --data-dir D)"`.
    EtcdctlEnv(EtcdctlEnvArgs),
    /// Show every member of a running cluster: leader, Raft term and indexes, lag, DB size; with
    /// --data-dir also the age of that member's newest Raft snapshot and its certificates' expiry.
    Status(StatusArgs),
}

/// Flags of `keel server`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ServerArgs {
    /// Human-readable name of this member.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Directory for the WAL, snapshots and store.
    #[arg(long, default_value = "default.keel")]
    pub data_dir: PathBuf,
    /// Comma-separated URLs to serve clients on (default `http://127.0.0.1:2379`; `https://` for a
    /// member made with --init or --join).
    #[arg(long, value_delimiter = ',')]
    pub listen_client_urls: Vec<String>,
    /// Comma-separated client URLs to advertise to the cluster (default: as the listen client URLs'
    /// default).
    #[arg(long, value_delimiter = ',')]
    pub advertise_client_urls: Vec<String>,
    /// Certificate (PEM) served on `https://` client URLs (etcd's `--cert-file`).
    #[arg(long)]
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of `--cert-file`.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// CA (PEM) that signs client certificates, checked with `--client-cert-auth`.
    #[arg(long)]
    pub trusted_ca_file: Option<PathBuf>,
    /// Require clients on `https://` client URLs to present a certificate signed by `--trusted-ca-file`.
    #[arg(long)]
    pub client_cert_auth: bool,
    /// Certificate (PEM) this member serves on `https://` peer URLs and presents as client certificate
    /// when it dials `https://` peers (etcd's `--peer-cert-file`; issue it for serverAuth and clientAuth).
    #[arg(long)]
    pub peer_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `--peer-cert-file`.
    #[arg(long)]
    pub peer_key_file: Option<PathBuf>,
    /// CA (PEM) that signs the other members' peer certificates: peers are verified against it.
    #[arg(long)]
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// Refuse peers on `https://` peer URLs that show no certificate signed by `--peer-trusted-ca-file`.
    #[arg(long)]
    pub peer_client_cert_auth: bool,
    /// Comma-separated URLs to listen on for peer traffic (default `http://127.0.0.1:2380`; `https://`
    /// with peer TLS for a member made with --init or --join).
    #[arg(long, value_delimiter = ',')]
    pub listen_peer_urls: Vec<String>,
    /// Comma-separated peer URLs to advertise to the cluster.
    #[arg(long, value_delimiter = ',')]
    pub initial_advertise_peer_urls: Vec<String>,
    /// Make a new cluster and write its join tokens to `<data-dir>/server-token` and `<data-dir>/agent-token`.
    #[arg(long, conflicts_with = "join")]
    pub init: bool,
    /// Join the cluster whose Kubernetes API is at this URL (`https://<member>:6443`), with --token.
    #[arg(long, requires = "token")]
    pub join: Option<String>,
    /// A server join token (`keel token create`, or `<data-dir>/server-token` of the first member).
    #[arg(long, env = "KEEL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Initial cluster for bootstrapping: `name=http://host:port,...` (default: this member alone).
    #[arg(long, default_value = "")]
    pub initial_cluster: String,
    /// `new` to bootstrap the initial cluster, `existing` to join a cluster that added this member.
    #[arg(long, default_value = "new", value_parser = ["new", "existing"])]
    pub initial_cluster_state: String,
    /// Token that identifies the cluster; members and cluster IDs derive from it.
    #[arg(long, default_value = "keel-cluster")]
    pub initial_cluster_token: String,
    /// Leader heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub heartbeat_interval: u64,
    /// Election timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub election_timeout: u64,
    /// Applied entries between Raft snapshots.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_count: u64,
    /// Interval of periodic watch progress notifications (e.g. 10m, 5s, 100ms).
    #[arg(long = "experimental-watch-progress-notify-interval", default_value = "10m", value_parser = parse_duration)]
    pub progress_notify_interval: std::time::Duration,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
    /// Serve the Kubernetes API over HTTPS at this URL (e.g. `https://127.0.0.11:6443`). Default: port 6443
    /// on the host of the first `--listen-client-urls` URL; `""` = not served. The cluster PKI and
    /// `<data-dir>/admin.kubeconfig` are made at first start.
    #[arg(long)]
    pub kube_listen: Option<String>,
    /// URL clients use to reach this member's Kubernetes API (default: `--kube-listen`).
    #[arg(long, default_value = "")]
    pub kube_advertise_url: String,
    /// Extra host names or IPs for the API serving certificate (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub kube_extra_sans: Vec<String>,
    /// Static bearer tokens, kube-apiserver's format: `token,user,uid[,"group1,group2"]` per line.
    #[arg(long)]
    pub token_auth_file: Option<std::path::PathBuf>,
    /// Encrypt resources at rest, kube-apiserver's EncryptionConfiguration file (providers `aesgcm` and
    /// `identity`). Every member needs the same file. See docs/security.md.
    #[arg(long)]
    pub encryption_provider_config: Option<std::path::PathBuf>,
    /// Append an audit event (JSON line, audit.k8s.io/v1) for each request the audit policy selects.
    #[arg(long)]
    pub audit_log_path: Option<std::path::PathBuf>,
    /// The audit policy (audit.k8s.io/v1 Policy); without one, writes and refused requests are logged.
    #[arg(long)]
    pub audit_policy_file: Option<std::path::PathBuf>,
    /// etcd's auto-compaction mode: `periodic` (retention is a duration, or a bare number of hours) or `revision`
    /// (retention is a number of revisions to keep). Runs on the Raft leader.
    #[arg(long, default_value = "periodic", value_parser = ["periodic", "revision"])]
    pub auto_compaction_mode: String,
    /// etcd's auto-compaction retention; 0 (the default) turns auto-compaction off.
    #[arg(long, default_value = "0")]
    pub auto_compaction_retention: String,
    /// Test hook: how often revision-mode auto-compaction checks the revision (etcd: fixed 5 minutes).
    #[arg(long, hide = true, default_value = "5m", value_parser = parse_duration)]
    pub auto_compaction_revision_check_interval: std::time::Duration,
    /// Space quota of the store in bytes (etcd's flag): 0 = the default 2 GiB, negative = no quota. A write that
    /// would take the store past it raises the NOSPACE alarm (see docs/operations.md).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub quota_backend_bytes: i64,
    /// Seconds a simple auth token lives after its last use (etcd's flag, default 300).
    #[arg(long, default_value_t = 300)]
    pub auth_token_ttl: u64,
    /// kube-apiserver's periodic compaction of history (its `--etcd-compaction-interval`), run by the Raft leader
    /// while the Kubernetes API is served; 0 turns it off.
    #[arg(long, alias = "etcd-compaction-interval", default_value = "5m", value_parser = parse_duration)]
    pub kube_compaction_interval: std::time::Duration,
    /// When this member snapshots its store into `--snapshot-dir`: cron syntax, five fields (minute hour
    /// day-of-month month weekday, UTC) or six with seconds first. k3s's default: every 12 hours.
    #[arg(long, alias = "etcd-snapshot-schedule-cron", default_value = crate::snapshot::schedule::DEFAULT_SCHEDULE)]
    pub snapshot_schedule: String,
    /// How many scheduled snapshots to keep (the oldest beyond this are removed; on-demand ones are kept).
    #[arg(long, alias = "etcd-snapshot-retention", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub snapshot_retention: u32,
    /// Where scheduled snapshots go (default `<data-dir>/snapshots`).
    #[arg(long, alias = "etcd-snapshot-dir")]
    pub snapshot_dir: Option<PathBuf>,
    /// Test hook: days the member's serving certificate lives (default a year).
    #[arg(long, hide = true, default_value_t = keel_kube_api::pki::LEAF_DAYS)]
    pub leaf_cert_days: u32,
    /// Take no scheduled snapshots.
    #[arg(long, alias = "etcd-disable-snapshots")]
    pub disable_snapshots: bool,
    /// kube-apiserver's `--event-ttl`: Events expire this long after their last write (through a lease, so
    /// controllers and agents cannot grow the store without bound); 0 keeps them forever.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub event_ttl: std::time::Duration,
    /// UNSAFE, never use in production: serve linearizable reads from this member's local state without
    /// confirming leadership (ReadIndex), so a partitioned member returns stale data. Exists only so that the
    /// Jepsen tests (jepsen-tests/) can show their checker catches stale reads.
    #[arg(long, hide = true)]
    pub unsafe_serve_linearizable_reads_locally: bool,
    /// UNSAFE, for tests only: a member that forwards a write to the leader answers its client as soon as the
    /// leader does, before applying the write itself, so a serializable read from the same member may miss it.
    /// Exists only so that the Jepsen tests can show their read-your-writes checker catches it.
    #[arg(long, hide = true)]
    pub unsafe_answer_forwarded_writes_early: bool,
    /// Do not run the controller manager on this member when it leads (k3s's flag; run `keel controllers`
    /// elsewhere instead).
    #[arg(long)]
    pub disable_controller_manager: bool,
    /// Controllers to run, as kube-controller-manager's `--controllers`: `*` for all, `name` to add, `-name`
    /// to leave one out.
    #[arg(long, default_value = "*")]
    pub controllers: String,
    /// How long a node may go without a heartbeat (Lease or status) before the node-lifecycle controller
    /// marks its conditions Unknown (kube-controller-manager's `--node-monitor-grace-period`).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    /// Do not run the scheduler on this member when it leads (k3s's flag; run `keel scheduler`
    /// elsewhere instead).
    #[arg(long)]
    pub disable_scheduler: bool,
    #[command(flatten)]
    pub network: NetworkControllerArgs,
}

/// The network controllers' flags (node-ipam and ServiceLB), in `keel server` and `keel controllers`.
#[derive(Debug, Args, Clone)]
pub(crate) struct NetworkControllerArgs {
    /// The pod network node-ipam cuts into per-node ranges (kube-controller-manager's `--cluster-cidr`;
    /// IPv4 only).
    #[arg(long, default_value = keel_controllers::nodeipam::allocator::DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: keel_controllers::nodeipam::Ipv4Cidr,
    /// The prefix length of each node's range (kube-controller-manager's `--node-cidr-mask-size`).
    #[arg(long, default_value_t = keel_controllers::nodeipam::allocator::DEFAULT_NODE_MASK)]
    pub node_cidr_mask_size: u8,
    /// Give every Node without `spec.podCIDR` a free range of `--cluster-cidr` (on by default, as in k3s;
    /// `--allocate-node-cidrs=false` leaves pod CIDRs to the agents' `--pod-cidr`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allocate_node_cidrs: bool,
    /// Do not write the status of LoadBalancer Services from the nodes' addresses (k3s's
    /// `--disable servicelb`), e.g. to use another load-balancer implementation.
    #[arg(long)]
    pub disable_servicelb: bool,
}

impl NetworkControllerArgs {
    /// The ranges node-ipam hands out (`None` when it hands out none), or why the flags do not fit.
    pub(crate) fn node_cidrs(
        &self,
    ) -> Result<Option<keel_controllers::nodeipam::Allocator>, String> {
        if !self.allocate_node_cidrs {
            return Ok(None);
        }
        keel_controllers::nodeipam::Allocator::new(self.cluster_cidr, self.node_cidr_mask_size)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// Flags of `keel controllers`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ControllersArgs {
    /// Kubeconfig of the API server to manage.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Identity in the `kube-system/kube-controller-manager` Lease (default: host name and a random suffix).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Controllers to run: `*` for all, `name` to add, `-name` to leave one out.
    #[arg(long, default_value = "*")]
    pub controllers: String,
    /// How long a node may go without a heartbeat (Lease or status) before the node-lifecycle controller
    /// marks its conditions Unknown (kube-controller-manager's `--node-monitor-grace-period`).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    #[command(flatten)]
    pub network: NetworkControllerArgs,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
}

/// Flags of `keel scheduler`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SchedulerArgs {
    /// Kubeconfig of the API server whose pods to schedule.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Identity in the `kube-system/kube-scheduler` Lease (default: host name and a random suffix).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
}

/// Flags of `keel agent`.
#[derive(Debug, Args, Clone)]
pub(crate) struct AgentArgs {
    /// Join the cluster whose Kubernetes API is at this URL with an agent --token: the agent gets its node
    /// identity's kubeconfig (kept as `<root-dir>/kubeconfig`, or --kubeconfig) and runs with it.
    #[arg(long, requires = "token")]
    pub join: Option<String>,
    /// An agent join token (`keel token create --agent`, or `<data-dir>/agent-token` of the first member).
    #[arg(long, env = "KEEL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Kubeconfig of the API server (required unless --remove-all-pods or --join).
    #[arg(long, required_unless_present_any = ["remove_all_pods", "cleanup", "join"])]
    pub kubeconfig: Option<PathBuf>,
    /// API server URL (overrides the kubeconfig's).
    #[arg(long)]
    pub server: Option<String>,
    /// The container runtime's CRI socket.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    pub cri: String,
    /// The Node's name (default: the host name).
    #[arg(long, default_value = "")]
    pub node_name: String,
    /// The node's InternalIP (default: the address this machine reaches the API server from).
    #[arg(long)]
    pub node_ip: Option<String>,
    /// Put --node-ip on this node's pod bridge as its gateway (it must be the pod CIDR's first
    /// address), for a machine whose own addresses pods cannot reach, as `keel up`'s worker on loopback.
    #[arg(long, requires = "node_ip")]
    pub node_ip_on_bridge: bool,
    /// Pod CIDR of this node when the Node's spec.podCIDR is not set (e.g. 10.42.0.0/24).
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// Comma-separated labels to register the node with (`key=value`).
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// The agent's directory: pod volumes and CNI state.
    #[arg(long, default_value = "/var/lib/keel-agent")]
    pub root_dir: PathBuf,
    /// Where container logs are written.
    #[arg(long, default_value = "/var/log/pods")]
    pub pod_log_dir: PathBuf,
    /// Give pods that name no seccomp profile the runtime's default one instead of none (the
    /// kubelet's `--seccomp-default`). `Localhost` profiles are read from `<root-dir>/seccomp`.
    #[arg(long)]
    pub seccomp_default: bool,
    /// A running container's log file is rotated once this large (a quantity: 10Mi, 500Ki).
    #[arg(long, default_value = "10Mi", value_parser = parse_byte_quantity)]
    pub container_log_max_size: u64,
    /// Log files kept per container, the live one included.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..))]
    pub container_log_max_files: u32,
    /// How often container log sizes are checked.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub container_log_monitor_interval: std::time::Duration,
    /// Remove unused images once the image filesystem is this full (percent; 100 never).
    #[arg(long, default_value_t = 85, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_high_threshold: u8,
    /// Remove unused images down to this usage (percent).
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_low_threshold: u8,
    /// An unused image is kept at least this long.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub minimum_image_ttl_duration: std::time::Duration,
    /// How often image usage is checked.
    #[arg(long, hide = true, default_value = "5m", value_parser = parse_duration)]
    pub image_gc_period: std::time::Duration,
    /// containerd's CNI conf_dir, where the agent writes the pod network config.
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Import every OCI image archive (`*.tar`) of this directory at start.
    #[arg(long)]
    pub image_dir: Option<PathBuf>,
    /// Registry mirrors, credentials and TLS in k3s's `registries.yaml` format, rendered into the
    /// `hosts.toml` directory containerd reads (its CRI `registry.config_path`). Read at start.
    #[arg(long)]
    pub registries: Option<PathBuf>,
    /// Comma-separated cluster DNS server IPs given to ClusterFirst pods (default: 10.96.0.10,
    /// the `kube-system/kube-dns` Service in front of the agents' resolvers, unless --disable-dns).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    /// Where the built-in local-path provisioner (StorageClass `local-path`) keeps volume
    /// directories (default: `<root-dir>/storage`).
    #[arg(long)]
    pub storage_dir: Option<PathBuf>,
    /// Do not run the built-in local-path provisioner on this node.
    #[arg(long)]
    pub disable_local_storage: bool,
    /// Do not run the built-in Ingress controller (class `keel`).
    #[arg(long)]
    pub disable_ingress: bool,
    /// The port the built-in Ingress controller serves HTTP on, on the node IP.
    #[arg(long, default_value_t = 80)]
    pub ingress_http_port: u16,
    /// The port the built-in Ingress controller serves HTTPS on, on the node IP (0: none).
    #[arg(long, default_value_t = 443)]
    pub ingress_https_port: u16,
    /// Do not run the node's cluster DNS resolver (pods get --cluster-dns only when it is given).
    #[arg(long)]
    pub disable_dns: bool,
    /// Comma-separated resolvers (`ip` or `ip:port`) for names outside the cluster domain
    /// (default: the nameservers of /etc/resolv.conf).
    #[arg(long, value_delimiter = ',')]
    pub dns_upstream: Vec<String>,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// The cluster (pod) CIDR: given an `unreachable` route so a pod IP on no node never leaves the machine.
    #[arg(long, default_value = "10.42.0.0/16")]
    pub cluster_cidr: String,
    /// The service CIDR: given an `unreachable` route so a Service IP no rule rewrote never leaves the machine.
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cidr: String,
    /// The port the agent's API (logs) is served and advertised on.
    #[arg(long, default_value_t = 10250)]
    pub port: i32,
    /// The address the agent's API listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: std::net::IpAddr,
    /// Stop and remove every pod sandbox keel's agents made on `--cri`, remove the `unreachable` routes of
    /// --cluster-cidr and --service-cidr, then exit (a node's teardown).
    #[arg(long)]
    pub remove_all_pods: bool,
    /// Remove everything the agent installed on this machine, then exit: pods (as --remove-all-pods),
    /// the nftables table `ip keel`, the pod and `unreachable` routes, the bridge, CNI state, and the
    /// forwarding settings it changed. Needs --node-name when the agent ran under another name.
    #[arg(long)]
    pub cleanup: bool,
    /// Do not program Services (the nftables table): another proxy does it.
    #[arg(long)]
    pub disable_kube_proxy: bool,
    /// Simulate this many nodes without containers instead of running this machine's (kubemark's hollow
    /// nodes, KWOK): Nodes, Leases and pod statuses only. Needs only --kubeconfig; see docs/node-agent.md.
    #[arg(long, default_value_t = 0)]
    pub hollow: u32,
    /// Hollow nodes are named `<prefix>-0` … `<prefix>-<N-1>`.
    #[arg(long, default_value = "hollow")]
    pub hollow_prefix: String,
    /// CPU capacity (and allocatable) of each hollow node.
    #[arg(long, default_value = "8")]
    pub hollow_cpu: String,
    /// Memory capacity (and allocatable) of each hollow node.
    #[arg(long, default_value = "32Gi")]
    pub hollow_memory: String,
    /// Pod capacity (and allocatable) of each hollow node.
    #[arg(long, default_value_t = 110)]
    pub hollow_pods: u32,
    /// Spread the hollow nodes over this many zones (`topology.kubernetes.io/zone=zone-<i mod K>`); 0: none.
    #[arg(long, default_value_t = 0)]
    pub hollow_zones: u32,
    /// API writes the hollow nodes have in flight at most (registrations, Leases, statuses, deletes).
    #[arg(long, default_value_t = 32)]
    pub hollow_concurrency: usize,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
}

/// Flags of `keel images`.
#[derive(Debug, Args, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["out", "push"])))]
pub(crate) struct ImagesArgs {
    /// Directory to write `busybox.tar` and `pause.tar` into.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Push the images to this registry, `[http(s)://]host[:port][/namespace]`: `localhost/busybox:latest`
    /// goes to `<namespace>/busybox:latest`, so a `localhost` mirror serves them to every node.
    #[arg(long, value_name = "REGISTRY")]
    pub push: Option<String>,
    /// User name for the registry.
    #[arg(long, requires = "push")]
    pub username: Option<String>,
    /// Read the registry password from standard input (else `KEEL_REGISTRY_PASSWORD`).
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
    /// CA bundle that signs the registry's certificate (default: the system's roots).
    #[arg(long, requires = "push")]
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP to a registry given without a scheme.
    #[arg(long, requires = "push")]
    pub plain_http: bool,
    /// The static busybox binary the images carry.
    #[arg(long, default_value = "/bin/busybox")]
    pub busybox: PathBuf,
}

/// Flags of `keel up`.
#[derive(Debug, Args, Clone)]
pub(crate) struct UpArgs {
    /// Directory holding each member's data directory.
    #[arg(long, default_value = "keel-data")]
    pub data_dir: PathBuf,
    /// Number of members (1, 3 or 5), on 127.0.0.11, .12, ...
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=7))]
    pub members: u8,
    /// Log level for the members.
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
    /// Start the control plane only: no worker (containerd + keel agent) on this machine, no root needed.
    #[arg(long)]
    pub no_worker: bool,
    /// Comma-separated resolvers (`ip` or `ip:port`) the worker's cluster DNS forwards names outside
    /// the cluster domain to (default: the nameservers of /etc/resolv.conf).
    #[arg(long, value_delimiter = ',')]
    pub dns_upstream: Vec<String>,
    /// The worker's registry mirrors (k3s's `registries.yaml` format; see `keel agent --registries`).
    #[arg(long)]
    pub registries: Option<PathBuf>,
}

/// Flags of `keel snapshot`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotArgs {
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

/// `keel snapshot` subcommands.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum SnapshotCommand {
    /// Stream a snapshot from a running member (keel or etcd) into FILE, as `etcdctl snapshot save`.
    Save(SnapshotSaveArgs),
    /// Create a member's data directory from a snapshot taken from keel or etcd 3.4/3.5.
    Restore(SnapshotRestoreArgs),
    /// List the snapshots of a snapshot directory with their metadata.
    List(SnapshotDirArgs),
    /// Remove the oldest scheduled snapshots of a snapshot directory beyond a count.
    Prune(SnapshotPruneArgs),
}

/// Which snapshot directory a command works on.
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotDirArgs {
    /// The snapshot directory (default `<data-dir>/snapshots`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A member's data directory, whose `snapshots/` is meant.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Re-hash every file and compare with its metadata (`ok`, `CORRUPT`, or `-` without metadata).
    #[arg(long)]
    pub check: bool,
}

/// Flags of `keel snapshot prune`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotPruneArgs {
    /// The snapshot directory (default `<data-dir>/snapshots`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A member's data directory, whose `snapshots/` is meant.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// How many scheduled snapshots to keep.
    #[arg(long, default_value_t = 5)]
    pub retention: usize,
}

/// Flags of `keel snapshot save`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotSaveArgs {
    /// Where to write the snapshot (written to FILE.part first, renamed when verified). Without it the
    /// snapshot goes into `--dir` (or `<data-dir>/snapshots`) as `on-demand-<member>-<time>.db` with its
    /// metadata beside it.
    pub file: Option<PathBuf>,
    /// The snapshot directory to save into when no FILE is given.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A member's data directory, whose `snapshots/` to save into when no FILE is given.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The one member to take the snapshot from.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// How long to wait for the connection (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub dial_timeout: std::time::Duration,
    /// `user:password` when the member has etcd auth enabled (etcdctl's flag; the user needs role root).
    #[arg(long)]
    pub user: Option<String>,
    #[command(flatten)]
    pub tls: crate::etcd_tls::EtcdTlsArgs,
}

/// Flags of `keel snapshot restore` (etcdctl's, with keel's defaults).
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotRestoreArgs {
    /// The snapshot file (`keel snapshot save` or `etcdctl snapshot save` output).
    pub file: PathBuf,
    /// Data directory to create for this member; must not exist.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Name of this member (as in --initial-cluster).
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The new cluster: `name=http://host:port,...` (default: this member alone).
    #[arg(long, default_value = "")]
    pub initial_cluster: String,
    /// Token of the new cluster; `keel server` must be started with the same one.
    #[arg(long, default_value = "keel-cluster")]
    pub initial_cluster_token: String,
    /// This member's peer URLs, as listed for it in --initial-cluster.
    #[arg(long, default_value = "http://127.0.0.1:2380", value_delimiter = ',')]
    pub initial_advertise_peer_urls: Vec<String>,
    /// Accept a file without the SHA-256 trailer (e.g. a copy of etcd's member/snap/db).
    #[arg(long)]
    pub skip_hash_check: bool,
}

/// Flags of `keel status`.
#[derive(Debug, Args, Clone)]
pub(crate) struct StatusArgs {
    /// Client URLs to ask for the member list (comma-separated); every member is shown. Default:
    /// the client URLs of --data-dir's member, else http://127.0.0.1:2379.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// A member's data directory: its client URLs, newest snapshots and certificates.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The member's snapshot directory, if not `<data-dir>/snapshots` (`keel server --snapshot-dir`).
    #[arg(long)]
    pub snapshot_dir: Option<PathBuf>,
    /// How long to wait for each connection (e.g. 5s).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub dial_timeout: std::time::Duration,
    /// How long each request may take (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub command_timeout: std::time::Duration,
    /// `user:password` when the cluster has etcd auth enabled (etcdctl's flag).
    #[arg(long)]
    pub user: Option<String>,
    #[command(flatten)]
    pub tls: crate::etcd_tls::EtcdTlsArgs,
}

/// Flags of `keel etcdctl-env`.
#[derive(Debug, Args, Clone)]
pub(crate) struct EtcdctlEnvArgs {
    /// The member's data directory (its `client-urls` and `tls/` files).
    #[arg(long, default_value = "default.keel")]
    pub data_dir: PathBuf,
}

/// Parses `10m`, `5s`, `250ms` or a bare number of seconds.
/// A byte size written as a Kubernetes quantity (`10Mi`, `500Ki`, `1G`), at least 1 Ki.
fn parse_byte_quantity(s: &str) -> Result<u64, String> {
    let n = keel_client_kit::quantity::value(s)
        .ok_or_else(|| format!("{s:?} is not a quantity (for example 10Mi)"))?;
    u64::try_from(n)
        .ok()
        .filter(|n| *n >= 1024)
        .ok_or_else(|| format!("{s:?}: at least 1Ki"))
}

pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(format!("bad duration unit in {s:?} (use ms, s, m or h)")),
    };
    Ok(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("100ms"),
            Ok(std::time::Duration::from_millis(100))
        );
        assert_eq!(
            parse_duration("10m"),
            Ok(std::time::Duration::from_secs(600))
        );
        assert_eq!(parse_duration("3"), Ok(std::time::Duration::from_secs(3)));
        assert!(parse_duration("3d").is_err());
    }
}

/// Flags of `keel kubeconfig`.
#[derive(Debug, Args)]
pub(crate) struct KubeconfigArgs {
    /// A member's data directory (its `pki/ca.crt` and `pki/ca.key` sign the certificate).
    #[arg(long)]
    pub(crate) data_dir: std::path::PathBuf,
    /// The user name (the certificate's CN).
    #[arg(long)]
    pub(crate) user: String,
    /// The user's group (the certificate's O; at most one).
    #[arg(long)]
    pub(crate) group: Vec<String>,
    /// The API server URL (default: the one in the data dir's admin.kubeconfig).
    #[arg(long)]
    pub(crate) server: Option<String>,
    /// Where to write the kubeconfig (mode 0600; default: standard output).
    #[arg(long)]
    pub(crate) out: Option<std::path::PathBuf>,
}

/// Flags of `keel recover`.
#[derive(Debug, Args, Clone)]
pub(crate) struct RecoverArgs {
    /// The data directory of the surviving member (stopped), the most up to date one when several survive.
    #[arg(long)]
    pub data_dir: PathBuf,
}

/// Flags of `keel token`.
#[derive(Debug, Args, Clone)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    /// A member's data directory (its `admin.kubeconfig` is used).
    #[arg(long, global = true, default_value = "default.keel")]
    pub data_dir: PathBuf,
    /// An admin kubeconfig (instead of `<data-dir>/admin.kubeconfig`).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

/// `keel token` subcommands.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum TokenCommand {
    /// Create a join token and print it (`K10<CA hash>::<id>.<secret>`).
    Create {
        /// How long it is valid (e.g. 24h, 30m); 0 = forever.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        ttl: std::time::Duration,
        /// A token for agents (workers) instead of servers.
        #[arg(long)]
        agent: bool,
        /// What it is for.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List the join tokens.
    List,
    /// Revoke a join token (its ID, or the whole token).
    Revoke { id: String },
}

/// Flags of `keel certificate`.
#[derive(Debug, Args, Clone)]
pub(crate) struct CertificateArgs {
    #[command(subcommand)]
    pub command: CertificateCommand,
    /// The member's data directory.
    #[arg(long, global = true, default_value = "default.keel")]
    pub data_dir: PathBuf,
}

/// `keel certificate` subcommands.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum CertificateCommand {
    /// Ask the running member to renew its serving certificate now (no restart, no dropped request).
    Rotate {
        /// How long to wait for the member to do it.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: std::time::Duration,
    },
    /// Show when each certificate under `<data-dir>/pki` ends.
    Check,
}
