//! One active AI turn per chat across every node: admission (start, queue or refuse) in
//! one atomic step of the [`TurnStore`], the lease the running node renews, cancellation
//! by the owner from any node ([`cancel`]), and hand-over to the next turn when messages were queued
//! (all messages queued behind a turn are answered together by one next turn, after the
//! skills' follow-up messages queued with them). The queued work waits in the store, sealed
//! with the owner's key ([`queued`]); only the cancel tokens of turns running on this node
//! live here (each turn's [`TurnTicket`], in [`ticket`]).

mod cancel;
mod queued;
mod ticket;

pub use cancel::CancelError;
pub use ticket::TurnTicket;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ChatId, MessageId, TaskId};
// tokio's clock, as the lease clock's.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::queued::{Queued, Work};
use super::Inbound;
use super::lease_clock::Standing;
use super::store::{Admit, Admitted, Finished, Lease, TurnStore, TurnStoreError};
use crate::auth::UserId;
use crate::cache::ai::CacheFault;
use crate::crypto::{Keyring, SealError, UserHash};
use crate::ids::NodeId;
use crate::inbound::FollowUp;

/// What became of a message or follow-up offered to a chat.
pub enum Admission {
    Start(Box<TurnTicket>),
    Queued {
        active_task_id: TaskId,
    },
    /// The running turn answers this very message already (a re-send).
    Running {
        active_task_id: TaskId,
    },
    QueueFull,
    /// Another user's turn runs in this chat.
    Foreign,
}

/// Why a message could not be offered to its chat.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TurnsError {
    #[error(transparent)]
    Store(#[from] TurnStoreError),
    #[error("sealing a queued message: {0}")]
    Seal(#[from] SealError),
}

impl TurnsError {
    /// The typed error the sender sees.
    pub fn user_error(&self) -> (chatd_protocol::ErrorCode, String) {
        match self {
            TurnsError::Seal(e) => CacheFault::from(e.clone()).code(),
            TurnsError::Store(_) => (
                chatd_protocol::ErrorCode::CacheUnavailable,
                "the server cannot take messages right now; try again shortly".into(),
            ),
        }
    }
}

/// A turn running on this node.
struct Local {
    owner: UserId,
    chat: ChatId,
    ticket: TurnTicket,
}

/// The turns of every chat as this node sees them: the store, and the turns running here.
pub struct Turns {
    store: Arc<dyn TurnStore>,
    /// Seals queued messages; `None` for a store inside this process (nothing leaves it).
    keyring: Option<Arc<Keyring>>,
    node: NodeId,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    max_queue: usize,
    /// task → the turn running here. A std Mutex: a map operation per call, never held
    /// across an await.
    local: Mutex<HashMap<TaskId, Local>>,
}

impl Turns {
    pub fn new(
        store: Arc<dyn TurnStore>,
        keyring: Option<Arc<Keyring>>,
        node: NodeId,
        lease: Duration,
        max_queue: usize,
    ) -> Self {
        Self {
            store,
            keyring,
            node,
            lease,
            max_queue,
            local: Mutex::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &Arc<dyn TurnStore> {
        &self.store
    }

    pub fn node(&self) -> &NodeId {
        &self.node
    }

    fn local(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Local>> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a turn for the message, or queues it behind the running one (on any node).
    pub async fn admit(
        &self,
        user: &UserId,
        chat: &ChatId,
        inbound: Inbound,
        parent: &CancellationToken,
    ) -> Result<Admission, TurnsError> {
        let message = inbound.message_id().clone();
        self.admit_work(
            user,
            chat,
            &message,
            Work::Message(Box::new(inbound)),
            self.max_queue,
            parent,
        )
        .await
    }

    /// Runs a skill's follow-up message now, or queues it behind the running turn (on
    /// any node). Follow-ups have room of their own beside the user messages' queue.
    pub async fn admit_follow_up(
        &self,
        user: &UserId,
        chat: &ChatId,
        follow_up: FollowUp,
        parent: &CancellationToken,
    ) -> Result<Admission, TurnsError> {
        let message = follow_up.message_id();
        let room = self.max_queue.saturating_mul(2).max(2);
        self.admit_work(
            user,
            chat,
            &message,
            Work::FollowUp(follow_up),
            room,
            parent,
        )
        .await
    }

    async fn admit_work(
        &self,
        user: &UserId,
        chat: &ChatId,
        message: &MessageId,
        work: Work,
        max_queue: usize,
        parent: &CancellationToken,
    ) -> Result<Admission, TurnsError> {
        let owner = UserHash::of(user);
        let task = TaskId::random();
        let queued = Queued {
            user: user.as_str().to_string(),
            work,
        };
        let value = queued.seal(self.keyring.as_deref(), &owner, chat).await?;
        let asked = Instant::now();
        let admitted = self
            .store
            .admit(Admit {
                chat,
                owner: &owner,
                task: &task,
                node: &self.node,
                message,
                value,
                lease: self.lease,
                max_queue,
            })
            .await?;
        Ok(match admitted {
            Admitted::Started(lease) => {
                let work = vec![queued.work];
                Admission::Start(Box::new(self.start(user, (lease, asked), work, parent)))
            }
            Admitted::Queued { active } => Admission::Queued {
                active_task_id: active.task,
            },
            Admitted::Running { active } => Admission::Running {
                active_task_id: active.task,
            },
            Admitted::QueueFull { .. } => Admission::QueueFull,
            Admitted::Foreign => Admission::Foreign,
        })
    }

    /// A ticket for a lease this node holds (granted in answer to a request sent at
    /// `asked`), registered so it can be cancelled here.
    fn start(
        &self,
        user: &UserId,
        (lease, asked): (Lease, Instant),
        work: Vec<Work>,
        parent: &CancellationToken,
    ) -> TurnTicket {
        let ticket = TurnTicket::new((lease, asked, self.lease), work, parent);
        self.local().insert(
            ticket.task_id.clone(),
            Local {
                owner: user.clone(),
                chat: ticket.lease.chat.clone(),
                ticket: ticket.clone(),
            },
        );
        ticket
    }

    /// Ends the ticket's turn; if messages were queued meanwhile, returns the ticket of
    /// the turn that answers them all (the chat stays busy), else frees the chat. At
    /// shutdown the lease is left to expire, so the queue waits for another node.
    pub async fn finish(
        &self,
        ticket: &TurnTicket,
        parent: &CancellationToken,
    ) -> Option<TurnTicket> {
        self.local().remove(&ticket.task_id);
        if parent.is_cancelled() {
            return None;
        }
        // The store refused the lapsed lease (another node took it, or may: it expired), and
        // frames of the turn were dropped: the node that takes it over ends the turn from
        // its log and hands the chat on. Freeing the chat here left that ending unwritten
        // (chaos run AH: a cancelled turn that devices not showing the chat never heard the
        // end of). A turn whose frames were all logged is over: its chat is freed.
        let clock = &ticket.lease_clock;
        if clock.standing() == Standing::Taken && clock.had_frames_dropped() {
            return None;
        }
        let (next, asked) = (TaskId::random(), Instant::now());
        let finished = match self.store.finish(&ticket.lease, &next, self.lease).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand the chat over; its lease will expire");
                return None;
            }
        };
        self.next_turn((finished, asked), parent)
            .await
            .map(|(_, t)| t)
    }

    /// Hands a chat whose node was lost (its lease now this node's, see
    /// `TurnStore::take_over_expired`) to the turn for its queued messages, if any.
    pub async fn finish_lost(
        &self,
        lease: &Lease,
        parent: &CancellationToken,
    ) -> Option<(UserId, TurnTicket)> {
        let (next, asked) = (TaskId::random(), Instant::now());
        match self.store.finish(lease, &next, self.lease).await {
            Ok(finished) => self.next_turn((finished, asked), parent).await,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand a lost turn's chat over");
                None
            }
        }
    }

    /// The ticket for the messages a finished turn handed over.
    async fn next_turn(
        &self,
        (finished, asked): (Finished, Instant),
        parent: &CancellationToken,
    ) -> Option<(UserId, TurnTicket)> {
        let Finished::Next { lease, queued } = finished else {
            return None;
        };
        let mut user = None;
        let mut work = Vec::with_capacity(queued.len());
        for value in queued {
            match Queued::open(self.keyring.as_deref(), &lease.owner, &lease.chat, &value).await {
                Some(q) => {
                    user = UserId::parse(q.user).ok();
                    work.push(q.work);
                }
                None => tracing::warn!("a queued message does not open; it is dropped"),
            }
        }
        let Some(user) = user else {
            // Nothing readable was queued: free the chat again.
            let _ = self
                .store
                .finish(&lease, &TaskId::random(), self.lease)
                .await;
            return None;
        };
        let ticket = self.start(&user, (lease, asked), work, parent);
        Some((user, ticket))
    }

    /// Renews a running turn's lease; stops the turn when a cancel was requested from
    /// another node, or when the lease was lost. False when the turn must stop writing.
    pub async fn renew(&self, ticket: &TurnTicket) -> bool {
        let _one = ticket.lease_clock.renewing().await;
        let asked = tokio::time::Instant::now();
        let lapsed = !ticket.lease_clock.holds();
        // The store lost the chat (Redis restarted empty): the turn holds it again. Had
        // this node's lease lapsed meanwhile (a pause), another node may have ended the
        // turn with `node_lost` before the loss: the turn ends the same way (stopping it
        // silently left devices with no ending at all: chaos seed 5, 15 violations).
        match self.store.renew(&ticket.lease, self.lease).await {
            Ok(renewed) => {
                if renewed.reclaimed && lapsed {
                    tracing::warn!(
                        "the store lost the turn's lease while it had lapsed here; ending it as lost"
                    );
                    ticket.end_as_lost();
                    ticket.lease_clock.lost();
                } else if renewed.reclaimed {
                    tracing::warn!("the store had lost the turn's lease; it holds the chat again");
                }
                ticket.lease_clock.renewed(asked, self.lease);
                if let Some(reason) = renewed.cancel {
                    ticket.stop(reason);
                }
                true
            }
            Err(TurnStoreError::Fenced) => {
                tracing::warn!("the turn's lease moved to another node; stopping it");
                ticket.lose();
                ticket.lease_clock.taken();
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew the turn's lease");
                true
            }
        }
    }

    /// The running turn of a chat (on any node) if it belongs to `user`.
    pub async fn active_task(&self, user: &UserId, chat: &ChatId) -> Option<TaskId> {
        let lease = self.store.active(chat).await.ok().flatten()?;
        (lease.owner == UserHash::of(user)).then_some(lease.task)
    }
}

#[cfg(test)]
mod tests;
