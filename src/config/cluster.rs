//! `[cluster]`: several chatd nodes behind one load balancer, sharing Redis (the cache, the
//! turn store and the bus) and PostgreSQL (the store). Start-up refuses a cluster whose
//! nodes would not share what they must: the cache, the store, the token secret and the
//! keys.

use std::time::Duration;

use serde::Deserialize;

use super::{CacheBackendKind, Config, ConfigError, KeyProviderKind};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub enabled: bool,
    /// This node's name in Redis keys and logs; empty: host name and process id.
    pub node_id: String,
    /// How long a node owns a running turn without renewing it.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long a turn's frames stay available for resume after it ends.
    #[serde(with = "humantime_serde")]
    pub resume_window: Duration,
}

impl ClusterConfig {
    pub fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if self.lease < Duration::from_secs(1) {
            return invalid("cluster.lease", "must be at least 1s");
        }
        if self.resume_window.is_zero() {
            return invalid("cluster.resume_window", "must be longer than zero");
        }
        if !self.node_id.is_empty() && crate::ids::NodeId::parse(&self.node_id).is_err() {
            return invalid(
                "cluster.node_id",
                "must be 1 to 128 characters of [A-Za-z0-9_.:-]",
            );
        }
        if !self.enabled {
            return Ok(());
        }
        if config.cache.backend != CacheBackendKind::Redis {
            return invalid(
                "cache.backend",
                "cluster mode needs the shared cache: set cache.backend = \"redis\"",
            );
        }
        let store = config.store.url.trim();
        if !(store.starts_with("postgres://") || store.starts_with("postgresql://")) {
            return invalid(
                "store.url",
                "cluster mode needs a shared store: set store.url to postgres://...",
            );
        }
        if config.auth.secret.is_none() && config.auth.secret_file.is_none() {
            return invalid(
                "auth.secret",
                "cluster mode needs one token secret on every node: set auth.secret or auth.secret_file",
            );
        }
        let keys = &config.keys;
        let shared_local_key =
            keys.local_master_key_file.is_some() || std::env::var_os("CHATD_MASTER_KEY").is_some();
        if keys.provider == KeyProviderKind::Local && !shared_local_key {
            return invalid(
                "keys.provider",
                "cluster mode needs keys every node shares: set keys.provider = \"vault\", or keys.local_master_key_file (or CHATD_MASTER_KEY) on every node",
            );
        }
        Ok(())
    }

    /// This node's id.
    pub fn node(&self) -> crate::ids::NodeId {
        crate::ids::NodeId::parse(&self.node_id).unwrap_or_else(|_| crate::ids::NodeId::from_host())
    }
}
