//! A lean fake LLM for load: a real HTTP server speaking OpenAI streaming SSE, with zero
//! think time unless one is asked for (`think`: every answer, stage calls included, waits
//! that long before its first byte, like a real model's time to first token). *instant*
//! streams all tokens as fast as possible; *paced* sends one token every `pace`. A request that forces a function (`tool_choice.function.name`, chatd's
//! preprocessing and postprocessing) gets a call of that function with arguments `{}`.
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
    /// Wait before the first byte of every answer.
    pub think: Duration,
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
    Rendered {
        script,
        tokens,
        tail,
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

fn sse(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    r
}

async fn completions(State(r): State<Arc<Rendered>>, body: Bytes) -> Response {
    if !r.script.think.is_zero() {
        tokio::time::sleep(r.script.think).await;
    }
    let forced = serde_json::from_slice::<Request>(&body)
        .ok()
        .and_then(|q| match q.tool_choice {
            Some(ToolChoice::Forced { function }) => Some(function.name),
            _ => None,
        });
    if let Some(name) = forced {
        let parts = [
            event(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": format!("call_{name}"),
                "type": "function", "function": {"name": name, "arguments": "{}"}}]}}]}),
            ),
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ];
        return sse(Body::from_stream(stream::iter(
            parts.into_iter().map(Ok::<_, std::io::Error>),
        )));
    }
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
) -> anyhow::Result<(std::net::SocketAddr, crate::procs::Serving)> {
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
