//! OpenAI-compatible chat-completions client: `POST {base_url}/chat/completions` with
//! `stream: true`, Server-Sent Events parsed by `eventsource-stream`, tool-call fragments
//! merged by index. The only module that knows this provider JSON.

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    LlmClient, LlmError, LlmEvent, LlmMessage, LlmRequest, LlmStream, ToolCallAccumulator,
    ToolChoice, Usage,
};
use crate::config::LlmConfig;

pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    api_key: Option<SecretString>,
    idle_timeout: Duration,
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
            api_key: config.api_key.clone(),
            idle_timeout: config.idle_timeout,
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

impl LlmClient for OpenAiClient {
    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        Box::pin(self.open(request))
    }

    fn provider_name(&self) -> &str {
        "openai_compatible"
    }
}

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

fn request_body(r: &LlmRequest) -> Value {
    let messages: Vec<Value> = r.messages.iter().map(message_json).collect();
    let mut body = json!({
        "model": r.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body["tool_choice"] = match &r.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
        };
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(m) = r.max_tokens {
        body["max_tokens"] = json!(m);
    }
    body
}

fn message_json(m: &LlmMessage) -> Value {
    match m {
        LlmMessage::System(c) => json!({"role": "system", "content": c}),
        LlmMessage::User(c) => json!({"role": "user", "content": c}),
        LlmMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut v = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                v["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
            }
            v
        }
        LlmMessage::Tool {
            tool_call_id,
            content,
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

#[derive(Deserialize)]
struct Chunk {
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
    let state = State {
        events,
        idle,
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
            let next = match tokio::time::timeout(st.idle, st.events.next()).await {
                Err(_) => {
                    st.finished = true;
                    return Some((Err(LlmError::Idle(st.idle)), st));
                }
                Ok(next) => next,
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

fn done<S>(st: &mut State<S>) -> LlmEvent {
    LlmEvent::Done {
        finish_reason: st.finish_reason.take(),
        tool_calls: std::mem::take(&mut st.tools).finish(),
    }
}

fn handle_chunk<S>(st: &mut State<S>, data: &str) -> Result<(), LlmError> {
    let value: Value = serde_json::from_str(data)
        .map_err(|e| LlmError::Protocol(format!("bad JSON chunk: {e}")))?;
    if let Some(err) = value.get("error") {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("provider error")
            .to_string();
        return Err(LlmError::Stream(message));
    }
    let chunk: Chunk =
        serde_json::from_value(value).map_err(|e| LlmError::Protocol(e.to_string()))?;
    for choice in chunk.choices {
        if let Some(delta) = choice.delta {
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn parses_text_tools_usage_and_done() {
        let lines = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"web-search","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
            "[DONE]",
        ];
        let body: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
        let bytes =
            futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
        let events: Vec<_> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
            .collect()
            .await;
        let events: Vec<LlmEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(events[0], LlmEvent::TextDelta("Hel".into()));
        assert_eq!(events[1], LlmEvent::TextDelta("lo".into()));
        assert!(events.contains(&LlmEvent::Usage(Usage {
            prompt_tokens: 7,
            completion_tokens: 3
        })));
        match events.last().unwrap() {
            LlmEvent::Done {
                finish_reason,
                tool_calls,
            } => {
                assert_eq!(finish_reason.as_deref(), Some("tool_calls"));
                assert_eq!(tool_calls.len(), 1);
                assert_eq!(tool_calls[0].arguments, "{\"q\":1}");
            }
            other => panic!("expected Done, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn truncated_stream_is_an_error() {
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
        let bytes =
            futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
        let events: Vec<_> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
            .collect()
            .await;
        assert!(matches!(events.last(), Some(Err(LlmError::Stream(_)))));
    }
}
