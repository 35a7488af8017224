//! One turn's log in the memory store.

use std::collections::VecDeque;

use tokio::time::Instant;

/// The entries by index, the newest index, the fence and the end of one log.
pub(super) struct Log {
    pub(super) entries: VecDeque<(u64, Vec<u8>)>,
    pub(super) last: u64,
    /// Appends under an older generation are refused.
    pub(super) fence: u64,
    pub(super) ended: bool,
    pub(super) expires: Instant,
}

impl Log {
    pub(super) fn new(fence: u64, expires: Instant) -> Self {
        let entries = VecDeque::new();
        let (last, ended) = (0, false);
        Self {
            entries,
            last,
            fence,
            ended,
            expires,
        }
    }
}
