//! The load client: one connection to a target (the fake LLM directly, the floor relay or
//! chatd), able to run a turn (send a message, read the streamed answer) and time it.
//! Every socket has `TCP_NODELAY`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chatd_protocol::{
    ChatId, ChatMessageAdded, ClientMessage, MessageId, PreprocessingStepKind, ServerMessage,
};
use eventsource_stream::Eventsource;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::workload::Workload;

/// How long one turn may take before it counts as an error.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The fake LLM, straight over HTTP (the baseline "added" figures subtract).
    Direct,
    /// The floor relay.
    Floor,
    Chatd,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Floor => "floor",
            Kind::Chatd => "chatd",
        }
    }
}

/// Where a client connects.
#[derive(Clone)]
pub struct Target {
    pub kind: Kind,
    pub addr: SocketAddr,
}

/// Times of one turn, from the moment the message was sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnTiming {
    /// Send → first answer frame (first SSE content delta when direct).
    pub first: Duration,
    /// chatd: send → `preprocessing_step` `model_selected`.
    pub model_selected: Option<Duration>,
    /// chatd: `ai_typing_started` → first `ai_message_update` (the main call's part).
    pub main_first: Option<Duration>,
    /// Send → last frame of the answer.
    pub done: Duration,
    /// Longest gap between consecutive answer frames (or before the first).
    pub max_gap: Duration,
}

enum Io {
    Http(reqwest::Client, String),
    Ws(Box<WebSocketStream<TcpStream>>),
}

pub struct Conn {
    kind: Kind,
    io: Io,
    id: u64,
    turns: u64,
    /// chatd only: turns follow this workload as the connection in this slot (one chat for
    /// several turns) instead of a new chat per turn.
    workload: Option<(Arc<Workload>, u64)>,
}

pub async fn ws_connect(
    addr: SocketAddr,
    path_and_query: &str,
) -> anyhow::Result<WebSocketStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let url = format!("ws://{addr}{path_and_query}");
    let (ws, _) = tokio_tungstenite::client_async(url, tcp).await?;
    Ok(ws)
}

impl Conn {
    /// Opens a connection; `token` is required for chatd.
    pub async fn open(target: &Target, id: u64, token: Option<&str>) -> anyhow::Result<Conn> {
        let io = match target.kind {
            Kind::Direct => Io::Http(
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .pool_max_idle_per_host(1)
                    .build()?,
                format!("http://{}/v1/chat/completions", target.addr),
            ),
            Kind::Floor => Io::Ws(Box::new(ws_connect(target.addr, "/ws").await?)),
            Kind::Chatd => {
                let token = token.context("chatd needs a token")?;
                Io::Ws(Box::new(
                    ws_connect(target.addr, &format!("/v1/ws?token={token}")).await?,
                ))
            }
        };
        Ok(Conn {
            kind: target.kind,
            io,
            id,
            turns: 0,
            workload: None,
        })
    }

    /// The connection's id (its user's number for chatd).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Makes a chatd connection's turns follow `workload` as the connection in `slot`
    /// (other targets are unaffected: they have no chats).
    pub fn follow(&mut self, workload: Arc<Workload>, slot: u64) {
        self.workload = Some((workload, slot));
    }

    /// Sends one message and reads the whole answer.
    pub async fn turn(&mut self) -> anyhow::Result<TurnTiming> {
        self.turns += 1;
        match tokio::time::timeout(TURN_TIMEOUT, self.turn_inner()).await {
            Ok(r) => r,
            Err(_) => bail!("turn timed out after {TURN_TIMEOUT:?}"),
        }
    }

    async fn turn_inner(&mut self) -> anyhow::Result<TurnTiming> {
        let (id, n) = (self.id, self.turns);
        match (&mut self.io, self.kind, &self.workload) {
            (Io::Http(http, url), _, _) => direct_turn(http, url).await,
            (Io::Ws(ws), Kind::Floor, _) => floor_turn(ws, n).await,
            (Io::Ws(ws), _, Some((w, slot))) => workload_turn(ws, id, w, *slot, n - 1).await,
            (Io::Ws(ws), _, None) => chatd_turn(ws, id, n).await,
        }
    }

    /// Sends a WebSocket ping (idle scenarios); pongs are read by [`Conn::drain`].
    pub async fn ping(&mut self) -> anyhow::Result<()> {
        if let Io::Ws(ws) = &mut self.io {
            ws.send(Message::Ping(Default::default())).await?;
        }
        Ok(())
    }

    /// Reads whatever is pending for up to `wait` (pongs, late frames); errors if closed.
    pub async fn drain(&mut self, wait: Duration) -> anyhow::Result<()> {
        if let Io::Ws(ws) = &mut self.io {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                match tokio::time::timeout_at(deadline, ws.next()).await {
                    Err(_) => return Ok(()),
                    Ok(None) => bail!("connection closed"),
                    Ok(Some(Err(e))) => return Err(e.into()),
                    Ok(Some(Ok(Message::Close(_)))) => bail!("connection closed by server"),
                    Ok(Some(Ok(_))) => {}
                }
            }
        }
        Ok(())
    }
}

struct Gaps {
    start: Instant,
    last: Instant,
    max: Duration,
    first: Option<Duration>,
}

impl Gaps {
    fn new(start: Instant) -> Self {
        Self {
            start,
            last: start,
            max: Duration::ZERO,
            first: None,
        }
    }
    fn frame(&mut self, now: Instant) {
        self.max = self.max.max(now - self.last);
        self.last = now;
        self.first.get_or_insert(now - self.start);
    }
}

async fn direct_turn(http: &reqwest::Client, url: &str) -> anyhow::Result<TurnTiming> {
    let body = serde_json::json!({"model": "fake", "stream": true,
        "messages": [{"role": "user", "content": "hello"}]});
    let start = Instant::now();
    let resp = http.post(url).json(&body).send().await?;
    if !resp.status().is_success() {
        bail!("fake LLM answered {}", resp.status());
    }
    let mut events = resp.bytes_stream().eventsource();
    let mut gaps = Gaps::new(start);
    while let Some(ev) = events.next().await {
        let ev = ev?;
        let now = Instant::now();
        if ev.data == "[DONE]" {
            return Ok(TurnTiming {
                first: gaps.first.context("no content")?,
                done: now - start,
                max_gap: gaps.max,
                ..Default::default()
            });
        }
        if ev.data.contains("\"content\"") {
            gaps.frame(now);
        }
    }
    bail!("stream ended without [DONE]")
}

async fn floor_turn(ws: &mut WebSocketStream<TcpStream>, n: u64) -> anyhow::Result<TurnTiming> {
    let start = Instant::now();
    ws.send(Message::text(format!("hello {n}"))).await?;
    let mut gaps = Gaps::new(start);
    loop {
        let msg = ws.next().await.context("connection closed")??;
        let now = Instant::now();
        let Message::Text(t) = msg else { continue };
        if t.starts_with(r#"{"type":"delta""#) {
            gaps.frame(now);
        } else if t.starts_with(r#"{"type":"done""#) {
            return Ok(TurnTiming {
                first: gaps.first.context("no content")?,
                done: now - start,
                max_gap: gaps.max,
                ..Default::default()
            });
        } else {
            bail!("floor relay error: {t}");
        }
    }
}

pub fn chatd_message(conn: u64, n: u64) -> anyhow::Result<String> {
    let msg = ClientMessage::ChatMessageAdded(Box::new(ChatMessageAdded::user(
        ChatId::parse(format!("load-{conn}-{n}"))?,
        MessageId::parse(format!("m-{conn}-{n}"))?,
        "Hello, how are you today?".to_string(),
        1_700_000_000,
    )));
    Ok(serde_json::to_string(&msg)?)
}

async fn chatd_turn(
    ws: &mut WebSocketStream<TcpStream>,
    conn: u64,
    n: u64,
) -> anyhow::Result<TurnTiming> {
    let text = chatd_message(conn, n)?;
    let chat = ChatId::parse(format!("load-{conn}-{n}"))?;
    chatd_exchange(ws, text, chat, false).await
}

/// Turn `n` (from 0) of the workload in one of the connection's chats.
async fn workload_turn(
    ws: &mut WebSocketStream<TcpStream>,
    conn: u64,
    workload: &Workload,
    slot: u64,
    n: u64,
) -> anyhow::Result<TurnTiming> {
    let planned = workload.turn(slot, n);
    let chat = ChatId::parse(format!("mix-{conn}-{}", planned.chat))?;
    let mut m = ChatMessageAdded::user(
        chat.clone(),
        MessageId::parse(format!("m-{conn}-{n}"))?,
        Workload::text(&planned, n),
        1_700_000_000 + n as i64,
    );
    m.message.chat_has_title = planned.index_in_chat > 0;
    let text = serde_json::to_string(&ClientMessage::ChatMessageAdded(Box::new(m)))?;
    chatd_exchange(ws, text, chat, true).await
}

/// Sends `text` (a message to `chat`) and reads the answer; with `settle`, also waits for
/// `ai_typing_ended` (the turn is over), so the chat's next message starts a turn at once.
async fn chatd_exchange(
    ws: &mut WebSocketStream<TcpStream>,
    text: String,
    chat: ChatId,
    settle: bool,
) -> anyhow::Result<TurnTiming> {
    let start = Instant::now();
    ws.send(Message::text(text)).await?;
    let mut gaps = Gaps::new(start);
    let mut model_selected = None;
    let mut typing = None;
    let mut main_first = None;
    let mut answered: Option<TurnTiming> = None;
    loop {
        let msg = ws.next().await.context("connection closed")??;
        let now = Instant::now();
        let Message::Text(t) = msg else { continue };
        let frame: ServerMessage = serde_json::from_str(&t)?;
        match frame {
            ServerMessage::PreprocessingStep(s)
                if s.chat_id == chat && s.step == PreprocessingStepKind::ModelSelected =>
            {
                model_selected = Some(now - start);
            }
            // The wait before the first answer frame counts from the send, as for the floor
            // (preprocessing and queueing are part of it).
            ServerMessage::AiTypingStarted(s) if s.chat_id == chat && typing.is_none() => {
                typing = Some(now);
            }
            ServerMessage::AiMessageUpdate(u) if u.chat_id == chat => {
                if gaps.first.is_none() {
                    main_first = typing.map(|t| now - t);
                }
                gaps.frame(now);
                if u.is_final_chunk {
                    if let Some(code) = u.error_code {
                        bail!("turn ended with error {code:?}");
                    }
                    let timing = TurnTiming {
                        first: gaps.first.unwrap_or_default(),
                        model_selected,
                        main_first,
                        done: now - start,
                        max_gap: gaps.max,
                    };
                    if !settle {
                        return Ok(timing);
                    }
                    answered = Some(timing);
                }
            }
            ServerMessage::AiTypingEnded(e) if e.chat_id == chat => {
                if let Some(timing) = answered {
                    return Ok(timing);
                }
            }
            ServerMessage::Error(e) => bail!("chatd error {:?}: {}", e.code, e.message),
            _ => {}
        }
    }
}
