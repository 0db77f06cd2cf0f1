//! `keel`: one binary for every role. `keel server` runs a member; `keel up` starts a local
//! cluster on loopback for trying keel with etcdctl.

mod cli;
mod server;
mod snapshot;
mod up;

use clap::Parser;

fn main() -> std::process::ExitCode {
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
