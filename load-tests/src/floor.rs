//! The floor relay: the simplest server doing what chatd's hot path must do, built from
//! the same crates (axum WebSocket, reqwest, eventsource-stream). A text frame from the
//! client becomes one streaming POST to the LLM; every content delta goes back as one
//! frame `{"type":"delta","content":...}`, then `{"type":"done"}`. No auth, cache,
//! crypto, tools or queueing: it is what chatd is compared with.
//!
//! With `calls: 3` it makes the model calls chatd makes per chat: a forced function call
//! before the answer (preprocessing), the streamed answer, and a forced function call after
//! `done` (postprocessing), before it reads the next message (chatd's next turn in a chat
//! waits for the previous one).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::get;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::json;

struct Floor {
    http: reqwest::Client,
    url: String,
    /// Model calls per chat: 1 (the answer) or 3 (a stage call before and after it).
    calls: u8,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

async fn upgrade(State(f): State<Arc<Floor>>, ws: WebSocketUpgrade) -> Response {
    // The same buffer sizes chatd uses by default (`server.read_buffer_bytes`), so memory
    // is compared like for like.
    ws.read_buffer_size(2048)
        .write_buffer_size(0)
        .on_upgrade(move |socket| relay(f, socket))
}

async fn relay(f: Arc<Floor>, mut socket: WebSocket) {
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(text) = msg else { continue };
        let staged = f.calls >= 3;
        let mut ok = !staged || stage_call(&f, "preprocess", text.as_str()).await;
        if ok {
            let body = json!({"model": "fake", "stream": true,
                "messages": [{"role": "user", "content": text.as_str()}]});
            ok = match f.http.post(&f.url).json(&body).send().await {
                Ok(resp) => stream_answer(resp, &mut socket).await,
                Err(_) => false,
            };
        }
        let end = if ok {
            r#"{"type":"done"}"#
        } else {
            r#"{"type":"error"}"#
        };
        if socket.send(Message::Text(end.into())).await.is_err() {
            return;
        }
        if ok && staged {
            stage_call(&f, "postprocess", text.as_str()).await;
        }
    }
}

/// A streamed call that forces the function `name`, drained to its end (the fake LLM
/// answers it with a call of that function).
async fn stage_call(f: &Floor, name: &str, text: &str) -> bool {
    let body = json!({"model": "fake", "stream": true,
        "messages": [{"role": "user", "content": text}],
        "tools": [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": name}}});
    let Ok(resp) = f.http.post(&f.url).json(&body).send().await else {
        return false;
    };
    let mut events = resp.bytes_stream().eventsource();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) if ev.data == "[DONE]" => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

async fn stream_answer(resp: reqwest::Response, socket: &mut WebSocket) -> bool {
    let mut events = resp.bytes_stream().eventsource();
    while let Some(ev) = events.next().await {
        let Ok(ev) = ev else { return false };
        if ev.data == "[DONE]" {
            return true;
        }
        let Ok(chunk) = serde_json::from_str::<Chunk>(&ev.data) else {
            continue;
        };
        for c in chunk.choices {
            if let Some(content) = c.delta.content {
                let frame = json!({"type": "delta", "content": content}).to_string();
                if socket.send(Message::Text(frame.into())).await.is_err() {
                    return false;
                }
            }
        }
    }
    false
}

pub async fn serve(
    llm_base: &str,
    calls: u8,
    listen: std::net::SocketAddr,
) -> anyhow::Result<(std::net::SocketAddr, crate::serving::Serving)> {
    let floor = Arc::new(Floor {
        http: reqwest::Client::builder().tcp_nodelay(true).build()?,
        url: format!("{llm_base}/chat/completions"),
        calls,
    });
    let app = Router::new().route("/ws", get(upgrade)).with_state(floor);
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
