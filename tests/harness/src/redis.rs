//! A throwaway `redis-server` on a free port, without persistence, killed on drop.

use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::process::{find_binary, port_open, wait_until};

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

    /// SIGKILLs the server and waits for it to exit.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.spawn().await
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let bin = find_binary("redis-cli", &[], "apt-get install redis-tools")?;
        let out = Command::new(bin)
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "redis-cli failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every key and its raw value bytes (strings, list items, set and zset members).
    pub async fn dump(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let keys = self.cli(&["--scan"]).await?;
        let mut out = Vec::new();
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let kind = self.cli(&["TYPE", key]).await?;
            let args: Vec<&str> = match kind.trim() {
                "string" => vec!["--no-raw", "GET", key],
                "list" => vec!["--no-raw", "LRANGE", key, "0", "-1"],
                "set" => vec!["--no-raw", "SMEMBERS", key],
                "zset" => vec!["--no-raw", "ZRANGE", key, "0", "-1"],
                "hash" => vec!["--no-raw", "HGETALL", key],
                "stream" => vec!["--no-raw", "XRANGE", key, "-", "+"],
                _ => continue,
            };
            let value = Command::new(find_binary(
                "redis-cli",
                &[],
                "apt-get install redis-tools",
            )?)
            .args(["-p", &self.port.to_string()])
            .args(["--raw"])
            .args(&args[1..])
            .output()
            .await?
            .stdout;
            out.push((key.to_string(), value));
        }
        Ok(out)
    }
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
