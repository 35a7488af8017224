//! A run's durable record: what it runs, its journal of effects (in the order the script
//! asked for them) and, while it waits, its question and state frames. A resumed run
//! replays its script against the journal: each effect returns its journaled result
//! without running again; a script that asks for something else than the journal holds
//! at the same position ends with `journal_mismatch`.

use chatd_protocol::{ChatId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a script asked of chatd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    Emit,
    Ask,
    Run,
    Skill,
    Model,
    DriveGet,
    DriveSet,
}

/// One journaled effect: the request (compared on replay) and its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub kind: EffectKind,
    pub request: Value,
    pub result: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A slice runs (on some node).
    Running,
    /// Waits for the user's answer to `question`.
    Paused,
}

/// One frame of the run's state stack as it was when the run paused (outermost first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameSnapshot {
    pub routine: String,
    pub state: Value,
}

/// A run, sealed into the cache backend under its owner and id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    pub chat_id: ChatId,
    /// `app_id.name` of the top routine.
    pub routine: String,
    pub args: Value,
    pub status: RunStatus,
    pub journal: Vec<Entry>,
    #[serde(default)]
    pub question: Option<String>,
    #[serde(default)]
    pub frames: Vec<FrameSnapshot>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// When its latest slice started (Unix milliseconds). A running run whose slice started
    /// longer than `routines.slice_time` ago runs nowhere: its node stopped mid-slice.
    #[serde(default)]
    pub slice_started_at: i64,
}

impl RunRecord {
    /// Effects that did real work (a model, skill or drive call, a sub-routine's result):
    /// what a replay must never repeat.
    pub fn performed(&self) -> usize {
        self.journal
            .iter()
            .filter(|e| !matches!(e.kind, EffectKind::Emit | EffectKind::Ask))
            .count()
    }
}
