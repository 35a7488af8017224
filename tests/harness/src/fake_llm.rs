//! A fake LLM: a real HTTP server speaking the OpenAI chat-completions streaming protocol
//! (`POST /v1/chat/completions`, Server-Sent Events, `data: [DONE]`), with scripted replies
//! (text, tool calls, HTTP errors, a cut connection, a stall a test can observe and release),
//! a record of every request body, and detection of clients that hang up mid-stream.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// How long the `wait_for_*` helpers wait before failing the test.
const WAIT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Streams each chunk as a content delta, `delay` apart, then `stop`, usage, `[DONE]`.
    Text {
        chunks: Vec<String>,
        delay: Duration,
        usage: Option<Usage>,
    },
    /// Streams tool calls the way OpenAI does (id and name first, arguments in pieces).
    ToolCalls {
        calls: Vec<ToolCall>,
        text_before: Option<String>,
    },
    /// A plain HTTP error response.
    HttpError { status: u16, body: String },
    /// HTTP 429, with `Retry-After: <seconds>` when given.
    RateLimited { retry_after: Option<u32> },
    /// Streams the chunks, then drops the connection without finishing.
    CutAfter { chunks: Vec<String> },
    /// Streams the chunks, waits until the gate is released, then continues with `then`.
    Stall {
        chunks: Vec<String>,
        gate: Gate,
        then: Box<Reply>,
    },
    /// A non-streaming 200 JSON body.
    Json(Value),
    /// Streams these Server-Sent Events data fields as they are (malformed ones included),
    /// then ends the stream (`[DONE]` only if one of them says so).
    Raw { data: Vec<String> },
    /// Streams one call of `name` whose arguments are `before` (in pieces), waits until the
    /// gate is released, then streams `after` and finishes the call (a model still writing
    /// the later arguments).
    ToolCallHeld {
        name: String,
        before: String,
        gate: Gate,
        after: String,
    },
    /// Starts a tool call and cuts the connection in the middle of its arguments.
    CutInToolCall {
        name: String,
        partial_arguments: String,
    },
    /// A reasoning model: streams `reasoning` as deltas of the field `field` (DeepSeek and
    /// vLLM say `reasoning_content`, OpenRouter `reasoning`), then `then`.
    Reasoning {
        field: &'static str,
        reasoning: Vec<String>,
        then: Box<Reply>,
    },
}

/// A point a stalled reply waits at: the test awaits `reached()` and calls `release()`.
#[derive(Debug, Clone)]
pub struct Gate {
    reached: Arc<watch::Sender<bool>>,
    released: Arc<watch::Sender<bool>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    pub fn new() -> Self {
        Self {
            reached: Arc::new(watch::channel(false).0),
            released: Arc::new(watch::channel(false).0),
        }
    }

    pub fn release(&self) {
        self.released.send_replace(true);
    }

    /// Resolves once a stream is waiting at this gate.
    pub async fn reached(&self) {
        let mut rx = self.reached.subscribe();
        let wait = rx.wait_for(|r| *r);
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("fake LLM: no stream reached the gate within {WAIT:?}");
        }
    }

    /// Marks the gate reached and waits until it is released (for other fake servers).
    pub async fn hold(&self) {
        self.wait_released().await;
    }

    async fn wait_released(&self) {
        self.reached.send_replace(true);
        let mut rx = self.released.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }
}

type Responder = Box<dyn Fn(&Value) -> Option<Reply> + Send + Sync>;
type StageResponder = Box<dyn Fn(&str, &Value) -> Option<Reply> + Send + Sync>;

struct Shared {
    /// Main-processing requests (no forced function).
    requests: Mutex<Vec<Value>>,
    /// Requests that force a function (`preprocess`, `postprocess`), by function name.
    stage_requests: Mutex<HashMap<String, Vec<Value>>>,
    stage_queues: Mutex<HashMap<String, VecDeque<Reply>>>,
    stage_responder: Mutex<Option<StageResponder>>,
    /// The `Authorization` header of every request, in arrival order.
    authorizations: Mutex<Vec<Option<String>>>,
    request_seen: Notify,
    queue: Mutex<VecDeque<Reply>>,
    default: Mutex<Reply>,
    responder: Mutex<Option<Responder>>,
    disconnects: AtomicUsize,
    disconnect_seen: Notify,
    /// What `GET /models` answers (200 unless a test says otherwise).
    models_status: std::sync::atomic::AtomicU16,
}

/// A reply calling function `name` with `arguments` (what a stage request expects).
pub fn function_reply(name: &str, arguments: Value) -> Reply {
    Reply::ToolCalls {
        calls: vec![ToolCall {
            id: format!("call_{name}"),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }],
        text_before: None,
    }
}

pub struct FakeLlm {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FakeLlm {
    pub async fn start() -> anyhow::Result<FakeLlm> {
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            stage_requests: Mutex::new(HashMap::new()),
            stage_queues: Mutex::new(HashMap::new()),
            stage_responder: Mutex::new(None),
            authorizations: Mutex::new(Vec::new()),
            request_seen: Notify::new(),
            queue: Mutex::new(VecDeque::new()),
            default: Mutex::new(Reply::Text {
                chunks: vec![
                    "Hello from the fake LLM.\n\n".into(),
                    "Second paragraph.".into(),
                ],
                delay: Duration::ZERO,
                usage: None,
            }),
            responder: Mutex::new(None),
            disconnects: AtomicUsize::new(0),
            disconnect_seen: Notify::new(),
            models_status: std::sync::atomic::AtomicU16::new(200),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/chat/completions", post(completions))
            .route("/v1/models", axum::routing::get(models))
            .route("/models", axum::routing::get(models))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        Ok(FakeLlm { addr, shared, stop })
    }

    /// `http://127.0.0.1:PORT/v1`: clients POST to `{base_url}/chat/completions`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn push(&self, reply: Reply) {
        lock(&self.shared.queue).push_back(reply);
    }

    pub fn set_default(&self, reply: Reply) {
        *lock(&self.shared.default) = reply;
    }

    /// Consulted before the queue; `None` falls through to the queue, then the default.
    pub fn set_responder(&self, f: impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static) {
        *lock(&self.shared.responder) = Some(Box::new(f));
    }

    /// Every main-processing request body received so far, in order (requests that force
    /// a function are stage requests: see [`FakeLlm::stage_requests`]).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// Queues a reply for the next request that forces function `name`. Without one, such a
    /// request gets a call of `name` with arguments `{}`.
    pub fn push_stage(&self, name: &str, reply: Reply) {
        lock(&self.shared.stage_queues)
            .entry(name.to_string())
            .or_default()
            .push_back(reply);
    }

    /// Consulted first for requests that force a function: `(function name, body)`.
    pub fn set_stage_responder(
        &self,
        f: impl Fn(&str, &Value) -> Option<Reply> + Send + Sync + 'static,
    ) {
        *lock(&self.shared.stage_responder) = Some(Box::new(f));
    }

    /// What `GET /models` (a readiness probe) answers from now on: 401 plays a key the
    /// provider refuses.
    pub fn set_models_status(&self, status: u16) {
        self.shared.models_status.store(status, Ordering::SeqCst);
    }

    /// The `Authorization` header of every request (stage and main), in arrival order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        lock(&self.shared.authorizations).clone()
    }

    /// Request bodies that forced function `name`, in order.
    pub fn stage_requests(&self, name: &str) -> Vec<Value> {
        lock(&self.shared.stage_requests)
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    pub async fn wait_for_stage_requests(&self, name: &str, n: usize) {
        let wait = async {
            loop {
                let seen = self.shared.request_seen.notified();
                if self.stage_requests(name).len() >= n {
                    return;
                }
                seen.await;
            }
        };
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("fake LLM: fewer than {n} `{name}` requests within {WAIT:?}");
        }
    }

    pub async fn wait_for_requests(&self, n: usize) {
        let wait = async {
            loop {
                let seen = self.shared.request_seen.notified();
                if lock(&self.shared.requests).len() >= n {
                    return;
                }
                seen.await;
            }
        };
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("fake LLM: fewer than {n} requests within {WAIT:?}");
        }
    }

    /// Streams whose client hung up before the stream finished.
    pub fn disconnects(&self) -> usize {
        self.shared.disconnects.load(Ordering::SeqCst)
    }

    pub async fn wait_for_disconnect(&self) {
        let wait = async {
            loop {
                let seen = self.shared.disconnect_seen.notified();
                if self.disconnects() > 0 {
                    return;
                }
                seen.await;
            }
        };
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("fake LLM: no client disconnect within {WAIT:?}");
        }
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The function a request forces with `tool_choice`, if any.
fn forced_function(request: &Value) -> Option<String> {
    request
        .pointer("/tool_choice/function/name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&shared.authorizations).push(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    );
    let reply = match forced_function(&request) {
        Some(name) => {
            let queued = lock(&shared.stage_responder)
                .as_ref()
                .and_then(|f| f(&name, &request))
                .or_else(|| {
                    lock(&shared.stage_queues)
                        .get_mut(&name)
                        .and_then(VecDeque::pop_front)
                });
            let reply = queued.unwrap_or_else(|| Reply::ToolCalls {
                calls: vec![ToolCall {
                    id: format!("call_{name}"),
                    name: name.clone(),
                    arguments: "{}".into(),
                }],
                text_before: None,
            });
            lock(&shared.stage_requests)
                .entry(name)
                .or_default()
                .push(request);
            reply
        }
        None => {
            let from_responder = lock(&shared.responder).as_ref().and_then(|f| f(&request));
            let reply = from_responder
                .or_else(|| lock(&shared.queue).pop_front())
                .unwrap_or_else(|| lock(&shared.default).clone());
            lock(&shared.requests).push(request);
            reply
        }
    };
    shared.request_seen.notify_waiters();
    match reply {
        Reply::HttpError { status, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = if body.is_empty() {
                json!({"error": {"message": "scripted failure", "type": "server_error"}})
                    .to_string()
            } else {
                body
            };
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Reply::RateLimited { retry_after } => {
            let body = json!({"error": {"message": "rate limited", "type": "rate_limit_error"}});
            let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
            }
            response
        }
        Reply::Json(v) => axum::Json(v).into_response(),
        streaming => {
            let steps = steps(streaming);
            let guard = DisconnectGuard {
                shared,
                finished: false,
            };
            let body = stream::unfold(
                (VecDeque::from(steps), guard),
                |(mut steps, mut guard)| async move {
                    loop {
                        match steps.pop_front()? {
                            Step::Send(data, delay) => {
                                if !delay.is_zero() {
                                    tokio::time::sleep(delay).await;
                                }
                                if steps.is_empty() {
                                    guard.finished = true;
                                }
                                return Some((
                                    Ok::<_, std::io::Error>(Bytes::from(data)),
                                    (steps, guard),
                                ));
                            }
                            Step::Wait(gate) => {
                                // Heartbeat comments while stalled, so a client that hung up is
                                // noticed (the write fails and the body is dropped).
                                let beat = tokio::time::sleep(Duration::from_millis(50));
                                tokio::select! {
                                    () = gate.wait_released() => continue,
                                    () = beat => {
                                        steps.push_front(Step::Wait(gate));
                                        return Some((Ok(Bytes::from_static(b": waiting\n\n")), (steps, guard)));
                                    }
                                }
                            }
                            Step::Cut => {
                                // Give the server a chance to flush what was sent before the
                                // connection is aborted (it flushes when the body is pending).
                                for _ in 0..3 {
                                    tokio::task::yield_now().await;
                                }
                                guard.finished = true;
                                return Some((
                                    Err(std::io::Error::other("scripted cut")),
                                    (steps, guard),
                                ));
                            }
                        }
                    }
                },
            );
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(Body::from_stream(body))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// Records a client that went away before the stream finished.
struct DisconnectGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.disconnects.fetch_add(1, Ordering::SeqCst);
            self.shared.disconnect_seen.notify_waiters();
        }
    }
}

enum Step {
    Send(String, Duration),
    Wait(Gate),
    Cut,
}

fn event(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn content_delta(text: &str) -> String {
    event(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
    )
}

fn finish(reason: &str) -> String {
    event(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}),
    )
}

fn reasoning_delta(field: &str, text: &str) -> String {
    event(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {field: text, "content": null}, "finish_reason": null}]}),
    )
}

fn steps(reply: Reply) -> Vec<Step> {
    let mut out = Vec::new();
    push_steps(reply, &mut out);
    out
}

fn push_steps(reply: Reply, out: &mut Vec<Step>) {
    match reply {
        Reply::Reasoning {
            field,
            reasoning,
            then,
        } => {
            for r in reasoning {
                out.push(Step::Send(reasoning_delta(field, &r), Duration::ZERO));
            }
            push_steps(*then, out);
        }
        Reply::Text {
            chunks,
            delay,
            usage,
        } => {
            for c in chunks {
                out.push(Step::Send(content_delta(&c), delay));
            }
            out.push(Step::Send(finish("stop"), Duration::ZERO));
            if let Some(u) = usage {
                out.push(Step::Send(
                    event(json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [],
                        "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                                  "total_tokens": u.prompt_tokens + u.completion_tokens}})),
                    Duration::ZERO,
                ));
            }
            out.push(Step::Send("data: [DONE]\n\n".into(), Duration::ZERO));
        }
        Reply::ToolCalls { calls, text_before } => {
            if let Some(t) = text_before {
                out.push(Step::Send(content_delta(&t), Duration::ZERO));
            }
            for (index, call) in calls.iter().enumerate() {
                out.push(Step::Send(
                    event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": call.id,
                        "type": "function", "function": {"name": call.name, "arguments": ""}}]}}]})),
                    Duration::ZERO,
                ));
                let args: Vec<char> = call.arguments.chars().collect();
                for piece in args.chunks(args.len().div_ceil(3).max(1)) {
                    let piece: String = piece.iter().collect();
                    out.push(Step::Send(
                        event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index,
                            "function": {"arguments": piece}}]}}]})),
                        Duration::ZERO,
                    ));
                }
            }
            out.push(Step::Send(finish("tool_calls"), Duration::ZERO));
            out.push(Step::Send("data: [DONE]\n\n".into(), Duration::ZERO));
        }
        Reply::Raw { data } => {
            for d in data {
                out.push(Step::Send(format!("data: {d}\n\n"), Duration::ZERO));
            }
        }
        Reply::ToolCallHeld {
            name,
            before,
            gate,
            after,
        } => {
            out.push(Step::Send(
                event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": format!("call_{name}"),
                    "type": "function", "function": {"name": name, "arguments": ""}}]}}]})),
                Duration::ZERO,
            ));
            let piece = |text: &str| {
                Step::Send(
                    event(
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                        "function": {"arguments": text}}]}}]}),
                    ),
                    Duration::ZERO,
                )
            };
            let chars: Vec<char> = before.chars().collect();
            for part in chars.chunks(chars.len().div_ceil(4).max(1)) {
                out.push(piece(&part.iter().collect::<String>()));
            }
            out.push(Step::Wait(gate));
            out.push(piece(&after));
            out.push(Step::Send(finish("tool_calls"), Duration::ZERO));
            out.push(Step::Send("data: [DONE]\n\n".into(), Duration::ZERO));
        }
        Reply::CutInToolCall {
            name,
            partial_arguments,
        } => {
            out.push(Step::Send(
                event(json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_cut",
                        "type": "function", "function": {"name": name, "arguments": partial_arguments}}]},
                        "finish_reason": null}]})),
                Duration::ZERO,
            ));
            out.push(Step::Cut);
        }
        Reply::CutAfter { chunks } => {
            for c in chunks {
                out.push(Step::Send(content_delta(&c), Duration::ZERO));
            }
            out.push(Step::Cut);
        }
        Reply::Stall { chunks, gate, then } => {
            for c in chunks {
                out.push(Step::Send(content_delta(&c), Duration::ZERO));
            }
            out.push(Step::Wait(gate));
            push_steps(*then, out);
        }
        Reply::HttpError { .. } | Reply::RateLimited { .. } | Reply::Json(_) => {}
    }
}

/// `GET /models`: the model list, or the status a test set.
async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.models_status.load(Ordering::SeqCst);
    if status != 200 {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (
            code,
            axum::Json(json!({"error": {"message": "refused by the test"}})),
        )
            .into_response();
    }
    axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
        .into_response()
}
