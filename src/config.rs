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
mod cluster;
mod kv_ref;
mod skills;

pub use cluster::ClusterConfig;
pub use kv_ref::KvRef;
pub use skills::{SkillsConfig, WebSearchConfig};

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub secret: Option<SecretString>,
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
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
    /// The longest a turn may run (tool calls included); it ends then with
    /// `turn_deadline` and the text so far.
    #[serde(with = "humantime_serde")]
    pub turn_deadline: Duration,
    pub postprocessing: bool,
    /// Open the likely main call while preprocessing runs (see `pipeline::speculation`).
    pub speculative_main_call: bool,
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

    /// Checks the values serde cannot: ranges and cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        let s = &self.server;
        if s.max_frame_bytes < 1024 {
            return invalid("server.max_frame_bytes", "must be at least 1024");
        }
        if s.max_message_bytes < s.max_frame_bytes {
            return invalid(
                "server.max_message_bytes",
                "must be at least server.max_frame_bytes",
            );
        }
        if !(1024..=1 << 20).contains(&s.read_buffer_bytes) {
            return invalid(
                "server.read_buffer_bytes",
                "must be between 1024 and 1048576",
            );
        }
        if s.outbox_capacity == 0 {
            return invalid("server.outbox_capacity", "must be at least 1");
        }
        let l = &self.limits;
        if l.connection_rate == 0 || l.user_rate == 0 {
            return invalid("limits", "rates must be at least 1 per second");
        }
        if l.connection_burst < 1 || l.user_burst < 1 {
            return invalid("limits", "bursts must be at least 1");
        }
        if self.llm.provider == LlmProvider::OpenaiCompatible {
            let url = self.llm.base_url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return invalid("llm.base_url", "must start with http:// or https://");
            }
        }
        if self.llm.model.trim().is_empty() {
            return invalid("llm.model", "must not be empty");
        }
        if let Some(r) = &self.llm.api_key_vault {
            self.check_vault_ref("llm.api_key_vault", r)?;
        }
        let c = &self.cache;
        if c.backend == CacheBackendKind::Redis
            && !(c.redis_url.starts_with("redis://")
                || c.redis_url.starts_with("rediss://")
                || c.redis_url.starts_with("unix://"))
        {
            return invalid(
                "cache.redis_url",
                "must start with redis://, rediss:// or unix://",
            );
        }
        if c.backend == CacheBackendKind::Redis
            && c.redis_cluster
            && c.redis_url.starts_with("unix://")
        {
            return invalid(
                "cache.redis_cluster",
                "a Redis Cluster is reached over TCP: cache.redis_url must be redis:// or rediss://",
            );
        }
        if c.timeout.is_zero() {
            return invalid("cache.timeout", "must be longer than zero");
        }
        if c.ai_ttl.is_zero() || c.sync_ttl.is_zero() {
            return invalid("cache", "ai_ttl and sync_ttl must be longer than zero");
        }
        if !(1..=10_000).contains(&c.ai_max_messages) {
            return invalid("cache.ai_max_messages", "must be between 1 and 10000");
        }
        if !(1..=1000).contains(&c.ai_max_chats) {
            return invalid("cache.ai_max_chats", "must be between 1 and 1000");
        }
        let k = &self.keys;
        if k.provider == KeyProviderKind::Vault {
            let url = k.vault_addr.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return invalid("keys.vault_addr", "must start with http:// or https://");
            }
            if k.vault_token.is_none() && k.vault_token_file.is_none() {
                return invalid(
                    "keys.vault_token",
                    "set keys.vault_token or keys.vault_token_file for the vault provider",
                );
            }
            if k.transit_mount.trim().is_empty() {
                return invalid("keys.transit_mount", "must not be empty");
            }
        }
        if k.vault_timeout.is_zero() {
            return invalid("keys.vault_timeout", "must be longer than zero");
        }
        if self.auth.token_ttl.is_zero() {
            return invalid("auth.token_ttl", "must be longer than zero");
        }
        if self.llm.context_window < 1024 {
            return invalid("llm.context_window", "must be at least 1024 tokens");
        }
        self.validate_models()?;
        self.skills.validate()?;
        self.cluster.validate(self)?;
        let url = self.store.url.trim();
        if !(url.is_empty()
            || url.starts_with("sqlite://")
            || url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return invalid(
                "store.url",
                "must be empty (SQLite in server.data_dir), sqlite://PATH or postgres://...",
            );
        }
        let p = &self.pipeline;
        if !(1..=10).contains(&p.harm_threshold) || !(1..=10).contains(&p.misuse_threshold) {
            return invalid(
                "pipeline",
                "harm_threshold and misuse_threshold must be between 1 and 10",
            );
        }
        if !(0.0..=1.0).contains(&p.injection_caution_threshold) {
            return invalid(
                "pipeline.injection_caution_threshold",
                "must be between 0 and 1",
            );
        }
        if p.preprocessing_block_tokens < 1000 {
            return invalid(
                "pipeline.preprocessing_block_tokens",
                "must be at least 1000",
            );
        }
        if !(1..=20).contains(&p.max_tool_rounds) {
            return invalid("pipeline.max_tool_rounds", "must be between 1 and 20");
        }
        if p.stage_timeout.is_zero() {
            return invalid("pipeline.stage_timeout", "must be longer than zero");
        }
        self.validate_links()
    }

    fn validate_links(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        let l = &self.links;
        if l.timeout.is_zero() || l.timeout > Duration::from_secs(120) {
            return invalid("links.timeout", "must be between 1ms and 120s");
        }
        let t = l.search_url_template.trim();
        if !(t.starts_with("http://") || t.starts_with("https://")) || !t.contains("{query}") {
            return invalid(
                "links.search_url_template",
                "must start with http:// or https:// and contain {query}",
            );
        }
        if !(1..=1024).contains(&l.concurrency) {
            return invalid("links.concurrency", "must be between 1 and 1024");
        }
        if !(1..=64).contains(&l.per_host_concurrency) {
            return invalid("links.per_host_concurrency", "must be between 1 and 64");
        }
        if !(1..=1_000_000).contains(&l.cache_max_entries) {
            return invalid("links.cache_max_entries", "must be between 1 and 1000000");
        }
        if l.max_redirects > 20 {
            return invalid("links.max_redirects", "must be at most 20");
        }
        if let Some(proxy) = &l.proxy {
            use secrecy::ExposeSecret;
            let p = proxy.expose_secret().trim();
            if !(p.starts_with("http://") || p.starts_with("https://")) {
                return invalid("links.proxy", "must start with http:// or https://");
            }
        }
        Ok(())
    }

    /// A `MOUNT/PATH#FIELD` reference needs Vault access (`keys.vault_addr` and a token).
    fn check_vault_ref(&self, key: &'static str, reference: &str) -> Result<(), ConfigError> {
        if let Err(reason) = KvRef::parse(reference) {
            return Err(ConfigError::Invalid { key, reason });
        }
        if self.keys.vault_token.is_none() && self.keys.vault_token_file.is_none() {
            return Err(ConfigError::Invalid {
                key,
                reason:
                    "reading an API key from Vault needs keys.vault_token or keys.vault_token_file"
                        .into(),
            });
        }
        Ok(())
    }

    fn validate_models(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| Err(ConfigError::Invalid { key, reason });
        let m = &self.models;
        let mut ids = std::collections::HashSet::new();
        for entry in &m.catalog {
            if entry.id.trim().is_empty() {
                return invalid("models.catalog", "every entry needs an `id`".into());
            }
            if !ids.insert(entry.id.as_str()) {
                return invalid(
                    "models.catalog",
                    format!("model `{}` is listed twice", entry.id),
                );
            }
            if entry.context_window < 1024 {
                return invalid(
                    "models.catalog",
                    format!("model `{}`: context_window must be at least 1024", entry.id),
                );
            }
            if !(1..=3).contains(&entry.cost_tier) {
                return invalid(
                    "models.catalog",
                    format!("model `{}`: cost_tier must be 1, 2 or 3", entry.id),
                );
            }
            if let Some(url) = &entry.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return invalid(
                    "models.catalog",
                    format!(
                        "model `{}`: base_url must start with http:// or https://",
                        entry.id
                    ),
                );
            }
            if let Some(r) = &entry.api_key_vault {
                self.check_vault_ref("models.catalog", r)?;
            }
            if let Some(var) = &entry.api_key_env
                && std::env::var_os(var).is_none()
                && self.llm.provider == LlmProvider::OpenaiCompatible
            {
                return invalid(
                    "models.catalog",
                    format!(
                        "model `{}`: environment variable {var} is not set",
                        entry.id
                    ),
                );
            }
        }
        for (key, id) in [
            ("models.preprocessing", &m.preprocessing),
            ("models.main", &m.main),
            ("models.postprocessing", &m.postprocessing),
        ] {
            if id.is_empty() {
                continue;
            }
            let known = if m.catalog.is_empty() {
                *id == self.llm.model
            } else {
                ids.contains(id.as_str())
            };
            if !known {
                return invalid(key, format!("`{id}` is not in models.catalog"));
            }
        }
        Ok(())
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
