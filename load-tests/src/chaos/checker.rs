//! The checker over a run's recorded history (see `history.rs`). It never looks at time
//! for pass or fail (times only label the frames it prints and the share of typed endings
//! near a fault); every rule is about what the devices received:
//!
//! - `sequences`: on each connection, a turn's `ai_message_update` frames have consecutive
//!   sequences from where the connection started or resumed, up to one final frame;
//! - `turns`: every acknowledged message got exactly one answer turn or a typed ending;
//!   every turn reached a device with an ending, and the same ending on every device; a
//!   device that showed a turn got its ending (or `recovered: false`); a connection open
//!   across a whole turn got it; no user got a frame of another user's chat;
//! - `stores`: every acknowledged store write reads back byte-equal after the run.

mod sequences;
mod stores;
mod turns;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use super::history::{Event, What};

/// One broken rule, at the event that shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub kind: &'static str,
    /// Index into the history.
    pub at: usize,
    pub detail: String,
}

/// What the checker found, with the figures of the summary table.
#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub frames: usize,
    pub messages_sent: usize,
    pub messages_acked: usize,
    pub turns: usize,
    /// Turns (and acknowledged messages without a turn) by the ending the first device
    /// saw: `answered`, `cancelled`, `node_lost`, `cache_unavailable`...
    pub endings: BTreeMap<String, usize>,
    /// Typed endings (not answered, not a cancel the client asked for) outside the ten
    /// seconds after a fault, and all turns outside those windows.
    pub typed_calm: usize,
    pub turns_calm: usize,
    pub stores_acked: usize,
    pub faults: BTreeMap<String, usize>,
}

impl Verdict {
    pub fn by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for v in &self.violations {
            *m.entry(v.kind).or_insert(0) += 1;
        }
        m
    }
}

/// Checks a whole history.
pub fn check(events: &[Event]) -> Verdict {
    let mut verdict = Verdict::default();
    for e in events {
        match &e.what {
            What::Frame(_) => verdict.frames += 1,
            What::Sent { resend: false, .. } => verdict.messages_sent += 1,
            What::Fault { kind, .. } => *verdict.faults.entry(kind.clone()).or_insert(0) += 1,
            _ => {}
        }
    }
    verdict.violations.extend(sequences::check(events));
    turns::check(events, &mut verdict);
    let stores = stores::check(events, &mut verdict);
    verdict.violations.extend(stores);
    verdict.violations.sort_by_key(|v| v.at);
    verdict
}
