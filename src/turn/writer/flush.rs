//! A turn writer's flusher: an owned task that seals and appends the turn's frames to its
//! log in order, and hands each to this node's devices and the other nodes once the log took
//! it (so a device here, or there after reading the log, misses nothing and sees nothing
//! the log lacks); it ends the log when the writer is gone.
//!
//! A frame the store cannot take (after [`super::super::store::patience::PATIENCE`])
//! waits, with the frames behind it, for the next try (the next frame, a retry while none
//! comes, or the end); a fenced append stops the turn's output (the turn belongs to
//! another generation, whose log tells the devices how it ended). The flusher keeps its
//! newest entries ([`Recent`]): a log that lost some (Redis came back from an older
//! snapshot, or without its data) refuses the next append as `Behind`, and gets them again
//! before it; a device here that a frame would reach past an update it missed (it resumed
//! from such a log) gets them too, before the frame. When the log ends, the kept entries go
//! to the outlet's ended logs (`super::ended`), to be written back after the turn.
//!
//! While the turn's lease lapsed by this node's clock the frames wait too, logged nowhere,
//! until the store's word ([`Standing`]): renewed, they go on; taken by another node, they
//! are dropped like fenced ones (what the store lost of the log meanwhile is put back
//! first: `put_back`); lost (the store forgot the turn meanwhile), they are
//! dropped and the flusher ends the turn with `node_lost` right after the log's newest
//! frame ([`Tip`]), as another node may have done from that log (or, when none was logged,
//! without a frame: no device heard of it); later frames are dropped.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::super::lease_clock::Standing;
use super::super::log::{LogEntry, LogError};
use super::super::store::{LogSlot, NotedTurn, TurnStoreError};
use super::recent::Recent;
use super::{Logged, Outlet, TurnKey};
use crate::delivery::Audience;
use crate::delivery::frames::{self, Head, LostTurn};
use crate::delivery::outbox::EncodedFrame;
use chatd_protocol::ServerMessage;

/// The most frames that wait for a store that cannot be reached (the oldest are dropped).
const MAX_WAITING: usize = 4096;
/// How often frames the store could not take are tried again while nothing else comes.
const WAITING_RETRY: std::time::Duration = std::time::Duration::from_millis(200);
/// The longest the writer's last frames wait for a lapsed lease's verdict.
const HOLD_AT_END: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) async fn flush(
    outlet: Arc<Outlet>,
    key: Arc<TurnKey>,
    mut rx: mpsc::UnboundedReceiver<Logged>,
    (flushed, settled): (watch::Sender<u64>, watch::Sender<u64>),
    (tip, recent): (Tip, Recent),
) {
    let mut flusher = Flusher {
        outlet: &outlet,
        key: &key,
        fenced: false,
        recent,
        waiting: VecDeque::new(),
        noted: false,
        began_ms: crate::clock::unix_millis(),
        held: false,
        ended: false,
        tip,
    };
    let mut batch = Vec::new();
    let mut received = flusher.tip.index;
    loop {
        // Frames held for the lease go on (or are dropped) at the store's word; frames the
        // store could not take are tried again meanwhile.
        let (lease, held) = (key.lease.clone(), flusher.held);
        let verdict = async move {
            match lease {
                Some(clock) if held => clock.settled().await,
                _ => std::future::pending().await,
            }
        };
        let retry = !held && !flusher.waiting.is_empty();
        tokio::select! {
            // Frames queued meanwhile are taken together (one wake-up for a burst).
            n = rx.recv_many(&mut batch, 64) => if n == 0 { break },
            _ = verdict => flusher.drain().await,
            () = tokio::time::sleep(WAITING_RETRY), if retry => flusher.drain().await,
        }
        for l in batch.drain(..) {
            received = l.index;
            flusher.one(l).await;
            flushed.send_replace(received);
        }
        let waiting = flusher.waiting.front().map(|l| l.index.saturating_sub(1));
        settled.send_replace(waiting.unwrap_or(received).min(received));
    }
    if let (Some(clock), true) = (&key.lease, flusher.held) {
        // The turn's renewals close the clock when they end; this bounds a turn stopped
        // without them (shutdown).
        let _ = tokio::time::timeout(HOLD_AT_END, clock.settled()).await;
    }
    if !flusher.waiting.is_empty() {
        flusher.drain().await;
    }
    if !flusher.waiting.is_empty() {
        let lost = flusher.waiting.len();
        tracing::warn!(lost, "turn frames the log could not take reached no device");
    }
    if flusher.fenced {
        return;
    }
    if let Err(e) = outlet.log.end(&key.chat, &key.task, key.generation).await {
        tracing::warn!(error = %e, "could not end the turn log");
    }
    outlet.keep_ended(&key, flusher.began_ms, flusher.recent.into_entries());
}

struct Flusher<'a> {
    outlet: &'a Outlet,
    key: &'a TurnKey,
    fenced: bool,
    recent: Recent,
    /// Frames not in the log yet, oldest first (more than one only while the store cannot
    /// be reached).
    waiting: VecDeque<Logged>,
    /// The turn is noted among its owner's recent turns (see [`Flusher::note`]).
    noted: bool,
    /// When this flusher began (unix ms): what the turn is noted at.
    began_ms: i64,
    /// The waiting frames wait for the lease (it lapsed by this node's clock).
    held: bool,
    /// The turn ended here as lost ([`Flusher::end_as_lost`]): later frames are dropped.
    ended: bool,
    /// The newest frame logged.
    tip: Tip,
}

/// What the log's newest frames say: the newest index, the newest `ai_message_update`'s
/// number and text and whether it was final, and the model and category the typing frame
/// named (what a `node_lost` ending after them needs).
pub(super) struct Tip {
    index: u64,
    sequence: u64,
    text: String,
    finished: bool,
    model_name: Option<String>,
    category: Option<String>,
}

impl Tip {
    /// After the log's `index` and `ai_message_update` number `sequence`.
    pub(super) fn new(index: u64, sequence: u64) -> Self {
        Tip {
            index,
            sequence,
            text: String::new(),
            finished: false,
            model_name: None,
            category: None,
        }
    }

    /// The log took `msg` at `index`.
    fn took(&mut self, index: u64, msg: &ServerMessage) {
        self.index = index;
        match msg {
            ServerMessage::AiMessageUpdate(u) => {
                self.sequence = u.sequence;
                self.text.clone_from(&u.full_content_so_far);
                self.finished = u.is_final_chunk;
            }
            ServerMessage::AiTypingStarted(t) => {
                self.model_name = Some(t.model_name.clone());
                self.category.clone_from(&t.category);
            }
            _ => {}
        }
    }
}

impl Flusher<'_> {
    /// One frame: after those waiting, into the log, then to the devices.
    async fn one(&mut self, l: Logged) {
        if self.fenced || self.ended {
            return;
        }
        if self.waiting.len() >= MAX_WAITING {
            self.waiting.pop_front();
        }
        self.waiting.push_back(l);
        self.drain().await;
    }

    /// Where the turn stands with the store (always held without a lease clock; a loss
    /// after the turn's end was logged, or after it ended as lost here, changes nothing).
    fn standing(&self) -> Standing {
        match self.key.lease.as_ref().map(|c| c.standing()) {
            None => Standing::Holds,
            Some(Standing::Lost) if self.tip.finished || self.ended => Standing::Holds,
            Some(standing) => standing,
        }
    }

    /// Drops the frames not logged yet and queues the turn's `node_lost` ending after the
    /// log's newest frame, the text it held (another node that found the lease expired
    /// ended the turn so from that log, and the store has since forgotten that ending).
    fn end_as_lost(&mut self) {
        let dropped = self.waiting.len();
        self.waiting.clear();
        self.ended = true;
        if let Some(clock) = &self.key.lease {
            clock.ended_lost();
        }
        if self.tip.index == 0 {
            // No device had a frame of it (frames go out once logged): no ending either.
            // The client's copy of its message may be answered by another turn already,
            // and the message is released for one (see `LeaseClock::lost_unseen`).
            tracing::warn!(
                dropped,
                "the store lost the turn before any of its frames was logged; it ends without a frame"
            );
            if let Some(clock) = &self.key.lease {
                clock.lost_unseen();
            }
            return;
        }
        tracing::warn!(
            dropped,
            logged = self.tip.index,
            "the store lost the turn while its lease had lapsed here; it ends as lost after its logged frames"
        );
        let (k, tip) = (self.key, &self.tip);
        let lost = LostTurn {
            head: Head {
                chat_id: k.chat.clone(),
                task_id: k.task.clone(),
                user_message_id: k.message.clone(),
                model_name: tip.model_name.clone(),
                category: tip.category.clone(),
            },
            text: tip.text.clone(),
        };
        let publish = self.outlet.delivery.has_peers();
        let mut text = tip.text.clone();
        let ending = frames::node_lost(lost, tip.sequence + 1);
        for (index, (audience, msg)) in (tip.index + 1..).zip(ending) {
            let frame = EncodedFrame::new(&msg);
            let entry = LogEntry::encode(&audience, &msg, frame.text.as_str(), &text);
            if let ServerMessage::AiMessageUpdate(u) = &msg {
                text.clone_from(&u.full_content_so_far);
            }
            let l = Logged {
                index,
                entry,
                audience,
                frame,
                msg,
                publish,
            };
            self.waiting.push_back(l);
        }
    }

    /// The turn is another node's: the frames not logged yet are dropped, and so is every
    /// later one (see [`super::super::lease_clock::LeaseClock::dropped_frames`]).
    fn drop_waiting(&mut self) {
        self.fenced = true;
        self.waiting.clear();
        if let Some(clock) = &self.key.lease {
            clock.dropped_frames();
        }
    }

    /// Logs and hands on the waiting frames in order, until one cannot be logged (or the
    /// lease lapsed, or was lost).
    async fn drain(&mut self) {
        self.held = false;
        while let Some(l) = self.waiting.front() {
            match self.standing() {
                Standing::Holds => {}
                Standing::Lapsed => {
                    self.held = true;
                    return;
                }
                Standing::Taken => {
                    tracing::warn!("another node took the turn over; its frames here are dropped");
                    self.put_back().await;
                    self.drop_waiting();
                    return;
                }
                Standing::Lost => {
                    self.end_as_lost();
                    continue;
                }
            }
            match self.append(l.index, &l.entry).await {
                Ok(refilled) => self.noted &= !refilled,
                Err(LogError::Store(TurnStoreError::Fenced)) => {
                    tracing::warn!("turn log fenced: another node took the turn over");
                    self.drop_waiting();
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not log a turn frame; it waits");
                    return;
                }
            }
            let Some(l) = self.waiting.pop_front() else {
                return;
            };
            self.recent.keep(l.index, l.entry);
            self.tip.took(l.index, &l.msg);
            self.hand_on(l.index, l.audience, l.frame, l.msg, l.publish)
                .await;
            if !self.noted {
                self.note().await;
            }
        }
    }

    /// Notes the turn among its owner's recent turns (until it succeeded once, and again
    /// after the store lost its data), so a node whose bus link was down while the turn's
    /// frames went out finds it and catches its devices up from the log. Nothing to note
    /// in embedded mode.
    async fn note(&mut self) {
        self.noted = true;
        let (k, log) = (self.key, &self.outlet.log);
        if log.in_process() {
            return;
        }
        let turn = NotedTurn {
            chat: k.chat.clone(),
            task: k.task.clone(),
            at_ms: self.began_ms,
        };
        let noted = (log.store()).note_turn(&k.owner, &turn, log.keep);
        if let Err(e) = noted.await {
            // Tried again after the next frame the log takes.
            self.noted = false;
            tracing::debug!(error = %e, "cannot note a turn among its owner's recent ones");
        }
    }

    /// A logged frame to this node's devices and the other nodes.
    async fn hand_on(
        &self,
        index: u64,
        audience: Audience,
        frame: EncodedFrame,
        msg: ServerMessage,
        publish: bool,
    ) {
        let (k, delivery) = (self.key, &self.outlet.delivery);
        let turn = (&k.task, index);
        let held =
            (delivery.hub).send_turn_minding_gaps(&k.owner, &audience, turn, (frame, &msg), false);
        if !held.is_empty() {
            self.fill_gaps(&held).await;
        }
        if publish {
            delivery
                .publish_turn(&k.owner, audience, (&k.task, index), msg, false)
                .await;
        }
    }

    /// Appends the entry right after the log's newest; a log that lost entries gets the
    /// kept ones after its newest first (what is not kept stays a hole: a device resuming
    /// before it is told the log cannot recover it). True when it lost entries.
    async fn append(&self, index: u64, entry: &[u8]) -> Result<bool, LogError> {
        let slot = LogSlot::new(self.key.generation, index).contiguous();
        let last = match self.put(slot, entry).await {
            Err(LogError::Store(TurnStoreError::Behind { last })) => last,
            done => return done.map(|()| false),
        };
        tracing::info!(
            lost = index - 1 - last,
            "the turn log lost entries (the store restarted); appending them again"
        );
        self.put_kept_after(last).await?;
        self.put(LogSlot::new(self.key.generation, index), entry)
            .await
            .map(|()| true)
    }

    async fn put(&self, slot: LogSlot, entry: &[u8]) -> Result<(), LogError> {
        let k = self.key;
        let log = &self.outlet.log;
        let until = k.lease.as_ref().and_then(|c| c.until());
        log.append_patiently(&k.owner, &k.chat, &k.task, slot, entry, until)
            .await
            .map(drop)
    }
}

mod gaps;
mod put_back;
