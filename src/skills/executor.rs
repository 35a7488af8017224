//! Running one request of a skill once: a built-in (`docs-search`, `web-search`, `web-read`)
//! or a remote HTTP skill (POST the request as JSON; the answer is `{"results": [...]}`).
//! Retries, rate limits and cancellation are the runner's; this is one attempt. How an
//! attempt fails is [`super::exec_error`]'s (re-exported here).

use secrecy::ExposeSecret;
use serde_json::{Value, json};

pub use super::exec_error::{ExecError, checked, transport};
use super::manifest::Executor;
use crate::config::SkillsConfig;

/// What one request produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub results: Vec<Value>,
    /// Follow-up requests the skill suggests to the user (shown in the embed).
    pub suggestions: Vec<String>,
    /// Extra guidance for the model (checked for prompt injection like any external text).
    pub added_instructions: Option<String>,
}

impl From<Vec<Value>> for Output {
    fn from(results: Vec<Value>) -> Self {
        Output {
            results,
            ..Output::default()
        }
    }
}

/// What an attempt may use besides the request.
pub struct Using<'a> {
    pub http: &'a reqwest::Client,
    pub config: &'a SkillsConfig,
    pub mcp: &'a super::mcp::McpApps,
    pub tasks: &'a tokio_util::task::TaskTracker,
    /// An MCP tool's progress notifications.
    pub on_progress: &'a (dyn Fn(super::mcp::conn::Progress) + Send + Sync),
}

/// One attempt of one request (`request` without its `id`).
pub async fn execute(
    executor: &Executor,
    using: &Using<'_>,
    request: &Value,
) -> Result<Output, ExecError> {
    let (http, config) = (using.http, using.config);
    match executor {
        Executor::Mcp { app, tool, .. } => {
            let server = using
                .mcp
                .get(app)
                .ok_or_else(|| ExecError::Invalid(format!("no MCP server for `{app}`")))?;
            // URLs the server will fetch pass chatd's SSRF guard first.
            if let Some(declared) = server.spec.tools.get(tool) {
                let guard = crate::net_guard::Guard {
                    allow_private: config.allow_private_targets,
                };
                super::mcp::url_guard::check(&declared.guarded_urls, request, guard).await?;
            }
            let arguments = request.as_object().cloned().unwrap_or_default();
            let result = server
                .call(tool, arguments, using.on_progress, using.tasks)
                .await
                .map_err(|e| match e {
                    super::mcp::conn::ConnError::Protocol(m) => ExecError::Invalid(m),
                    other => ExecError::Connect(other.to_string()),
                })?;
            super::mcp::tools::result_of(&result)
                .map(|r| Output::from(vec![r]))
                .map_err(|e| ExecError::Invalid(e.to_string()))
        }
        Executor::Http { url, timeout } => {
            let deadline = timeout.unwrap_or(config.timeout);
            let response = http
                .post(url)
                .timeout(deadline)
                .json(request)
                .send()
                .await
                .map_err(|e| transport(e, deadline))?;
            results_of(
                checked(response)?
                    .json::<Value>()
                    .await
                    .map_err(|e| transport(e, deadline))?,
            )
        }
        Executor::Builtin(name) => match name.as_str() {
            "docs-search" => Ok(super::docs::search(str_field(request, "query")?, 3).into()),
            "web-search" => web_search(http, config, request).await.map(Output::from),
            "web-read" => super::web_read::read(config, str_field(request, "url")?)
                .await
                .map(Output::from),
            other => Err(ExecError::Invalid(format!("unknown built-in `{other}`"))),
        },
    }
}

fn str_field<'a>(request: &'a Value, field: &str) -> Result<&'a str, ExecError> {
    request[field]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| ExecError::Invalid(format!("`{field}` must be a non-empty string")))
}

/// `{"results": [...], "suggestions_follow_up_requests"?: [...], "added_instructions"?: "..."}`
/// (or a bare array of results).
fn results_of(body: Value) -> Result<Output, ExecError> {
    match body {
        Value::Array(items) => Ok(items.into()),
        Value::Object(mut map) => {
            let Some(Value::Array(results)) = map.remove("results") else {
                return Err(ExecError::Invalid(
                    "the skill's answer has no `results` array".into(),
                ));
            };
            let suggestions = match map.remove("suggestions_follow_up_requests") {
                Some(Value::Array(s)) => s
                    .into_iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .filter(|s| !s.trim().is_empty() && s.len() <= 300)
                    .take(6)
                    .collect(),
                _ => Vec::new(),
            };
            let added_instructions = map
                .remove("added_instructions")
                .and_then(|v| v.as_str().map(str::to_string))
                .filter(|s| !s.trim().is_empty());
            Ok(Output {
                results,
                suggestions,
                added_instructions,
            })
        }
        _ => Err(ExecError::Invalid("the skill's answer is not JSON".into())),
    }
}

/// A Brave-Search-compatible web search: `GET {base_url}/web/search?q=&count=`.
async fn web_search(
    http: &reqwest::Client,
    config: &SkillsConfig,
    request: &Value,
) -> Result<Vec<Value>, ExecError> {
    let query = str_field(request, "query")?;
    let count = request["count"].as_u64().unwrap_or(5).clamp(1, 10);
    let base = config.web_search.base_url.trim_end_matches('/');
    let mut url = url::Url::parse(&format!("{base}/web/search"))
        .map_err(|e| ExecError::Invalid(format!("skills.web_search.base_url: {e}")))?;
    url.query_pairs_mut()
        .append_pair("q", query)
        .append_pair("count", &count.to_string());
    let mut req = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(config.timeout);
    if let Some(key) = &config.web_search.api_key {
        req = req.header("X-Subscription-Token", key.expose_secret());
    }
    let body: Value = checked(req.send().await.map_err(|e| transport(e, config.timeout))?)?
        .json()
        .await
        .map_err(|e| transport(e, config.timeout))?;
    let items = body["web"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(items
        .into_iter()
        .take(count as usize)
        .map(|r| {
            json!({
                "title": r["title"],
                "url": r["url"],
                "description": r["description"],
                "page_age": r["page_age"].as_str().map(|d| d.chars().take(10).collect::<String>()),
                "thumbnail": r["thumbnail"]["src"],
            })
        })
        .collect())
}
