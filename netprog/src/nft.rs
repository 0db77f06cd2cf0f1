//! Running `nft`: applying a rendered transaction, reading back which per-service chains and sets
//! the table holds, removing the table. `nft -f -` applies a script atomically: either all of it
//! takes effect or none does, so a refused script leaves the previous table in force.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::error::{Error, Result};
use crate::names;
use crate::render::{Existing, TABLE};

/// The `nft` binary (found on `PATH`).
const NFT: &str = "nft";

async fn run(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let command = format!("{NFT} {}", args.join(" "));
    let mut child = Command::new(NFT)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::Command {
            command: command.clone(),
            message: e.to_string(),
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| Error::Command {
                command: command.clone(),
                message: e.to_string(),
            })?;
    }
    let out = child.wait_with_output().await.map_err(|e| Error::Command {
        command: command.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Applies `script` in one transaction. A script nft refuses is [`Error::Rejected`].
pub async fn apply(script: &str) -> Result<()> {
    match run(&["-f", "-"], Some(script)).await {
        Ok(_) => Ok(()),
        Err(Error::Command { message, .. }) if !message.is_empty() => Err(Error::Rejected(message)),
        Err(e) => Err(e),
    }
}

/// Whether `table ip keel` exists (a cheap listing of table names only).
pub async fn table_exists() -> Result<bool> {
    let (family, name) = TABLE.split_once(' ').unwrap_or(("ip", "keel"));
    let listed = run(&["list", "tables", family], None).await?;
    Ok(listed
        .lines()
        .any(|l| l.trim() == format!("table {family} {name}")))
}

/// Checks `script` with `nft -c` without applying it.
pub async fn check(script: &str) -> Result<()> {
    run(&["-c", "-f", "-"], Some(script)).await.map(|_| ())
}

/// The per-service chains and sets `table ip keel` holds now (empty when there is no table).
pub async fn existing() -> Result<Existing> {
    let (family, name) = TABLE.split_once(' ').unwrap_or(("ip", "keel"));
    let text = match run(&["-j", "list", "table", family, name], None).await {
        Ok(t) => t,
        // No such table yet.
        Err(Error::Command { message, .. }) if message.contains("No such file") => {
            return Ok(Existing::default())
        }
        Err(e) => return Err(e),
    };
    parse_existing(&text)
}

/// Reads the names out of `nft -j list table` output.
pub fn parse_existing(json: &str) -> Result<Existing> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::Config(format!("nft -j output is not JSON: {e}")))?;
    let mut out = Existing::default();
    for item in v
        .get("nftables")
        .and_then(|n| n.as_array())
        .into_iter()
        .flatten()
    {
        let named = |kind: &str| {
            item.get(kind)
                .and_then(|c| c.get("name"))
                .and_then(|n| n.as_str())
                .filter(|n| names::is_per_service(n))
                .map(str::to_string)
        };
        if let Some(n) = named("chain") {
            out.chains.insert(n);
        }
        if let Some(n) = named("set") {
            out.sets.insert(n);
        }
    }
    Ok(out)
}

/// The table as `nft list table` prints it (for tests and `keel agent` diagnostics).
pub async fn list() -> Result<String> {
    let (family, name) = TABLE.split_once(' ').unwrap_or(("ip", "keel"));
    run(&["list", "table", family, name], None).await
}

/// Removes the table; nothing else in the ruleset changes.
pub async fn remove() -> Result<()> {
    run(&["-f", "-"], Some(&crate::render::removal()))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_per_service_names_only() {
        let json = r#"{"nftables":[{"metainfo":{}},{"table":{"family":"ip","name":"keel"}},
            {"chain":{"family":"ip","table":"keel","name":"services"}},
            {"chain":{"family":"ip","table":"keel","name":"service-ABCDEFGH-default/web/tcp/"}},
            {"set":{"family":"ip","table":"keel","name":"affinity-ABCDEFGH-default/web/tcp/__10.42.0.2/80"}},
            {"map":{"family":"ip","table":"keel","name":"service-ips"}}]}"#;
        let e = parse_existing(json).unwrap();
        assert_eq!(e.chains.len(), 1);
        assert_eq!(e.sets.len(), 1);
        assert!(parse_existing("not json").is_err());
    }
}
