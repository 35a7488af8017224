//! The main model's request: [`MainPlan`] (what of preprocessing's decision shapes it), the
//! system prompt assembled from the instruction parts in
//! order (focus mode, base ethics, mate, apps, follow-up guidance, date/time and language,
//! and a caution when preprocessing suspects prompt injection), then the history oldest
//! first, trimmed to the model's context window (the oldest messages go first; the system
//! prompt and the latest message always stay; tried with the token bounds first, exact
//! counts only when the bounds overflow).

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
/// Tried first with the token bounds: if they fit the window nothing is left out, whatever
/// the exact counts; otherwise the uncounted messages are counted and the trim redone.
pub async fn main_request(
    instructions: &Instructions,
    tools: &dyn ToolRunner,
    plan: &MainPlan,
    history: &[HistoryEntry],
    datetime: &str,
    reserve: u32,
) -> (LlmRequest, usize) {
    let defs = tools.definitions(&plan.skills);
    let system = system_prompt(
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
    let budget = u64::from(plan.model.spec.context_window.saturating_sub(reserve));
    let fixed = fixed_cost(&system, &defs);
    let bounds = tokens::bounds(history);
    let counts = if fixed + total_cost(&bounds) <= budget {
        bounds
    } else {
        tokens::exact(history).await
    };
    assemble(
        &plan.model.spec.name,
        system,
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

pub fn system_prompt(i: &Instructions, p: &PromptInput<'_>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(f) = p.focus_mode.and_then(|id| i.focus_mode(id)) {
        parts.push(f.instruction.trim().to_string());
    }
    parts.push(i.prompts.base_ethics.trim().to_string());
    if let Some(m) = i.mate(p.category) {
        parts.push(m.instruction.trim().to_string());
    }
    if p.with_tools {
        parts.push(i.prompts.apps.trim().to_string());
    }
    parts.push(i.prompts.follow_up.trim().to_string());
    let values = HashMap::from([
        ("datetime", p.datetime.to_string()),
        (
            "date",
            p.datetime.get(..10).unwrap_or(p.datetime).to_string(),
        ),
        ("language", p.language.to_string()),
    ]);
    parts.push(instructions::fill(i.prompts.date_language.trim(), &values));
    if p.injection_caution {
        parts.push(i.prompts.injection_caution.trim().to_string());
    }
    parts.join("\n\n")
}

/// The request and how many of the oldest history messages were left out to fit
/// `window - reserve` tokens.
/// `counts` are the history's token counts (exact, or upper bounds).
pub fn build_main_request(
    model: &str,
    system: String,
    history: &[HistoryEntry],
    counts: &[u32],
    tools: Vec<ToolDef>,
    window: u32,
    reserve: u32,
) -> (LlmRequest, usize) {
    let budget = u64::from(window.saturating_sub(reserve));
    let fixed = fixed_cost(&system, &tools);
    assemble(
        model,
        system,
        history,
        counts,
        tools,
        budget.saturating_sub(fixed),
    )
}

/// The request with the oldest history messages left out until the rest fits `room`.
fn assemble(
    model: &str,
    system: String,
    history: &[HistoryEntry],
    counts: &[u32],
    tools: Vec<ToolDef>,
    room: u64,
) -> (LlmRequest, usize) {
    let mut total = total_cost(counts);
    let mut dropped = 0;
    while total > room && dropped + 1 < history.len() {
        total -= counts.get(dropped).map_or(0, |&c| cost(c));
        dropped += 1;
    }
    let mut messages = Vec::with_capacity(history.len() - dropped + 1);
    messages.push(LlmMessage::System(system));
    messages.extend(
        history[dropped..]
            .iter()
            .map(|h| h.role.message(h.content.clone())),
    );
    let mut request = LlmRequest::chat(model, messages);
    request.tools = tools;
    (request, dropped)
}

/// The prompt and tool definitions change every turn (date, tools) and are small next to
/// the window: a byte-based estimate instead of a BPE pass per turn (profiling showed that
/// recount at ~9% of chatd's CPU under load).
fn fixed_cost(system: &str, tools: &[ToolDef]) -> u64 {
    u64::from(tokens::estimate(system))
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
mod tests {
    use super::*;
    use crate::pipeline::HistoryRole;

    fn entry(role: HistoryRole, text: &str) -> HistoryEntry {
        HistoryEntry {
            role,
            content: text.into(),
            created_at: 0,
            tokens: tokens::Tokens::Counted(tokens::count(text)),
        }
    }

    #[test]
    fn trimming_keeps_system_prompt_and_latest_message() {
        let long = "lorem ipsum ".repeat(400);
        let history = vec![
            entry(HistoryRole::User, &long),
            entry(HistoryRole::Assistant, &long),
            entry(HistoryRole::User, "latest question"),
        ];
        let counts = tokens::bounds(&history);
        let (req, dropped) = build_main_request(
            "m",
            "system".into(),
            &history,
            &counts,
            Vec::new(),
            1000,
            200,
        );
        assert_eq!(dropped, 2);
        assert_eq!(req.messages.len(), 2);
        assert_eq!(req.messages[0], LlmMessage::System("system".into()));
        assert_eq!(req.messages[1], LlmMessage::User("latest question".into()));
        let (req, dropped) = build_main_request(
            "m",
            "system".into(),
            &history,
            &counts,
            Vec::new(),
            100_000,
            200,
        );
        assert_eq!((dropped, req.messages.len()), (0, 4));
    }

    struct NoTools;
    impl ToolRunner for NoTools {
        fn skills(&self) -> Vec<super::super::tools::SkillInfo> {
            Vec::new()
        }
        fn always_include(&self) -> Vec<String> {
            Vec::new()
        }
        fn definitions(&self, _: &[String]) -> Vec<ToolDef> {
            Vec::new()
        }
        fn prepare(
            &self,
            _: crate::llm::ToolCall,
            _: &super::super::TurnContext,
            _: &std::sync::Arc<dyn super::super::TurnSink>,
            _: tokio_util::sync::CancellationToken,
        ) -> super::super::tools::PreparedCall {
            unreachable!("no tools are offered")
        }
    }

    fn plan(window: u32) -> MainPlan {
        let client: std::sync::Arc<dyn crate::llm::LlmClient> =
            std::sync::Arc::new(crate::llm::SimulatedClient::new(std::time::Duration::ZERO));
        MainPlan {
            model: Model {
                spec: std::sync::Arc::new(super::super::models::ModelSpec {
                    id: "m".into(),
                    name: "m".into(),
                    context_window: window,
                    capabilities: Vec::new(),
                    cost_tier: 1,
                }),
                client,
            },
            category: "general_knowledge".into(),
            language: "en".into(),
            skills: Vec::new(),
            focus_mode: None,
            injection_caution: false,
        }
    }

    #[tokio::test]
    async fn uncounted_history_is_counted_only_when_its_bound_overflows_the_window() {
        let i = Instructions::parse(instructions::DEFAULT_YAML).unwrap();
        // 2,400 bytes each but far fewer tokens: the byte bounds overflow the window chosen
        // below, the exact counts do not.
        let long = "lorem ipsum ".repeat(200);
        let uncounted = |role, text: &str| HistoryEntry {
            role,
            content: text.into(),
            created_at: 0,
            tokens: tokens::Tokens::of(text, None),
        };
        let history = vec![
            uncounted(HistoryRole::User, &long),
            uncounted(HistoryRole::Assistant, &long),
            uncounted(HistoryRole::User, "latest"),
        ];
        let p = plan(0);
        let system = system_prompt(
            &i,
            &PromptInput {
                focus_mode: None,
                category: &p.category,
                with_tools: false,
                language: &p.language,
                datetime: "now",
                injection_caution: false,
            },
        );
        let fixed = fixed_cost(&system, &[]);
        let exact = u64::from(tokens::count(&long));
        let window = fixed + 2 * cost(tokens::count(&long)) + cost(1) + 20;
        assert!(fixed + 2 * cost(tokens::Tokens::of(&long, None).bound()) > window);
        let window = u32::try_from(window).unwrap();
        let (_, dropped) = main_request(&i, &NoTools, &plan(window), &history, "now", 0).await;
        assert_eq!(
            dropped, 0,
            "exact counts ({exact} each) fit: nothing is left out"
        );
        // A window the exact counts overflow too: the oldest goes.
        let (req, dropped) =
            main_request(&i, &NoTools, &plan(window - 100), &history, "now", 0).await;
        assert_eq!(dropped, 1);
        assert_eq!(
            req.messages.last(),
            Some(&LlmMessage::User("latest".into()))
        );
    }

    #[test]
    fn system_prompt_parts_come_in_order() {
        let mut i = Instructions::parse(instructions::DEFAULT_YAML).unwrap();
        i.focus_modes.push(instructions::FocusMode {
            id: "docs-deep_dive".into(),
            instruction: "Focus mode \"deep dive\": answer thoroughly.".into(),
        });
        let p = PromptInput {
            focus_mode: Some("docs-deep_dive"),
            category: "software_development",
            with_tools: true,
            language: "de",
            datetime: "2026-01-01T00:00:00Z",
            injection_caution: true,
        };
        let s = system_prompt(&i, &p);
        let pos = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("{needle} missing"));
        assert!(pos("deep dive") < pos("helpful, honest"));
        assert!(pos("helpful, honest") < pos("You are Max"));
        assert!(pos("You are Max") < pos("call the tools"));
        assert!(pos("call the tools") < pos("2026-01-01"));
        assert!(pos("`de`") < pos("CAUTION"));
    }
}
