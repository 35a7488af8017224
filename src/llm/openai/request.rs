//! The chat-completions request body as the provider reads it, borrowed from
//! [`LlmRequest`] and serialized straight to the body.

use serde::Serialize;

use crate::llm::{LlmMessage, LlmRequest, ToolChoice};

/// The request as the provider reads it, borrowed from [`LlmRequest`] (serialized straight
/// to the body: no intermediate JSON tree).
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: &'a str,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::value::RawValue,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireName<'a>,
    },
}

#[derive(Serialize)]
struct WireName<'a> {
    name: &'a str,
}

/// Which of a request's provider hints are sent.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hints {
    /// Its prompt-cache key (`llm.prompt_cache_key`).
    pub(super) cache_key: bool,
    /// Its end user's hash (`llm.send_user`).
    pub(super) user: bool,
}

/// The body of `r`, with the provider `hints` it has and `hints` allows.
pub(super) fn request_body(r: &LlmRequest, hints: Hints) -> Body<'_> {
    Body {
        model: &r.model,
        messages: r.messages.iter().map(wire_message).collect(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        tools: r
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireToolFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: t.parameters.json(),
                },
            })
            .collect(),
        tool_choice: (!r.tools.is_empty()).then(|| match &r.tool_choice {
            ToolChoice::Auto => WireToolChoice::Mode("auto"),
            ToolChoice::None => WireToolChoice::Mode("none"),
            ToolChoice::Required => WireToolChoice::Mode("required"),
            ToolChoice::Function(name) => WireToolChoice::Function {
                kind: "function",
                function: WireName { name },
            },
        }),
        temperature: r.temperature,
        max_tokens: r.max_tokens,
        prompt_cache_key: r.cache_key.as_deref().filter(|_| hints.cache_key),
        user: r.user.as_deref().filter(|_| hints.user),
    }
}

fn wire_message(m: &LlmMessage) -> WireMessage<'_> {
    match m {
        LlmMessage::System(content) => WireMessage::System { content },
        LlmMessage::User(content) => WireMessage::User { content },
        LlmMessage::Assistant {
            content,
            tool_calls,
        } => WireMessage::Assistant {
            content,
            tool_calls: tool_calls
                .iter()
                .map(|c| WireCall {
                    id: &c.id,
                    kind: "function",
                    function: WireFunction {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                })
                .collect(),
        },
        LlmMessage::Tool {
            tool_call_id,
            content,
        } => WireMessage::Tool {
            tool_call_id,
            content,
        },
    }
}
