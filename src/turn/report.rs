//! What a turn reports besides its frames: the labels of the turn metrics.

use chatd_protocol::HistoryReason;

use super::deps::TurnDeps;
use crate::metrics::OutcomeLabel;

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
