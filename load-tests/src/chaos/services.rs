//! The run's own redis-server (on a data directory, so a restart can keep or lose what it
//! held) and the three chatd nodes (`chatd-load serve chatd` children in cluster mode, each
//! on its own Redis proxy), with the signals the nemesis sends them.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::sync::RwLock;

use super::held::Usage;
use crate::procs::{SECRET, Server};

const MASTER_KEY: &str = "5e8b2d4f6a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d2f4a6c8e0b1d3f5a7c9e2b";

/// `kill -SIG pid` (STOP, CONT, KILL).
pub async fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .await
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{sig} {pid}: {status}");
    Ok(())
}

pub struct Redis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Redis {
    pub async fn start() -> anyhow::Result<Redis> {
        let mut r = Redis {
            port: chatd_test_harness::free_port(),
            dir: tempfile::tempdir()?,
            child: None,
        };
        r.spawn().await?;
        Ok(r)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?;
        self.child = Some(child);
        for _ in 0..400 {
            if self.cli(&["PING"]).await.is_ok_and(|o| o.trim() == "PONG") {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("redis-server did not answer PING")
    }

    /// SIGKILLs it and starts it again on the same port: with `keep`, after a `SAVE`
    /// (it loads that snapshot), else with its data file removed (empty).
    pub async fn restart(&mut self, keep: bool) -> anyhow::Result<()> {
        if keep {
            self.cli(&["SAVE"]).await?;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        if !keep {
            let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        }
        self.spawn().await
    }

    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .await
            .context("running redis-cli")?;
        anyhow::ensure!(out.status.success(), "redis-cli {args:?} failed");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Keys whose name or value holds `marker` (values read by type, raw).
    pub async fn find(&self, marker: &str) -> anyhow::Result<(usize, Vec<String>)> {
        let keys = self.cli(&["--scan"]).await?;
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        let mut hits = Vec::new();
        for key in &keys {
            let kind = self.cli(&["TYPE", key]).await?;
            let read: &[&str] = match kind.trim() {
                "string" => &["GET"],
                "list" => &["LRANGE"],
                "set" => &["SMEMBERS"],
                "zset" => &["ZRANGE"],
                "hash" => &["HGETALL"],
                "stream" => &["XRANGE"],
                _ => continue,
            };
            let mut args = vec!["--raw", read[0], key];
            match read[0] {
                "LRANGE" | "ZRANGE" => args.extend(["0", "-1"]),
                "XRANGE" => args.extend(["-", "+"]),
                _ => {}
            }
            let value = self.cli(&args).await?;
            if key.contains(marker) || value.contains(marker) {
                hits.push(key.to_string());
            }
        }
        Ok((keys.len(), hits))
    }
}

/// One chatd node: its environment (fixed), the child while it runs, and what the child
/// held when it had just started (its baseline).
pub struct Node {
    env: Vec<(String, String)>,
    llm: Arc<Server>,
    server: RwLock<Option<Server>>,
    baseline: std::sync::Mutex<Option<Usage>>,
}

/// The port of a `scheme://host:port/...` URL.
fn url_port(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let host_port = rest.split('/').next()?;
    host_port.rsplit(':').next()?.parse().ok()
}

/// The cluster settings of node `index` (its Redis through `redis_url`); it appends its
/// log to `log`.
pub fn node_env(
    index: usize,
    redis_url: &str,
    pg_url: &str,
    log: &std::path::Path,
) -> Vec<(String, String)> {
    [
        ("CHATD_LOAD_LOG", log.display().to_string()),
        ("CHATD__CLUSTER__ENABLED", "true".to_string()),
        ("CHATD__CLUSTER__NODE_ID", format!("chaos-{index}")),
        ("CHATD__CLUSTER__LEASE", "2s".into()),
        ("CHATD__CACHE__BACKEND", "redis".into()),
        ("CHATD__CACHE__REDIS_URL", redis_url.to_string()),
        ("CHATD__STORE__URL", pg_url.to_string()),
        ("CHATD__LINKS__ENABLED", "false".into()),
        ("CHATD__PIPELINE__SPECULATIVE_MAIN_CALL", "off".into()),
        ("CHATD_MASTER_KEY", MASTER_KEY.into()),
        ("CHATD__AUTH__SECRET", SECRET.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Node {
    /// Starts the node on the shared fake LLM.
    pub async fn start(env: Vec<(String, String)>, llm: Arc<Server>) -> anyhow::Result<Node> {
        let node = Node {
            env,
            llm,
            server: RwLock::new(None),
            baseline: std::sync::Mutex::new(None),
        };
        node.spawn().await?;
        Ok(node)
    }

    async fn spawn(&self) -> anyhow::Result<()> {
        let (llm, env) = (self.llm.clone(), self.env.clone());
        let server = tokio::task::spawn_blocking(move || Server::chatd_with(&llm, &env)).await??;
        let usage = Usage::of(&server, &self.services())?;
        *self.server.write().await = Some(server);
        if let Ok(mut baseline) = self.baseline.lock() {
            *baseline = Some(usage);
        }
        Ok(())
    }

    /// The services the node connects to: (port, name).
    pub fn services(&self) -> Vec<(u16, &'static str)> {
        let mut out = vec![(self.llm.addr.port(), "model")];
        for (key, name) in [
            ("CHATD__CACHE__REDIS_URL", "redis"),
            ("CHATD__STORE__URL", "postgres"),
        ] {
            let url = self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            if let Some(port) = url.and_then(|u| url_port(u)) {
                out.push((port, name));
            }
        }
        out
    }

    /// What the running child held when it started, and what it holds now (None while
    /// it is down).
    pub async fn usage(&self) -> Option<(Usage, Usage)> {
        let now = Usage::of(self.server.read().await.as_ref()?, &self.services()).ok()?;
        let baseline = (*self.baseline.lock().ok()?)?;
        Some((baseline, now))
    }

    /// Where clients connect (None while it is down).
    pub async fn addr(&self) -> Option<SocketAddr> {
        self.server.read().await.as_ref().map(|s| s.addr)
    }

    pub async fn pid(&self) -> Option<u32> {
        self.server.read().await.as_ref().map(Server::pid)
    }

    /// SIGKILL; the node is down until [`Node::restart`].
    pub async fn kill(&self) -> anyhow::Result<()> {
        let server = self.server.write().await.take();
        if let Some(server) = server {
            signal(server.pid(), "KILL").await?;
            // Drop reaps the child (it has exited); off the reactor, it may wait briefly.
            tokio::task::spawn_blocking(move || drop(server)).await?;
        }
        Ok(())
    }

    /// Starts it again, retrying as a supervisor (systemd, Kubernetes) would while it
    /// exits at start-up (its store or Redis down at that moment): every 500 ms, 20 tries.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let mut tries = 0;
        loop {
            match self.spawn().await {
                Ok(()) => return Ok(()),
                Err(e) if tries >= 20 => return Err(e),
                Err(_) => tries += 1,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Closes every node at the end of the run.
    pub async fn stop(&self) {
        if let Some(pid) = self.pid().await {
            let _ = signal(pid, "CONT").await;
        }
        let server = self.server.write().await.take();
        let _ = tokio::task::spawn_blocking(move || drop(server)).await;
    }
}
