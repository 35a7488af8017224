//! What a turn reports besides its frames: the typed error of a turn that could not start
//! (and the error a user sees when the cache or the key service fails), and the labels of
//! the turn metrics.

use chatd_protocol::{ChatId, ErrorCode, ErrorPayload, HistoryReason, ServerMessage};

use super::super::TurnTicket;
use super::super::deps::TurnDeps;
use super::super::writer::TurnWriter;
use crate::cache::ai::CacheFault;
use crate::crypto::KeyError;
use crate::delivery::Audience;
use crate::metrics::OutcomeLabel;

/// Ends a turn that could not start: a typed error to the devices that asked.
pub(super) fn refuse(
    app: &TurnDeps,
    writer: &TurnWriter,
    chat: &ChatId,
    ticket: &TurnTicket,
    code: ErrorCode,
    message: String,
) {
    let mut payload = ErrorPayload::new(code, message);
    payload.chat_id = Some(chat.clone());
    payload.message_id = Some(ticket.user_message_id.clone());
    writer.frame(
        Audience::Only(ticket.requesters.clone()),
        ServerMessage::Error(payload),
    );
    app.metrics
        .turns
        .get_or_create(&OutcomeLabel { outcome: "refused" })
        .inc();
}

/// The typed error a user sees when the cache or the key service fails a turn.
pub(crate) fn fault_message(fault: &CacheFault) -> (ErrorCode, String) {
    match fault {
        CacheFault::Keys(KeyError::MountMissing(mount)) => (
            ErrorCode::EncryptionUnavailable,
            format!(
                "the key service has no transit engine at `{mount}`; the operator must enable it"
            ),
        ),
        CacheFault::Keys(_) => (
            ErrorCode::EncryptionUnavailable,
            "the key service is unavailable; try again shortly".into(),
        ),
        CacheFault::Cache(_) => (
            ErrorCode::CacheUnavailable,
            "the cache is unavailable; try again shortly".into(),
        ),
    }
}

pub(super) fn speculation_outcome(app: &TurnDeps, outcome: &'static str) {
    app.metrics
        .speculative_main_calls
        .get_or_create(&OutcomeLabel { outcome })
        .inc();
}

pub(super) fn reason_label(reason: HistoryReason) -> &'static str {
    match reason {
        HistoryReason::CacheMiss => "cache_miss",
        HistoryReason::DecryptionFailed => "decryption_failed",
        HistoryReason::InsufficientCacheHistory => "insufficient_cache_history",
    }
}
