//! Routines: procedures an app runs over several messages. `cancel_routine` from the
//! client; `routine_started`, `routine_status`, `routine_message`, `routine_information`,
//! `routine_error`, `awaiting_user_input` and `routine_finished` from the server (to every
//! device of the user, in order, logged with the turn that wrote them).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ChatId, MessageId, RunId};

/// Stops a routine run (running or waiting for the user); answered with `routine_finished`
/// (`outcome: cancelled`) on every device, or `error` `not_found`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelRoutine {
    #[serde(alias = "runId")]
    pub run_id: RunId,
}

/// A run started (`routine` is `app_id.routine_name`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutineStarted {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub routine: String,
}

/// `emit(kind, text)` of a routine: `routine_status` (what it is doing) and
/// `routine_information` (shown, not stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutineText {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub text: String,
}

/// `emit("message", text)` of a routine: an assistant message of the chat. The client
/// stores it (`ai_response_completed` with this `message_id`); the server has it in the
/// chat's AI cache already, so the model sees it on the next turn. The id is the same
/// on every device and for every replay of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutineMessage {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub message_id: MessageId,
    pub text: String,
}

/// Why chatd ended a run with an error (a script's own `emit("error", ..)` has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoutineErrorCode {
    /// The script ran more operations than `routines.max_operations` in one slice.
    OperationBudgetExceeded,
    /// One slice ran longer than `routines.slice_time`.
    TimeBudgetExceeded,
    /// The script failed (a runtime error, a bad call).
    ScriptError,
    /// A resumed run's script asked for different effects than its journal holds.
    JournalMismatch,
    /// The arguments do not match the routine's schema.
    InvalidArguments,
    /// `run` named a routine that does not exist.
    RoutineNotFound,
    /// The run's journal could not be read or written (cache or key service).
    JournalUnavailable,
    /// A model call of the routine failed.
    ModelFailed,
    /// `skill` named a skill that needs an account the user has not connected.
    AccountRequired,
}

/// An error of a run: `code` when chatd ended it, none for a script's `emit("error", ..)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutineError {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<RoutineErrorCode>,
}

/// The run paused on `ask_user`: the user's next message in the chat is the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AwaitingUserInput {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub question: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoutineOutcome {
    Completed,
    Error,
    Cancelled,
}

/// A run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutineFinished {
    pub chat_id: ChatId,
    pub run_id: RunId,
    pub outcome: RoutineOutcome,
}
