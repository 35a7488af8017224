//! Which chats have a waiting run, when the runs live in the permanent store (embedded
//! mode). Every user message asks "does a routine wait for an answer here?"; without this
//! index each would be a store round trip (on SQLite, a hop to its worker thread), for an
//! answer that is nearly always "no".
//!
//! The index holds the *names* of the waiting markers (never their values), each with its
//! expiry. It is read from the store once, then kept by this process, which is the store's
//! only writer of these names in embedded mode (cluster mode keeps runs in Redis and has
//! no index). A name in the index may have expired or been replaced in the store: the
//! store read that follows says so. A name not in the index is not in the store.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::store::values::now_millis;
use crate::store::{Store, StoreError};

/// How much later than the store the index lets a name expire (see `insert`).
const EXPIRY_MARGIN_MS: i64 = 1_000;

/// What every waiting marker's name contains (see `waiting_key`).
pub(super) const INFIX: &str = ":routine:waiting:";

#[derive(Default)]
pub(super) struct WaitingIndex {
    loaded: OnceCell<()>,
    /// Name → expiry (milliseconds since the epoch).
    names: Mutex<HashMap<String, i64>>,
    /// The size after the last sweep of expired names (the next sweep waits until the
    /// index has doubled).
    swept_at: Mutex<usize>,
}

impl WaitingIndex {
    /// Whether the store may hold `name` (false: it surely does not).
    pub(super) async fn may_hold(&self, store: &dyn Store, name: &str) -> Result<bool, StoreError> {
        self.load(store).await?;
        let names = self.names();
        Ok(names.get(name).is_some_and(|&exp| exp > now_millis()))
    }

    /// `name` is about to be written for `ttl`.
    pub(super) async fn insert(
        &self,
        store: &dyn Store,
        name: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.load(store).await?;
        // The store computes its own expiry when it writes, a little later: the index
        // keeps a margin so that it never says "surely not" while the store still holds
        // the name (a filter may err only towards "may hold").
        let expiry = crate::store::values::expiry(ttl).saturating_add(EXPIRY_MARGIN_MS);
        let mut names = self.names();
        // A live holder may outlast this claim: the later expiry stands.
        let held = names.entry(name.to_string()).or_insert(expiry);
        *held = (*held).max(expiry);
        let mut swept = self.swept_at.lock().unwrap_or_else(PoisonError::into_inner);
        if names.len() > 2 * (*swept).max(64) {
            let now = now_millis();
            names.retain(|_, exp| *exp > now);
            *swept = names.len();
        }
        Ok(())
    }

    /// `name` was deleted from the store.
    pub(super) fn remove(&self, name: &str) {
        self.names().remove(name);
    }

    async fn load(&self, store: &dyn Store) -> Result<(), StoreError> {
        self.loaded
            .get_or_try_init(|| async {
                let found = store.value_names(INFIX).await?;
                let mut names = self.names();
                // A name written meanwhile (none can be: writers load first) keeps its own.
                for (name, expiry) in found {
                    names.entry(name).or_insert(expiry);
                }
                Ok::<(), StoreError>(())
            })
            .await
            .map(|_| ())
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
