//! The language-model boundary: [`LlmClient`] streams [`LlmEvent`]s for an [`LlmRequest`].
//! Two implementations: `openai` (any OpenAI-compatible HTTP endpoint) and `simulated`
//! (local, deterministic). Nothing above this module knows a provider's JSON.

pub(crate) mod openai;
pub mod probe;
pub mod secrets;
mod simulated;

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use futures_util::future::BoxFuture;

pub use openai::OpenAiClient;
pub use simulated::SimulatedClient;

use crate::config::{LlmConfig, LlmProvider};

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmMessage {
    System(String),
    User(String),
    Assistant {
        content: String,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Schema,
}

/// A tool's JSON Schema, encoded once: a clone shares it and a request embeds the encoded
/// text as it is (tool definitions go out with every model call; cloning and encoding
/// them per call showed up at ~5% of chatd's CPU in the `stream` benchmark).
#[derive(Clone)]
pub struct Schema(Arc<SchemaInner>);

struct SchemaInner {
    value: serde_json::Value,
    json: Box<serde_json::value::RawValue>,
}

impl Schema {
    pub fn new(value: serde_json::Value) -> Self {
        // A `Value` always encodes; the fallback (`null`) only satisfies the type.
        let json = serde_json::value::to_raw_value(&value).unwrap_or_default();
        Self(Arc::new(SchemaInner { value, json }))
    }

    /// The schema as JSON text.
    pub fn json(&self) -> &serde_json::value::RawValue {
        &self.0.json
    }
}

impl From<serde_json::Value> for Schema {
    fn from(value: serde_json::Value) -> Self {
        Self::new(value)
    }
}

impl<'de> serde::Deserialize<'de> for Schema {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Schema::new)
    }
}

impl std::ops::Deref for Schema {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.0.value
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.json.get() == other.0.json.get()
    }
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.json.get().fmt(f)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
    Function(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    pub model: String,
    pub messages: Vec<LlmMessage>,
    pub tools: Vec<ToolDef>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Groups requests that share a prompt prefix (a chat's) for a provider's prompt cache;
    /// an opaque hash, never an id.
    pub cache_key: Option<String>,
    /// The end user for the provider's `user` field (sent only with `llm.send_user`): an
    /// opaque hash, never an id.
    pub user: Option<String>,
}

impl LlmRequest {
    pub fn chat(model: impl Into<String>, messages: Vec<LlmMessage>) -> Self {
        Self {
            model: model.into(),
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: None,
            cache_key: None,
            user: None,
        }
    }

    /// The request's input size in tokens, estimated from its bytes (messages and tool
    /// definitions): what a thrown-away call costs.
    pub fn estimated_input_tokens(&self) -> u64 {
        let text = |m: &LlmMessage| match m {
            LlmMessage::System(c) | LlmMessage::User(c) => c.len(),
            LlmMessage::Assistant {
                content,
                tool_calls,
            } => content.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>(),
            LlmMessage::Tool { content, .. } => content.len(),
        };
        let bytes = self.messages.iter().map(text).sum::<usize>()
            + self
                .tools
                .iter()
                .map(|t| t.description.len() + t.parameters.json().get().len())
                .sum::<usize>();
        (bytes as u64).div_ceil(4)
    }
}

/// A complete tool call (its argument fragments merged).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text, not yet validated).
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What a streaming call yields, in order: deltas, optionally usage, then `Done`.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    TextDelta(String),
    /// Reasoning a model streams before (or between) its answer text: shown to the user,
    /// never part of the answer and never sent back to the model.
    ReasoningDelta(String),
    ToolCallDelta {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    /// The stream ended normally; `tool_calls` holds the merged calls, if any.
    Done {
        finish_reason: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the provider: {0}")]
    Connect(String),
    #[error("provider answered HTTP {status}")]
    Status { status: u16, body: String },
    /// HTTP 429, with the provider's `Retry-After` when it sent one.
    #[error("provider rate-limited the request")]
    RateLimited {
        retry_after: Option<std::time::Duration>,
    },
    #[error("provider stream broke: {0}")]
    Stream(String),
    #[error("provider sent nothing for {0:?}")]
    Idle(std::time::Duration),
    #[error("provider sent something unreadable: {0}")]
    Protocol(String),
}

impl LlmError {
    /// Worth one retry when nothing was streamed yet: connect errors, timeouts and 5xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect(_) | LlmError::Idle(_) => true,
            LlmError::Status { status, .. } => *status >= 500,
            // Waited out, not retried at once (see `pipeline::answer`).
            LlmError::RateLimited { .. } => false,
            LlmError::Stream(_) | LlmError::Protocol(_) => false,
        }
    }
}

pub type LlmStream = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send>>;

/// A streaming chat-completions client. Dropping the stream aborts the request
/// (for HTTP providers the connection is closed).
pub trait LlmClient: Send + Sync {
    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>>;
    /// Provider name for logs and `ai_typing_started`.
    fn provider_name(&self) -> &str;
    /// A cheap request that shows the provider answers and takes the key (for `/readyz`,
    /// through [`probe::LlmProbe`]). A client with nothing to reach is always ready.
    fn probe(&self) -> BoxFuture<'_, Result<(), LlmError>> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Whether a request costs money: a provider reached over the network. A local model
    /// (the simulated one, or an endpoint on this machine or a private network) does not.
    fn is_metered(&self) -> bool {
        true
    }
}

/// Builds the configured client.
pub fn from_config(config: &LlmConfig) -> Result<Arc<dyn LlmClient>, LlmError> {
    Ok(match config.provider {
        LlmProvider::Simulated => Arc::new(SimulatedClient::new(config.simulated_pace)),
        LlmProvider::OpenaiCompatible => Arc::new(OpenAiClient::new(config)?),
    })
}

/// Merges streamed tool-call fragments by their `index`.
#[derive(Debug, Default)]
pub struct ToolCallAccumulator {
    calls: Vec<ToolCall>,
}

impl ToolCallAccumulator {
    pub fn push(&mut self, index: usize, id: Option<String>, name: Option<String>, args: &str) {
        // Providers number calls 0..n; a gap would be a provider bug, so cap growth.
        if index >= 64 {
            return;
        }
        while self.calls.len() <= index {
            self.calls.push(ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
        }
        let call = &mut self.calls[index];
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.id = id;
        }
        if let Some(name) = name {
            call.name.push_str(&name);
        }
        call.arguments.push_str(args);
    }

    pub fn finish(self) -> Vec<ToolCall> {
        self.calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulator_merges_by_index() {
        let mut acc = ToolCallAccumulator::default();
        acc.push(0, Some("a".into()), Some("search".into()), "");
        acc.push(1, Some("b".into()), Some("read".into()), "{\"u");
        acc.push(0, None, None, "{\"q\":");
        acc.push(0, None, None, "1}");
        acc.push(1, None, None, "rl\":2}");
        let calls = acc.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, "{\"q\":1}");
        assert_eq!(calls[1].name, "read");
        assert_eq!(calls[1].arguments, "{\"url\":2}");
    }
}
