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

/// The two-speed model's `preprocess` answer.
#[derive(Clone, Copy, Debug)]
pub struct Preprocess {
    /// Wait before the first byte.
    pub think: Duration,
    /// Between two fragments of the arguments.
    pub pace: Duration,
    /// About how many fragments (tokens) a chat's first answer is cut into; a fragment is
    /// kept at 3-5 characters, so the count is clamped to what the object's length allows.
    pub tokens: usize,
}

/// The marker that makes a user message a software-development one for the two-speed model.
pub const CODE_MARKER: &str = "[code]";

/// The `preprocess` arguments the two-speed model writes, in chatd's schema order (`first`:
/// with the first message's `title` and `icon_names`), and the length of the part up to
/// the end of the eleventh (last decision) field.
pub fn preprocess_arguments(code: bool, first: bool) -> (String, usize) {
    let (category, title, topic, tags) = if code {
        (
            "software_development",
            "Fixing a Rust borrow checker error",
            "rust programming",
            r#"["rust","borrow-checker","debugging"]"#,
        )
    } else {
        (
            "general_knowledge",
            "Planning a short spring trip",
            "travel planning",
            r#"["travel","spring","planning"]"#,
        )
    };
    let decision = format!(
        r#"{{"harmful_or_illegal_score":0,"misuse_risk_score":0,"prompt_injection_chance":0.0,"language":"en","category":"{category}","complexity":"simple","needs_vision":false,"needs_reasoning":false,"relevant_app_skills":[],"relevant_focus_modes":[],"relevant_app_settings_and_memories":[]"#
    );
    let naming = if first {
        format!(r#","title":"{title}","icon_names":["message-circle"]"#)
    } else {
        String::new()
    };
    let rest = format!(
        r#"{naming},"topic":"{topic}","chat_tags":{tags},"relevant_new_app_settings_and_memories":[]}}"#
    );
    let end = decision.len();
    (decision + rest.as_str(), end)
}

/// Characters per fragment for about `want` fragments in a chat's first `preprocess`
/// answer (the general one, the longest kind but one), kept within 3-5 so a fragment is
/// about a token; every answer is cut at this rate, so the decision fields end at the same
/// fragment whatever follows them.
pub fn chars_per_token(want: usize) -> f64 {
    let (text, _) = preprocess_arguments(false, true);
    (text.len() as f64 / want.max(1) as f64).clamp(3.0, 5.0)
}

/// `text` (ASCII) cut into fragments of `rate` characters on average (the last may be
/// shorter).
pub fn fragments(text: &str, rate: f64) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 1.0;
    while start < text.len() {
        let end = ((i * rate).round() as usize).clamp(start + 1, text.len());
        parts.push(&text[start..end]);
        start = end;
        i += 1.0;
    }
    parts
}

/// How the two-speed model cuts its `preprocess` arguments: (fragments in all, the
/// fragment that completes the decision fields, counted from 1).
pub fn preprocess_shape(code: bool, first: bool, want: usize) -> (usize, usize) {
    let (text, end) = preprocess_arguments(code, first);
    let parts = fragments(&text, chars_per_token(want));
    let mut at = 0;
    let mut decided = parts.len();
    for (i, f) in parts.iter().enumerate() {
        at += f.len();
        if at >= end {
            decided = i + 1;
            break;
        }
    }
    (parts.len(), decided)
}

/// Tokens of the scripted answer: the first is a paragraph of its own (so a relay that
/// streams whole paragraphs, like chatd, can show a first frame at once), then
/// paragraphs of eight tokens.
pub fn token_text(i: usize) -> String {
    if i == 0 {
        "Sure.\n\n".to_string()
    } else if i.is_multiple_of(8) {
        format!(" word{i}.\n\n")
    } else {
        format!(" word{i}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preprocess_arguments_are_json_in_schema_order_cut_into_token_sized_fragments() {
        for (code, first) in [(false, false), (false, true), (true, false), (true, true)] {
            let (text, end) = preprocess_arguments(code, first);
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(keys[4], "category");
            assert_eq!(keys[10], "relevant_app_settings_and_memories");
            assert_eq!(v.get("title").is_some(), first);
            assert!(text[..end].ends_with("\"relevant_app_settings_and_memories\":[]"));
            let parts = fragments(&text, chars_per_token(100));
            assert_eq!(parts.concat(), text);
            let last = parts.len() - 1;
            assert!(parts[..last].iter().all(|f| (3..=5).contains(&f.len())));
            let (n, decided) = preprocess_shape(code, first, 100);
            assert_eq!(n, parts.len());
            assert!(parts[..decided].concat().len() >= end);
            assert!(parts[..decided - 1].concat().len() < end);
        }
        assert_eq!(preprocess_shape(false, true, 100).0, 100);
    }
}
