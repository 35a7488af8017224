//! `[skills]`: where app manifests come from, how skills run, the prompt-injection check,
//! and the built-in web skills' endpoints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsConfig {
    /// Directory of `*.yml` app manifests; empty: the built-in `config/apps/`.
    pub apps_dir: PathBuf,
    /// MCP apps whose manifest says `enabled: false` (the shipped `time` and `fetch`, whose
    /// packages chatd does not bring) that this node runs.
    #[serde(default)]
    pub mcp_apps: Vec<String>,
    /// Searched first for an MCP app's program named without a `/` (a virtual environment's
    /// `bin/`); then `PATH`.
    #[serde(default)]
    pub mcp_bin_dir: PathBuf,
    /// An MCP app's command line on this node, by app id (replaces the manifest's).
    #[serde(default)]
    pub mcp_commands: BTreeMap<String, Vec<String>>,
    /// Sub-requests of one call running at once.
    pub max_parallel_requests: usize,
    /// Per-attempt deadline of a skill request.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Pause before the one retry of a timeout or 5xx.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// A call still running (or waiting on a rate limit) after this long does not hold up
    /// the answer: its results follow as their own message.
    #[serde(with = "humantime_serde")]
    pub long_wait: Duration,
    /// Let `web-read` fetch, and an MCP tool's `guarded_urls` name, private, loopback and
    /// link-local addresses (tests only).
    pub allow_private_targets: bool,
    /// Largest page `web-read` reads.
    pub max_read_bytes: usize,
    /// Prompt-injection check: from this score on the strings are removed (the text withheld
    /// when none is found in it)...
    pub injection_block_score: f32,
    /// ...from this score on the embed is flagged for review.
    pub injection_review_score: f32,
    /// External text is checked in chunks of at most this many tokens, concurrently.
    pub injection_chunk_tokens: u32,
    /// The detector's prompt and function (YAML); empty: the built-in copy.
    pub injection_prompt_file: PathBuf,
    /// The detector's model (a catalog id); empty: the preprocessing model.
    #[serde(default)]
    pub content_sanitization_model: String,
    pub web_search: WebSearchConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// A Brave-Search-compatible API (`{base_url}/web/search?q=`).
    pub base_url: String,
    /// Sent as `X-Subscription-Token`; also from `CHATD__SKILLS__WEB_SEARCH__API_KEY`.
    #[serde(default)]
    pub api_key: Option<SecretString>,
}

impl SkillsConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if !(1..=50).contains(&self.max_parallel_requests) {
            return invalid("skills.max_parallel_requests", "must be 1 to 50");
        }
        if self.timeout.is_zero() {
            return invalid("skills.timeout", "must be longer than zero");
        }
        if self
            .mcp_commands
            .values()
            .any(|c| c.first().is_none_or(|p| p.trim().is_empty()))
        {
            return invalid("skills.mcp_commands", "each command needs its program");
        }
        if !(0.0..=10.0).contains(&self.injection_review_score)
            || !(0.0..=10.0).contains(&self.injection_block_score)
            || self.injection_review_score > self.injection_block_score
        {
            return invalid(
                "skills.injection_review_score",
                "scores are 0-10 and the review score is at most the block score",
            );
        }
        if self.injection_chunk_tokens < 1000 {
            return invalid("skills.injection_chunk_tokens", "must be at least 1000");
        }
        let url = self.web_search.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return invalid(
                "skills.web_search.base_url",
                "must start with http:// or https://",
            );
        }
        Ok(())
    }
}
