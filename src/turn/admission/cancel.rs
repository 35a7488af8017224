//! Cancelling turns: the owner's `cancel_ai_task` from any node (at once when the turn runs
//! here, else through the store, read on the running node's next renewal), a cancel that
//! another node forwarded, and the deletion of a chat (its turn stops and writes nothing
//! back, its queue is dropped).

use chatd_protocol::{ChatId, TaskId};

use super::{TurnTicket, Turns};
use crate::auth::UserId;
use crate::crypto::UserHash;
use crate::ids::NodeId;
use crate::turn::store::CancelReason;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    #[error("no running task with this id")]
    NotFound,
    #[error("the task belongs to another user")]
    Forbidden,
    #[error("the turn store is unavailable")]
    Unavailable,
}

impl Turns {
    /// Cancels a running task on behalf of `user`: at once when it runs here, else
    /// through the store (the running node reads it on its next renewal). Returns the
    /// node that runs it when that is another one.
    pub async fn cancel(
        &self,
        user: &UserId,
        task: &TaskId,
    ) -> Result<Option<NodeId>, CancelError> {
        if let Some(local) = self.local().get(task) {
            if &local.owner != user {
                return Err(CancelError::Forbidden);
            }
            local.ticket.stop(CancelReason::Revoked);
            return Ok(None);
        }
        let lease = match self.store.find_task(task).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return Err(CancelError::NotFound),
            Err(_) => return Err(CancelError::Unavailable),
        };
        if lease.owner != UserHash::of(user) {
            return Err(CancelError::Forbidden);
        }
        self.store
            .request_cancel(&lease, CancelReason::Revoked, self.lease * 2)
            .await
            .map_err(|_| CancelError::Unavailable)?;
        Ok(Some(lease.node))
    }

    /// Cancels a task running here on a request from another node (its owner was checked
    /// there). False when it does not run here.
    pub fn cancel_local(&self, task: &TaskId, reason: CancelReason) -> bool {
        match self.local().get(task) {
            Some(local) => {
                local.ticket.stop(reason);
                true
            }
            None => false,
        }
    }

    /// The chat is being deleted: its running turn (on any node) stops and writes nothing
    /// back, and the messages queued behind it are dropped. Only the owner's chat.
    pub async fn abandon(&self, user: &UserId, chat: &ChatId) {
        let running_here: Vec<TurnTicket> = self
            .local()
            .values()
            .filter(|l| &l.chat == chat && &l.owner == user)
            .map(|l| l.ticket.clone())
            .collect();
        for ticket in &running_here {
            ticket.stop(CancelReason::ChatDeleted);
        }
        match self.store.active(chat).await {
            Ok(Some(lease)) if lease.owner == UserHash::of(user) => {
                if let Err(e) = self
                    .store
                    .request_cancel(&lease, CancelReason::ChatDeleted, self.lease * 2)
                    .await
                {
                    tracing::warn!(error = %e, "cannot stop the deleted chat's turn");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot look up the deleted chat's turn"),
        }
    }
}
