//! The tools the main model may call. [`ToolRunner`] is the seam the skills runner plugs
//! into; until then [`BuiltinTools`] offers one real, offline skill: `docs-search`, a
//! keyword search over chatd's own documentation. Every tool takes a `requests` array
//! whose items carry an `id`; results are grouped by that id and handed to the model in TOON.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::llm::{ToolCall, ToolDef};

/// A skill as preprocessing sees it (to validate `relevant_app_skills`).
#[derive(Debug, Clone)]
pub struct SkillInfo {
    /// `app_id-skill_id`.
    pub id: String,
    pub description: String,
    /// The app whose connected account the skill needs, if any.
    pub requires_account: Option<String>,
}

pub trait ToolRunner: Send + Sync {
    /// Every skill that exists.
    fn skills(&self) -> Vec<SkillInfo>;
    /// Skills offered to the model whatever preprocessing chose.
    fn always_include(&self) -> Vec<String>;
    /// Tool definitions for these skill ids (unknown ids are skipped).
    fn definitions(&self, ids: &[String]) -> Vec<ToolDef>;
    /// Runs one call; the answer is the tool message content for the model.
    fn run(&self, call: ToolCall, cancel: CancellationToken) -> BoxFuture<'static, String>;
}

/// The model's message for a call to a tool that was not offered (never executed).
pub fn refused(name: &str) -> String {
    toon(&json!({
        "status": "error",
        "error": format!("tool `{name}` is not available in this turn; answer without it"),
    }))
}

pub fn toon(value: &Value) -> String {
    toon_format::encode_default(value).unwrap_or_else(|_| value.to_string())
}

#[derive(Default)]
pub struct BuiltinTools;

const DOCS: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    (
        "protocol/README.md",
        include_str!("../../protocol/README.md"),
    ),
];

#[derive(Deserialize)]
struct SearchArgs {
    requests: Vec<SearchRequest>,
}

#[derive(Deserialize)]
struct SearchRequest {
    #[serde(default)]
    id: Option<Value>,
    query: String,
}

impl BuiltinTools {
    pub fn new() -> Arc<Self> {
        Arc::new(Self)
    }
}

impl ToolRunner for BuiltinTools {
    fn skills(&self) -> Vec<SkillInfo> {
        vec![SkillInfo {
            id: "docs-search".into(),
            description: "Search chatd's documentation (README and protocol catalogue)".into(),
            requires_account: None,
        }]
    }

    fn always_include(&self) -> Vec<String> {
        Vec::new()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        self.skills()
            .into_iter()
            .filter(|s| ids.contains(&s.id))
            .map(|s| ToolDef {
                name: s.id,
                description: s.description,
                parameters: json!({
                    "type": "object",
                    "properties": {"requests": {"type": "array", "minItems": 1, "maxItems": 5,
                        "items": {"type": "object", "properties": {
                            "id": {"type": ["integer", "string"], "description": "unique per request"},
                            "query": {"type": "string"}},
                          "required": ["query"]}}},
                    "required": ["requests"]
                }),
            })
            .collect()
    }

    fn run(&self, call: ToolCall, _cancel: CancellationToken) -> BoxFuture<'static, String> {
        Box::pin(async move {
            if call.name != "docs-search" {
                return refused(&call.name);
            }
            let args: SearchArgs = match serde_json::from_str(&call.arguments) {
                Ok(a) => a,
                Err(e) => {
                    return toon(&json!({"status": "error",
                        "error": format!("invalid arguments: {e}; expected {{\"requests\": [{{\"id\": 1, \"query\": \"...\"}}]}}")}));
                }
            };
            let results: Vec<Value> = args
                .requests
                .iter()
                .take(5)
                .enumerate()
                .map(|(i, r)| {
                    json!({"id": r.id.clone().unwrap_or_else(|| json!(i + 1)),
                           "results": search_docs(&r.query, 3)})
                })
                .collect();
            toon(&json!({"results": results, "provider": "chatd-docs"}))
        })
    }
}

/// The paragraphs of the bundled docs that share the most words with `query`.
fn search_docs(query: &str, limit: usize) -> Vec<Value> {
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|t| t.len() > 2)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &str, &str)> = DOCS
        .iter()
        .flat_map(|(file, text)| text.split("\n\n").map(move |p| (*file, p)))
        .filter_map(|(file, p)| {
            let lower = p.to_lowercase();
            let score = terms.iter().filter(|t| lower.contains(t.as_str())).count();
            (score > 0).then_some((score, file, p))
        })
        .collect();
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    scored
        .into_iter()
        .take(limit)
        .map(|(_, file, p)| {
            let snippet: String = p.chars().take(400).collect();
            json!({"source": file, "snippet": snippet})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn docs_search_groups_results_by_request_id() {
        let tools = BuiltinTools::new();
        let call = ToolCall {
            id: "c1".into(),
            name: "docs-search".into(),
            arguments: r#"{"requests":[{"id":7,"query":"readyz dependencies"},{"query":"token"}]}"#
                .into(),
        };
        let out = tools.run(call, CancellationToken::new()).await;
        let v: Value = toon_format::decode_default(&out).unwrap();
        assert_eq!(v["results"][0]["id"], 7);
        assert_eq!(v["results"][1]["id"], 2);
        assert!(!v["results"][0]["results"].as_array().unwrap().is_empty());
        let bad = ToolCall {
            id: "c2".into(),
            name: "docs-search".into(),
            arguments: "not json".into(),
        };
        assert!(
            tools
                .run(bad, CancellationToken::new())
                .await
                .contains("invalid arguments")
        );
    }
}
