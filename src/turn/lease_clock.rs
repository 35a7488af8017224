//! How long this node may still act as a turn's owner on its own word. The turn store's
//! lease is the truth, but a node that was paused past its lease (or cut off from the
//! store) learns it lost the turn only at its next renewal, and meanwhile another node may
//! have ended the turn for every device (`node_lost`). So the node keeps its own clock: the
//! lease is good until its length after the last renewal the store granted (counted from
//! when the renewal was asked). Once it lapses, the turn's frames reach this node's devices
//! only after the store took them into the log (which refuses a fenced owner), never before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// tokio's clock (the std one outside a paused test runtime): tests can move it.
use tokio::time::Instant;

pub struct LeaseClock {
    base: Instant,
    /// Milliseconds after `base` until which the lease holds.
    until: AtomicU64,
}

impl LeaseClock {
    /// A lease of `ttl` granted now.
    pub fn new(ttl: Duration) -> Self {
        let clock = LeaseClock {
            base: Instant::now(),
            until: AtomicU64::new(0),
        };
        clock.renewed(clock.base, ttl);
        clock
    }

    /// The store renewed the lease for `ttl`, asked at `asked`.
    pub fn renewed(&self, asked: Instant, ttl: Duration) {
        let until = millis(asked.saturating_duration_since(self.base) + ttl);
        self.until.fetch_max(until, Ordering::AcqRel);
    }

    /// Whether the lease still holds by this node's clock.
    pub fn holds(&self) -> bool {
        millis(self.base.elapsed()) < self.until.load(Ordering::Acquire)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_until_its_length_after_the_last_renewal() {
        let clock = LeaseClock::new(Duration::from_secs(60));
        assert!(clock.holds());
        let lapsed = LeaseClock::new(Duration::ZERO);
        assert!(!lapsed.holds(), "a lease of no length never holds");
        lapsed.renewed(Instant::now(), Duration::from_secs(60));
        assert!(lapsed.holds(), "a renewal brings it back");
        // An older renewal answered late does not shorten it.
        let clock = LeaseClock::new(Duration::from_secs(60));
        clock.renewed(clock.base, Duration::ZERO);
        assert!(clock.holds());
    }
}
