//! App manifests (`config/apps/*.yml`): apps, their skills, how each runs and what of its
//! output the model may see. [`lint`] checks a set of manifests; a bad one stops start-up.
//!
//! Output contract (privilege separation): `agent_data` lists the fields the model may see,
//! each a number, boolean or *constrained* string (enum, pattern or format); `external_text`
//! lists free-text fields the model sees only after the prompt-injection check; everything
//! else declared in `user_content` goes to the user's embeds only. Undeclared fields are
//! dropped. `passthrough` skills give the model nothing but "delivered".

pub mod mcp;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use serde_json::{Map, Value};

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

fn slug_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Checks manifests (with the file each came from) and reports the first problem precisely.
pub fn lint(apps: &[(String, AppManifest)]) -> Result<(), ManifestError> {
    let mut app_ids = HashSet::new();
    for (file, app) in apps {
        let fail = |reason: String| {
            Err(ManifestError::Invalid {
                file: file.clone(),
                reason,
            })
        };
        if !slug_ok(&app.id) {
            return fail(format!(
                "app id `{}` must be 1-40 of [a-z0-9_] (`-` joins app and skill)",
                app.id
            ));
        }
        if !app_ids.insert(app.id.as_str()) {
            return fail(format!("app `{}` is defined twice", app.id));
        }
        if app.skills.is_empty() && app.settings_memories.is_none() && app.mcp.is_none() {
            return fail(format!(
                "app `{}` has no skills, no mcp server and no settings_memories",
                app.id
            ));
        }
        if let Some(mcp) = &app.mcp {
            if let Err(reason) = mcp.lint() {
                return fail(format!("app `{}`: {reason}", app.id));
            }
            for (tool, declared) in &mcp.tools {
                let Some(output) = &declared.output else {
                    continue;
                };
                let probe = SkillManifest {
                    id: mcp::skill_id(tool),
                    description: "declared".into(),
                    input: InputSchema {
                        properties: Map::new(),
                        required: Vec::new(),
                    },
                    executor: Executor::Mcp {
                        app: app.id.clone(),
                        tool: tool.clone(),
                        timeout: None,
                    },
                    requires_account: false,
                    always_include: false,
                    rate_limit: None,
                    provider: None,
                    output: output.clone(),
                };
                if let Err(reason) = lint_skill(&probe) {
                    return fail(format!("mcp tool `{}-{tool}`: {reason}", app.id));
                }
            }
        }
        if let Some(section) = &app.settings_memories
            && let Err(reason) = crate::memories::lint_section(section)
        {
            return fail(format!("app `{}`: {reason}", app.id));
        }
        let mut skill_ids = HashSet::new();
        for skill in &app.skills {
            if let Err(reason) = lint_skill(skill) {
                return fail(format!("skill `{}-{}`: {reason}", app.id, skill.id));
            }
            if !skill_ids.insert(skill.id.as_str()) {
                return fail(format!("skill `{}-{}` is defined twice", app.id, skill.id));
            }
        }
    }
    lint_focus_modes(apps)
}

/// Each app's focus modes, against every app's skills (a focus mode may offer any).
fn lint_focus_modes(apps: &[(String, AppManifest)]) -> Result<(), ManifestError> {
    let skills: HashSet<String> = apps
        .iter()
        .flat_map(|(_, a)| a.skills.iter().map(|s| format!("{}-{}", a.id, s.id)))
        .collect();
    for (file, app) in apps {
        crate::focus::manifest::lint(&app.id, &app.focus_modes, &skills).map_err(|reason| {
            ManifestError::Invalid {
                file: file.clone(),
                reason,
            }
        })?;
    }
    Ok(())
}

pub(crate) fn lint_skill(s: &SkillManifest) -> Result<(), String> {
    if !slug_ok(&s.id) {
        return Err("the skill id must be 1-40 of [a-z0-9_]".into());
    }
    if s.description.trim().is_empty() {
        return Err("a description is required (the model chooses skills by it)".into());
    }
    if s.input.properties.contains_key("id") {
        return Err(
            "input declares `id`: chatd injects each request's id; remove it from the schema"
                .into(),
        );
    }
    for r in &s.input.required {
        if !s.input.properties.contains_key(r) {
            return Err(format!(
                "input.required names `{r}`, which is not a property"
            ));
        }
    }
    match &s.executor {
        Executor::Builtin(name) if !BUILTINS.contains(&name.as_str()) => {
            return Err(format!(
                "unknown built-in executor `{name}` (known: {})",
                BUILTINS.join(", ")
            ));
        }
        Executor::Http { url, .. }
            if url::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) =>
        {
            return Err(format!("executor.http.url `{url}` is not an http(s) URL"));
        }
        _ => {}
    }
    if s.rate_limit.is_some_and(|r| r.per_second == 0) {
        return Err("rate_limit.per_second must be at least 1".into());
    }
    let o = &s.output;
    if o.mode == ResponseMode::Passthrough
        && (!o.agent_data.is_empty() || !o.external_text.is_empty())
    {
        return Err(
            "a passthrough skill gives the model nothing: declare its fields in user_content"
                .into(),
        );
    }
    for (name, spec) in &o.agent_data {
        if spec.kind == FieldKind::String
            && spec.allowed.is_empty()
            && spec.pattern.is_none()
            && spec.format.is_none()
        {
            return Err(format!(
                "agent_data.{name} is an unconstrained string: give it an enum, a pattern or a \
                 format, or move it to external_text (checked) or user_content (user only)"
            ));
        }
        if spec.kind != FieldKind::String
            && (spec.pattern.is_some() || spec.format.is_some() || !spec.allowed.is_empty())
        {
            return Err(format!(
                "agent_data.{name}: enum, pattern and format apply to strings only"
            ));
        }
        if let Some(p) = &spec.pattern {
            let re = Regex::new(&anchored(p))
                .map_err(|e| format!("agent_data.{name}.pattern does not compile: {e}"))?;
            if spec.allowed.is_empty() && super::free_text::admits_free_text(&re) {
                return Err(format!(
                    "agent_data.{name}.pattern admits free text (a sentence of more than {} \
                     words): tighten it or give it an enum, or move the field to \
                     external_text (checked) or user_content (user only)",
                    super::free_text::MAX_WORD_RUN
                ));
            }
        }
    }
    let mut seen: HashSet<&str> = o.agent_data.keys().map(String::as_str).collect();
    for f in o.external_text.iter().chain(&o.user_content) {
        if !seen.insert(f.as_str()) {
            return Err(format!("output field `{f}` is declared twice"));
        }
    }
    if let Some(t) = &o.template {
        for cap in placeholder_names(t) {
            if cap != "count" && !o.agent_data.contains_key(&cap) {
                return Err(format!(
                    "template uses `{{{cap}}}`, which is neither `count` nor an agent_data field"
                ));
            }
        }
    }
    Ok(())
}

/// `^(?:pattern)$`: patterns must match the whole value.
pub fn anchored(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

fn placeholder_names(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<(), String> {
        let app: AppManifest = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        lint(&[("t.yml".into(), app)]).map_err(|e| e.to_string())
    }

    const BASE: &str = r#"
id: demo
name: Demo
skills:
  - id: find
    description: Finds things.
    input: {properties: {query: {type: string}}, required: [query]}
    executor: {http: {url: "http://127.0.0.1:1/find", timeout: 5s}}
    output:
      mode: template
      agent_data:
        url: {type: string, format: url}
        rank: {type: integer}
      user_content: [snippet]
      template: "{count} results, first {url}"
"#;

    #[test]
    fn the_built_in_manifests_lint_clean() {
        let apps = load(Path::new("")).unwrap();
        assert!(apps.iter().any(|a| a.id == "web"));
    }

    #[test]
    fn settings_memories_categories_are_linted() {
        let with = |schema: &str| {
            format!(
                "{BASE}settings_memories:\n  categories:\n    - {{id: trips, title: Trips, \
                 description: Planned trips, schema: {schema}}}\n"
            )
        };
        parse(&with("{type: object, properties: {to: {type: string}}}")).unwrap();
        // Not a JSON Schema (an unknown type): refused, naming the category.
        let err = parse(&with("{type: objcet}")).unwrap_err();
        assert!(
            err.contains("t.yml") && err.contains("`trips`") && err.contains("objcet"),
            "{err}"
        );
        let bare = "id: empty\nname: Empty\n";
        assert!(
            parse(bare)
                .unwrap_err()
                .contains("no skills, no mcp server and no settings_memories")
        );
    }

    #[test]
    fn a_good_manifest_passes() {
        parse(BASE).unwrap();
        parse(&format!(
            "{BASE}focus_modes:\n  - {{id: deep, title: Deep, instruction: Go deep., tools: [demo-find]}}\n"
        ))
        .unwrap();
    }

    #[test]
    fn lint_errors_are_precise() {
        let cases = [
            (
                BASE.replace("{type: string, format: url}", "{type: string}"),
                "agent_data.url is an unconstrained string",
            ),
            (
                BASE.replace(
                    "{query: {type: string}}",
                    "{query: {type: string}, id: {type: integer}}",
                ),
                "input declares `id`",
            ),
            (
                BASE.replace("first {url}", "first {title}"),
                "template uses `{title}`",
            ),
            (
                BASE.replace("mode: template", "mode: passthrough"),
                "passthrough",
            ),
            (
                BASE.replace("http://127.0.0.1:1/find", "ftp://x"),
                "not an http(s) URL",
            ),
            (BASE.replace("id: find", "id: Find-It"), "skill id"),
            (
                format!(
                    "{BASE}focus_modes:\n  - {{id: deep, title: Deep, instruction: Go deep., tools: [demo-lose]}}\n"
                ),
                "focus mode `demo-deep`: tool `demo-lose` is not a skill",
            ),
            (
                BASE.replace("format: url}", "pattern: \"(\"}"),
                "pattern does not compile",
            ),
            (
                BASE.replace("format: url}", "pattern: \"[A-Za-z_-]{1,80}\"}"),
                "pattern admits free text",
            ),
        ];
        for (yaml, expected) in cases {
            let err = parse(&yaml).unwrap_err();
            assert!(err.contains(expected), "{err} should mention {expected}");
            assert!(err.contains("t.yml") && err.contains("demo-"), "{err}");
        }
    }
}
