//! The rules serde cannot check: ranges, cross-field rules, what cluster mode requires,
//! the links and models sections, and Vault references; the first broken one is reported
//! with its key.

use super::*;

/// The error for `key`: `reason`.
fn invalid(key: &'static str, reason: &str) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid {
        key,
        reason: reason.to_string(),
    })
}

impl Config {
    /// Checks the values serde cannot: ranges and cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_llm()?;
        self.validate_cache()?;
        self.validate_keys()?;
        self.auth.validate()?;
        if self.llm.context_window < 1024 {
            return invalid("llm.context_window", "must be at least 1024 tokens");
        }
        self.validate_models()?;
        self.skills.validate()?;
        self.routines.validate()?;
        self.privacy.validate()?;
        self.cluster.validate(self)?;
        self.validate_store()?;
        self.validate_pipeline()?;
        self.validate_links()
    }

    /// `server.*` and the rate limits.
    fn validate_server(&self) -> Result<(), ConfigError> {
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
        if s.outbox_bytes < 16 * 1024 {
            return invalid("server.outbox_bytes", "must be at least 16384");
        }
        if s.slow_consumer_grace.is_zero() {
            return invalid("server.slow_consumer_grace", "must be longer than zero");
        }
        let l = &self.limits;
        if l.connection_rate == 0 || l.user_rate == 0 {
            return invalid("limits", "rates must be at least 1 per second");
        }
        if l.connection_burst < 1 || l.user_burst < 1 {
            return invalid("limits", "bursts must be at least 1");
        }
        Ok(())
    }

    /// The single-provider `llm.*` settings (its context window is checked after `auth`).
    fn validate_llm(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `cache.*`: the Redis URL (and what a Cluster needs), TTLs and sizes.
    fn validate_cache(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `keys.*`: what the Vault provider needs.
    fn validate_keys(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `store.url`: empty (SQLite in the data directory), SQLite or Postgres.
    fn validate_store(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `pipeline.*`: thresholds, budgets and timeouts.
    fn validate_pipeline(&self) -> Result<(), ConfigError> {
        let p = &self.pipeline;
        if !(1..=10).contains(&p.harm_threshold) || !(1..=10).contains(&p.misuse_threshold) {
            return invalid(
                "pipeline",
                "harm_threshold and misuse_threshold must be between 1 and 10",
            );
        }
        if p.harmful_response_threshold > 10 {
            return invalid(
                "pipeline.harmful_response_threshold",
                "must be between 0 (off) and 10",
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
        if !(0.0..=1.0).contains(&p.compress_at) {
            return invalid("pipeline.compress_at", "must be between 0 (off) and 1");
        }
        if p.recent_summaries > 3 {
            return invalid("pipeline.recent_summaries", "must be between 0 and 3");
        }
        if !(1..=4000).contains(&p.summary_max_tokens) {
            return invalid("pipeline.summary_max_tokens", "must be between 1 and 4000");
        }
        Ok(())
    }

    /// `links.*`: timeouts, the search URL, concurrency, cache size, redirects, proxy.
    fn validate_links(&self) -> Result<(), ConfigError> {
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

    /// `models.*`: the catalog's entries, and every stage's model in it.
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
            (
                "skills.content_sanitization_model",
                &self.skills.content_sanitization_model,
            ),
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
}
