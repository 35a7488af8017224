//! [`PrivateClient`]: a model's client as one chat's turn uses it. Each request leaves with
//! the chat's personal data replaced by placeholders; the stream comes back with them
//! restored (the answer, its reasoning, and the arguments of a stage's own function, which
//! chatd reads; a skill call's arguments keep them, see `ToolSet::prepare`).

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::{ChatPrivacy, Restorer};
use crate::llm::{LlmClient, LlmError, LlmEvent, LlmMessage, LlmRequest, LlmStream, ToolChoice};

pub struct PrivateClient {
    inner: Arc<dyn LlmClient>,
    privacy: Arc<ChatPrivacy>,
}

impl PrivateClient {
    pub fn wrap(inner: Arc<dyn LlmClient>, privacy: Arc<ChatPrivacy>) -> Arc<dyn LlmClient> {
        Arc::new(Self { inner, privacy })
    }

    /// The request's text with the chat's personal data replaced (the system messages too:
    /// the main request's per-turn one carries the user's settings, memories and summary).
    fn hide(&self, request: &mut LlmRequest) {
        let p = &self.privacy;
        for message in &mut request.messages {
            match message {
                LlmMessage::System(c) | LlmMessage::User(c) => p.hide_in(c),
                LlmMessage::Assistant {
                    content,
                    tool_calls,
                } => {
                    p.hide_in(content);
                    for call in tool_calls {
                        p.hide_in(&mut call.arguments);
                    }
                }
                LlmMessage::Tool { content, .. } => p.hide_in(content),
            }
        }
    }
}

impl LlmClient for PrivateClient {
    fn stream(&self, mut request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        self.hide(&mut request);
        // A stage's function (forced) is read by chatd and shown to the user: restored.
        let own_function = matches!(request.tool_choice, ToolChoice::Function(_));
        let privacy = self.privacy.clone();
        Box::pin(async move {
            let stream = self.inner.stream(request).await?;
            // A chat without personal data (most) has nothing to restore: the stream as it is.
            if privacy.is_empty() {
                return Ok(stream);
            }
            Ok(reveal(stream, privacy, own_function))
        })
    }

    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), LlmError>> {
        self.inner.probe()
    }

    fn is_metered(&self) -> bool {
        self.inner.is_metered()
    }
}

/// The stream with the chat's placeholders restored.
fn reveal(stream: LlmStream, privacy: Arc<ChatPrivacy>, own_function: bool) -> LlmStream {
    let mut state = Revealing {
        privacy,
        own_function,
        text: Restorer::default(),
        reasoning: Restorer::default(),
        calls: Vec::new(),
    };
    Box::pin(stream.flat_map(move |item| futures_util::stream::iter(state.event(item))))
}

struct Revealing {
    privacy: Arc<ChatPrivacy>,
    own_function: bool,
    text: Restorer,
    reasoning: Restorer,
    /// Per call index (a stage's function only).
    calls: Vec<Restorer>,
}

type Item = Result<LlmEvent, LlmError>;

impl Revealing {
    fn event(&mut self, item: Item) -> Vec<Item> {
        let p = &*self.privacy;
        let event = match item {
            Ok(event) => event,
            Err(e) => return vec![Err(e)],
        };
        let out = match event {
            LlmEvent::TextDelta(t) => nonempty(self.text.push(p, &t), LlmEvent::TextDelta),
            LlmEvent::ReasoningDelta(t) => {
                nonempty(self.reasoning.push(p, &t), LlmEvent::ReasoningDelta)
            }
            LlmEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } if self.own_function && index < 64 => {
                while self.calls.len() <= index {
                    self.calls.push(Restorer::json());
                }
                let arguments = self.calls[index].push(p, &arguments);
                vec![LlmEvent::ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments,
                }]
            }
            LlmEvent::Done {
                finish_reason,
                tool_calls,
            } => self.done(finish_reason, tool_calls),
            other => vec![other],
        };
        out.into_iter().map(Ok).collect()
    }

    /// The held ends of the texts, then `Done` (a stage function's calls restored).
    fn done(
        &mut self,
        finish_reason: Option<String>,
        mut tool_calls: Vec<crate::llm::ToolCall>,
    ) -> Vec<LlmEvent> {
        let p = &*self.privacy;
        let mut out = nonempty(self.text.finish(p), LlmEvent::TextDelta);
        out.extend(nonempty(self.reasoning.finish(p), LlmEvent::ReasoningDelta));
        for (index, call) in self.calls.iter_mut().enumerate() {
            let arguments = call.finish(p);
            if !arguments.is_empty() {
                out.push(LlmEvent::ToolCallDelta {
                    index,
                    id: None,
                    name: None,
                    arguments,
                });
            }
        }
        if self.own_function {
            for call in &mut tool_calls {
                call.arguments = p.reveal(&call.arguments, true);
            }
        }
        out.push(LlmEvent::Done {
            finish_reason,
            tool_calls,
        });
        out
    }
}

fn nonempty(text: String, event: fn(String) -> LlmEvent) -> Vec<LlmEvent> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![event(text)]
    }
}
