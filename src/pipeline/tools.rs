//! The seam between the tool loop and the skills runner (`crate::skills`): which skills
//! exist, their tool definitions, and [`ToolRunner::prepare`], which turns one model tool call
//! into an embed reference to stream at once and a future with the model's tool message.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::TurnContext;
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

/// One tool call, ready to run.
pub struct PreparedCall {
    /// Markdown inserted into the streamed answer before the call runs (the embed reference).
    pub reference: Option<String>,
    /// Runs the call; yields the tool message content for the model.
    pub run: BoxFuture<'static, String>,
}

impl PreparedCall {
    /// A call answered at once with `message` (a refusal, an argument error).
    pub fn answer(message: String) -> PreparedCall {
        PreparedCall::later(async move { message })
    }

    /// A call whose tool message comes from `run`, with no embed reference.
    pub fn later(run: impl std::future::Future<Output = String> + Send + 'static) -> PreparedCall {
        PreparedCall {
            reference: None,
            run: Box::pin(run),
        }
    }
}

pub trait ToolRunner: Send + Sync {
    /// Every skill that exists.
    fn skills(&self) -> Vec<SkillInfo>;
    /// Skills offered to the model whatever preprocessing chose.
    fn always_include(&self) -> Vec<String>;
    /// Tool definitions for these skill ids (unknown ids are skipped).
    fn definitions(&self, ids: &[String]) -> Vec<ToolDef>;
    /// Prepares one call of an offered tool; `cancel` fires when the turn is cancelled.
    /// Its events go to `sink`, the turn's writer.
    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &std::sync::Arc<dyn super::TurnSink>,
        cancel: CancellationToken,
    ) -> PreparedCall;
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

/// The turn's tools: the skills plus per-turn tools of other owners (settings and memories
/// proposals, routines, focus modes), each a [`ToolRunner`] of its own. A part offers its
/// per-turn tools through `always_include` (and lists them in `skills` so preprocessing
/// keeps them); a call goes to the first part that defines its name.
pub struct ToolSet<'a> {
    parts: Vec<&'a dyn ToolRunner>,
    off: SwitchedOff,
}

impl<'a> ToolSet<'a> {
    pub fn new(parts: Vec<&'a dyn ToolRunner>) -> Self {
        Self {
            parts,
            off: SwitchedOff::default(),
        }
    }

    /// Leaves out (and refuses to run) what the user switched off.
    pub fn without(mut self, off: SwitchedOff) -> Self {
        self.off = off;
        self
    }
}

/// Apps and skills the user switched off (`set_app_preferences`): none of their tools
/// (skills, focus modes, routines, proposals: every tool is named `app_id-…`) is offered
/// or run.
#[derive(Debug, Clone, Default)]
pub struct SwitchedOff {
    apps: std::collections::HashSet<String>,
    skills: std::collections::HashSet<String>,
}

impl SwitchedOff {
    pub fn new(apps: Vec<String>, skills: Vec<String>) -> Self {
        Self {
            apps: apps.into_iter().collect(),
            skills: skills.into_iter().collect(),
        }
    }

    /// Whether the tool `app_id-name` may be offered.
    pub fn allows(&self, tool: &str) -> bool {
        !self.skills.contains(tool)
            && tool
                .split_once('-')
                .is_none_or(|(app, _)| !self.apps.contains(app))
    }
}

impl ToolRunner for ToolSet<'_> {
    fn skills(&self) -> Vec<SkillInfo> {
        self.parts
            .iter()
            .flat_map(|p| p.skills())
            .filter(|s| self.off.allows(&s.id))
            .collect()
    }

    fn always_include(&self) -> Vec<String> {
        self.parts
            .iter()
            .flat_map(|p| p.always_include())
            .filter(|id| self.off.allows(id))
            .collect()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        let ids: Vec<String> = ids
            .iter()
            .filter(|id| self.off.allows(id))
            .cloned()
            .collect();
        self.parts
            .iter()
            .flat_map(|p| p.definitions(&ids))
            .collect()
    }

    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &std::sync::Arc<dyn super::TurnSink>,
        cancel: CancellationToken,
    ) -> PreparedCall {
        if !self.off.allows(&call.name) {
            return PreparedCall::answer(refused(&call.name));
        }
        let name = std::slice::from_ref(&call.name);
        match self.parts.iter().find(|p| !p.definitions(name).is_empty()) {
            Some(part) => part.prepare(call, ctx, sink, cancel),
            None => PreparedCall::answer(refused(&call.name)),
        }
    }
}
