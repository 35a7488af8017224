//! `cancel_routine`: a run is stopped wherever it is. A slice running on this node is
//! signalled; a paused run, or a running one whose node died mid-slice (orphaned), is
//! removed at once; a run running on another node is asked to stop (its slice checks
//! before each effect).

use chatd_protocol::{ChatId, RunId};

use super::Routines;
use super::journal::{RunRecord, RunStatus};
use crate::auth::UserId;
use crate::crypto::UserHash;

/// Clock skew between nodes allowed for when deciding a running run is orphaned.
const ORPHAN_MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

/// What `cancel_routine` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// No slice of the run was running (it waited for the user, or the node running it
    /// stopped mid-slice): it is gone, and its `routine_finished` is the caller's.
    Ended(ChatId),
    /// The run is running (here or on another node): it stops and reports itself.
    Signalled,
    NotFound,
}

impl Routines {
    /// `cancel_routine`: stops the user's run wherever it is.
    pub async fn cancel(&self, user: &UserId, run: &RunId) -> Cancelled {
        let owner = UserHash::of(user);
        if let Some(entry) = self.inner.running.get(run)
            && entry.0 == owner
        {
            entry.1.cancel();
            return Cancelled::Signalled;
        }
        let store = &self.inner.store;
        match store.get(&owner, run).await {
            Ok(Some(record)) if record.status == RunStatus::Paused || self.orphaned(&record) => {
                if let Err(e) = store.delete(&owner, run).await {
                    tracing::warn!(error = %e, "cannot remove a cancelled routine run");
                }
                if let Ok(Some(waiting)) = store.waiting(&owner, &record.chat_id).await
                    && &waiting == run
                {
                    let _ = store.clear_waiting(&owner, &record.chat_id).await;
                }
                Cancelled::Ended(record.chat_id)
            }
            Ok(Some(_)) => match store.request_cancel(&owner, run).await {
                Ok(()) => Cancelled::Signalled,
                Err(_) => Cancelled::NotFound,
            },
            _ => Cancelled::NotFound,
        }
    }

    /// A running run whose slice cannot be running anywhere: a slice ends within
    /// `slice_time`, so one that started longer ago (with a margin for clocks) died with its
    /// node.
    fn orphaned(&self, record: &RunRecord) -> bool {
        let limit = self.inner.config.slice_time + ORPHAN_MARGIN;
        let age = crate::clock::unix_millis().saturating_sub(record.slice_started_at);
        record.status == RunStatus::Running && u128::try_from(age).unwrap_or(0) > limit.as_millis()
    }
}
