//! The logs of turns that ended on this node lately, kept for a while: a store that lost
//! them after their writer was gone (Redis came back from an older snapshot, or without
//! its data) gets them again when the bus reconnects, and the frames it had lost go out
//! again to the other nodes, where only devices that follow the turn take them (and only
//! what they have not had). So a device on a node that was out meanwhile, or that read
//! the log before it was refilled, still gets the turn's end.
//!
//! A repair copy, not a second owner: the store's log is what every node reads; this only
//! writes back what this node had appended to it. Bounded by age, count and bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ErrorCode, ServerMessage};
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
    generation: u64,
    entries: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    at: Instant,
}

impl EndedLog {
    fn new(key: &TurnKey, began_ms: i64, entries: Vec<(u64, Vec<u8>)>) -> Self {
        let turn = NotedTurn {
            chat: key.chat.clone(),
            task: key.task.clone(),
            at_ms: began_ms,
        };
        Self {
            owner: key.owner.clone(),
            turn,
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

/// Whether `entries` are a taken-over turn's `node_lost` ending written into an empty log:
/// no device heard of that turn (frames go out once logged), save one told of it as
/// running when it sent its message again. Written back to a store that came back
/// without its data, it reached devices after the client's copy of the message had been
/// taken as new (the record that the ending settled the message was lost with the rest)
/// and answered: the message was answered twice (chaos run AE: 6 times, and 4 devices
/// "missed" that ending).
fn an_unheard_turns_ending(entries: &[(u64, Vec<u8>)]) -> bool {
    let decoded = recent::decode(entries.iter().take(1).map(|(i, e)| (*i, e.as_slice())));
    let first = log::frames(&decoded).next();
    matches!(first, Some((1, _, ServerMessage::Error(e))) if e.code == ErrorCode::NodeLost)
}

impl Outlet {
    /// Keeps the log of a turn that ended here (see the module's header), unless it is
    /// only the ending another node's turn got here when taken over before any of its
    /// frames was logged ([`an_unheard_turns_ending`]).
    pub(super) fn keep_ended(&self, key: &TurnKey, began_ms: i64, entries: Vec<(u64, Vec<u8>)>) {
        if an_unheard_turns_ending(&entries) {
            return;
        }
        let kept = self.ended.keep(EndedLog::new(key, began_ms, entries));
        self.metrics.turn_logs_kept.set(kept as i64);
    }

    /// After the bus reconnected (the store may have restarted): each ended log kept here
    /// that the store lost entries or the end of gets them again, and the frames it had
    /// lost go out again to the other nodes (this node's devices had them when they were
    /// first logged).
    pub async fn refill_ended(&self) {
        let logs = self.ended.fresh();
        let checked = logs.len();
        self.metrics.turn_logs_kept.set(checked as i64);
        let refilled = futures_util::stream::iter(logs)
            .map(|l| self.refill(l))
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
    async fn refill(&self, l: Arc<EndedLog>) -> bool {
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
        self.metrics.turn_logs_refilled.inc();
        tracing::info!(
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

#[cfg(test)]
mod tests {
    use chatd_protocol::{ChatId, MessageId, TaskId};

    use super::*;
    use crate::delivery::frames::{self, Head, LostTurn};
    use crate::delivery::outbox::EncodedFrame;

    /// A lost turn's ending after `logged` frames, as the taker's writer logs it.
    fn ending(logged: u64, text: &str) -> Vec<(u64, Vec<u8>)> {
        let head = Head {
            chat_id: ChatId::parse("c1").unwrap(),
            task_id: TaskId::parse("t1").unwrap(),
            user_message_id: MessageId::parse("m1").unwrap(),
            model_name: None,
            category: None,
        };
        let lost = LostTurn {
            head,
            text: text.into(),
        };
        let frames = frames::node_lost(lost, logged + 1);
        (logged + 1..)
            .zip(frames)
            .map(|(i, (audience, msg))| {
                let wire = EncodedFrame::new(&msg);
                (
                    i,
                    log::LogEntry::encode(&audience, &msg, wire.text.as_str(), ""),
                )
            })
            .collect()
    }

    #[test]
    fn only_an_ending_written_into_an_empty_log_is_an_unheard_turns() {
        assert!(an_unheard_turns_ending(&ending(0, "")));
        assert!(!an_unheard_turns_ending(&ending(3, "Some text")));
        assert!(!an_unheard_turns_ending(&[]));
    }
}
