//! OpenAI-compatible chat-completions client: `POST {base_url}/chat/completions` with
//! `stream: true`, Server-Sent Events parsed by `eventsource-stream`, tool-call fragments
//! merged by index. The only module that knows this provider JSON (the request's in
//! [`request`]).

mod request;

use request::request_body;

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;

use super::{LlmClient, LlmError, LlmEvent, LlmRequest, LlmStream, ToolCallAccumulator, Usage};
use crate::config::LlmConfig;

pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    /// `GET {base_url}/models`: the readiness probe.
    models_url: String,
    api_key: Option<SecretString>,
    idle_timeout: Duration,
    /// The endpoint is on this machine or a private network (see `is_metered`).
    local: bool,
}

impl OpenAiClient {
    pub fn new(config: &LlmConfig) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| LlmError::Connect(e.to_string()))?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            models_url: format!("{}/models", config.base_url.trim_end_matches('/')),
            api_key: config.api_key.clone(),
            idle_timeout: config.idle_timeout,
            local: is_local(&config.base_url),
        })
    }

    async fn open(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        let mut builder = self.http.post(&self.url).json(&request_body(&request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose_secret());
        }
        let response = tokio::time::timeout(self.idle_timeout, builder.send())
            .await
            .map_err(|_| LlmError::Idle(self.idle_timeout))?
            .map_err(|e| LlmError::Connect(without_url(&e)))?;
        let status = response.status();
        if status.as_u16() == 429 {
            return Err(LlmError::RateLimited {
                retry_after: retry_after(response.headers()),
            });
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let mut body = body;
            body.truncate(512);
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
            });
        }
        let events = response.bytes_stream().eventsource();
        Ok(Box::pin(sse_to_events(events, self.idle_timeout)))
    }
}

/// A base URL whose host is `localhost`, a loopback, private or link-local address (a model
/// served next to chatd: Ollama, vLLM, llama.cpp) rather than a metered provider.
fn is_local(base_url: &str) -> bool {
    let Ok(url) = url::Url::parse(base_url) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Some(url::Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local()
        }
        None => false,
    }
}

impl LlmClient for OpenAiClient {
    fn is_metered(&self) -> bool {
        !self.local
    }

    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        Box::pin(self.open(request))
    }

    fn provider_name(&self) -> &str {
        "openai_compatible"
    }

    /// `GET /models`: an answer shows the provider is up; 401/403 that the key is not
    /// taken. A provider without the endpoint (404, 405) is up all the same.
    fn probe(&self) -> BoxFuture<'_, Result<(), LlmError>> {
        Box::pin(async move {
            let mut builder = self.http.get(&self.models_url);
            if let Some(key) = &self.api_key {
                builder = builder.bearer_auth(key.expose_secret());
            }
            let wait = self.idle_timeout.min(PROBE_TIMEOUT);
            let response = tokio::time::timeout(wait, builder.send())
                .await
                .map_err(|_| LlmError::Idle(wait))?
                .map_err(|e| LlmError::Connect(without_url(&e)))?;
            let status = response.status();
            if status.is_success() || matches!(status.as_u16(), 404 | 405) {
                return Ok(());
            }
            Err(LlmError::Status {
                status: status.as_u16(),
                body: String::new(),
            })
        })
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The longest a readiness probe waits.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A short description of a request error: its kind and innermost cause, never the URL.
fn without_url(e: &reqwest::Error) -> String {
    use std::error::Error;
    let kind = if e.is_connect() {
        "connect"
    } else if e.is_timeout() {
        "timeout"
    } else {
        "request"
    };
    let mut cause = None;
    let mut source = e.source();
    while let Some(s) = source {
        cause = Some(s.to_string());
        source = s.source();
    }
    format!(
        "{kind} error: {}",
        cause.unwrap_or_else(|| "unknown".into())
    )
}

#[derive(Deserialize)]
struct Chunk {
    /// A provider error sent inside the stream.
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    /// Reasoning (DeepSeek, vLLM, most OpenAI-compatible servers).
    #[serde(default)]
    reasoning_content: Option<String>,
    /// Reasoning (OpenRouter).
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallChunk>,
}

#[derive(Deserialize)]
struct ToolCallChunk {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionChunk>,
}

#[derive(Deserialize)]
struct FunctionChunk {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

struct State<S> {
    events: S,
    idle: Duration,
    /// The idle deadline: one timer for the whole stream, armed at the last event's time +
    /// `idle` and moved on only when it fires (registering a fresh timer per event takes
    /// the runtime's timer lock twice an event).
    idle_timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    last_event: tokio::time::Instant,
    pending: VecDeque<Result<LlmEvent, LlmError>>,
    tools: ToolCallAccumulator,
    finish_reason: Option<String>,
    finished: bool,
}

/// Turns SSE events into [`LlmEvent`]s, with an idle deadline between events.
fn sse_to_events<S, E>(events: S, idle: Duration) -> impl Stream<Item = Result<LlmEvent, LlmError>>
where
    S: Stream<Item = Result<eventsource_stream::Event, E>> + Unpin + Send,
    E: std::fmt::Display,
{
    let now = tokio::time::Instant::now();
    let state = State {
        events,
        idle,
        idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
        last_event: now,
        pending: VecDeque::new(),
        tools: ToolCallAccumulator::default(),
        finish_reason: None,
        finished: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.pending.pop_front() {
                return Some((item, st));
            }
            if st.finished {
                return None;
            }
            let Some(next) = next_event(&mut st).await else {
                st.finished = true;
                return Some((Err(LlmError::Idle(st.idle)), st));
            };
            match next {
                None => {
                    st.finished = true;
                    if st.finish_reason.is_some() {
                        // Lenient: some servers omit `[DONE]` after a finish_reason.
                        let d = done(&mut st);
                        st.pending.push_back(Ok(d));
                        continue;
                    }
                    return Some((
                        Err(LlmError::Stream("stream ended before completion".into())),
                        st,
                    ));
                }
                Some(Err(e)) => {
                    st.finished = true;
                    return Some((Err(LlmError::Stream(e.to_string())), st));
                }
                Some(Ok(event)) => {
                    let data = event.data.trim();
                    if data.is_empty() {
                        continue;
                    }
                    if data == "[DONE]" {
                        st.finished = true;
                        let d = done(&mut st);
                        return Some((Ok(d), st));
                    }
                    if let Err(e) = handle_chunk(&mut st, data) {
                        st.finished = true;
                        return Some((Err(e), st));
                    }
                }
            }
        }
    })
}

/// The stream's next item, or `None` when nothing came for `idle` since the last one.
async fn next_event<S: Stream + Unpin>(st: &mut State<S>) -> Option<Option<S::Item>> {
    loop {
        tokio::select! {
            biased;
            next = st.events.next() => {
                st.last_event = tokio::time::Instant::now();
                return Some(next);
            }
            () = st.idle_timer.as_mut() => {
                let due = st.last_event + st.idle;
                if due <= tokio::time::Instant::now() {
                    return None;
                }
                st.idle_timer.as_mut().reset(due);
            }
        }
    }
}

/// The events a response body cut into `chunks` (as the network might deliver it) turns
/// into, with no idle deadline in play. For the fuzz targets (`crate::fuzzing`).
pub(crate) async fn events_of_body(chunks: Vec<Vec<u8>>) -> Vec<Result<LlmEvent, LlmError>> {
    let body =
        futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    sse_to_events(body.eventsource(), Duration::from_secs(3600))
        .collect()
        .await
}

fn done<S>(st: &mut State<S>) -> LlmEvent {
    LlmEvent::Done {
        finish_reason: st.finish_reason.take(),
        tool_calls: std::mem::take(&mut st.tools).finish(),
    }
}

fn handle_chunk<S>(st: &mut State<S>, data: &str) -> Result<(), LlmError> {
    let chunk: Chunk = serde_json::from_str(data)
        .map_err(|e| LlmError::Protocol(format!("bad JSON chunk: {e}")))?;
    if let Some(err) = chunk.error {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .or(err.as_str())
            .unwrap_or("provider error")
            .to_string();
        return Err(LlmError::Stream(message));
    }
    for choice in chunk.choices {
        if let Some(delta) = choice.delta {
            let reasoning = delta.reasoning_content.or(delta.reasoning);
            if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
                st.pending.push_back(Ok(LlmEvent::ReasoningDelta(text)));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                st.pending.push_back(Ok(LlmEvent::TextDelta(text)));
            }
            for tc in delta.tool_calls {
                let (name, args) = match tc.function {
                    Some(f) => (f.name, f.arguments.unwrap_or_default()),
                    None => (None, String::new()),
                };
                st.tools.push(tc.index, tc.id.clone(), name.clone(), &args);
                st.pending.push_back(Ok(LlmEvent::ToolCallDelta {
                    index: tc.index,
                    id: tc.id,
                    name,
                    arguments: args,
                }));
            }
        }
        if let Some(reason) = choice.finish_reason {
            st.finish_reason = Some(reason);
        }
    }
    if let Some(u) = chunk.usage {
        st.pending.push_back(Ok(LlmEvent::Usage(Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        })));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
