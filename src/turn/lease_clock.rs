//! How long this node may still act as a turn's owner on its own word. The turn store's
//! lease is the truth, but a node that was paused past its lease (or cut off from the
//! store) learns it lost the turn only at its next renewal, and meanwhile another node may
//! have ended the turn for every device (`node_lost`). So the node keeps its own clock: the
//! lease is good until its length after the last renewal the store granted (counted from
//! when the renewal was asked). Once it lapses, the turn's writer holds its frames (logs
//! none, hands none on) until the store's word: renewed, they go on; lost, they are
//! dropped, so the turn ends with what its log held when another node could read it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, Notify};
// tokio's clock (the std one outside a paused test runtime): tests can move it.
use tokio::time::Instant;

pub struct LeaseClock {
    base: Instant,
    /// Milliseconds after `base` until which the lease holds.
    until: AtomicU64,
    /// The store's last word beyond a renewal ([`Verdict`] as a number).
    verdict: AtomicU8,
    /// Woken at every renewal and verdict.
    changed: Notify,
    /// Held by the one renewal under way (see [`LeaseClock::renewing`]).
    renewal: Mutex<()>,
    /// The turn was lost before any of its frames was logged ([`LeaseClock::lost_unseen`]).
    unseen: AtomicBool,
    /// The writer ended the turn as lost ([`LeaseClock::ended_lost`]).
    ended_lost: AtomicBool,
    /// The writer dropped frames the log never took ([`LeaseClock::dropped_frames`]).
    dropped: AtomicBool,
}

/// Where the turn stands with the store, as the writer needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The lease holds by this node's clock (or the turn's renewals are over).
    Holds,
    /// It lapsed; the store has not answered since.
    Lapsed,
    /// Another node holds the lease: this node's frames are not the turn's.
    Taken,
    /// The store lost the lease while it had lapsed here: the turn ends as lost, with
    /// what its log held (another node may have ended it so from that log).
    Lost,
}

const OPEN: u8 = 0;
const TAKEN: u8 = 1;
const LOST: u8 = 2;
/// The turn's renewals are over (it finished): nothing more to wait for.
const CLOSED: u8 = 3;

impl LeaseClock {
    /// The writer ended the lost turn without a frame: none of its frames had been
    /// logged, so no device had heard of it, and its messages may be sent again.
    pub fn lost_unseen(&self) {
        self.unseen.store(true, Ordering::Release);
    }

    /// Whether [`LeaseClock::lost_unseen`] was said.
    pub fn was_lost_unseen(&self) -> bool {
        self.unseen.load(Ordering::Acquire)
    }

    /// The writer ended the lost turn itself (with `node_lost` after its logged frames, or
    /// without a frame): the devices did not get the answer the turn arrived at.
    pub fn ended_lost(&self) {
        self.ended_lost.store(true, Ordering::Release);
    }

    /// Whether [`LeaseClock::ended_lost`] was said.
    pub fn was_ended_lost(&self) -> bool {
        self.ended_lost.load(Ordering::Acquire)
    }

    /// The writer dropped frames the log never took (the lease was taken, or the store
    /// refused it once it had lapsed): the turn's log lacks the rest of it.
    pub fn dropped_frames(&self) {
        self.dropped.store(true, Ordering::Release);
    }

    /// Whether [`LeaseClock::dropped_frames`] was said.
    pub fn had_frames_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// A lease of `ttl` granted in answer to a request sent at `asked` (counted from then:
    /// a node paused between the two must not take the answer for a fresh lease).
    pub fn new(asked: Instant, ttl: Duration) -> Self {
        let clock = LeaseClock {
            base: asked,
            until: AtomicU64::new(0),
            verdict: AtomicU8::new(OPEN),
            changed: Notify::new(),
            renewal: Mutex::new(()),
            unseen: AtomicBool::new(false),
            ended_lost: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        };
        clock.renewed(clock.base, ttl);
        clock
    }

    /// Waits for the renewal under way to be done, and holds the next one: one at a time.
    /// Two at once after a lapse (the lease keeper's and the end of the turn's) made the
    /// store recreate a lost lease for one ("reclaimed": the turn ends as lost) and
    /// simply renew it for the other, which, done first, let the writer go on meanwhile.
    pub async fn renewing(&self) -> MutexGuard<'_, ()> {
        self.renewal.lock().await
    }

    /// The store renewed the lease for `ttl`, asked at `asked`.
    pub fn renewed(&self, asked: Instant, ttl: Duration) {
        let until = millis(asked.saturating_duration_since(self.base) + ttl);
        self.until.fetch_max(until, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Another node holds the lease.
    pub fn taken(&self) {
        self.decide(TAKEN);
    }

    /// The store lost the lease while it had lapsed here.
    pub fn lost(&self) {
        self.decide(LOST);
    }

    /// The turn's renewals are over: a lapse no longer waits for the store.
    pub fn close(&self) {
        self.decide(CLOSED);
    }

    /// A verdict stands once given (a later close keeps it).
    fn decide(&self, verdict: u8) {
        let _ = (self.verdict).compare_exchange(OPEN, verdict, Ordering::AcqRel, Ordering::Acquire);
        self.changed.notify_waiters();
    }

    /// When the lease lapses by this node's clock, while the store has given no verdict
    /// (after one, or once closed, there is nothing to keep to).
    pub fn until(&self) -> Option<Instant> {
        let open = self.verdict.load(Ordering::Acquire) == OPEN;
        let until = Duration::from_millis(self.until.load(Ordering::Acquire));
        open.then(|| self.base + until)
    }

    /// Whether the lease still holds by this node's clock.
    pub fn holds(&self) -> bool {
        millis(self.base.elapsed()) < self.until.load(Ordering::Acquire)
    }

    pub fn standing(&self) -> Standing {
        match self.verdict.load(Ordering::Acquire) {
            TAKEN => Standing::Taken,
            LOST => Standing::Lost,
            CLOSED => Standing::Holds,
            _ if self.holds() => Standing::Holds,
            _ => Standing::Lapsed,
        }
    }

    /// Waits until the standing is other than [`Standing::Lapsed`].
    pub async fn settled(&self) -> Standing {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.standing() {
                Standing::Lapsed => changed.await,
                standing => return standing,
            }
        }
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
        let clock = LeaseClock::new(Instant::now(), Duration::from_secs(60));
        assert!(clock.holds());
        let lapsed = LeaseClock::new(Instant::now(), Duration::ZERO);
        assert!(!lapsed.holds(), "a lease of no length never holds");
        lapsed.renewed(Instant::now(), Duration::from_secs(60));
        assert!(lapsed.holds(), "a renewal brings it back");
        // A grant answered after the node was paused past its length has lapsed already.
        let asked = Instant::now().checked_sub(Duration::from_secs(6));
        let late = asked.map(|asked| LeaseClock::new(asked, Duration::from_secs(2)));
        assert!(late.is_none_or(|c| !c.holds()));
        // An older renewal answered late does not shorten it.
        let clock = LeaseClock::new(Instant::now(), Duration::from_secs(60));
        clock.renewed(clock.base, Duration::ZERO);
        assert!(clock.holds());
    }

    #[tokio::test]
    async fn a_lapsed_lease_settles_at_the_stores_word() {
        let clock = LeaseClock::new(Instant::now(), Duration::ZERO);
        assert_eq!(clock.standing(), Standing::Lapsed);
        // The store's word comes while the clock is awaited.
        let (standing, ()) = tokio::join!(clock.settled(), async { clock.lost() });
        assert_eq!(standing, Standing::Lost);
        clock.renewed(Instant::now(), Duration::from_secs(60));
        clock.close();
        assert_eq!(clock.standing(), Standing::Lost, "a verdict stands");
        assert_eq!(clock.until(), None, "no lapse to keep to after a verdict");
        let open = LeaseClock::new(Instant::now(), Duration::from_secs(60));
        let until = open.until().map(|u| u.duration_since(open.base));
        assert_eq!(until, Some(Duration::from_secs(60)));
        let closed = LeaseClock::new(Instant::now(), Duration::ZERO);
        closed.close();
        assert_eq!(
            closed.settled().await,
            Standing::Holds,
            "nothing left to wait for"
        );
    }
}
