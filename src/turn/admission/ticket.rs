//! The ticket of a started turn: what it answers (its messages and the skills' follow-ups,
//! oldest first), who asked, the lease this node holds for it, and its cancel token with
//! the reason the token fired.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chatd_protocol::{MessageId, TaskId};
use tokio_util::sync::CancellationToken;

use super::super::Inbound;
use super::super::lease_clock::LeaseClock;
use super::super::store::{CancelReason, Lease};
use super::queued::Work;
use crate::delivery::ConnectionId;
use crate::inbound::FollowUp;
use crate::pipeline::Interruption;

/// What a started turn needs to run and to be cancelled.
#[derive(Clone)]
pub struct TurnTicket {
    pub task_id: TaskId,
    /// The newest message this turn answers.
    pub user_message_id: MessageId,
    /// The messages this turn answers, oldest first (several when queued ones merged;
    /// none when the turn only delivers follow-ups).
    pub inbound: Arc<[Inbound]>,
    /// Skills' follow-up messages to deliver before answering, oldest first.
    pub follow_ups: Arc<[FollowUp]>,
    /// Devices that sent the messages this turn answers (they get `ai_task_initiated`).
    pub requesters: Vec<ConnectionId>,
    /// The lease this node holds for the turn.
    pub lease: Lease,
    /// Until when the lease holds by this node's clock (see [`LeaseClock`]).
    pub lease_clock: Arc<LeaseClock>,
    pub cancel: CancellationToken,
    flags: Arc<Flags>,
}

/// Why a turn's token fired. Atomics: set by whoever cancels, read by the turn.
#[derive(Default)]
struct Flags {
    revoked: AtomicBool,
    /// Ended as lost (see [`Interruption::NodeLost`]).
    node_lost: AtomicBool,
    /// The chat was deleted: the turn must not write anything back.
    abandoned: AtomicBool,
}

impl TurnTicket {
    /// A ticket for `lease` (of `ttl`, asked for at `asked`) answering `work` (oldest
    /// first); its token is a child of `parent`.
    pub(super) fn new(
        (lease, asked, ttl): (Lease, tokio::time::Instant, std::time::Duration),
        work: Vec<Work>,
        parent: &CancellationToken,
    ) -> Self {
        let mut inbound = Vec::with_capacity(work.len());
        let mut follow_ups = Vec::new();
        for w in work {
            match w {
                Work::Message(i) => inbound.push(*i),
                Work::FollowUp(f) => follow_ups.push(f),
            }
        }
        let mut requesters: Vec<ConnectionId> = Vec::with_capacity(inbound.len());
        for i in &inbound {
            if !requesters.contains(&i.conn) {
                requesters.push(i.conn);
            }
        }
        let user_message_id = match (inbound.last(), follow_ups.last()) {
            (Some(i), _) => i.message_id().clone(),
            (None, Some(f)) => f.user_message_id.clone(),
            (None, None) => lease.message.clone(),
        };
        TurnTicket {
            task_id: lease.task.clone(),
            user_message_id,
            inbound: inbound.into(),
            follow_ups: follow_ups.into(),
            requesters,
            lease,
            lease_clock: Arc::new(LeaseClock::new(asked, ttl)),
            cancel: parent.child_token(),
            flags: Arc::default(),
        }
    }

    /// The chat was deleted while this turn ran: cache nothing, postprocess nothing.
    pub fn abandoned(&self) -> bool {
        self.flags.abandoned.load(Ordering::Acquire)
    }

    /// Why `cancel` fired: a user's `cancel_ai_task`, or else server shutdown.
    pub fn interruption(&self) -> Interruption {
        if self.flags.node_lost.load(Ordering::Acquire) {
            Interruption::NodeLost
        } else if self.flags.revoked.load(Ordering::Acquire) {
            Interruption::Cancelled
        } else {
            Interruption::Shutdown
        }
    }

    /// The lease moved to another node (which ends the turn for every device): this node
    /// stops the turn and writes nothing back (no pending answer, no history, no
    /// postprocessing), as for a deleted chat.
    pub fn lose(&self) {
        self.flags.abandoned.store(true, Ordering::Release);
        self.flags.revoked.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    /// The store lost the turn's lease while this node's had lapsed (see
    /// [`Interruption::NodeLost`]): the turn stops now and writes nothing back; its writer
    /// ends it with `node_lost` and the text its log held (see
    /// [`super::super::lease_clock::LeaseClock`]; a device that had another node's
    /// `node_lost` drops it).
    pub fn end_as_lost(&self) {
        self.flags.node_lost.store(true, Ordering::Release);
        self.flags.abandoned.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    /// Stops the turn for `reason`.
    pub fn stop(&self, reason: CancelReason) {
        if reason == CancelReason::ChatDeleted {
            self.flags.abandoned.store(true, Ordering::Release);
        }
        self.flags.revoked.store(true, Ordering::Release);
        self.cancel.cancel();
    }
}
