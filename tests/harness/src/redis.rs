//! A throwaway `redis-server` on a free port, without persistence, killed on drop.

use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::process::{find_binary, port_open, signal, wait_until};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub async fn start() -> anyhow::Result<RedisServer> {
        let mut server = RedisServer {
            port: crate::free_port(),
            child: None,
            dir: tempfile::tempdir()?,
        };
        server.spawn().await?;
        Ok(server)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let bin = find_binary("redis-server", &[], "apt-get install redis-server")?;
        let child = Command::new(bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server")?;
        self.child = Some(child);
        let port = self.port;
        wait_until("redis-server", || async move { ping(port).await }).await
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// SIGKILLs the server and waits for it to exit.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Writes its data to disk (`SAVE`) and SIGKILLs it: [`RedisServer::start_again`] brings
    /// it back with that data.
    pub async fn stop_keeping_data(&mut self) -> anyhow::Result<()> {
        self.cli(&["SAVE"]).await?;
        self.kill().await;
        Ok(())
    }

    /// Starts a stopped server again on the same port (with what it saved).
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        self.spawn().await
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.spawn().await
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        cli(self.port, args).await
    }

    /// Every key and its raw value bytes (strings, list items, set and zset members, hash
    /// fields and values, stream entry ids, fields and values).
    pub async fn dump(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        dump(self.port).await
    }

    /// Freezes the server (SIGSTOP): it keeps its connections but answers nothing.
    pub async fn pause(&self) -> anyhow::Result<()> {
        signal(self.child.as_ref(), "STOP").await
    }

    /// Thaws a paused server (SIGCONT).
    pub async fn resume(&self) -> anyhow::Result<()> {
        signal(self.child.as_ref(), "CONT").await
    }
}

/// Runs `redis-cli -p PORT [prefix...] args...` and returns its raw stdout.
async fn cli_bytes(port: u16, prefix: &[&str], args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let bin = find_binary("redis-cli", &[], "apt-get install redis-tools")?;
    let out = Command::new(bin)
        .args(["-p", &port.to_string()])
        .args(prefix)
        .args(args)
        .output()
        .await
        .context("running redis-cli")?;
    anyhow::ensure!(
        out.status.success(),
        "redis-cli -p {port} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// Runs `redis-cli -p PORT args...` and returns its stdout as text.
pub(crate) async fn cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = cli_bytes(port, &[], args).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The keys one server holds (`--scan`; on a cluster node, the keys of its own slots).
pub(crate) async fn keys(port: u16) -> anyhow::Result<Vec<String>> {
    let keys = cli(port, &["--scan"]).await?;
    Ok(keys
        .lines()
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect())
}

/// Every key of one server and its raw value bytes, read by type.
pub(crate) async fn dump(port: u16) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for key in keys(port).await? {
        let key = key.as_str();
        let kind = cli(port, &["TYPE", key]).await?;
        let args: &[&str] = match kind.trim() {
            "string" => &["GET", key],
            "list" => &["LRANGE", key, "0", "-1"],
            "set" => &["SMEMBERS", key],
            "zset" => &["ZRANGE", key, "0", "-1"],
            "hash" => &["HGETALL", key],
            "stream" => &["XRANGE", key, "-", "+"],
            // Expired between the scan and the read.
            "none" => continue,
            other => anyhow::bail!("dump: key {key} has a type it cannot read: {other}"),
        };
        let value = cli_bytes(port, &["--raw"], args).await?;
        out.push((key.to_string(), value));
    }
    Ok(out)
}

async fn ping(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if !port_open(port).await {
        return false;
    }
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if s.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf).await, Ok(n) if buf[..n].starts_with(b"+PONG"))
}
