//! `keel`: one binary for every role. `keel server` runs a member; `keel up` starts a local
//! cluster on loopback for trying keel with etcdctl.

mod agent;
mod api_balancer;
mod certificate;
mod cli;
mod control;
mod etcd_tls;
mod join;
mod recover;
mod server;
mod snapshot;
mod status;
mod token;
mod up;
mod upgrade;
mod worker;

use clap::Parser;

/// glibc's malloc gives large freed blocks back to the kernel at once (blocks from 128 KiB are
/// mmapped, the heap top is trimmed), so a request that assembles a big response, such as a
/// 500-key range page, faults fresh zeroed pages in on every call. Keeping them costs no
/// measurable RSS (1M keys: 1003 against 1008 MiB) and halves that path's CPU (1321 against
/// 771 µs per 500-key range in docs/benchmarks.md's runs).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

fn main() -> std::process::ExitCode {
    tune_malloc();
    let cli = cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keel: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(async move {
        match cli.command {
            cli::Command::Server(args) => server::run(*args).await,
            cli::Command::Up(args) => up::run(args).await,
            cli::Command::Controllers(args) => control::run_controllers(args).await,
            cli::Command::Scheduler(args) => control::run_scheduler(args).await,
            cli::Command::Agent(args) => agent::run(*args).await,
            cli::Command::Images(args) => agent::images(args).await,
            cli::Command::Kubeconfig(args) => server::kubeconfig(args),
            cli::Command::EtcdctlEnv(args) => server::etcdctl_env(args),
            cli::Command::Token(args) => token::run(args).await,
            cli::Command::Certificate(args) => certificate::run(args).await,
            cli::Command::Recover(args) => recover::run(args)
                .await
                .map_err(|e| server::ServerError::Config(e.to_string())),
            cli::Command::Status(args) => status::run(args)
                .await
                .map_err(|e| server::ServerError::Config(e.to_string())),
            cli::Command::Snapshot(args) => snapshot::run(args)
                .await
                .map_err(|e| server::ServerError::Config(e.to_string())),
        }
    });
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
