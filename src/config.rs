//! Typed configuration: the compiled-in `config/default.toml`, merged with an optional
//! file and `CHATD__SECTION__KEY` environment variables. Loaded once at start-up;
//! tests build a [`Config`] and edit the struct instead of touching the environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use secrecy::SecretString;
use serde::Deserialize;

/// The defaults, compiled into the binary.
mod auth;
mod cluster;
mod kv_ref;
mod privacy;
mod routines;
mod skills;
mod validate;
mod web;

pub use auth::AuthConfig;
pub use cluster::ClusterConfig;
pub use kv_ref::KvRef;
pub use privacy::{PersonalData, PrivacyConfig};
pub use routines::RoutinesConfig;
pub use skills::{SkillsConfig, WebSearchConfig};
pub use web::{Toggle, WebConfig};

pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub limits: LimitsConfig,
    pub auth: AuthConfig,
    pub llm: LlmConfig,
    pub cache: CacheConfig,
    pub keys: KeysConfig,
    pub models: ModelsConfig,
    pub pipeline: PipelineConfig,
    pub skills: SkillsConfig,
    pub store: StoreConfig,
    pub links: LinksConfig,
    pub cluster: ClusterConfig,
    pub web: WebConfig,
    /// `[routines]` (optional: every key has a default).
    #[serde(default)]
    pub routines: RoutinesConfig,
    /// `[privacy]`: pseudonymisation before model requests (optional).
    #[serde(default)]
    pub privacy: PrivacyConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub max_frame_bytes: usize,
    pub max_message_bytes: usize,
    pub read_buffer_bytes: usize,
    pub outbox_capacity: usize,
    /// Bytes queued per socket before the client counts as behind.
    pub outbox_bytes: usize,
    /// How long a socket's queue may stay over `outbox_bytes` before it is closed (4001).
    #[serde(with = "humantime_serde")]
    pub slow_consumer_grace: Duration,
    /// The kernel's send buffer per socket (`SO_SNDBUF`; 0: the kernel tunes it).
    pub socket_send_buffer_bytes: usize,
    pub allowed_origins: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub connection_rate: u32,
    pub connection_burst: u32,
    pub user_rate: u32,
    pub user_burst: u32,
    pub max_queued_per_chat: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmProvider {
    Simulated,
    OpenaiCompatible,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    pub provider: LlmProvider,
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<SecretString>,
    /// `MOUNT/PATH#FIELD` of a Vault/OpenBao KV v2 secret holding the API key (read at start-up).
    #[serde(default)]
    pub api_key_vault: Option<String>,
    pub model: String,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub simulated_pace: Duration,
    pub context_window: u32,
    /// Sent as `max_tokens` with every main call; a provider that streams on regardless is
    /// cut at 8 bytes per token. Either way the turn ends with `answer_too_long`.
    pub max_output_tokens: u32,
    /// Whether requests cost money (unset: by address, a provider on this machine or a
    /// private network is free). Decides `speculative_main_call = "auto"`.
    #[serde(default)]
    pub metered: Option<bool>,
    /// Send `prompt_cache_key` (a hash of the user and chat, never either id) so a provider
    /// with prompt caching routes a chat's requests to the same cache.
    pub prompt_cache_key: bool,
    /// Send the provider's `user` field with the main calls: a hash of the user's hash
    /// (never the id), stable per user, for a provider's abuse monitoring. Off by default.
    pub send_user: bool,
}

/// What a model can do, as far as model selection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Tools,
    Vision,
    Reasoning,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// `MOUNT/PATH#FIELD` of a Vault/OpenBao KV v2 secret holding the API key.
    #[serde(default)]
    pub api_key_vault: Option<String>,
    /// Filled at start-up from `api_key_vault` (never from the file).
    #[serde(skip)]
    pub api_key: Option<SecretString>,
    pub context_window: u32,
    #[serde(default)]
    pub capabilities: Vec<Capability>,
    #[serde(default = "default_tier")]
    pub cost_tier: u8,
}

fn default_tier() -> u8 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    pub preprocessing: String,
    pub main: String,
    pub postprocessing: String,
    #[serde(default)]
    pub catalog: Vec<ModelEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    pub instructions_file: PathBuf,
    pub harm_threshold: u8,
    pub misuse_threshold: u8,
    pub injection_caution_threshold: f32,
    pub preprocessing_block_tokens: u32,
    #[serde(with = "humantime_serde")]
    pub stage_timeout: Duration,
    pub max_tool_rounds: u32,
    pub answer_reserve_tokens: u32,
    /// The share of the main model's context window (after `answer_reserve_tokens`) past
    /// which a chat's oldest messages are summarised into one compressed message after an
    /// answer (`turn::compress`); 0 turns compression off (the oldest are only trimmed).
    pub compress_at: f64,
    /// The longest a turn may run (tool calls included); it ends then with
    /// `turn_deadline` and the text so far.
    #[serde(with = "humantime_serde")]
    pub turn_deadline: Duration,
    pub postprocessing: bool,
    /// A chat's latest summary joins its main request, and the summaries of the
    /// user's other chats in the AI cache join preprocessing (see `pipeline::summary`).
    pub carry_summary: bool,
    /// How many other chats' summaries preprocessing gets (0 to 3).
    pub recent_summaries: usize,
    /// Tokens of one carried summary at most (a longer one is cut).
    pub summary_max_tokens: u32,
    /// Postprocessing's `harmful_response` at or above which the answer is reprocessed
    /// (0: never).
    pub harmful_response_threshold: u8,
    /// Open the likely main call while preprocessing runs (see `pipeline::speculation`).
    pub speculative_main_call: Speculation,
    /// `auto` with a metered model: speculate while the expected waste (the estimated share
    /// of guesses that miss, each a main call's input tokens thrown away) stays at or below
    /// this share of the main calls' input tokens.
    pub speculation_budget: f64,
}

/// `pipeline.speculative_main_call`: whether the likely main call is opened while
/// preprocessing runs. A wrong guess is one more (dropped) request to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculation {
    /// Always for models whose requests cost nothing (local endpoints, the simulated
    /// model); for metered ones while the expected waste stays within
    /// `pipeline.speculation_budget`.
    Auto,
    On,
    Off,
}

/// Background link validation (`[links]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinksConfig {
    pub enabled: bool,
    pub allow_private_targets: bool,
    /// Deadline of one URL's check, redirects included.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Replacement for a broken link; `{query}` becomes the link text.
    pub search_url_template: String,
    pub concurrency: usize,
    pub per_host_concurrency: usize,
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    pub cache_max_entries: usize,
    pub max_redirects: usize,
    /// Outbound proxy URL (may hold credentials, hence secret).
    #[serde(default)]
    pub proxy: Option<SecretString>,
    pub report_replaced: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheBackendKind {
    Memory,
    Redis,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    pub backend: CacheBackendKind,
    pub redis_url: String,
    /// `redis_url` is a seed node of a Redis Cluster (the cluster client follows the slots).
    pub redis_cluster: bool,
    /// Deadline of every cache call.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub memory_max_entries: usize,
    #[serde(with = "humantime_serde")]
    pub ai_ttl: Duration,
    pub ai_max_messages: usize,
    pub ai_max_chats: usize,
    #[serde(with = "humantime_serde")]
    pub sync_ttl: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyProviderKind {
    Local,
    Vault,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysConfig {
    pub provider: KeyProviderKind,
    pub vault_addr: String,
    #[serde(default)]
    pub vault_token: Option<SecretString>,
    #[serde(default)]
    pub vault_token_file: Option<PathBuf>,
    pub transit_mount: String,
    /// Deadline of every key-service call.
    #[serde(with = "humantime_serde")]
    pub vault_timeout: Duration,
    /// How long an unwrapped data key stays in memory; `0s` disables the cache.
    #[serde(with = "humantime_serde")]
    pub data_key_ttl: Duration,
    /// Local provider: master key file (default `<data_dir>/master_key`, mode 0600).
    #[serde(default)]
    pub local_master_key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://...`; empty: `sqlite://<data_dir>/chatd.db`.
    pub url: String,
}

impl Config {
    /// The store URL with the default applied.
    pub fn store_url(&self) -> String {
        if self.store.url.trim().is_empty() {
            format!(
                "sqlite://{}",
                self.server.data_dir.join("chatd.db").display()
            )
        } else {
            self.store.url.trim().to_string()
        }
    }
}

/// A configuration problem, reported by `chatd check-config` and at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("{0}")]
    Parse(Box<figment::Error>),
    #[error("invalid value for `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
}

/// The user's data directory for chatd: `$XDG_DATA_HOME/chatd`, else
/// `$HOME/.local/share/chatd`, else `./data` (no home at all).
fn user_data_dir() -> PathBuf {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(xdg) = non_empty("XDG_DATA_HOME") {
        return PathBuf::from(xdg).join("chatd");
    }
    match non_empty("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/chatd"),
        None => PathBuf::from("./data"),
    }
}

impl Config {
    /// Defaults + optional file + `CHATD__*` environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::MissingFile(path.to_path_buf()));
            }
            figment = figment.merge(Toml::file(path));
        }
        figment = figment.merge(Env::prefixed("CHATD__").split("__"));
        Self::from_figment(figment)
    }

    /// The compiled-in defaults alone (tests start from this and edit the struct).
    pub fn defaults() -> Result<Config, ConfigError> {
        Self::from_figment(Figment::from(Toml::string(DEFAULT_TOML)))
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(Box::new(e)))?;
        if config.server.data_dir.as_os_str().is_empty() {
            config.server.data_dir = user_data_dir();
        }
        config.validate()?;
        Ok(config)
    }

    /// True when chatd runs without any external service.
    pub fn is_embedded(&self) -> bool {
        self.llm.provider == LlmProvider::Simulated
            && self.cache.backend == CacheBackendKind::Memory
            && self.keys.provider == KeyProviderKind::Local
    }
}

#[cfg(test)]
mod tests;
