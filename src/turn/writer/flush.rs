//! A turn writer's flusher: an owned task that seals and appends the turn's frames to its
//! log in order, then publishes each to the other nodes (so a device there that reads the
//! log and then listens misses nothing), and ends the log when the writer is gone.
//!
//! An append the store cannot take is tried again for a moment, then logged and skipped
//! (the frame reached this node's devices; a device resuming later finds the log
//! incomplete and syncs); a fenced one stops the turn's output to other nodes (the turn
//! belongs to another generation). The flusher keeps its newest entries ([`Recent`]): a
//! log that lost some (Redis came back from an older snapshot, or without its data)
//! refuses the next append as `Behind`, and gets them again before it.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::super::log::LogError;
use super::super::store::{LogSlot, TurnStoreError};
use super::{Logged, Outlet, TurnKey};
use crate::delivery::outbox::EncodedFrame;

/// The most entries, and bytes of them, a flusher keeps to refill its log.
const RECENT_ENTRIES: usize = 256;
const RECENT_BYTES: usize = 256 * 1024;

pub(super) async fn flush(
    outlet: Arc<Outlet>,
    key: Arc<TurnKey>,
    mut rx: mpsc::UnboundedReceiver<Logged>,
    flushed: watch::Sender<u64>,
) {
    let mut flusher = Flusher {
        outlet: &outlet,
        key: &key,
        fenced: false,
        recent: Recent::default(),
    };
    let mut batch = Vec::new();
    // Frames queued meanwhile are taken together (one wake-up for a burst).
    while rx.recv_many(&mut batch, 64).await > 0 {
        for l in batch.drain(..) {
            let index = l.index;
            flusher.one(l).await;
            flushed.send_replace(index);
        }
    }
    if !flusher.fenced
        && let Err(e) = outlet.log.end(&key.chat, &key.task, key.generation).await
    {
        tracing::warn!(error = %e, "could not end the turn log");
    }
}

struct Flusher<'a> {
    outlet: &'a Outlet,
    key: &'a TurnKey,
    fenced: bool,
    recent: Recent,
}

impl Flusher<'_> {
    /// One frame: into the log, then to the other nodes.
    async fn one(&mut self, l: Logged) {
        if self.fenced {
            return;
        }
        match self.append(l.index, &l.entry).await {
            Ok(()) => self.recent.keep(l.index, l.entry),
            Err(LogError::Store(TurnStoreError::Fenced)) => {
                tracing::warn!("turn log fenced: another node took the turn over");
                self.fenced = true;
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not log a turn frame");
                // Held for the log and the log cannot be reached: not for this node's devices.
                if l.local.is_some() {
                    return;
                }
            }
        }
        let (outlet, key) = (self.outlet, self.key);
        if let Some((audience, msg)) = &l.local {
            let frame = EncodedFrame::new(msg);
            let hub = &outlet.delivery.hub;
            hub.send_turn(&key.owner, audience, &key.task, l.index, frame, msg);
        }
        if let Some((audience, frame)) = l.publish {
            outlet
                .delivery
                .publish_turn(&key.owner, audience, &key.task, l.index, frame)
                .await;
        }
    }

    /// Appends the entry right after the log's newest; a log that lost entries gets the
    /// kept ones after its newest first (what is not kept stays a hole: a device resuming
    /// before it is told the log cannot recover it).
    async fn append(&self, index: u64, entry: &[u8]) -> Result<(), LogError> {
        let slot = LogSlot::new(self.key.generation, index).contiguous();
        let last = match self.put(slot, entry).await {
            Err(LogError::Store(TurnStoreError::Behind { last })) => last,
            done => return done,
        };
        let again: Vec<_> = self.recent.after(last).collect();
        tracing::info!(
            lost = index - 1 - last,
            again = again.len(),
            "the turn log lost entries (the store restarted); appending them again"
        );
        for (i, e) in again {
            self.put(LogSlot::new(self.key.generation, i), e).await?;
        }
        self.put(LogSlot::new(self.key.generation, index), entry)
            .await
    }

    async fn put(&self, slot: LogSlot, entry: &[u8]) -> Result<(), LogError> {
        let k = self.key;
        let log = &self.outlet.log;
        log.append_patiently(&k.owner, &k.chat, &k.task, slot, entry)
            .await
            .map(drop)
    }
}

/// The newest entries appended, oldest first, within [`RECENT_ENTRIES`] and
/// [`RECENT_BYTES`].
#[derive(Default)]
struct Recent {
    entries: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

impl Recent {
    fn keep(&mut self, index: u64, entry: Vec<u8>) {
        self.bytes += entry.len();
        self.entries.push_back((index, entry));
        while self.entries.len() > RECENT_ENTRIES || self.bytes > RECENT_BYTES {
            match self.entries.pop_front() {
                Some((_, e)) => self.bytes -= e.len(),
                None => break,
            }
        }
    }

    /// The kept entries after index `last`, in order.
    fn after(&self, last: u64) -> impl Iterator<Item = (u64, &[u8])> {
        (self.entries.iter())
            .filter(move |(i, _)| *i > last)
            .map(|(i, e)| (*i, e.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_keeps_the_newest_within_its_bounds() {
        let mut r = Recent::default();
        for i in 1..=300u64 {
            r.keep(i, vec![0; 10]);
        }
        let kept: Vec<u64> = r.after(0).map(|(i, _)| i).collect();
        assert_eq!(kept.len(), RECENT_ENTRIES);
        assert_eq!(kept.first(), Some(&45));
        assert_eq!(r.after(298).count(), 2);
        r.keep(301, vec![0; RECENT_BYTES]);
        let kept: Vec<u64> = r.after(0).map(|(i, _)| i).collect();
        assert_eq!(kept, [301], "one big entry pushes the rest out");
    }
}
