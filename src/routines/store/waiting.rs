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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::store::values::{expiry, now_millis};
use crate::store::{Store, StoreError};

/// What every waiting marker's name contains (see `waiting_key`).
pub(super) const INFIX: &str = ":routine:waiting:";

pub(super) struct WaitingIndex {
    store: Arc<dyn Store>,
    loaded: OnceCell<()>,
    names: Mutex<Names>,
}

#[derive(Default)]
struct Names {
    /// Name → expiry (milliseconds since the epoch).
    expiries: HashMap<String, i64>,
    /// The size after the last sweep of expired names (the next waits until it doubles).
    swept_at: usize,
}

impl WaitingIndex {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            loaded: OnceCell::new(),
            names: Mutex::default(),
        }
    }

    /// Whether the store may hold `name` (false: it surely does not).
    pub(super) async fn may_hold(&self, name: &str) -> Result<bool, StoreError> {
        self.load().await?;
        let names = self.names();
        Ok(names
            .expiries
            .get(name)
            .is_some_and(|&exp| exp > now_millis()))
    }

    /// `name` is about to be written for `ttl`.
    pub(super) async fn insert(&self, name: &str, ttl: Duration) -> Result<(), StoreError> {
        self.load().await?;
        let expiry = expiry(ttl);
        let mut names = self.names();
        // A live holder may outlast this claim: the later expiry stands.
        let held = names.expiries.entry(name.to_string()).or_insert(expiry);
        *held = (*held).max(expiry);
        if names.expiries.len() > 2 * names.swept_at.max(64) {
            let now = now_millis();
            names.expiries.retain(|_, exp| *exp > now);
            names.swept_at = names.expiries.len();
        }
        Ok(())
    }

    /// `name` is being deleted from the store.
    pub(super) fn remove(&self, name: &str) {
        self.names().expiries.remove(name);
    }

    async fn load(&self) -> Result<(), StoreError> {
        self.loaded
            .get_or_try_init(|| async {
                let found = self.store.value_names(INFIX).await?;
                let mut names = self.names();
                for (name, expiry) in found {
                    names.expiries.entry(name).or_insert(expiry);
                }
                Ok::<(), StoreError>(())
            })
            .await
            .map(|_| ())
    }

    fn names(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
