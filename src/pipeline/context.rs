//! Builds the model request for a turn from the chat history: a system prompt, then the
//! messages oldest first. The pipeline issue grows this into the full prompt assembly.

use crate::llm::{LlmMessage, LlmRequest};

use super::{HistoryEntry, HistoryRole};

const BASE_SYSTEM_PROMPT: &str = "You are a helpful assistant. Answer in markdown. \
Be accurate and concise; say so when you are unsure.";

pub fn build_request(model: &str, history: &[HistoryEntry]) -> LlmRequest {
    let mut messages = Vec::with_capacity(history.len() + 1);
    messages.push(LlmMessage::System(BASE_SYSTEM_PROMPT.to_string()));
    for entry in history {
        messages.push(match entry.role {
            HistoryRole::User => LlmMessage::User(entry.content.clone()),
            HistoryRole::Assistant => LlmMessage::Assistant {
                content: entry.content.clone(),
                tool_calls: Vec::new(),
            },
            HistoryRole::System => LlmMessage::System(entry.content.clone()),
        });
    }
    LlmRequest::chat(model, messages)
}
