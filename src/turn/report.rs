//! What a turn reports besides its frames: the typed error a user sees when the cache or the
//! key service fails a turn, and the labels of the turn metrics.

use chatd_protocol::{ErrorCode, HistoryReason};

use super::deps::TurnDeps;
use crate::cache::ai::CacheFault;
use crate::crypto::KeyError;
use crate::metrics::OutcomeLabel;

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

/// Counts a speculative main call's outcome (`started`, `used`, `wasted`).
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
