//! The devices on this node (one entry per socket) grouped by user hash, each with its
//! active chat and its position in the turns it receives; delivery to "all devices",
//! "other devices", "devices showing a chat" or one device. Local only (no bus).
//!
//! A turn frame carries its index in the turn's log. A device drops a turn frame it has
//! already had (index not above its position in that task, unless it is the update after
//! the device's newest), and any `ai_message_update` after the task's final one; a final
//! update not numbered right after the device's newest is renumbered (see `position`). While it resumes a task,
//! live frames of that task wait in its buffer until the replay from the log is done. A
//! frame from another node that skips an update the device never had starts such a wait
//! too ([`Hub::send_turn_minding_gaps`]: the caller catches the device up from the log).

use std::sync::{Arc, Mutex, PoisonError};

use chatd_protocol::{ChatId, ServerMessage, TaskId};
use dashmap::DashMap;

use super::outbox::{EncodedFrame, Outbox};
use crate::auth::UserId;
use crate::crypto::UserHash;
use position::{Positions, turn_chat, update_sequence};

/// A socket, unique across nodes (random), so a turn running on any node can address the
/// device that sent its message.
pub type ConnectionId = u64;

/// Live frames of a turn held while the device's resume replays that turn.
const RESUME_BUFFER: usize = 1024;

/// One connected socket of a user (a browser tab, an app, a CLI).
pub struct Device {
    pub conn_id: ConnectionId,
    /// The client's `sessionId` (or a generated one).
    pub session_id: String,
    pub user: UserId,
    pub user_hash: UserHash,
    pub outbox: Outbox,
    /// When the socket connected (unix ms).
    pub connected_ms: i64,
    /// The chat this device shows. A std Mutex: read or written in one step, never held
    /// across an await.
    active_chat: Mutex<Option<ChatId>>,
    /// Positions in recent turns. A std Mutex: a few comparisons per frame, no await.
    turns: Mutex<Positions>,
    /// Told when a live frame of a turn is held (see [`Device::next_held`]).
    held_one: tokio::sync::Notify,
}

impl Device {
    pub fn new(session_id: String, user: UserId, outbox: Outbox) -> Self {
        Self {
            conn_id: rand::random(),
            session_id,
            user_hash: UserHash::of(&user),
            user,
            outbox,
            connected_ms: crate::clock::unix_millis(),
            active_chat: Mutex::new(None),
            turns: Mutex::new(Positions::default()),
            held_one: tokio::sync::Notify::new(),
        }
    }

    pub fn set_active_chat(&self, chat: Option<ChatId>) {
        *self
            .active_chat
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = chat;
    }

    pub fn shows(&self, chat: &ChatId) -> bool {
        self.active_chat
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            == Some(chat)
    }

    pub fn send(&self, msg: &ServerMessage) -> bool {
        self.outbox.send(msg)
    }

    fn positions(&self) -> std::sync::MutexGuard<'_, Positions> {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers a turn frame unless the device already had it; held while resuming. With
    /// `hold_gaps`, an `ai_message_update` that skips a sequence the device has not had
    /// starts holding the turn's frames instead (true: the caller catches the device up
    /// from the log and ends the hold with [`Device::end_resume`]).
    fn send_turn(
        &self,
        task: &TaskId,
        index: u64,
        frame: EncodedFrame,
        msg: &ServerMessage,
        hold_gaps: bool,
    ) -> bool {
        let mut turns = self.positions();
        let pos = turns.at(task);
        if !pos.takes(index, msg) {
            return false;
        }
        if pos.chat.is_none() {
            pos.chat = turn_chat(msg);
        }
        let gap = hold_gaps
            && pos.held.is_none()
            && pos.placed()
            && update_sequence(msg).is_some_and(|s| s > pos.sequence + 1);
        if gap {
            pos.held = Some(Vec::new());
        }
        if let Some(held) = &mut pos.held {
            if held.len() < RESUME_BUFFER {
                held.push((index, frame, msg.clone()));
                drop(turns);
                self.held_one.notify_waiters();
            } else {
                drop(turns);
                tracing::warn!("resume buffer full: closing slow consumer");
                self.outbox
                    .close_with(chatd_protocol::CloseCode::SlowConsumer);
            }
            return gap;
        }
        let renumbered = pos.take(index, msg);
        drop(turns);
        match &renumbered {
            Some(m) => self.outbox.send(m),
            None => self.outbox.send_encoded(frame, msg),
        };
        false
    }

    /// Starts a resume of `task` after the update numbered `last_sequence`
    /// (`resume_ai_task`): live frames of the task are held until [`Device::end_resume`],
    /// and the replay that follows sends again, in order, what this device had before
    /// after that position. Unless this connection was sent newer updates of the turn
    /// while the request was on its way (chaos run AK: a node thawed from a pause and
    /// delivered the frames published meanwhile to a device that had just connected, before
    /// its resume): those are not sent twice.
    pub fn begin_resume(&self, task: &TaskId, last_sequence: u64) {
        let mut turns = self.positions();
        let pos = turns.at(task);
        if pos.sequence <= last_sequence {
            pos.restart();
        }
        pos.held.get_or_insert_with(Vec::new);
    }

    /// Starts a catch-up on `task` (a device that shows a chat whose turn runs): live frames
    /// are held until [`Device::end_resume`] like a resume's, but what the device had stays
    /// had. False (and nothing changes) when the device had the turn's final update, or a
    /// resume or catch-up of it is under way (that one ends the hold).
    pub fn begin_catch_up(&self, task: &TaskId) -> bool {
        let mut turns = self.positions();
        let pos = turns.at(task);
        if pos.held.is_some() || pos.has_ended() {
            return false;
        }
        pos.held = Some(Vec::new());
        true
    }

    /// The `sequence` of the newest update of `task` the device had (0: none).
    pub fn sequence_in(&self, task: &TaskId) -> u64 {
        let turns = self.positions();
        turns
            .iter()
            .find(|p| &p.task == task)
            .map_or(0, |p| p.sequence)
    }

    /// Whether the device has a position in `task` (it had frames of it, or catches up).
    pub fn follows(&self, task: &TaskId) -> bool {
        self.positions().iter().any(|p| &p.task == task)
    }

    /// The newest turn this device receives frames of, and its chat (what a catch-up from
    /// the log after a bus outage reads).
    pub fn followed_turn(&self) -> Option<(TaskId, ChatId)> {
        let turns = self.positions();
        let newest = turns.iter().find(|p| p.chat.is_some())?;
        Some((newest.task.clone(), newest.chat.clone()?))
    }

    /// Moves the position in `task` forward to `index` and the `ai_message_update` numbered
    /// `sequence` (frames up to them count as had).
    pub fn skip_to(&self, task: &TaskId, index: u64, sequence: u64) {
        let mut turns = self.positions();
        let pos = turns.at(task);
        pos.index = pos.index.max(index);
        pos.sequence = pos.sequence.max(sequence);
    }

    /// Sends a replayed frame of a resume (in log order) and moves the position to it.
    pub fn replay(&self, task: &TaskId, index: u64, msg: &ServerMessage) {
        let mut turns = self.positions();
        let pos = turns.at(task);
        if !pos.takes(index, msg) {
            return;
        }
        let renumbered = pos.take(index, msg);
        let msg = renumbered.as_ref().unwrap_or(msg);
        if pos.chat.is_none() {
            pos.chat = turn_chat(msg);
        }
        drop(turns);
        self.outbox.send(msg);
    }

    /// Resolves when a live frame of a turn is next held (awaited with `enable` first, so
    /// none held between the call and the await is missed).
    pub fn next_held(&self) -> tokio::sync::futures::Notified<'_> {
        self.held_one.notified()
    }

    /// Nothing more of `task` reaches the device (`recovered: false`): held or later.
    pub fn drop_turn(&self, task: &TaskId) {
        let mut turns = self.positions();
        turns.at(task).drop_all();
    }

    /// Ends a resume: the held live frames newer than the replay go out, in order.
    pub fn end_resume(&self, task: &TaskId) {
        self.release_held(task, false);
    }

    /// [`Device::end_resume`] unless the first held update the device has not had skips
    /// one (the log it replayed had lost its tail, which the node running the turn logs
    /// again before its next frame): then it goes on holding and returns false, for the
    /// caller to replay the log again.
    pub fn end_resume_if_whole(&self, task: &TaskId) -> bool {
        self.release_held(task, true)
    }

    fn release_held(&self, task: &TaskId, whole_only: bool) -> bool {
        let mut turns = self.positions();
        let pos = turns.at(task);
        // A device that had no update yet but other frames of the turn (a resume from 0
        // that replayed a log being written back, which held no update yet) waits for
        // update 1 too.
        if whole_only && (pos.placed() || pos.index > 0) {
            let next = (pos.held.iter().flatten())
                .filter(|(index, _, msg)| pos.takes(*index, msg))
                .find_map(|(_, _, msg)| update_sequence(msg));
            if next.is_some_and(|s| s > pos.sequence + 1) {
                return false;
            }
        }
        let held = pos.held.take().unwrap_or_default();
        let mut out = Vec::new();
        for (index, frame, msg) in held {
            if pos.takes(index, &msg) {
                let renumbered = pos.take(index, &msg);
                out.push((frame, msg, renumbered));
            }
        }
        drop(turns);
        for (frame, msg, renumbered) in out {
            match &renumbered {
                Some(m) => self.outbox.send(m),
                None => self.outbox.send_encoded(frame, &msg),
            };
        }
        true
    }
}

/// Which of a user's devices a message goes to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Audience {
    All,
    AllExcept(ConnectionId),
    Showing(ChatId),
    NotShowing(ChatId),
    Only(Vec<ConnectionId>),
}

impl Audience {
    fn includes(&self, d: &Device) -> bool {
        match self {
            Audience::All => true,
            Audience::AllExcept(c) => d.conn_id != *c,
            Audience::Showing(chat) => d.shows(chat),
            Audience::NotShowing(chat) => !d.shows(chat),
            Audience::Only(c) => c.contains(&d.conn_id),
        }
    }
}

#[derive(Default)]
pub struct Hub {
    /// user → their devices on this node. DashMap shards the lock; guards are dropped
    /// before sending.
    users: DashMap<UserHash, Vec<Arc<Device>>>,
}

impl Hub {
    /// Adds a device; true when it is the user's first on this node.
    pub fn register(&self, device: Arc<Device>) -> bool {
        let mut devices = self.users.entry(device.user_hash.clone()).or_default();
        devices.push(device);
        devices.len() == 1
    }

    /// Removes a device; true when it was the user's last on this node.
    pub fn unregister(&self, user: &UserHash, conn_id: ConnectionId) -> bool {
        self.users
            .remove_if_mut(user, |_, devices| {
                devices.retain(|d| d.conn_id != conn_id);
                devices.is_empty()
            })
            .is_some()
    }

    /// A snapshot of the user's devices (the map guard is released on return).
    pub fn devices(&self, user: &UserHash) -> Vec<Arc<Device>> {
        self.users.get(user).map(|d| d.clone()).unwrap_or_default()
    }

    /// Every device on this node (a snapshot).
    pub fn everyone(&self) -> Vec<Arc<Device>> {
        self.users.iter().flat_map(|e| e.value().clone()).collect()
    }

    /// Sends to every device on this node, encoding once; returns how many accepted it.
    pub fn send_everyone(&self, msg: &ServerMessage) -> usize {
        let devices = self.everyone();
        let frame = EncodedFrame::new(msg);
        devices
            .iter()
            .filter(|d| d.outbox.send_encoded(frame.clone(), msg))
            .count()
    }

    /// Asks every device's writer to close its socket with `code` (shutdown); how many.
    pub fn close_everyone(&self, code: chatd_protocol::CloseCode) -> usize {
        let devices = self.everyone();
        for d in &devices {
            d.outbox.close_with(code);
        }
        devices.len()
    }

    /// Sends to the chosen devices, encoding once; returns how many accepted it.
    pub fn send(&self, user: &UserHash, audience: &Audience, msg: &ServerMessage) -> usize {
        let mut frame: Option<EncodedFrame> = None;
        let mut sent = 0;
        for device in self.devices(user).iter().filter(|d| audience.includes(d)) {
            let f = frame.get_or_insert_with(|| EncodedFrame::new(msg)).clone();
            if device.outbox.send_encoded(f, msg) {
                sent += 1;
            }
        }
        sent
    }

    /// Sends frame `index` of `task` (`msg`, encoded as `frame`) to the chosen devices
    /// that have not had it.
    pub fn send_turn(
        &self,
        user: &UserHash,
        audience: &Audience,
        task: &TaskId,
        index: u64,
        frame: EncodedFrame,
        msg: &ServerMessage,
    ) {
        for d in self.devices(user).iter().filter(|d| audience.includes(d)) {
            d.send_turn(task, index, frame.clone(), msg, false);
        }
    }

    /// [`Hub::send_turn`] for a logged frame (another node's, or this node's flusher's):
    /// the devices it would reach past an update they have not had (frames lost on the
    /// way, or a log read before the store got back entries it had lost) hold the turn's
    /// frames from it on and are returned, for a catch-up that ends the hold.
    /// A frame sent `again` (its node appended it again to a log the store lost, after the
    /// turn ended) reaches only devices that follow the turn: ones that missed its end,
    /// not ones that connected since or forgot it.
    pub fn send_turn_minding_gaps(
        &self,
        user: &UserHash,
        audience: &Audience,
        (task, index): (&TaskId, u64),
        (frame, msg): (EncodedFrame, &ServerMessage),
        again: bool,
    ) -> Vec<Arc<Device>> {
        (self.devices(user).into_iter())
            .filter(|d| audience.includes(d) && (!again || d.follows(task)))
            .filter(|d| d.send_turn(task, index, frame.clone(), msg, true))
            .collect()
    }
}

mod position;
#[cfg(test)]
mod tests;
