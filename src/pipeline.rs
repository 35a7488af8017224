//! The AI turn pipeline. Speaks internal types only (never wire messages): it takes a
//! [`TurnInput`], streams the model's answer, and reports progress as [`TurnEvent`]s to a
//! [`TurnSink`]; the session layer maps those to frames in one place.
//! Later stages (preprocessing, skills, postprocessing, link repair) slot in here.

pub mod answer;
pub mod chunker;
pub mod context;
pub mod tokens;

use std::sync::Arc;

use chatd_protocol::{ChatId, MessageId, TaskId};

use crate::auth::UserId;
use crate::llm::{LlmError, Usage};

/// One message of a chat's history as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub role: HistoryRole,
    pub content: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryRole {
    User,
    Assistant,
    System,
}

/// Who and what a turn is about.
#[derive(Debug, Clone)]
pub struct TurnContext {
    pub user: UserId,
    pub chat_id: ChatId,
    pub task_id: TaskId,
    pub user_message_id: MessageId,
    pub model_name: String,
}

impl TurnContext {
    pub fn assistant_message_id(&self) -> MessageId {
        MessageId::from(self.task_id.clone())
    }
}

/// Why a turn stopped before the model finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// `cancel_ai_task` from one of the user's devices.
    Cancelled,
    /// The server is shutting down.
    Shutdown,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum TurnError {
    #[error("language model unavailable: {0}")]
    Llm(#[from] LlmError),
}

/// How a turn ended. `text` is the final answer (possibly partial).
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub text: Arc<str>,
    /// Sequence number of the final frame (one past the last chunk).
    pub sequence: u64,
    pub interrupted: Option<Interruption>,
    pub error: Option<TurnError>,
    pub usage: Option<Usage>,
}

/// Progress of a turn, in order: `Typing`, any number of `Chunk`s, one `Finished`.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    Typing,
    /// A completed paragraph: `text` is the whole answer so far (cumulative).
    Chunk {
        text: Arc<str>,
        sequence: u64,
    },
    Finished(TurnOutcome),
}

/// Where a turn reports its events (implemented by the session hub).
pub trait TurnSink: Send + Sync {
    fn emit(&self, ctx: &TurnContext, event: TurnEvent);
}
