//! Finding binaries (with an install hint), waiting for a service to become ready, and
//! signalling a child process.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// How long a service may take to start.
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// Finds `name` on PATH (or in `extra_dirs`); the error names how to install it.
pub fn find_binary(name: &str, extra_dirs: &[PathBuf], hint: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(extra_dirs.iter().cloned());
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!("`{name}` not found on PATH: {hint} (or run scripts/test, which installs it)")
}

/// Polls `ready` until it returns true or the deadline passes. Polling a readiness
/// condition of an external process is the one place a short interval is used.
pub async fn wait_until<F, Fut>(what: &str, mut ready: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + START_DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if ready().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("{what} was not ready within {START_DEADLINE:?}")
}

/// True if something accepts TCP connections on the port.
pub async fn port_open(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok()
}

/// Sends `SIG<name>` (`STOP`, `CONT`, `TERM`, ...) to a running child with the `kill` command.
pub async fn signal(child: Option<&Child>, name: &str) -> anyhow::Result<()> {
    let pid = child
        .and_then(|c| c.id())
        .context("the process is not running")?;
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .await
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{name} {pid} failed: {status}");
    Ok(())
}
