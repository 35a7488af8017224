//! One turn of a user: the message from one device, every device reading the answer. The
//! client acts as a real one would: it resumes (`resume_ai_task` from the last sequence it
//! has) on another node when its connection breaks or goes silent, re-sends a message
//! that was not acknowledged (or whose answer it never saw start) from there, answers
//! `request_chat_history`, and may cancel the turn or drop a device on purpose.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::conn::Inbox;
use super::history::{Ending, Frame, What};
use super::user::{MARKER, User};

/// Silence after which the devices still waiting reconnect elsewhere (a paused node).
const SILENCE: Duration = Duration::from_secs(5);
/// A turn the client gives up on (the checker then judges what arrived).
const GIVE_UP: Duration = Duration::from_secs(60);

struct Turn {
    chat: String,
    message: String,
    content: String,
    sender: usize,
    sends: u32,
    acked: bool,
    task: Option<String>,
    behind: Option<String>,
    last: HashMap<u32, u64>,
    done: HashSet<u32>,
    failed: bool,
    outcome: Option<(Ending, String)>,
    cancel: bool,
    drop_device: Option<u32>,
}

impl User {
    pub async fn turn(&mut self, chat: &str) {
        self.sent += 1;
        let mut t = Turn {
            chat: chat.to_string(),
            message: format!("u{}-m{}", self.id, self.sent),
            content: format!("Question {} from user {} {MARKER}", self.sent, self.id),
            sender: self.rng.below(self.devices.len() as u64) as usize,
            sends: 0,
            acked: false,
            task: None,
            behind: None,
            last: HashMap::new(),
            done: HashSet::new(),
            failed: false,
            outcome: None,
            cancel: self.restless && self.rng.chance(0.08),
            drop_device: (self.restless && self.rng.chance(0.15))
                .then(|| self.rng.below(self.devices.len() as u64) as u32),
        };
        for d in 0..self.devices.len() {
            // A device shows the chat, or (sometimes) none: it then gets the background ending.
            let shown = (d == t.sender || self.rng.chance(0.8)).then_some(chat);
            self.connect(d, None).await;
            let frame = json!({"type": "set_active_chat", "payload": {"chat_id": shown}});
            self.send(d, &frame, None).await;
        }
        self.send_message(&mut t, false).await;
        self.drive(&mut t).await;
        let entry = self.history.entry(t.chat.clone()).or_default();
        entry.push((t.message.clone(), "user", t.content.clone()));
        if let (Some(task), Some((Ending::Answered, text))) = (t.task.clone(), t.outcome.clone()) {
            entry.push((task.clone(), "assistant", text.clone()));
            self.store(t.sender as u32, &t.chat, &task, &text).await;
        }
    }

    async fn send_message(&mut self, t: &mut Turn, with_history: bool) {
        let mut message = json!({"message_id": t.message, "role": "user",
            "content": t.content, "created_at": 1_700_000_000 + i64::from(self.sent)});
        if let (true, Some(h)) = (with_history, self.history.get(&t.chat)) {
            let h: Vec<Value> = h
                .iter()
                .map(|(id, role, text)| {
                    json!({"message_id": id,
                "role": role, "content": text, "created_at": 1_700_000_000})
                })
                .collect();
            message["message_history"] = Value::Array(h);
        }
        let frame = json!({"type": "chat_message_added", "payload": {"chat_id": t.chat, "message": message}});
        let resend = t.sends > 0;
        let what = What::Sent {
            chat: t.chat.clone(),
            message: t.message.clone(),
            resend,
        };
        let sender = t.sender;
        if !self.connect(sender, None).await {
            return;
        }
        if self.send(sender, &frame, Some(what)).await {
            t.sends += 1;
        }
    }

    async fn drive(&mut self, t: &mut Turn) {
        let give_up = Instant::now() + GIVE_UP;
        while Instant::now() < give_up && !self.finished(t) {
            let silence = (Instant::now() + SILENCE).min(give_up);
            match tokio::time::timeout_at(silence, self.rx.recv()).await {
                Ok(Some(Inbox::Frame {
                    device,
                    conn,
                    frame,
                    ..
                })) => {
                    if self.conn_id(device) == Some(conn) {
                        self.on_frame(t, device, *frame).await;
                    }
                }
                Ok(Some(Inbox::Closed { device, conn })) => {
                    if self.conn_id(device) == Some(conn) {
                        self.devices[device as usize] = None;
                        self.rejoin(t, device, None).await;
                    }
                }
                Ok(None) => return,
                Err(_) => self.stalled(t).await,
            }
        }
    }

    /// Over once the turn ended (or failed before it started) on every connected device.
    fn finished(&self, t: &Turn) -> bool {
        if t.failed {
            return true;
        }
        t.task.is_some()
            && (0..self.devices.len() as u32)
                .all(|d| t.done.contains(&d) || self.conn_id(d).is_none())
            && !t.done.is_empty()
    }

    async fn on_frame(&mut self, t: &mut Turn, d: u32, f: Frame) {
        if f.kind == "pending_ai_response" {
            return self.store(d, &f.chat, &f.task, &f.text).await;
        }
        // Our message refused before a turn started (cache_unavailable, overloaded...):
        // a typed end. Such an error names the message; one that does not answers another
        // request (a `set_active_chat` while the store is down, say).
        if f.kind == "error" && t.task.is_none() && f.message == t.message {
            t.failed = true;
        }
        if f.chat != t.chat {
            return;
        }
        match f.kind.as_str() {
            "chat_message_confirmed" if f.message == t.message => t.acked = true,
            "message_queued" if f.user_message == t.message => t.behind = Some(f.task.clone()),
            // The turn did not start: unacknowledged until the re-send is (sent again when
            // its node stops first).
            "request_chat_history" => {
                t.acked = false;
                self.send_message(t, true).await;
            }
            _ => {}
        }
        let ours = f.user_message == t.message
            || (t.behind.is_some() && t.behind.as_deref() != Some(f.task.as_str()));
        let starts = [
            "ai_task_initiated",
            "ai_typing_started",
            "ai_message_update",
        ];
        if t.task.is_none() && ours && !f.task.is_empty() && starts.contains(&f.kind.as_str()) {
            t.task = Some(f.task.clone());
        }
        if t.task.as_deref() != Some(f.task.as_str()) {
            return;
        }
        self.on_turn_frame(t, d, f).await;
    }

    async fn on_turn_frame(&mut self, t: &mut Turn, d: u32, f: Frame) {
        if f.kind == "ai_task_resumed" && !f.recovered {
            t.done.insert(d);
        }
        if f.kind == "ai_message_update" {
            t.last.insert(d, f.sequence);
        }
        if let Some(ending) = f.ending() {
            t.done.insert(d);
            if t.outcome.is_none() || d as usize == t.sender {
                t.outcome = Some((ending, f.text.clone()));
            }
            return;
        }
        if f.kind != "ai_message_update" {
            return;
        }
        if std::mem::take(&mut t.cancel) {
            let cancel = json!({"type": "cancel_ai_task", "payload": {"task_id": f.task, "chat_id": t.chat}});
            let what = What::CancelSent {
                task: f.task.clone(),
            };
            self.send(d as usize, &cancel, Some(what)).await;
        }
        if t.drop_device == Some(d) {
            t.drop_device = None;
            let node = self.drop_device(d as usize, "client drops mid-turn").await;
            self.rejoin(t, d, node).await;
        }
    }

    /// Device `d` lost its connection: back on another node, resuming the turn (or
    /// showing the chat, before the turn is known).
    async fn rejoin(&mut self, t: &mut Turn, d: u32, avoid: Option<usize>) {
        if t.done.contains(&d) || !self.connect(d as usize, avoid).await {
            return;
        }
        let frame = match &t.task {
            Some(task) => {
                let last = t.last.get(&d).copied().unwrap_or(0);
                let what = What::ResumeSent {
                    chat: t.chat.clone(),
                    task: task.clone(),
                    last_sequence: last,
                };
                let f = json!({"type": "resume_ai_task", "payload": {"chat_id": t.chat,
                    "task_id": task, "last_sequence": last}});
                self.send(d as usize, &f, Some(what)).await;
                return;
            }
            None => json!({"type": "set_active_chat", "payload": {"chat_id": t.chat}}),
        };
        self.send(d as usize, &frame, None).await;
        // Not acknowledged, or acknowledged but its answer never seen starting (its node
        // may have stopped before any device heard of the turn, and the store may have
        // lost it since): sent again, the server tells where it stands (its running or
        // queued turn, a confirmation if it was answered, or a turn now).
        if d as usize == t.sender {
            self.send_message(t, false).await;
        }
    }

    /// Nothing came for a while: every device still waiting moves to another node.
    async fn stalled(&mut self, t: &mut Turn) {
        for d in 0..self.devices.len() as u32 {
            let sender = d as usize == t.sender;
            let waiting = !t.done.contains(&d) && (t.task.is_some() || !t.acked || sender);
            if waiting {
                let node = self
                    .drop_device(d as usize, "silent: moving to another node")
                    .await;
                self.rejoin(t, d, node).await;
            }
        }
        if !t.acked && self.conn_id(t.sender as u32).is_none() {
            self.send_message(t, false).await;
        }
    }
}
