//! The `simulated` provider: a deterministic, local stand-in for a model. It streams a
//! plausible markdown answer (several paragraphs, a link, a code block) word by word at a
//! configurable pace, so a newcomer sees streaming without an API key or network.
//! It also plays the pipeline's other parts: forced `preprocess`/`postprocess` calls get
//! plausible arguments (see [`stages`]), and when `docs-search` is offered and the user asks
//! to search, it calls the tool first and answers from its results.

mod stages;

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::{
    LlmClient, LlmError, LlmEvent, LlmMessage, LlmRequest, LlmStream, ToolCall, ToolChoice, Usage,
};

pub struct SimulatedClient {
    pace: Duration,
}

impl SimulatedClient {
    pub fn new(pace: Duration) -> Self {
        Self { pace }
    }
}

impl LlmClient for SimulatedClient {
    fn is_metered(&self) -> bool {
        false
    }

    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        let pace = self.pace;
        Box::pin(async move {
            let prompt_tokens = request
                .messages
                .iter()
                .map(|m| approx_tokens(message_text(m)))
                .sum();
            if let Some(call) = tool_call_for(&request) {
                let usage = Usage {
                    prompt_tokens,
                    completion_tokens: approx_tokens(&call.arguments),
                };
                let events = [
                    Ok(LlmEvent::Usage(usage)),
                    Ok(LlmEvent::Done {
                        finish_reason: Some("tool_calls".into()),
                        tool_calls: vec![call],
                    }),
                ];
                return Ok(Box::pin(futures_util::stream::iter(events)) as LlmStream);
            }
            let answer = answer_for(&request);
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

/// The call the simulated model makes instead of answering, if any: the forced stage
/// function, or `docs-search` when it is offered, the user asks to search and no tool
/// result has come back since the user's message.
fn tool_call_for(request: &LlmRequest) -> Option<ToolCall> {
    let question = last_user_message(request);
    if let ToolChoice::Function(name) = &request.tool_choice {
        let tool = request.tools.iter().find(|t| &t.name == name)?;
        let arguments = match name.as_str() {
            "preprocess" => stages::preprocess(question, &tool.parameters),
            "postprocess" => stages::postprocess(question),
            "compress_history" => stages::compress_history(question),
            "report_prompt_injection" => stages::injection(question),
            _ => serde_json::json!({}),
        };
        return Some(ToolCall {
            id: format!("call_{name}"),
            name: name.clone(),
            arguments: arguments.to_string(),
        });
    }
    let offered = request.tools.iter().any(|t| t.name == "docs-search");
    let answered = matches!(request.messages.last(), Some(LlmMessage::Tool { .. }));
    if !offered || answered || request.tool_choice == ToolChoice::None {
        return None;
    }
    let query = stages::search_query(question)?;
    Some(ToolCall {
        id: "call_docs_search".into(),
        name: "docs-search".into(),
        arguments: serde_json::json!({"requests": [{"id": 1, "query": query}]}).to_string(),
    })
}

/// What the tools returned since the last user message.
fn tool_results(request: &LlmRequest) -> Vec<&str> {
    let mut out: Vec<&str> = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, LlmMessage::User(_)))
        .filter_map(|m| match m {
            LlmMessage::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    out.reverse();
    out
}

/// The deterministic answer: depends only on the last user message, the history length and
/// any tool results.
fn answer_for(request: &LlmRequest) -> String {
    let results = tool_results(request);
    if !results.is_empty() {
        let found: String = results.join("\n").chars().take(600).collect();
        return format!(
            "I searched chatd's documentation. Here is what came back:\n\n             ```text\n{}\n```\n\n             That is what the documentation says on it.",
            found.replace('`', "'")
        );
    }
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
