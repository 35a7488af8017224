//! An app's `mcp:` section: how to reach its Model Context Protocol server and what of each
//! tool's output the model may see.
//!
//! ```yaml
//! mcp:
//!   command: [mcp-server-time, --local-timezone, UTC]   # stdio: the server as a child
//!   env: {TZ: UTC}
//!   # url: http://127.0.0.1:8000/mcp                   # or streamable HTTP
//!   # headers: {Authorization: {env: TIME_TOKEN}}
//!   enabled: true           # false: runs only where `skills.mcp_apps` names the app
//!   start: startup          # or lazy: listed at start-up, then started on the first call
//!   timeout: 20s            # one call's deadline (default: skills.timeout)
//!   tools:                  # per tool, all optional
//!     get_current_time:
//!       output: {mode: template, agent_data: {datetime: {type: string, pattern: "..."}},
//!                external_text: [timezone]}
//!     # fetch: {guarded_urls: [url]}   # URL arguments chatd's SSRF guard checks first
//! ```
//!
//! A tool without an `output` declaration gives the model its text content as
//! `external_text` (checked for prompt injection); `structuredContent` fields reach the
//! model only when declared (`agent_data`, `external_text`), images and other media only
//! the user (`media`).

use std::collections::BTreeMap;
use std::time::Duration;

use secrecy::ExposeSecret;
use serde::Deserialize;

use super::OutputContract;
use crate::config::KeysConfig;

/// A tool name as a skill id: `[a-z0-9_]{1,40}`.
pub fn skill_id(tool: &str) -> String {
    let mut id: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if id.is_empty() {
        id.push('_');
    }
    id
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// `false`: an opt-in app (its package is not part of chatd), run only on nodes whose
    /// `skills.mcp_apps` names it.
    #[serde(default = "on")]
    pub enabled: bool,
    /// The server's command line (stdio transport).
    #[serde(default)]
    pub command: Vec<String>,
    /// Its environment (added to chatd's; values are literal, `{env: VAR}` or
    /// `{vault: MOUNT/PATH#FIELD}`).
    #[serde(default)]
    pub env: BTreeMap<String, SecretSpec>,
    /// A streamable-HTTP server's endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers of every HTTP request (literal, `{env: VAR}` or `{vault: MOUNT/PATH#FIELD}`).
    #[serde(default)]
    pub headers: BTreeMap<String, SecretSpec>,
    #[serde(default)]
    pub start: McpStart,
    /// One call's deadline; default `skills.timeout`.
    #[serde(default, with = "humantime_serde::option")]
    pub timeout: Option<Duration>,
    #[serde(default)]
    pub tools: BTreeMap<String, McpToolSpec>,
}

fn on() -> bool {
    true
}

/// When the server process (or session) starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpStart {
    /// At start-up, kept running.
    #[default]
    Startup,
    /// Its tools are listed at start-up (the server is stopped again); it runs from the
    /// first call on.
    Lazy,
}

/// A value written in the manifest, the name of an environment variable holding it, or a
/// Vault/OpenBao KV v2 reference `MOUNT/PATH#FIELD` (read with the key service's address
/// and token, like `llm.api_key_vault`, each time the server starts; never logged).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SecretSpec {
    Literal(String),
    Env { env: String },
    Vault { vault: String },
}

impl SecretSpec {
    pub async fn resolve(&self, keys: &KeysConfig) -> Result<String, String> {
        match self {
            SecretSpec::Literal(v) => Ok(v.clone()),
            SecretSpec::Env { env } => {
                std::env::var(env).map_err(|_| format!("environment variable {env} is not set"))
            }
            SecretSpec::Vault { vault } => {
                let read = crate::crypto::read_secrets(keys, std::slice::from_ref(vault))
                    .await
                    .map_err(|e| format!("vault reference {vault}: {e}"))?;
                read.get(vault)
                    .map(|s| s.expose_secret().to_string())
                    .ok_or_else(|| format!("vault reference {vault}: not read"))
            }
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolSpec {
    /// Replaces the server's description (which is the server's text, checked like
    /// external text before a model reads it).
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub output: Option<OutputContract>,
    /// Offered to the model whatever preprocessing chose.
    #[serde(default)]
    pub always_include: bool,
    /// The tool gets the user's personal data as written (see the skill manifest's
    /// `personal_data`).
    #[serde(default)]
    pub personal_data: bool,
    /// Not offered at all.
    #[serde(default)]
    pub disabled: bool,
    /// Arguments holding a URL the server will fetch: chatd's SSRF guard checks each before
    /// the call is forwarded (see [`crate::skills::mcp::url_guard`]).
    #[serde(default)]
    pub guarded_urls: Vec<String>,
}

impl McpSpec {
    /// The section's own rules (tool contracts are linted with the skill rules).
    pub fn lint(&self) -> Result<(), String> {
        match (self.command.is_empty(), &self.url) {
            (false, None) | (true, Some(_)) => {}
            _ => return Err("mcp: give exactly one of `command` (stdio) or `url` (HTTP)".into()),
        }
        if let Some(url) = &self.url
            && url::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https"))
        {
            return Err(format!("mcp.url `{url}` is not an http(s) URL"));
        }
        if self.command.first().is_some_and(|c| c.trim().is_empty()) {
            return Err("mcp.command: the program is empty".into());
        }
        if !self.headers.is_empty() && self.url.is_none() {
            return Err("mcp.headers apply to `url` servers only".into());
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err("mcp.timeout must be longer than zero".into());
        }
        Ok(())
    }
}
