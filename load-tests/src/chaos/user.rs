//! One user of the run: 1-3 devices spread over the nodes, taking turns in two chats.
//! Between turns a device sometimes leaves and comes back on another node; a turn itself
//! (`turn.rs`) may be cancelled, or lose a device that then resumes elsewhere. The user
//! stores every answer as a real client would (`ai_response_completed`, also for a
//! `pending_ai_response`), and re-sends the chat's history when chatd asks for it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::conn::{Conn, Ctx, Inbox, Owner};
use super::history::{What, chat_id};
use super::rng::Rng;

/// In every user message; Redis and the store must never hold it in plaintext.
pub const MARKER: &str = "PLAINTEXT-MARKER-7f3c";

pub struct User {
    pub id: u32,
    pub rng: Rng,
    pub ctx: Ctx,
    pub token: String,
    pub devices: Vec<Option<Conn>>,
    pub inbox: UnboundedSender<Inbox>,
    pub rx: UnboundedReceiver<Inbox>,
    pub readers: JoinSet<()>,
    /// Per chat, what the client holds: (message id, role, plaintext).
    pub history: HashMap<String, Vec<(String, &'static str, String)>>,
    pub stored: HashSet<String>,
    pub sent: u32,
    /// Cancels some turns and drops devices on purpose (off: only faults move them).
    pub restless: bool,
}

impl User {
    pub fn new(id: u32, devices: u32, rng: Rng, ctx: Ctx, token: String) -> User {
        let (inbox, rx) = unbounded_channel();
        User {
            id,
            rng,
            ctx,
            token,
            devices: (0..devices).map(|_| None).collect(),
            inbox,
            rx,
            readers: JoinSet::new(),
            history: HashMap::new(),
            stored: HashSet::new(),
            sent: 0,
            restless: true,
        }
    }

    /// Turns until `deadline`, then (once `calm` says the faults are over) reads every
    /// chat back and closes.
    pub async fn run(mut self, deadline: Instant, mut calm: watch::Receiver<bool>) {
        while Instant::now() < deadline {
            let chat = chat_id(self.id, self.rng.below(2) as u32);
            self.turn(&chat).await;
            if self.restless && self.rng.chance(0.1) {
                let d = self.rng.below(self.devices.len() as u64) as usize;
                self.drop_device(d, "client moves to another node").await;
            }
            let think = self.rng.range(200, 1500);
            self.idle(Duration::from_millis(think)).await;
        }
        let _ = calm.wait_for(|c| *c).await;
        self.readback().await;
        for d in 0..self.devices.len() {
            self.drop_device(d, "end of run").await;
        }
        self.readers.shutdown().await;
    }

    /// Handles what comes in (pending answers, closes) for a while.
    async fn idle(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        while let Ok(Some(item)) = tokio::time::timeout_at(until, self.rx.recv()).await {
            self.background(item).await;
        }
    }

    /// Outside a turn's own frames: store pending answers, reconnect closed devices.
    pub async fn background(&mut self, item: Inbox) {
        match item {
            Inbox::Frame { device, frame, .. } if frame.kind == "pending_ai_response" => {
                self.store(device, &frame.chat, &frame.task, &frame.text)
                    .await;
            }
            Inbox::Closed { device, conn } => {
                if self.conn_id(device) == Some(conn) {
                    self.devices[device as usize] = None;
                }
            }
            Inbox::Frame { .. } => {}
        }
    }

    pub fn conn_id(&self, device: u32) -> Option<u64> {
        self.devices.get(device as usize)?.as_ref().map(|c| c.id)
    }

    /// Connects device `d` if it has no connection, preferring a node other than
    /// `avoid`; tries every node once. True once connected.
    pub async fn connect(&mut self, d: usize, avoid: Option<usize>) -> bool {
        if self.devices.get(d).is_some_and(Option::is_some) {
            return true;
        }
        let n = self.ctx.nodes.len();
        let start = self.rng.below(n as u64) as usize;
        let order = (0..n).map(|i| (start + i) % n);
        let order: Vec<usize> = order
            .clone()
            .filter(|x| Some(*x) != avoid)
            .chain(avoid)
            .collect();
        for node in order {
            let owner = Owner {
                ctx: &self.ctx,
                user: self.id,
                device: d as u32,
                token: &self.token,
                inbox: &self.inbox,
                readers: &mut self.readers,
            };
            if let Some(conn) = Conn::open(owner, node).await {
                self.devices[d] = Some(conn);
                return true;
            }
        }
        false
    }

    pub async fn drop_device(&mut self, d: usize, why: &str) -> Option<usize> {
        let conn = self.devices.get_mut(d)?.take()?;
        let node = conn.node;
        conn.close(&self.ctx.rec, why).await;
        Some(node)
    }

    /// Sends `frame` from device `d`; a broken connection is dropped (false).
    pub async fn send(&mut self, d: usize, frame: &Value, what: Option<What>) -> bool {
        let Some(conn) = self.devices.get_mut(d).and_then(Option::as_mut) else {
            return false;
        };
        if let Some(what) = what {
            self.ctx
                .rec
                .push(self.id, d as u32, conn.id, conn.node, what);
        }
        if conn.send(frame).await {
            return true;
        }
        self.drop_device(d, "send failed").await;
        false
    }

    /// Stores an answer once (a real client encrypts it: the content here is a stand-in
    /// ciphertext that holds no plaintext).
    pub async fn store(&mut self, device: u32, chat: &str, task: &str, text: &str) {
        if task.is_empty() || chat.is_empty() || !self.stored.insert(task.to_string()) {
            return;
        }
        let content = ciphertext(text);
        let frame = json!({"type": "ai_response_completed", "payload": {"chat_id": chat,
            "message": {"message_id": task, "role": "assistant", "encrypted_content": content,
            "created_at": 1_700_000_000}}});
        let what = What::StoreSent {
            chat: chat.into(),
            message: task.into(),
            content,
        };
        let d = device as usize;
        if !self.send(d, &frame, Some(what)).await {
            self.stored.remove(task);
        }
    }

    /// After the run: every chat's stored assistant messages, as `Readback` events.
    async fn readback(&mut self) {
        if !self.connect(0, None).await {
            return;
        }
        let chats: Vec<String> = self.history.keys().cloned().collect();
        for chat in chats {
            let ask = json!({"type": "get_chat_messages", "payload": {"chat_id": chat}});
            if !self.send(0, &ask, None).await {
                return;
            }
            let until = Instant::now() + Duration::from_secs(10);
            while let Ok(Some(item)) = tokio::time::timeout_at(until, self.rx.recv()).await {
                let Inbox::Frame { raw, frame, .. } = item else {
                    continue;
                };
                if frame.kind == "chat_messages_response" && frame.chat == chat {
                    let messages = assistant_messages(&raw);
                    self.ctx
                        .rec
                        .push(self.id, 0, 0, 0, What::Readback { chat, messages });
                    break;
                }
            }
        }
    }
}

/// A stand-in for the client's encryption: deterministic, no plaintext in it.
pub fn ciphertext(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("ct1:{h:016x}:{}", text.len())
}

fn assistant_messages(raw: &Value) -> Vec<(String, String)> {
    let list = raw.pointer("/payload/messages").and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| {
            let id = m.get("message_id")?.as_str()?.to_string();
            let content = m.get("encrypted_content")?.as_str()?.to_string();
            Some((id, content))
        })
        .collect()
}
