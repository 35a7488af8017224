//! Postprocessing, after the final frame: one forced `postprocess` call over the last
//! exchange and the previous summary, producing follow-up and new-chat suggestions, the
//! extended summary, tags (merged with preprocessing's), a harm score of the answer, and a
//! new title only on a clear topic shift. Its failure never touches the delivered answer.

use std::collections::HashMap;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::PostProcessed;
use super::function_call::{StageError, call_function};
use super::instructions::{self, Instructions};
use super::models::Model;
use crate::config::PipelineConfig;
use crate::llm::{LlmMessage, LlmRequest};

pub struct Input<'a> {
    pub user_message: &'a str,
    pub answer: &'a str,
    pub previous_summary: Option<&'a str>,
    /// Tags the chat had plus preprocessing's.
    pub tags: &'a [String],
    pub follow_ups_enabled: bool,
    /// Follow-up suggestions the turn's skills returned: offered before the model's.
    pub skill_suggestions: &'a [String],
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Raw {
    follow_up_request_suggestions: Vec<String>,
    new_chat_request_suggestions: Vec<String>,
    chat_summary: String,
    chat_tags: Vec<String>,
    harmful_response: Option<f64>,
    topic_shift: bool,
    updated_chat_title: Option<String>,
}

pub async fn run(
    instructions: &Instructions,
    model: &Model,
    config: &PipelineConfig,
    input: &Input<'_>,
    cancel: &CancellationToken,
) -> Result<PostProcessed, StageError> {
    let values = HashMap::from([(
        "previous_summary",
        input
            .previous_summary
            .filter(|s| !s.trim().is_empty())
            .unwrap_or("(none yet)")
            .to_string(),
    )]);
    let system = instructions::fill(&instructions.prompts.postprocessing, &values);
    let messages = vec![
        LlmMessage::System(system),
        LlmMessage::User(input.user_message.to_string()),
        LlmMessage::Assistant {
            content: input.answer.to_string(),
            tool_calls: Vec::new(),
        },
    ];
    let mut request = LlmRequest::chat(model.spec.name.clone(), messages);
    request.tools = vec![instructions.postprocess_tool()];
    let called =
        call_function(model.client.as_ref(), request, config.stage_timeout, cancel).await?;
    let raw: Raw =
        serde_json::from_value(called.arguments).map_err(|e| StageError::BadArguments {
            function: instructions::POSTPROCESS.into(),
            reason: e.to_string(),
        })?;
    Ok(clean(raw, input))
}

fn clean(raw: Raw, input: &Input<'_>) -> PostProcessed {
    let follow_ups = if input.follow_ups_enabled {
        let from_skills = input.skill_suggestions.iter().cloned();
        suggestions(
            from_skills
                .chain(raw.follow_up_request_suggestions)
                .collect(),
            true,
        )
    } else {
        Vec::new()
    };
    let mut tags: Vec<String> = Vec::new();
    for t in input.tags.iter().chain(raw.chat_tags.iter()) {
        let t = t.trim().to_lowercase();
        if !t.is_empty() && t.len() <= 40 && !tags.contains(&t) && tags.len() < 10 {
            tags.push(t);
        }
    }
    let updated_chat_title = raw
        .updated_chat_title
        .filter(|_| raw.topic_shift)
        .map(|t| t.split_whitespace().take(8).collect::<Vec<_>>().join(" "))
        .filter(|t| t.split_whitespace().count() >= 3);
    PostProcessed {
        follow_up_request_suggestions: follow_ups,
        new_chat_request_suggestions: suggestions(raw.new_chat_request_suggestions, false),
        chat_summary: raw
            .chat_summary
            .split_whitespace()
            .take(20)
            .collect::<Vec<_>>()
            .join(" "),
        chat_tags: tags,
        harmful_response: raw.harmful_response.unwrap_or(0.0).clamp(0.0, 10.0).round() as u8,
        updated_chat_title,
        suggested_settings_memories: Vec::new(),
    }
}

/// At most 6 distinct, non-empty suggestions; follow-ups need at least four words.
fn suggestions(list: Vec<String>, follow_up: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in list {
        let s = s.trim().to_string();
        if s.is_empty() || s.len() > 300 || out.contains(&s) {
            continue;
        }
        if follow_up && s.split_whitespace().count() < 4 {
            continue;
        }
        out.push(s);
        if out.len() == 6 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_bounded_and_merged() {
        let input = Input {
            user_message: "q",
            answer: "a",
            previous_summary: None,
            tags: &["rust".into()],
            follow_ups_enabled: true,
            skill_suggestions: &["Compare both skill results".into()],
        };
        let raw = Raw {
            follow_up_request_suggestions: (0..9)
                .map(|i| format!("Explain point {i} in detail"))
                .chain(["Too short".to_string()])
                .collect(),
            new_chat_request_suggestions: vec!["Plan a trip".into(); 3],
            chat_summary: "word ".repeat(30),
            chat_tags: vec!["Rust".into(), "async".into()],
            harmful_response: Some(12.0),
            topic_shift: false,
            updated_chat_title: Some("A brand new topic here".into()),
        };
        let out = clean(raw, &input);
        assert_eq!(out.follow_up_request_suggestions.len(), 6);
        assert_eq!(
            out.follow_up_request_suggestions[0], "Compare both skill results",
            "a skill's suggestion comes first"
        );
        assert_eq!(out.new_chat_request_suggestions, vec!["Plan a trip"]);
        assert_eq!(out.chat_summary.split_whitespace().count(), 20);
        assert_eq!(out.chat_tags, vec!["rust", "async"]);
        assert_eq!(out.harmful_response, 10);
        assert_eq!(out.updated_chat_title, None, "no topic shift, no new title");
    }
}
