//! App manifests (`config/apps/*.yml`): apps, their skills, how each runs and what of its
//! output the model may see. [`lint()`] (`lint.rs`) checks a set of manifests; a bad one stops
//! start-up.
//!
//! Output contract (privilege separation): `agent_data` lists the fields the model may see,
//! each a number, boolean or *constrained* string (enum, pattern or format); `external_text`
//! lists free-text fields the model sees only after the prompt-injection check; everything
//! else declared in `user_content` goes to the user's embeds only. Undeclared fields are
//! dropped. `passthrough` skills give the model nothing but "delivered".

mod lint;
pub mod mcp;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

pub use lint::lint;
pub(crate) use lint::lint_skill;

/// Built-in executors.
pub const BUILTINS: &[&str] = &["docs-search", "web-search", "web-read"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppManifest {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub skills: Vec<SkillManifest>,
    /// Chat-level modes the app offers (see [`crate::focus`]).
    #[serde(default)]
    pub focus_modes: Vec<crate::focus::FocusModeManifest>,
    /// The app's settings/memories categories (see `crate::memories`).
    #[serde(default)]
    pub settings_memories: Option<crate::memories::SettingsMemoriesSection>,
    /// Procedures over several messages (`crate::routines`).
    #[serde(default)]
    pub routines: Vec<super::routine_manifest::RoutineManifest>,
    /// An MCP server whose tools become this app's skills ([`super::mcp`]).
    #[serde(default)]
    pub mcp: Option<mcp::McpSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillManifest {
    pub id: String,
    pub description: String,
    /// JSON Schema of one request (its `id` is injected by chatd, never declared).
    pub input: InputSchema,
    pub executor: Executor,
    /// The skill needs the user's connected account for this app.
    #[serde(default)]
    pub requires_account: bool,
    /// Offered to the model whatever preprocessing chose.
    #[serde(default)]
    pub always_include: bool,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// Shown as `provider` in results.
    #[serde(default)]
    pub provider: Option<String>,
    pub output: OutputContract,
    /// The skill needs the user's personal data as written (a search for the user's own
    /// address, a message to send to a number): while `privacy.pseudonymize` hides it from
    /// the model, the chat's placeholders in this skill's arguments are restored before it
    /// runs. Without it the skill gets the placeholders.
    #[serde(default)]
    pub personal_data: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSchema {
    pub properties: Map<String, Value>,
    #[serde(default)]
    pub required: Vec<String>,
}

/// Written `{builtin: NAME}` or `{http: {url, timeout?}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "ExecutorSpec")]
pub enum Executor {
    /// One of [`BUILTINS`].
    Builtin(String),
    /// POST the request as JSON to `url`; the answer is `{"results": [...]}`.
    Http {
        url: String,
        timeout: Option<Duration>,
    },
    /// A tool of the app's MCP server (made from its tool list, never written).
    Mcp {
        app: String,
        tool: String,
        timeout: Option<Duration>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutorSpec {
    #[serde(default)]
    builtin: Option<String>,
    #[serde(default)]
    http: Option<HttpSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSpec {
    url: String,
    #[serde(default, with = "humantime_serde::option")]
    timeout: Option<Duration>,
}

impl TryFrom<ExecutorSpec> for Executor {
    type Error = String;
    fn try_from(spec: ExecutorSpec) -> Result<Self, String> {
        match (spec.builtin, spec.http) {
            (Some(name), None) => Ok(Executor::Builtin(name)),
            (None, Some(h)) => Ok(Executor::Http {
                url: h.url,
                timeout: h.timeout,
            }),
            _ => Err(
                "executor must be exactly one of {builtin: NAME} or {http: {url, timeout}}".into(),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub per_second: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseMode {
    /// The model sees `agent_data` (and checked `external_text`) plus the filled template.
    Template,
    /// The model sees only that the content was delivered to the user.
    Passthrough,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputContract {
    pub mode: ResponseMode,
    /// Each result becomes a child embed of this type (composite skills).
    #[serde(default)]
    pub child_type: Option<String>,
    #[serde(default)]
    pub agent_data: BTreeMap<String, FieldSpec>,
    #[serde(default)]
    pub external_text: Vec<String>,
    #[serde(default)]
    pub user_content: Vec<String>,
    /// `{count}` and agent-data field names of the first result are filled in.
    #[serde(default)]
    pub template: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    #[serde(rename = "type")]
    pub kind: FieldKind,
    #[serde(default, rename = "enum")]
    pub allowed: Vec<String>,
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub format: Option<StringFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    String,
    Integer,
    Number,
    Boolean,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StringFormat {
    /// An absolute http(s) URL.
    Url,
    /// `YYYY-MM-DD`.
    Date,
    /// `[A-Za-z0-9_.:-]{1,128}`.
    Id,
    /// A language code (`en`, `pt-BR`).
    Language,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{file}: {reason}")]
    Invalid { file: String, reason: String },
}

/// The manifests compiled into the binary (`config/apps/`).
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "config/apps/docs.yml",
        include_str!("../../config/apps/docs.yml"),
    ),
    (
        "config/apps/web.yml",
        include_str!("../../config/apps/web.yml"),
    ),
    (
        "config/apps/travel.yml",
        include_str!("../../config/apps/travel.yml"),
    ),
    // MCP apps, opt-in (`enabled: false`; `skills.mcp_apps` switches them on).
    (
        "config/apps/time.yml",
        include_str!("../../config/apps/time.yml"),
    ),
    (
        "config/apps/fetch.yml",
        include_str!("../../config/apps/fetch.yml"),
    ),
];

/// Reads every `*.yml`/`*.yaml` in `dir` (sorted), or the built-in set when `dir` is empty,
/// and lints them together.
pub fn load(dir: &Path) -> Result<Vec<AppManifest>, ManifestError> {
    let sources: Vec<(String, String)> = if dir.as_os_str().is_empty() {
        BUILT_IN
            .iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect()
    } else {
        read_dir(dir)?
    };
    let mut apps = Vec::with_capacity(sources.len());
    for (file, text) in &sources {
        let app: AppManifest =
            serde_yaml_ng::from_str(text).map_err(|e| ManifestError::Invalid {
                file: file.clone(),
                reason: e.to_string(),
            })?;
        apps.push((file.clone(), app));
    }
    lint(&apps)?;
    Ok(apps.into_iter().map(|(_, a)| a).collect())
}

fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, ManifestError> {
    let read_err = |reason: String| ManifestError::Read {
        path: dir.display().to_string(),
        reason,
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| read_err(e.to_string()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(read_err("no *.yml app manifests".into()));
    }
    files
        .into_iter()
        .map(|p| {
            std::fs::read_to_string(&p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|e| ManifestError::Read {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                })
        })
        .collect()
}

/// `^(?:pattern)$`: patterns must match the whole value.
pub fn anchored(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

#[cfg(test)]
mod tests;
