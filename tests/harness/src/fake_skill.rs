//! A fake skill provider: a real HTTP server for remote skills (`POST /skill/{name}`), web
//! pages (`GET /page/{name}`) and a Brave-compatible search API (`GET /web/search`). Replies
//! are scripted per request; it records every request, counts requests in flight (and the
//! most ever in flight at once), and notices clients that hang up before the reply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::fake_llm::Gate;

const WAIT: Duration = Duration::from_secs(15);

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum SkillReply {
    /// 200 with this JSON body.
    Json(Value),
    /// 200 `text/html`.
    Html(String),
    /// This status; `retry_after` seconds as `Retry-After`.
    Status {
        status: u16,
        retry_after: Option<u32>,
    },
    /// Waits at the gate, then answers with `then`.
    Hold { gate: Gate, then: Box<SkillReply> },
    /// Sends 200 and then only whitespace (which JSON readers skip), every 50 ms, forever:
    /// the write fails once the client hangs up, and that is counted.
    Hang,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub body: Value,
    pub query: HashMap<String, String>,
    pub headers: HashMap<String, String>,
}

type Responder = Box<dyn Fn(&Seen) -> SkillReply + Send + Sync>;

struct Shared {
    seen: Mutex<Vec<Seen>>,
    changed: Notify,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    hangups: AtomicUsize,
    responder: Mutex<Option<Responder>>,
}

pub struct FakeSkill {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FakeSkill {
    pub async fn start() -> anyhow::Result<FakeSkill> {
        let shared = Arc::new(Shared {
            seen: Mutex::new(Vec::new()),
            changed: Notify::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            hangups: AtomicUsize::new(0),
            responder: Mutex::new(None),
        });
        let app = Router::new()
            .route("/skill/{name}", post(skill))
            .route("/page/{name}", get(page))
            .route("/web/search", get(search))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        Ok(FakeSkill { addr, shared, stop })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Decides every reply (default: `{"results": []}` for skills, 404 for pages).
    pub fn respond(&self, f: impl Fn(&Seen) -> SkillReply + Send + Sync + 'static) {
        *lock(&self.shared.responder) = Some(Box::new(f));
    }

    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }

    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests whose client hung up before the reply was sent.
    pub fn hangups(&self) -> usize {
        self.shared.hangups.load(Ordering::SeqCst)
    }

    /// Waits until `check` holds (checked whenever a request starts or ends).
    pub async fn wait_until(&self, what: &str, check: impl Fn(&FakeSkill) -> bool) {
        let wait = async {
            loop {
                let changed = self.shared.changed.notified();
                if check(self) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("fake skill: `{what}` did not happen within {WAIT:?}");
        }
    }
}

impl Drop for FakeSkill {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts a request in flight; when dropped before `answered`, the client hung up.
struct InFlight {
    shared: Arc<Shared>,
    answered: bool,
}

impl InFlight {
    fn enter(shared: Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        shared.changed.notify_waiters();
        InFlight {
            shared,
            answered: false,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.answered {
            self.shared.hangups.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.changed.notify_waiters();
    }
}

async fn handle(shared: Arc<Shared>, seen: Seen, default: SkillReply) -> Response {
    let mut guard = InFlight::enter(shared.clone());
    let mut reply = lock(&shared.responder)
        .as_ref()
        .map_or(default, |f| f(&seen));
    lock(&shared.seen).push(seen);
    shared.changed.notify_waiters();
    loop {
        match reply {
            SkillReply::Hold { gate, then } => {
                gate.hold().await;
                reply = *then;
            }
            SkillReply::Hang => {
                let beats = futures_util::stream::unfold(guard, |guard| async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), guard))
                });
                return (
                    [(header::CONTENT_TYPE, "application/json")],
                    axum::body::Body::from_stream(beats),
                )
                    .into_response();
            }
            SkillReply::Json(v) => {
                guard.answered = true;
                return axum::Json(v).into_response();
            }
            SkillReply::Html(h) => {
                guard.answered = true;
                return ([(header::CONTENT_TYPE, "text/html")], h).into_response();
            }
            SkillReply::Status {
                status,
                retry_after,
            } => {
                guard.answered = true;
                let code =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut resp = (code, "scripted").into_response();
                if let Some(s) = retry_after
                    && let Ok(v) = s.to_string().parse()
                {
                    resp.headers_mut().insert(header::RETRY_AFTER, v);
                }
                return resp;
            }
        }
    }
}

fn header_map(h: &HeaderMap) -> HashMap<String, String> {
    h.iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

async fn skill(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = Seen {
        path: format!("/skill/{name}"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        query: HashMap::new(),
        headers: header_map(&headers),
    };
    handle(
        shared,
        seen,
        SkillReply::Json(serde_json::json!({"results": []})),
    )
    .await
}

async fn page(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let seen = Seen {
        path: format!("/page/{name}"),
        body: Value::Null,
        query: HashMap::new(),
        headers: header_map(&headers),
    };
    handle(
        shared,
        seen,
        SkillReply::Status {
            status: 404,
            retry_after: None,
        },
    )
    .await
}

async fn search(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let seen = Seen {
        path: "/web/search".into(),
        body: Value::Null,
        query,
        headers: header_map(&headers),
    };
    handle(
        shared,
        seen,
        SkillReply::Json(serde_json::json!({"web": {"results": []}})),
    )
    .await
}
