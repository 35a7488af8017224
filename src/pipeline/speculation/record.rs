//! The speculation record's seam: what chatd remembers of its guesses. Per chat, the plan of
//! its last turn (the sticky guess of the next one) and how often its guesses hit; across
//! every node, how often guesses hit and the recent share of turns whose speculative call
//! was thrown away. One owner, two implementations: in process ([`memory`], embedded mode)
//! and on Redis ([`redis`], cluster mode: every node reads and adds to the same record,
//! the chat's part sealed), both held to `tests/it/speculation_contract.rs`. A hint only:
//! bounded, expiring, and a record that cannot be read counts as none. What is decided from
//! it (the threshold, the blending) is in [`super`]; only how the counts move lives here,
//! because the Redis record moves the shared counts on the server, atomically.

pub mod memory;
pub mod redis;

use std::time::Duration;

use chatd_protocol::ChatId;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::crypto::UserHash;

/// A main-call plan as remembered: the model's id (looked up in the catalog again when the
/// guess is made) and what else shapes the request. It says what the chat is about (its
/// category, language and tools), so it leaves the process only sealed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredPlan {
    pub model: String,
    pub category: String,
    pub language: String,
    pub skills: Vec<String>,
    pub focus_mode: Option<String>,
    pub injection_caution: bool,
}

/// Hits and misses of guesses, the older ones weighing less (halved past a window).
#[derive(Clone, Copy, Default, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub hits: f32,
    pub misses: f32,
}

impl Tally {
    /// Observations before the older half is forgotten.
    pub const WINDOW: f32 = 32.0;

    pub fn record(&mut self, hit: bool) {
        if self.hits + self.misses >= Self::WINDOW {
            self.hits /= 2.0;
            self.misses /= 2.0;
        }
        match hit {
            true => self.hits += 1.0,
            false => self.misses += 1.0,
        }
    }
}

/// One chat's record: its last plan and how its guesses fared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRecord {
    pub plan: StoredPlan,
    pub tally: Tally,
}

/// Every node's guesses together, and their recent waste.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct SharedRecord {
    pub tally: Tally,
    /// The share of recent turns whose speculative call was thrown away (a moving average).
    pub waste: f32,
}

impl SharedRecord {
    /// Weight of the newest turn in `waste` (about the last 20 turns count).
    pub const ALPHA: f32 = 0.05;

    /// Adds one scored guess (the Redis record runs the same steps in Lua).
    pub fn add(&mut self, outcome: Outcome) {
        self.tally.record(outcome.hit);
        let wasted = if outcome.speculated && !outcome.hit {
            1.0
        } else {
            0.0
        };
        self.waste += Self::ALPHA * (wasted - self.waste);
    }
}

/// A scored guess: whether it was right, and whether a call was opened for it (a wrong
/// guess then wasted one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub hit: bool,
    pub speculated: bool,
}

/// What a turn reads: the chat's record (if any) and the shared one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub chat: Option<ChatRecord>,
    pub shared: SharedRecord,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordError {
    #[error("speculation record unavailable: {0}")]
    Unavailable(String),
    #[error("speculation record did not answer within {0:?}")]
    Timeout(Duration),
}

/// Where the speculation record lives. Each call is at most one round trip.
pub trait SpeculationRecords: Send + Sync {
    /// The chat's record (`None`: never written, expired, forgotten, or a value that does
    /// not open) and the shared one.
    fn read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Snapshot, RecordError>>;

    /// Replaces the chat's record (its lifetime starts again) and adds `outcome`, when the
    /// turn scored a guess, to the shared record.
    fn write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        record: ChatRecord,
        outcome: Option<Outcome>,
    ) -> BoxFuture<'a, Result<(), RecordError>>;

    /// Drops the chat's record (the chat was deleted).
    fn forget<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), RecordError>>;
}
