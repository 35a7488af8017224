//! History compression, the stage: when a chat's history passes `pipeline.compress_at` of
//! the main model's context window (after the answer reserve), its oldest messages are
//! summarised by one forced `compress_history` call into one compressed message (facts,
//! decisions, open questions, the user's stated preferences), and the newest messages, up
//! to half that share, stay verbatim. This module decides when and where to cut and makes
//! the call; `crate::turn::compress` runs it after an answer (claimed once per chat, sealed
//! into the AI cache, sent to the devices), `crate::history::compressed` gives the model the
//! compressed message and what follows it.

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::function_call::{StageError, call_function};
use super::instructions::{self, Instructions};
use super::models::Model;
use super::tokens;
use crate::llm::{LlmMessage, LlmRequest};

/// The history's share of the window past which it is compressed, in tokens; `None` when
/// compression is off (`compress_at` 0).
pub fn threshold(window: u32, reserve: u32, compress_at: f64) -> Option<u64> {
    if compress_at <= 0.0 {
        return None;
    }
    let room = f64::from(window.saturating_sub(reserve));
    Some((room * compress_at.min(1.0)) as u64)
}

/// A history message's share of the window: its tokens plus chat-format framing (as the
/// main request counts it).
pub fn cost(tokens: u32) -> u64 {
    u64::from(tokens) + 4
}

/// Where to cut a history of `costs` (oldest first, `user[i]`: message `i` is the user's)
/// that passed `threshold`: the index of the first message kept verbatim. The newest
/// messages are kept while they fit half the threshold (the latest one always), and the cut
/// moves back to the start of an exchange (a user message) when one is within that part,
/// so a question and its answer stay together. `None`: nothing older to summarise.
pub fn cut(costs: &[u64], user: &[bool], threshold: u64) -> Option<usize> {
    let keep = threshold / 2;
    let mut first = costs.len().checked_sub(1)?;
    let mut kept = costs.get(first).copied().unwrap_or(0);
    while first > 0 {
        let next = costs.get(first - 1).copied().unwrap_or(0);
        if kept + next > keep {
            break;
        }
        kept += next;
        first -= 1;
    }
    // Move forward to the first user message of the kept part, if it has one after the cut.
    if let Some(offset) = (first..costs.len()).position(|i| user.get(i) == Some(&true))
        && first + offset + 1 < costs.len()
    {
        first += offset;
    }
    (first > 0).then_some(first)
}

/// The summary the model wrote.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Raw {
    facts: Vec<String>,
    decisions: Vec<String>,
    open_questions: Vec<String>,
    user_preferences: Vec<String>,
}

/// Summarises `messages` (the oldest part of a chat as the model reads it, a previous
/// compressed message included) with one forced `compress_history` call on `model`. The
/// oldest messages are left out when they overflow the model's window; an empty summary is
/// an error.
pub async fn summarise(
    instructions: &Instructions,
    model: &Model,
    messages: Vec<(LlmMessage, u64)>,
    reserve: u32,
    deadline: std::time::Duration,
    cancel: &CancellationToken,
) -> Result<String, StageError> {
    let system = instructions.prompts.compression.trim().to_string();
    let room = u64::from(model.spec.context_window.saturating_sub(reserve))
        .saturating_sub(u64::from(tokens::estimate(&system)) + 512);
    let mut total: u64 = messages.iter().map(|(_, c)| c).sum();
    let mut skip = 0;
    while total > room && skip + 1 < messages.len() {
        total -= messages.get(skip).map_or(0, |(_, c)| *c);
        skip += 1;
    }
    let mut all = Vec::with_capacity(messages.len() - skip + 1);
    all.push(LlmMessage::System(system));
    all.extend(messages.into_iter().skip(skip).map(|(m, _)| m));
    let mut request = LlmRequest::chat(model.spec.name.clone(), all);
    request.tools = vec![instructions.compress_tool()];
    let called = call_function(model.client.as_ref(), request, deadline, cancel).await?;
    let bad = |reason: String| StageError::BadArguments {
        function: instructions::COMPRESS_HISTORY.into(),
        reason,
    };
    // The shape only: serde's message may quote the model's text.
    let raw: Raw = serde_json::from_value(called.arguments)
        .map_err(|e| bad(format!("not the expected shape ({:?})", e.classify())))?;
    render(&raw).ok_or_else(|| bad("the summary is empty".into()))
}

/// The compressed message's text: one markdown section per non-empty part.
fn render(raw: &Raw) -> Option<String> {
    let sections = [
        ("Facts", &raw.facts),
        ("Decisions", &raw.decisions),
        ("Open questions", &raw.open_questions),
        ("The user's preferences", &raw.user_preferences),
    ];
    let mut out = String::new();
    for (title, items) in sections {
        let items: Vec<&str> = items
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if items.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&format!("**{title}**"));
        for item in items {
            out.push_str("\n- ");
            out.push_str(&item.replace('\n', " "));
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_a_share_of_the_room_after_the_reserve() {
        assert_eq!(threshold(6_000, 1_000, 0.75), Some(3_750));
        assert_eq!(threshold(6_000, 1_000, 0.0), None);
        assert_eq!(threshold(500, 1_000, 0.75), Some(0));
    }

    #[test]
    fn the_cut_keeps_the_newest_within_half_the_threshold_from_an_exchange_start() {
        // u a u a u a: 100 each; threshold 500 keeps 250: the newest two, from a user message.
        let costs = [100; 6];
        let user = [true, false, true, false, true, false];
        assert_eq!(cut(&costs, &user, 500), Some(4));
        // A kept part that starts with an answer moves forward to its question.
        assert_eq!(cut(&costs, &user, 700), Some(4));
        // The latest message alone is over the budget: still kept, the rest summarised.
        assert_eq!(cut(&[100, 100, 900], &[true, false, true], 500), Some(2));
        // Everything fits: nothing to summarise.
        assert_eq!(cut(&costs, &user, 10_000), None);
        assert_eq!(cut(&[], &[], 500), None);
    }

    #[test]
    fn the_summary_is_rendered_by_section_and_empty_is_none() {
        let raw = Raw {
            facts: vec!["Lena ports a CLI to async Rust".into(), " ".into()],
            decisions: Vec::new(),
            open_questions: vec!["How to cancel\ntasks".into()],
            user_preferences: vec!["short answers".into()],
        };
        assert_eq!(
            render(&raw).as_deref(),
            Some(
                "**Facts**\n- Lena ports a CLI to async Rust\n\n**Open questions**\n- How to \
                 cancel tasks\n\n**The user's preferences**\n- short answers"
            )
        );
        assert_eq!(render(&Raw::default()), None);
    }
}
