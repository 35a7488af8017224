//! The `simulated` provider: a deterministic, local stand-in for a model. It streams a
//! plausible markdown answer (several paragraphs, a link, a code block) word by word at a
//! configurable pace, so a newcomer sees streaming without an API key or network.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::{LlmClient, LlmError, LlmEvent, LlmMessage, LlmRequest, LlmStream, Usage};

pub struct SimulatedClient {
    pace: Duration,
}

impl SimulatedClient {
    pub fn new(pace: Duration) -> Self {
        Self { pace }
    }
}

impl LlmClient for SimulatedClient {
    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        let pace = self.pace;
        Box::pin(async move {
            let answer = answer_for(&request);
            let prompt_tokens = request
                .messages
                .iter()
                .map(|m| approx_tokens(message_text(m)))
                .sum();
            let completion_tokens = approx_tokens(&answer);
            let words = split_keeping_whitespace(&answer);
            let deltas = futures_util::stream::iter(words).then(move |w| async move {
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
                Ok(LlmEvent::TextDelta(w))
            });
            let tail = futures_util::stream::iter([
                Ok(LlmEvent::Usage(Usage {
                    prompt_tokens,
                    completion_tokens,
                })),
                Ok(LlmEvent::Done {
                    finish_reason: Some("stop".into()),
                    tool_calls: Vec::new(),
                }),
            ]);
            Ok(Box::pin(deltas.chain(tail)) as LlmStream)
        })
    }

    fn provider_name(&self) -> &str {
        "simulated"
    }
}

fn message_text(m: &LlmMessage) -> &str {
    match m {
        LlmMessage::System(c) | LlmMessage::User(c) => c,
        LlmMessage::Assistant { content, .. } => content,
        LlmMessage::Tool { content, .. } => content,
    }
}

fn approx_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

fn last_user_message(request: &LlmRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            LlmMessage::User(c) => Some(c.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// The deterministic answer: depends only on the last user message and the history length.
fn answer_for(request: &LlmRequest) -> String {
    let question: String = last_user_message(request).chars().take(120).collect();
    let question = question.replace(['\n', '`'], " ");
    let turns = request
        .messages
        .iter()
        .filter(|m| matches!(m, LlmMessage::User(_)))
        .count();
    format!(
        "This is chatd's simulated model answering: \"{question}\". \
         It streams locally, with no API key and no network.\n\n\
         The conversation so far has {turns} user message(s). Point `llm.provider` at \
         `openai_compatible` with a `llm.base_url` to talk to a real model.\n\n\
         Read more in the [OpenAI API reference](https://platform.openai.com/docs/api-reference/chat).\n\n\
         ```text\nchatd token --user alice\n```\n\n\
         That is all for now."
    )
}

/// Splits text into words, each carrying the whitespace that follows it.
fn split_keeping_whitespace(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for ch in text.chars() {
        let space = ch.is_whitespace();
        if in_space && !space {
            out.push(std::mem::take(&mut current));
        }
        in_space = space;
        current.push(ch);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(client: &SimulatedClient, req: LlmRequest) -> String {
        let mut s = client.stream(req).await.unwrap();
        let mut text = String::new();
        let mut done = false;
        while let Some(ev) = s.next().await {
            match ev.unwrap() {
                LlmEvent::TextDelta(t) => text.push_str(&t),
                LlmEvent::Done { .. } => done = true,
                _ => {}
            }
        }
        assert!(done);
        text
    }

    #[tokio::test]
    async fn streams_a_deterministic_markdown_answer() {
        let client = SimulatedClient::new(Duration::ZERO);
        let req = LlmRequest::chat("sim", vec![LlmMessage::User("hi there".into())]);
        let a = collect(&client, req.clone()).await;
        let b = collect(&client, req).await;
        assert_eq!(a, b);
        assert!(a.contains("hi there"));
        assert!(a.contains("](https://"));
        assert!(a.matches("\n\n").count() >= 3);
    }
}
