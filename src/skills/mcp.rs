//! MCP servers as apps: an app manifest's `mcp:` section names a Model Context Protocol
//! server ([`super::manifest::mcp`]); its tools become skills ([`tools`]) behind the same output contract
//! and injection check as every skill. One server per app per node, reached through the
//! official SDK ([`conn`]).
//!
//! Lifecycle: a supervisor task per app (owned by the skills' tracker, stopped by the
//! shutdown token) lists the tools at start-up and again on `notifications/tools/list_changed`;
//! a `lazy` server is stopped after that first listing and started by the first call. A
//! server that died is started again by the next call or listing; one that cannot start
//! is tried again after a backoff that doubles from [`FIRST_BACKOFF`] to [`MAX_BACKOFF`]
//! while it keeps failing. Shutdown stops every server.
//!
//! Which apps' servers run on a node, and with which program, is [`setup`]'s (`enabled:
//! false` apps only where `skills.mcp_apps` names them); a tool's URL arguments pass the
//! SSRF pre-check ([`url_guard`]) before a call is forwarded.

pub mod conn;
pub mod listing;
pub mod setup;
pub mod tools;
pub mod url_guard;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::manifest::mcp::{McpSpec, McpStart};
use crate::config::KeysConfig;
use conn::{Conn, ConnError, Handler, Progress};

use super::manifest::SkillManifest;

/// Wait before the first restart of a server that failed.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One app's server on this node.
pub struct McpServer {
    pub app_id: String,
    pub spec: McpSpec,
    handler: Handler,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    restarts: Mutex<Restarts>,
    /// Deadline of a start (the handshake) and of a listing.
    start_deadline: Duration,
    /// Where `{vault: ...}` references in the spec are read (at each start).
    keys: Arc<KeysConfig>,
}

#[derive(Default)]
struct Restarts {
    failures: u32,
    not_before: Option<Instant>,
}

impl McpServer {
    pub fn new(
        app_id: String,
        spec: McpSpec,
        start_deadline: Duration,
        keys: Arc<KeysConfig>,
    ) -> McpServer {
        McpServer {
            app_id,
            spec,
            handler: Handler::default(),
            conn: tokio::sync::Mutex::new(None),
            restarts: Mutex::new(Restarts::default()),
            start_deadline,
            keys,
        }
    }

    fn restarts(&self) -> std::sync::MutexGuard<'_, Restarts> {
        self.restarts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self) {
        let mut r = self.restarts();
        let wait = FIRST_BACKOFF
            .saturating_mul(2u32.saturating_pow(r.failures.min(16)))
            .min(MAX_BACKOFF);
        r.failures = r.failures.saturating_add(1);
        r.not_before = Some(Instant::now() + wait);
    }

    /// The running session, started (again) if there is none and the backoff allows.
    async fn connection(&self) -> Result<Arc<Conn>, ConnError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
            // It started well before: started again at once (a start that fails backs off).
            tracing::warn!(app = %self.app_id, "MCP server stopped; it is started again");
            *slot = None;
        }
        if let Some(at) = self.restarts().not_before
            && let Some(left) = at.checked_duration_since(Instant::now())
        {
            return Err(ConnError::Start(format!(
                "it failed; the next start is in {} ms",
                left.as_millis()
            )));
        }
        let opened = Conn::open(
            &self.spec,
            self.handler.clone(),
            self.start_deadline,
            &self.keys,
        );
        match opened.await {
            Ok(c) => {
                *self.restarts() = Restarts::default();
                let c = Arc::new(c);
                *slot = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                self.failed();
                Err(e)
            }
        }
    }

    /// The server's tools (as JSON).
    pub async fn list(&self) -> Result<Vec<Value>, ConnError> {
        let conn = self.connection().await?;
        let listed = tokio::time::timeout(self.start_deadline, conn.tools())
            .await
            .map_err(|_| ConnError::Protocol("no tool list in time".into()))??;
        Ok(listed
            .into_iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect())
    }

    /// Calls one tool (the caller bounds the time and may drop the future to cancel).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        on_progress: &(dyn Fn(Progress) + Send + Sync),
        tasks: &TaskTracker,
    ) -> Result<Value, ConnError> {
        let conn = self.connection().await?;
        let answer = conn.call(tool, arguments, on_progress, tasks).await;
        if matches!(answer, Err(ConnError::Closed)) {
            tracing::warn!(app = %self.app_id, tool, "MCP server stopped during a call");
        }
        answer
    }

    /// Stops the server (a call still running keeps the session until it ends).
    pub async fn stop(&self) {
        let taken = self.conn.lock().await.take();
        if let Some(conn) = taken.and_then(|c| Arc::try_unwrap(c).ok()) {
            conn.close().await;
        }
    }
}

/// Every MCP app of the node.
#[derive(Default)]
pub struct McpApps {
    servers: Vec<Arc<McpServer>>,
}

impl McpApps {
    pub fn new(servers: Vec<Arc<McpServer>>) -> McpApps {
        McpApps { servers }
    }

    pub fn get(&self, app_id: &str) -> Option<&Arc<McpServer>> {
        self.servers.iter().find(|s| s.app_id == app_id)
    }

    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }
}

/// Keeps one app's tools listed until `shutdown`: `publish` gets the app's skills after
/// every listing. Then stops the server.
pub async fn supervise(
    server: Arc<McpServer>,
    publish: impl Fn(Vec<SkillManifest>) + Send,
    shutdown: CancellationToken,
) {
    let mut listed_once = false;
    loop {
        let retry = match server.list().await {
            Ok(tools) => {
                let (skills, skipped) = tools::skills_of(&server.app_id, &server.spec, &tools);
                for (tool, reason) in skipped {
                    tracing::warn!(app = %server.app_id, tool, reason, "MCP tool not offered");
                }
                tracing::info!(app = %server.app_id, tools = skills.len(), "MCP tools listed");
                publish(skills);
                if !listed_once && server.spec.start == McpStart::Lazy {
                    server.stop().await;
                }
                listed_once = true;
                None
            }
            Err(e) => {
                tracing::warn!(app = %server.app_id, error = %e, "cannot list the MCP server's tools");
                let r = server.restarts();
                Some(r.not_before.map_or(FIRST_BACKOFF, |at| {
                    at.saturating_duration_since(Instant::now())
                }))
            }
        };
        let wait = async {
            match retry {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = server.handler.tools_changed.notified() => {}
            () = wait => {}
        }
    }
    server.stop().await;
}
