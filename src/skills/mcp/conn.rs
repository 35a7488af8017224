//! One connection to an MCP server through the official SDK (`rmcp`): started as a child
//! process (stdio) or opened over streamable HTTP, its tools listed, one tool called with
//! its progress reported and `notifications/cancelled` sent when the caller stops waiting.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rmcp::ClientHandler;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    ProgressNotificationParam, RequestId, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::{
    StreamableHttpClientTransport, TokioChildProcess,
    streamable_http_client::StreamableHttpClientTransportConfig,
};
use serde_json::Value;
use tokio::sync::Notify;

use crate::config::KeysConfig;
use crate::skills::manifest::mcp::McpSpec;

/// Why talking to a server failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnError {
    #[error("cannot start the MCP server: {0}")]
    Start(String),
    #[error("the MCP server stopped")]
    Closed,
    #[error("the MCP server answered with an error: {0}")]
    Protocol(String),
}

/// What the server tells chatd without being asked.
#[derive(Clone, Default)]
pub struct Handler {
    progress: ProgressDispatcher,
    /// Fired on `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// A running session with one server.
pub struct Conn {
    service: RunningService<RoleClient, Handler>,
    progress: ProgressDispatcher,
}

/// One progress notification of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

impl Conn {
    /// Starts (stdio) or opens (HTTP) a session within `deadline`.
    pub async fn open(
        spec: &McpSpec,
        handler: Handler,
        deadline: Duration,
        keys: &KeysConfig,
    ) -> Result<Conn, ConnError> {
        let progress = handler.progress.clone();
        let started = tokio::time::timeout(deadline, async {
            if let Some(url) = &spec.url {
                let mut headers = HashMap::new();
                for (name, value) in &spec.headers {
                    let value = value.resolve(keys).await.map_err(ConnError::Start)?;
                    let name = reqwest::header::HeaderName::try_from(name.as_str())
                        .map_err(|e| ConnError::Start(format!("header {name}: {e}")))?;
                    let value = reqwest::header::HeaderValue::try_from(value)
                        .map_err(|e| ConnError::Start(format!("header {name}: {e}")))?;
                    headers.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(headers),
                );
                rmcp::serve_client(handler, transport)
                    .await
                    .map_err(|e| ConnError::Start(e.to_string()))
            } else {
                let (program, args) = spec
                    .command
                    .split_first()
                    .ok_or_else(|| ConnError::Start("no command".into()))?;
                let mut command = tokio::process::Command::new(program);
                command.args(args).kill_on_drop(true);
                for (name, value) in &spec.env {
                    command.env(name, value.resolve(keys).await.map_err(ConnError::Start)?);
                }
                // The server's stderr is its own log: it may hold what users sent it, so it
                // is not copied into chatd's.
                let (transport, _) = TokioChildProcess::builder(command)
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| ConnError::Start(spawn_error(program, &e)))?;
                rmcp::serve_client(handler, transport)
                    .await
                    .map_err(|e| ConnError::Start(e.to_string()))
            }
        })
        .await
        .map_err(|_| ConnError::Start(format!("no handshake within {deadline:?}")))??;
        Ok(Conn {
            service: started,
            progress,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    pub async fn tools(&self) -> Result<Vec<Tool>, ConnError> {
        self.service
            .peer()
            .list_all_tools()
            .await
            .map_err(service_error)
    }

    /// Calls `tool`; each progress notification goes to `on_progress`. Dropping the future
    /// before the answer tells the server with `notifications/cancelled`.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        on_progress: &(dyn Fn(Progress) + Send + Sync),
        tasks: &tokio_util::task::TaskTracker,
    ) -> Result<Value, ConnError> {
        let peer = self.service.peer().clone();
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(service_error)?;
        let mut guard = CancelOnDrop {
            peer: Some(peer),
            id: handle.id.clone(),
            tasks: tasks.clone(),
        };
        let mut updates = self.progress.subscribe(handle.progress_token.clone()).await;
        let response = handle.await_response();
        tokio::pin!(response);
        let answer = loop {
            tokio::select! {
                biased;
                r = &mut response => break r,
                Some(p) = updates.next() => on_progress(Progress {
                    progress: p.progress,
                    total: p.total,
                    message: p.message,
                }),
            }
        };
        guard.peer = None;
        match answer.map_err(service_error)? {
            ServerResult::CallToolResult(result) => {
                serde_json::to_value(result).map_err(|e| ConnError::Protocol(e.to_string()))
            }
            _ => Err(ConnError::Protocol("not a tool result".into())),
        }
    }

    /// Ends the session (a child process is killed if it does not leave).
    pub async fn close(mut self) {
        let _ = self
            .service
            .close_with_timeout(Duration::from_secs(2))
            .await;
    }
}

fn spawn_error(program: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "`{program}` not found: install it, or set skills.mcp_bin_dir or skills.mcp_commands"
        )
    } else {
        format!("{program}: {e}")
    }
}

fn service_error(e: rmcp::ServiceError) -> ConnError {
    match e {
        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
            ConnError::Closed
        }
        other => ConnError::Protocol(other.to_string()),
    }
}

/// Sends `notifications/cancelled` for a request nobody waits for any more.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
    tasks: tokio_util::task::TaskTracker,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("cancelled by the user or the deadline".into()),
        );
        // Best effort, bounded, owned by the skills' tracker: one message on an open session.
        if tokio::runtime::Handle::try_current().is_ok() {
            self.tasks.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), peer.notify_cancelled(params))
                    .await;
            });
        }
    }
}
