//! A chatd process (the built binary) on a free port with a config file the test writes:
//! its log captured to a file, ready once `/readyz` answers 200, SIGKILLed on `kill()` and
//! on drop, restartable on the same port and data. For the multi-node tests: several of
//! these share one Redis and one PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::process::wait_until;

pub struct ChatdProcess {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    env: Vec<(String, String)>,
}

impl ChatdProcess {
    /// Starts `bin serve --config FILE`; `config` is TOML without `[server] listen` and
    /// `data_dir` (the harness sets them). `env` is added to the process environment.
    pub async fn start(bin: &Path, config: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        Self::start_at(bin, crate::free_port(), config, env).await
    }

    /// [`ChatdProcess::start`] on a port the test picked (for a peer that must know chatd's
    /// address before chatd starts, e.g. an identity provider's redirect URI).
    pub async fn start_at(
        bin: &Path,
        port: u16,
        config: &str,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("chatd.toml");
        let data = dir.path().join("data");
        let server = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n\n",
            data.display()
        );
        std::fs::write(&file, format!("{server}{config}"))?;
        let mut node = ChatdProcess {
            port,
            child: None,
            dir,
            bin: bin.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        node.spawn().await?;
        Ok(node)
    }

    /// Starts the process again after [`ChatdProcess::kill`]: the same port, configuration
    /// and data directory (token secret, keys, SQLite store); the log goes on in the same file.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.spawn().await
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve")
            .arg("--config")
            .arg(self.dir.path().join("chatd.toml"))
            .current_dir(self.dir.path())
            .env_remove("CHATD_LOG")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().context("starting chatd")?);
        let url = self.http_url("/readyz");
        wait_until("chatd /readyz", || {
            let url = url.clone();
            async move {
                reqwest::get(&url)
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        })
        .await
        .with_context(|| format!("chatd log:\n{}", self.log_text()))
    }

    /// The data directory (token secret, local keys, the SQLite store).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn ws_url(&self, token: &str) -> String {
        format!("ws://127.0.0.1:{}/v1/ws?token={token}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("chatd.log")
    }

    /// Everything the process logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGTERM (chatd drains: devices are told, running answers get `shutdown_grace`), and
    /// waits for the process to exit.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        crate::process::signal(self.child.as_ref(), "TERM").await?;
        let mut child = self.child.take().context("the process is not running")?;
        Ok(child.wait().await?)
    }

    /// Freezes the process (SIGSTOP): its sockets stay open, it does nothing (its leases
    /// lapse, as in a long GC pause or a stopped VM).
    pub async fn pause(&self) -> anyhow::Result<()> {
        crate::process::signal(self.child.as_ref(), "STOP").await
    }

    /// Thaws a paused process (SIGCONT).
    pub async fn resume(&self) -> anyhow::Result<()> {
        crate::process::signal(self.child.as_ref(), "CONT").await
    }

    /// SIGKILL, and waits for the process to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}
