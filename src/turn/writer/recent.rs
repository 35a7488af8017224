//! A flusher's newest appended entries (a taker's also the ones it read from the log), to
//! append again to a log that lost them (the store restarted from an older snapshot, or
//! without its data).

use std::collections::VecDeque;

use chatd_protocol::ServerMessage;

use super::super::log::LogEntry;
use super::super::rejoin;

/// The most entries, and bytes of them, a flusher keeps to refill its log.
const RECENT_ENTRIES: usize = 256;
const RECENT_BYTES: usize = 256 * 1024;

/// The newest entries appended, oldest first, within [`RECENT_ENTRIES`] and
/// [`RECENT_BYTES`].
#[derive(Default)]
pub(super) struct Recent {
    entries: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

impl Recent {
    /// Entries a log held before this flusher (a taker's: see `TurnWriter::continuing`).
    pub(super) fn of(entries: &[(u64, LogEntry)]) -> Self {
        let mut recent = Recent::default();
        for (index, entry) in entries {
            if let Ok(stored) = serde_json::to_vec(entry) {
                recent.keep(*index, stored);
            }
        }
        recent
    }

    pub(super) fn keep(&mut self, index: u64, entry: Vec<u8>) {
        self.bytes += entry.len();
        self.entries.push_back((index, entry));
        while self.entries.len() > RECENT_ENTRIES || self.bytes > RECENT_BYTES {
            match self.entries.pop_front() {
                Some((_, e)) => self.bytes -= e.len(),
                None => break,
            }
        }
    }

    /// The kept entries, in order.
    pub(super) fn into_entries(self) -> Vec<(u64, Vec<u8>)> {
        self.entries.into()
    }

    /// The kept entries as the frames a device catching up gets (for all devices, or the
    /// ones showing the chat), in order, chunks with their cumulative text.
    pub(super) fn replayable(&self) -> Vec<(u64, ServerMessage)> {
        let entries = decode(self.entries.iter().map(|(i, e)| (*i, e.as_slice())));
        rejoin::catch_up_frames(&entries)
    }

    /// The kept entries after index `last`, in order.
    pub(super) fn after(&self, last: u64) -> impl Iterator<Item = (u64, &[u8])> {
        (self.entries.iter())
            .filter(move |(i, _)| *i > last)
            .map(|(i, e)| (*i, e.as_slice()))
    }
}

/// Entries in their stored form, opened (an entry that does not parse is left out).
pub(super) fn decode<'a>(entries: impl Iterator<Item = (u64, &'a [u8])>) -> Vec<(u64, LogEntry)> {
    entries
        .filter_map(|(index, entry)| Some((index, serde_json::from_slice(entry).ok()?)))
        .collect()
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
