//! The provider's Server-Sent Events as [`LlmEvent`]s: each `data:` chunk parsed (text,
//! reasoning, tool-call fragments merged by index, usage, an in-stream error), `[DONE]` or a
//! finish reason ending it, and one idle deadline between events.

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use crate::llm::{LlmError, LlmEvent, ToolCallAccumulator, Usage};

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
pub(super) fn sse_to_events<S, E>(
    events: S,
    idle: Duration,
) -> impl Stream<Item = Result<LlmEvent, LlmError>>
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
