//! A lean fake LLM for load: a real HTTP server speaking OpenAI streaming SSE, with zero
//! think time unless one is asked for (`think`: every answer, stage calls included, waits
//! that long before its first byte, like a real model's time to first token). *instant*
//! streams all tokens as fast as possible; *paced* sends one token every `pace`. A request that forces a function (`tool_choice.function.name`, chatd's
//! preprocessing and postprocessing) gets a call of that function with arguments `{}`.
//!
//! *Two-speed* (`Script::preprocess`, for `ttft-policy`): a request forcing `preprocess`
//! waits its own think time, then streams a realistic arguments object in chatd's schema
//! order (the eleven decision fields first) as fragments of 3-5 characters (about one token
//! each), `pace` apart; its `category` is `software_development` when the last user message
//! holds [`CODE_MARKER`], else `general_knowledge`; `title` and `icon_names` only when the
//! request's schema asks for them (a chat's first message). Other forced functions get `{}`
//! at once (no think time); main calls (nothing forced) wait `think`, then stream as above.
//!
//! Every token's SSE bytes are rendered once at start-up; nothing is recorded per request.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use futures_util::stream;
use serde::Deserialize;
use serde_json::json;

mod two_speed;
pub use two_speed::*;

#[derive(Clone, Copy, Debug, clap::ValueEnum, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Instant,
    Paced,
}

#[derive(Clone, Debug)]
pub struct Script {
    pub mode: Mode,
    pub tokens: usize,
    pub pace: Duration,
    /// Wait before the first byte of every answer (two-speed: of main calls only).
    pub think: Duration,
    /// Two-speed: how chatd's preprocessing call is answered (None: `{}` after `think`).
    pub preprocess: Option<Preprocess>,
}

fn event(v: serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

struct Rendered {
    script: Script,
    tokens: Vec<Bytes>,
    tail: Vec<Bytes>,
    /// Two-speed: the `preprocess` timing and answers (see [`variant`]).
    preprocess: Option<(Preprocess, [Arc<Call>; 4])>,
}

/// A forced function call's SSE events: the head (id, name, empty arguments), the argument
/// fragments, the tail (`finish_reason`, `[DONE]`).
struct Call {
    head: Bytes,
    fragments: Vec<Bytes>,
    tail: Vec<Bytes>,
}

fn function_call(name: &str, fragments: &[&str]) -> Call {
    Call {
        head: event(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": format!("call_{name}"),
            "type": "function", "function": {"name": name, "arguments": ""}}]}}]}),
        ),
        fragments: fragments
            .iter()
            .map(|f| {
                event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": f}}]}}]}))
            })
            .collect(),
        tail: vec![
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ],
    }
}

fn render(script: Script) -> Rendered {
    let tokens = (0..script.tokens)
        .map(|i| {
            event(json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "model": "fake",
                "choices": [{"index": 0, "delta": {"content": token_text(i)}, "finish_reason": null}]}))
        })
        .collect();
    let tail = vec![
        event(
            json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "model": "fake",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ),
        event(
            json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": script.tokens,
                      "total_tokens": 10 + script.tokens}}),
        ),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ];
    let preprocess = script.preprocess.map(|p| {
        let rate = chars_per_token(p.tokens);
        let calls = [0, 1, 2, 3].map(|v| {
            let (text, _) = preprocess_arguments(v >= 2, v % 2 == 1);
            Arc::new(function_call("preprocess", &fragments(&text, rate)))
        });
        (p, calls)
    });
    Rendered {
        script,
        tokens,
        tail,
        preprocess,
    }
}

#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    tool_choice: Option<ToolChoice>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ToolChoice {
    Forced { function: Named },
    Other(#[allow(dead_code)] serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

/// What a two-speed `preprocess` answer depends on: the conversation and the schema.
#[derive(Deserialize)]
struct Conversation {
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    tools: Vec<Tool>,
}

#[derive(Deserialize)]
struct Tool {
    function: ToolFunction,
}

#[derive(Deserialize)]
struct ToolFunction {
    #[serde(default)]
    parameters: serde_json::Value,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: serde_json::Value,
}

/// Which of the four `preprocess` answers fits the request: about code (the last `user`
/// message holds [`CODE_MARKER`]) × the first message (the schema asks for a `title`).
fn variant(body: &[u8]) -> usize {
    let Ok(c) = serde_json::from_slice::<Conversation>(body) else {
        return 1;
    };
    let code = c
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .is_some_and(|m| match &m.content {
            serde_json::Value::String(s) => s.contains(CODE_MARKER),
            other => other.to_string().contains(CODE_MARKER),
        });
    let first = c
        .tools
        .first()
        .is_none_or(|t| t.function.parameters.pointer("/properties/title").is_some());
    usize::from(code) * 2 + usize::from(first)
}

fn sse(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    r
}

fn forced_name(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Request>(body)
        .ok()
        .and_then(|q| match q.tool_choice {
            Some(ToolChoice::Forced { function }) => Some(function.name),
            _ => None,
        })
}

async fn completions(State(r): State<Arc<Rendered>>, body: Bytes) -> Response {
    if let Some((p, calls)) = &r.preprocess {
        // Two-speed: each kind of call waits its own time.
        return match forced_name(&body) {
            Some(name) if name == "preprocess" => {
                let call = calls[variant(&body)].clone();
                if !p.think.is_zero() {
                    tokio::time::sleep(p.think).await;
                }
                paced_call(call, p.pace)
            }
            Some(name) => instant_call(&name),
            None => {
                if !r.script.think.is_zero() {
                    tokio::time::sleep(r.script.think).await;
                }
                answer(r)
            }
        };
    }
    if !r.script.think.is_zero() {
        tokio::time::sleep(r.script.think).await;
    }
    match forced_name(&body) {
        Some(name) => instant_call(&name),
        None => answer(r),
    }
}

/// A call of `name` with arguments `{}` (chatd's history compression: a one-fact summary,
/// so that it succeeds), all at once.
fn instant_call(name: &str) -> Response {
    let arguments = match name {
        "compress_history" => r#"{"facts": ["an earlier exchange"]}"#,
        _ => "{}",
    };
    let parts = [
        event(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": format!("call_{name}"),
            "type": "function", "function": {"name": name, "arguments": arguments}}]}}]}),
        ),
        event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ];
    sse(Body::from_stream(stream::iter(
        parts.into_iter().map(Ok::<_, std::io::Error>),
    )))
}

/// A function call whose arguments stream as fragments `pace` apart (the first with the
/// head), then the tail.
fn paced_call(call: Arc<Call>, pace: Duration) -> Response {
    let start = tokio::time::Instant::now();
    let body = stream::unfold((call, 0usize), move |(c, i)| async move {
        let n = c.fragments.len();
        let b = if i == 0 {
            c.head.clone()
        } else if i <= n {
            if !pace.is_zero() {
                tokio::time::sleep_until(start + pace * (i - 1) as u32).await;
            }
            c.fragments[i - 1].clone()
        } else if i <= n + c.tail.len() {
            c.tail[i - n - 1].clone()
        } else {
            return None;
        };
        Some((Ok::<_, std::io::Error>(b), (c, i + 1)))
    });
    sse(Body::from_stream(body))
}

/// The scripted answer of a main call.
fn answer(r: Arc<Rendered>) -> Response {
    match r.script.mode {
        Mode::Instant => {
            let all: Vec<Bytes> = r.tokens.iter().chain(r.tail.iter()).cloned().collect();
            sse(Body::from_stream(stream::iter(
                all.into_iter().map(Ok::<_, std::io::Error>),
            )))
        }
        Mode::Paced => {
            let start = tokio::time::Instant::now();
            let pace = r.script.pace;
            let body = stream::unfold((r, 0usize), move |(r, i)| async move {
                let n = r.tokens.len();
                if i < n {
                    tokio::time::sleep_until(start + pace * i as u32).await;
                    let b = r.tokens[i].clone();
                    Some((Ok::<_, std::io::Error>(b), (r, i + 1)))
                } else if i < n + r.tail.len() {
                    let b = r.tail[i - n].clone();
                    Some((Ok(b), (r, i + 1)))
                } else {
                    None
                }
            });
            sse(Body::from_stream(body))
        }
    }
}

/// Serves until the process ends; returns once the listener is bound.
pub async fn serve(
    script: Script,
    listen: std::net::SocketAddr,
) -> anyhow::Result<(std::net::SocketAddr, crate::serving::Serving)> {
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::new(render(script)));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let serving = Box::pin(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, serving))
}
