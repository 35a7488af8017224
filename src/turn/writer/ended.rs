//! The logs of turns that ended on this node lately, kept for a while: a store that lost
//! them after their writer was gone (Redis came back from an older snapshot, or without
//! its data) gets them again when the bus reconnects, and the frames it had lost go out
//! again to the other nodes, where only devices that follow the turn take them (and only
//! what they have not had). So a device on a node that was out meanwhile, or that read
//! the log before it was refilled, still gets the turn's end. A turn written back that
//! answered its message is handed to the caller, which records that answer again (the
//! store lost that record too).
//!
//! A repair copy, not a second owner: the store's log is what every node reads; this only
//! writes back what this node had appended to it. Bounded by age, count and bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ChatId, ErrorCode, MessageId, ServerMessage, TaskId};
use futures_util::StreamExt;
use tokio::time::Instant;

use super::super::log;
use super::super::store::patience::patiently;
use super::super::store::{LogSlot, NotedTurn};
use super::recent;
use super::{Outlet, TurnKey};
use crate::crypto::UserHash;

/// How long an ended turn's log is kept to refill (a device's node can be out about as
/// long as a lease and its catch-up margin).
const ENDED_KEEP: Duration = Duration::from_secs(120);
/// The most ended logs, and bytes of their entries, kept (the oldest go first).
const ENDED_LOGS: usize = 512;
const ENDED_BYTES: usize = 16 * 1024 * 1024;
/// Logs checked against the store at once after a reconnect.
const REFILLS: usize = 16;

/// What one turn's flusher appended (its entries in their stored form, before sealing).
pub(super) struct EndedLog {
    owner: UserHash,
    turn: NotedTurn,
    /// The user message the turn answered.
    message: MessageId,
    generation: u64,
    entries: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    at: Instant,
}

/// A turn that answered its message (see [`Outlet::refill_ended`]).
pub struct AnsweredTurn {
    pub owner: UserHash,
    pub chat: ChatId,
    pub message: MessageId,
    pub task: TaskId,
}

impl EndedLog {
    /// The turn, when its final update answered the message as its node settled it: with
    /// text and no error, or with `node_lost` (a taker's ending).
    fn answered(&self) -> Option<AnsweredTurn> {
        let entries = recent::decode(self.entries.iter().map(|(i, e)| (*i, e.as_slice())));
        let answered = log::frames(&entries).any(|(_, _, frame)| match frame {
            ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => match u.error_code {
                Some(code) => code == ErrorCode::NodeLost,
                None => !u.full_content_so_far.trim().is_empty(),
            },
            _ => false,
        });
        answered.then(|| AnsweredTurn {
            owner: self.owner.clone(),
            chat: self.turn.chat.clone(),
            message: self.message.clone(),
            task: self.turn.task.clone(),
        })
    }

    fn new(key: &TurnKey, began_ms: i64, entries: Vec<(u64, Vec<u8>)>) -> Self {
        let turn = NotedTurn {
            chat: key.chat.clone(),
            task: key.task.clone(),
            at_ms: began_ms,
        };
        Self {
            owner: key.owner.clone(),
            turn,
            message: key.message.clone(),
            generation: key.generation,
            bytes: entries.iter().map(|(_, e)| e.len()).sum(),
            entries,
            at: Instant::now(),
        }
    }
}

#[derive(Default)]
pub(super) struct EndedLogs {
    /// A std Mutex: a push or a copy of the list, no await.
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    logs: VecDeque<Arc<EndedLog>>,
    bytes: usize,
}

impl Kept {
    fn prune(&mut self) {
        let old = |l: &EndedLog| l.at.elapsed() > ENDED_KEEP;
        while let Some(l) = self.logs.front() {
            if !(old(l) || self.logs.len() > ENDED_LOGS || self.bytes > ENDED_BYTES) {
                break;
            }
            self.bytes -= l.bytes;
            self.logs.pop_front();
        }
    }
}

impl EndedLogs {
    /// Keeps `log`; how many are kept now.
    pub(super) fn keep(&self, log: EndedLog) -> usize {
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !log.entries.is_empty() {
            kept.bytes += log.bytes;
            kept.logs.push_back(Arc::new(log));
        }
        kept.prune();
        kept.logs.len()
    }

    fn fresh(&self) -> Vec<Arc<EndedLog>> {
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        kept.prune();
        kept.logs.iter().cloned().collect()
    }
}

impl Outlet {
    /// Keeps the log of a turn that ended here (see the module's header).
    pub(super) fn keep_ended(&self, key: &TurnKey, began_ms: i64, entries: Vec<(u64, Vec<u8>)>) {
        let kept = self.ended.keep(EndedLog::new(key, began_ms, entries));
        self.metrics.turn_logs_kept.set(kept as i64);
    }

    /// After the bus reconnected (the store may have restarted): each ended log kept here
    /// that the store lost entries or the end of gets them again, and the frames it had
    /// lost go out again to the other nodes (this node's devices had them when they were
    /// first logged).
    ///
    /// A turn written back that answered its message (with text, or with `node_lost`)
    /// goes to `settle` before it counts as written back: the store lost the record of
    /// that answer too, and a copy of the message must not be answered again (see
    /// [`EndedLog::answered`]).
    pub async fn refill_ended<F, Fut>(&self, settle: F)
    where
        F: Fn(AnsweredTurn) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let logs = self.ended.fresh();
        let checked = logs.len();
        self.metrics.turn_logs_kept.set(checked as i64);
        // Newest first: a lease the store came back holding is of a turn that ended
        // lately, and its taker waits only a moment for the log (see `reaper::lost_log`).
        let refilled = futures_util::stream::iter(logs.into_iter().rev())
            .map(|l| self.refill(l, &settle))
            .buffer_unordered(REFILLS)
            .filter(|refilled| std::future::ready(*refilled))
            .count()
            .await;
        tracing::info!(
            checked,
            refilled,
            "ended turn logs checked against the store"
        );
    }

    /// True when the store had lost some of `l` and got it again.
    async fn refill<F, Fut>(&self, l: Arc<EndedLog>, settle: &F) -> bool
    where
        F: Fn(AnsweredTurn) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (store, turn_log) = (self.log.store(), &self.log);
        let last = l.entries.last().map_or(0, |(i, _)| *i);
        let had = match patiently(None, || store.log_read(&l.turn.chat, &l.turn.task, last)).await {
            Ok(Some(read)) if read.ended && read.last >= last => return false,
            Ok(read) => read.map_or(0, |r| r.last),
            Err(e) => {
                tracing::warn!(error = %e, "cannot check an ended turn log");
                return false;
            }
        };
        for (index, entry) in l.entries.iter().filter(|(i, _)| *i > had) {
            let slot = LogSlot::new(l.generation, *index);
            let put =
                turn_log.append_patiently(&l.owner, &l.turn.chat, &l.turn.task, slot, entry, None);
            if let Err(e) = put.await {
                // Fenced: another node took the turn over since, and its log says the rest.
                tracing::info!(error = %e, "an ended turn log cannot be appended again");
                return false;
            }
        }
        if let Err(e) = turn_log.end(&l.turn.chat, &l.turn.task, l.generation).await {
            tracing::warn!(error = %e, "could not end a turn log appended again");
        }
        if let Err(e) = store.note_turn(&l.owner, &l.turn, turn_log.keep).await {
            tracing::debug!(error = %e, "cannot note a turn appended again");
        }
        if let Some(answered) = l.answered() {
            settle(answered).await;
        }
        self.metrics.turn_logs_refilled.inc();
        tracing::info!(
            task_id = %l.turn.task,
            lost = last - had.min(last),
            "an ended turn's log lost entries (the store restarted); they were appended again"
        );
        let entries = recent::decode(l.entries.iter().map(|(i, e)| (*i, e.as_slice())));
        for (index, audience, msg) in log::frames(&entries).filter(|f| f.0 > had) {
            (self.delivery)
                .publish_turn(&l.owner, audience, (&l.turn.task, index), msg, true)
                .await;
        }
        true
    }
}
