//! Preprocessing: the history is cut into blocks of at most `pipeline.preprocessing_block_tokens`
//! tokens (on message boundaries), one forced `preprocess` call per block runs concurrently,
//! and the answers are merged ([`merge`]): maximum scores, the language of the last block
//! (which holds the last user message), the union of tags and skills. Everything the model
//! names is validated against what exists and what the user may use. A failure degrades to
//! safe defaults (the default model, no tools) instead of failing the turn. The arguments
//! stream: the main call's fields come first in the function's schema, and the decision is
//! taken as soon as they are complete ([`early`]); title, tags and the rest follow.

mod early;
mod merge;

pub use early::{DECISION_FIELDS, Decided, Running};
pub use merge::normalize_tool_name;

use std::collections::HashMap;
use std::sync::Mutex;

use chatd_protocol::RejectionReason;
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::function_call::{StageError, stream_function};
use super::instructions::{self, Instructions};
use super::models::{Choice, Complexity, Models};
use super::tokens;
use super::tools::ToolRunner;
use super::{HistoryEntry, HistoryRole};
use crate::config::PipelineConfig;
use crate::llm::{LlmMessage, LlmRequest};
use early::{Progress, lock};
use merge::or_none;

/// What the turn brings to preprocessing.
pub struct Input<'a> {
    /// The whole history, the message(s) to answer last.
    pub history: &'a [HistoryEntry],
    /// The chat's first message (and the client did not say it has a title).
    pub first_message: bool,
    pub pinned_model: Option<&'a str>,
    pub connected_accounts: &'a [String],
    /// The settings/memories categories (`app_id:category`) the user has saved entries
    /// of: the ones preprocessing may ask to load (every declared one when the client
    /// does not say).
    pub settings_saved: Vec<String>,
    /// Every declared settings/memories category (`app_id:category`): the ones a new
    /// entry may be suggested for.
    pub settings_categories: Vec<String>,
    /// Summaries of the user's other recent chats (bounded; quoted as data, see
    /// [`super::summary`]), so a message may refer back to them.
    pub recent_summaries: &'a [String],
}

#[derive(Clone, Copy)]
pub struct Stage<'a> {
    pub instructions: &'a Instructions,
    pub models: &'a Models,
    pub tools: &'a dyn ToolRunner,
    pub config: &'a PipelineConfig,
}

#[derive(Debug, Clone)]
pub struct Preprocessed {
    pub harm: u8,
    pub misuse: u8,
    pub language: String,
    pub category: String,
    pub mate: Option<String>,
    pub topic: Option<String>,
    pub complexity: Complexity,
    pub tags: Vec<String>,
    pub injection_chance: f32,
    pub skills: Vec<String>,
    pub focus_modes: Vec<String>,
    /// Settings/memories categories (`app_id:category`) the answer needs.
    pub settings_memories: Vec<String>,
    /// Categories worth suggesting new entries for after the answer.
    pub new_settings_memories: Vec<String>,
    pub title: Option<String>,
    pub icon_names: Vec<String>,
    pub choice: Choice,
    pub rejection: Option<RejectionReason>,
    /// Preprocessing failed; these are the safe defaults.
    pub degraded: bool,
    /// How many concurrent requests preprocessing made.
    pub blocks: usize,
}

/// The `preprocess` arguments as a model may write them (lenient: every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Raw {
    harmful_or_illegal_score: Option<f64>,
    misuse_risk_score: Option<f64>,
    language: Option<String>,
    category: Option<String>,
    topic: Option<String>,
    complexity: Option<String>,
    chat_tags: Vec<String>,
    prompt_injection_chance: Option<f64>,
    relevant_app_skills: Vec<String>,
    relevant_focus_modes: Vec<String>,
    needs_vision: bool,
    needs_reasoning: bool,
    relevant_app_settings_and_memories: Vec<String>,
    relevant_new_app_settings_and_memories: Vec<String>,
    title: Option<String>,
    icon_names: Vec<String>,
}

impl<'s> Stage<'s> {
    /// Starts preprocessing: [`Running::decide`] waits for the decision the main call needs
    /// (the first fields of every block's answer, see [`early`]), the rest keeps arriving.
    pub fn start(self, input: Input<'s>, cancel: &'s CancellationToken) -> Running<'s> {
        let (decided, decision) = oneshot::channel();
        let whole = async move { self.run(&input, cancel, decided).await };
        Running::new(Box::pin(whole), decision)
    }

    /// Every block's call concurrently; the decision is sent as soon as it is settled. Returns
    /// the whole answer.
    async fn run(
        &self,
        input: &Input<'_>,
        cancel: &CancellationToken,
        decided: oneshot::Sender<Preprocessed>,
    ) -> Preprocessed {
        let blocks = self.blocks(input.history).await;
        let model = self.models.preprocessing();
        let tool = self.instructions.preprocess_tool(input.first_message);
        let system = self.system_prompt(input);
        let progress = Mutex::new(Progress::new(blocks.len(), decided));
        let progress = &progress;
        let client = model.client.as_ref();
        let calls = blocks.iter().enumerate().map(|(i, block)| {
            let mut messages = Vec::with_capacity(block.len() + 1);
            messages.push(LlmMessage::System(system.clone()));
            messages.extend(block.iter().cloned());
            let mut request = LlmRequest::chat(model.spec.name.clone(), messages);
            request.tools = vec![tool.clone()];
            async move {
                let result = stream_function(
                    client,
                    request,
                    self.config.stage_timeout,
                    cancel,
                    |key, value| {
                        let mut p = lock(progress);
                        p.add(i, key, value);
                        self.settle(&mut p, input);
                    },
                )
                .await;
                if let Err(e) = &result
                    && !matches!(e, StageError::Cancelled)
                {
                    tracing::warn!(error = %e, "preprocessing request failed");
                }
                let mut p = lock(progress);
                p.end(i, result.is_ok());
                self.settle(&mut p, input);
            }
        });
        join_all(calls).await;
        let mut p = lock(progress);
        match p.take_unchanged() {
            Some(whole) => whole,
            None => self.outcome(&p, input),
        }
    }
}

impl Stage<'_> {
    /// What preprocessing decides when the model reports nothing notable (no scores, no
    /// tools, the default category and language): the guess a speculative main call is
    /// opened with for a chat without a previous plan.
    pub fn unremarkable(&self, input: &Input<'_>) -> Preprocessed {
        self.merge(vec![Raw::default()], input)
    }

    fn system_prompt(&self, input: &Input<'_>) -> String {
        let categories: Vec<&str> = self
            .instructions
            .mates
            .iter()
            .map(|m| m.category.as_str())
            .collect();
        let skills: Vec<String> = self.tools.skills().into_iter().map(|s| s.id).collect();
        let focus: Vec<&str> = self
            .instructions
            .focus_modes
            .iter()
            .map(|f| f.id.as_str())
            .collect();
        let values = HashMap::from([
            ("categories", categories.join(", ")),
            ("skills", or_none(&skills.join(", "))),
            ("focus_modes", or_none(&focus.join(", "))),
            (
                "settings_memories",
                or_none(&input.settings_saved.join(", ")),
            ),
            (
                "new_settings_memories",
                or_none(&input.settings_categories.join(", ")),
            ),
        ]);
        let prompt = instructions::fill(&self.instructions.prompts.preprocessing, &values);
        match super::summary::recent_block(input.recent_summaries) {
            Some(recent) => format!("{prompt}\n\n{recent}"),
            None => prompt,
        }
    }

    /// The history as model messages, cut into blocks of at most the block budget. When the
    /// token bounds fit one block the exact counts cannot split it either; otherwise the
    /// uncounted messages are counted first.
    async fn blocks(&self, history: &[HistoryEntry]) -> Vec<Vec<LlmMessage>> {
        let budget = self.config.preprocessing_block_tokens;
        let bounds = tokens::bounds(history);
        let counts = if bounds.iter().map(|&b| u64::from(b)).sum::<u64>() <= u64::from(budget) {
            bounds
        } else {
            tokens::exact(history).await
        };
        // Messages over the budget are split on paragraphs into several of the same role.
        let mut parts: Vec<(HistoryRole, String, u32)> = Vec::with_capacity(history.len());
        for (h, &n) in history.iter().zip(&counts) {
            if n > budget {
                for piece in tokens::split_text(&h.content, budget) {
                    let n = tokens::count(&piece);
                    parts.push((h.role, piece, n));
                }
            } else {
                parts.push((h.role, h.content.clone(), n));
            }
        }
        let counts: Vec<u32> = parts.iter().map(|p| p.2).collect();
        let mut blocks: Vec<Vec<LlmMessage>> = tokens::split_by_budget(&counts, budget)
            .into_iter()
            .map(|range| {
                parts[range]
                    .iter()
                    .map(|(role, content, _)| role.message(content.clone()))
                    .collect()
            })
            .collect();
        if blocks.is_empty() {
            blocks.push(vec![LlmMessage::User(String::new())]);
        }
        blocks
    }
}

/// The `data` of a `preprocessing_step` frame.
pub fn step_data(pairs: &[(&str, Value)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    )
}
