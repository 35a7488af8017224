//! The main model's request: [`MainPlan`] (what of preprocessing's decision shapes it) and
//! its messages, laid out for the provider's prompt cache (a stable prefix, then what
//! changes every turn):
//! 1. one system message with the prompt's parts that depend only on the chat's plan, which
//!    is sticky per chat (focus mode, base ethics, mate, apps, follow-up guidance);
//! 2. the history oldest first, trimmed to the model's context window (the oldest messages
//!    go first; tried with the token bounds first, exact counts only when the bounds
//!    overflow);
//! 3. one trailing system message with the turn's own parts ([`add_turn_context`]): the
//!    date and language, the caution when preprocessing suspects prompt injection, then the
//!    blocks the turn adds as data (the chat's summary, the settings/memories entries).
//!
//! Both system messages and the latest history message always stay; the tools go sorted by
//! name, so the same tool set gives the same bytes.

use std::collections::HashMap;

use crate::llm::{LlmMessage, LlmRequest, ToolDef};

use super::HistoryEntry;
use super::instructions::{self, Instructions};
use super::models::Model;
use super::preprocess::Preprocessed;
use super::tokens;
use super::tools::ToolRunner;

/// What of preprocessing's decision shapes the main request: two equal plans give the same
/// request for the same history and time (which is what lets a speculative main call be
/// kept, see [`super::speculation`]).
#[derive(Clone, Debug)]
pub struct MainPlan {
    pub model: Model,
    pub category: String,
    pub language: String,
    pub skills: Vec<String>,
    pub focus_mode: Option<String>,
    pub injection_caution: bool,
}

impl PartialEq for MainPlan {
    fn eq(&self, other: &Self) -> bool {
        self.model.spec.id == other.model.spec.id
            && self.category == other.category
            && self.language == other.language
            && self.skills == other.skills
            && self.focus_mode == other.focus_mode
            && self.injection_caution == other.injection_caution
    }
}

impl MainPlan {
    /// The plan preprocessing decided. The chat's active focus mode (the server's record)
    /// puts its instruction first; without one, the focus modes preprocessing found
    /// relevant are offered as the tools that start them (named like them).
    pub fn new(pre: &Preprocessed, active_focus: Option<&str>, caution_threshold: f32) -> Self {
        let mut skills = pre.skills.clone();
        if active_focus.is_none() {
            for f in &pre.focus_modes {
                if !skills.contains(f) {
                    skills.push(f.clone());
                }
            }
        }
        Self {
            model: pre.choice.model.clone(),
            category: pre.category.clone(),
            language: pre.language.clone(),
            skills,
            focus_mode: active_focus.map(str::to_string),
            injection_caution: pre.injection_chance >= caution_threshold,
        }
    }
}

/// The main request for `plan` and how many of the oldest history messages it left out.
/// `blocks` join the turn's trailing system message after its own parts, in order (data
/// the turn carries: the chat's summary, the settings/memories entries), and count against
/// the window like the rest of the prompt.
/// Tried first with the token bounds: if they fit the window nothing is left out, whatever
/// the exact counts; otherwise the uncounted messages are counted and the trim redone.
pub async fn main_request(
    instructions: &Instructions,
    tools: &dyn ToolRunner,
    plan: &MainPlan,
    history: &[HistoryEntry],
    datetime: &str,
    blocks: &[&str],
    reserve: u32,
) -> (LlmRequest, usize) {
    let defs = tools.definitions(&plan.skills);
    let mut prompt = prompt(
        instructions,
        &PromptInput {
            focus_mode: plan.focus_mode.as_deref(),
            category: &plan.category,
            with_tools: !defs.is_empty(),
            language: &plan.language,
            datetime,
            injection_caution: plan.injection_caution,
        },
    );
    prompt.turn.extend(blocks.iter().map(|b| b.to_string()));
    let budget = u64::from(plan.model.spec.context_window.saturating_sub(reserve));
    let fixed = fixed_cost(&prompt, &defs);
    let bounds = tokens::bounds(history);
    let counts = if fixed + total_cost(&bounds) <= budget {
        bounds
    } else {
        tokens::exact(history).await
    };
    assemble(
        &plan.model.spec.name,
        prompt,
        history,
        &counts,
        defs,
        budget.saturating_sub(fixed),
    )
}

/// What the system prompt depends on besides the instructions.
pub struct PromptInput<'a> {
    pub focus_mode: Option<&'a str>,
    pub category: &'a str,
    pub with_tools: bool,
    pub language: &'a str,
    /// RFC 3339 UTC.
    pub datetime: &'a str,
    pub injection_caution: bool,
}

/// The system prompt in its two places: `stable` (the first message) depends only on the
/// chat's plan, `turn` (the parts of the trailing message, in order) changes between turns.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub stable: String,
    pub turn: Vec<String>,
}

pub fn prompt(i: &Instructions, p: &PromptInput<'_>) -> Prompt {
    let mut stable: Vec<String> = Vec::new();
    if let Some(f) = p.focus_mode.and_then(|id| i.focus_mode(id)) {
        stable.push(f.instruction.trim().to_string());
    }
    stable.push(i.prompts.base_ethics.trim().to_string());
    if let Some(m) = i.mate(p.category) {
        stable.push(m.instruction.trim().to_string());
    }
    if p.with_tools {
        stable.push(i.prompts.apps.trim().to_string());
    }
    stable.push(i.prompts.follow_up.trim().to_string());
    let values = HashMap::from([
        ("datetime", p.datetime.to_string()),
        (
            "date",
            p.datetime.get(..10).unwrap_or(p.datetime).to_string(),
        ),
        ("language", p.language.to_string()),
    ]);
    let mut turn = vec![instructions::fill(i.prompts.date_language.trim(), &values)];
    if p.injection_caution {
        turn.push(i.prompts.injection_caution.trim().to_string());
    }
    Prompt {
        stable: stable.join("\n\n"),
        turn,
    }
}

/// The request and how many of the oldest history messages were left out to fit
/// `window - reserve` tokens.
/// `counts` are the history's token counts (exact, or upper bounds).
pub fn build_main_request(
    model: &str,
    prompt: Prompt,
    history: &[HistoryEntry],
    counts: &[u32],
    tools: Vec<ToolDef>,
    window: u32,
    reserve: u32,
) -> (LlmRequest, usize) {
    let budget = u64::from(window.saturating_sub(reserve));
    let fixed = fixed_cost(&prompt, &tools);
    assemble(
        model,
        prompt,
        history,
        counts,
        tools,
        budget.saturating_sub(fixed),
    )
}

/// The request with the oldest history messages left out until the rest fits `room` (the
/// latest history message and both system messages always stay).
fn assemble(
    model: &str,
    prompt: Prompt,
    history: &[HistoryEntry],
    counts: &[u32],
    mut tools: Vec<ToolDef>,
    room: u64,
) -> (LlmRequest, usize) {
    let mut total = total_cost(counts);
    let mut dropped = 0;
    while total > room && dropped + 1 < history.len() {
        total -= counts.get(dropped).map_or(0, |&c| cost(c));
        dropped += 1;
    }
    let mut messages = Vec::with_capacity(history.len() - dropped + 2);
    messages.push(LlmMessage::System(prompt.stable));
    messages.extend(
        history[dropped..]
            .iter()
            .map(|h| h.role.message(h.content.clone())),
    );
    let mut request = LlmRequest::chat(model, messages);
    for part in &prompt.turn {
        add_turn_context(&mut request, part);
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    request.tools = tools;
    (request, dropped)
}

/// Adds `block` to the turn's trailing system message (after the history, see the module
/// doc), which it opens when the request has none yet. The one way a part that changes
/// between turns joins the main request: the first message and the history stay the
/// prefix the provider has cached. Call it before the answer adds its tool rounds.
pub fn add_turn_context(request: &mut LlmRequest, block: &str) {
    match request.messages.as_mut_slice() {
        [_, .., LlmMessage::System(turn)] => {
            turn.push_str("\n\n");
            turn.push_str(block);
        }
        _ => request.messages.push(LlmMessage::System(block.to_string())),
    }
}

/// The prompt and tool definitions (the turn's parts change every turn, the tools with the
/// plan) are small next to the window: a byte-based estimate instead of a BPE pass per turn
/// (profiling showed that recount at ~9% of chatd's CPU under load). Both system messages
/// count, with their framing.
fn fixed_cost(prompt: &Prompt, tools: &[ToolDef]) -> u64 {
    cost(tokens::estimate(&prompt.stable))
        + cost(0)
        + prompt
            .turn
            .iter()
            .map(|part| u64::from(tokens::estimate(part)) + 1)
            .sum::<u64>()
        + tools
            .iter()
            .map(|t| {
                u64::from(tokens::estimate(&t.description))
                    + u64::from(tokens::estimate(t.parameters.json().get()))
            })
            .sum::<u64>()
}

/// A history message's share of the window: its tokens plus chat-format framing, roughly.
fn cost(tokens: u32) -> u64 {
    u64::from(tokens) + 4
}

fn total_cost(counts: &[u32]) -> u64 {
    counts.iter().map(|&c| cost(c)).sum()
}

/// The plain request of the foundation (no instructions): kept for benchmarks of the
/// history path.
pub fn build_request(model: &str, history: &[HistoryEntry]) -> LlmRequest {
    let mut messages = Vec::with_capacity(history.len() + 1);
    messages.push(LlmMessage::System(
        "You are a helpful assistant. Answer in markdown.".into(),
    ));
    messages.extend(history.iter().map(|h| h.role.message(h.content.clone())));
    LlmRequest::chat(model, messages)
}

#[cfg(test)]
mod tests;
