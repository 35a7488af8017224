//! Where runs live between messages: each run's record, the one run per chat that waits
//! for the user, cancel requests for runs on other nodes, and each user's per-app drive.
//! Values are sealed with the user's server key, bound to the owner and the key's name.
//! They live in one [`Home`]: Redis when the cache is Redis (every node reads them there),
//! else the permanent store (SQLite or PostgreSQL), so that a paused run survives a
//! restart of an embedded chatd too. One contract suite runs against all four.

mod waiting;

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{ChatId, RunId};
use sha2::{Digest, Sha256};

use super::journal::RunRecord;
use crate::cache::CacheBackend;
use crate::cache::backend::{CacheError, keys};
use crate::crypto::UserHash;
use crate::crypto::keyring::{Keyring, OpenError, Purpose, SealError};
use crate::store::{Store, StoreError};
use waiting::WaitingIndex;

#[derive(Debug, thiserror::Error)]
pub enum StoreFault {
    #[error("routine store: {0}")]
    Cache(#[from] CacheError),
    #[error("routine store: {0}")]
    Store(#[from] StoreError),
    #[error("routine store: cannot seal: {0}")]
    Seal(#[from] SealError),
    #[error("routine store: cannot open: {0}")]
    Open(#[from] OpenError),
    #[error("routine store: bad record: {0}")]
    Decode(#[from] serde_json::Error),
}

/// A cancel request for a run on another node lives this long.
const CANCEL_TTL: Duration = Duration::from_secs(3600);

/// Where the run store keeps its values.
#[derive(Clone)]
pub enum Home {
    /// The cache backend's small values (in-memory or Redis).
    Cache(Arc<dyn CacheBackend>),
    /// The permanent store's sealed values.
    Store(Arc<dyn Store>),
}

impl Home {
    async fn put(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<(), StoreFault> {
        match self {
            Home::Cache(c) => c.kv_put(key, value, ttl).await?,
            Home::Store(s) => s.value_put(key, value, ttl).await?,
        }
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreFault> {
        Ok(match self {
            Home::Cache(c) => c.kv_get(key).await?,
            Home::Store(s) => s.value_get(key).await?,
        })
    }

    async fn delete(&self, key: &str) -> Result<(), StoreFault> {
        match self {
            Home::Cache(c) => c.kv_delete(key).await?,
            Home::Store(s) => s.value_delete(key).await?,
        }
        Ok(())
    }

    async fn claim(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<Vec<u8>, StoreFault> {
        Ok(match self {
            Home::Cache(c) => c.kv_claim(key, value, ttl).await?,
            Home::Store(s) => s.value_claim(key, value, ttl).await?,
        })
    }
}

#[derive(Clone)]
pub struct RunStore {
    backend: Home,
    keyring: Arc<Keyring>,
    /// With the permanent store as home: which chats have a waiting run (see [`waiting`]).
    waiting_index: Option<Arc<WaitingIndex>>,
}

fn run_key(owner: &UserHash, run: &RunId) -> String {
    format!("{}:routine:run:{}", keys::tag(owner), run.as_str())
}
fn waiting_key(owner: &UserHash, chat: &ChatId) -> String {
    format!("{}{}{}", keys::tag(owner), waiting::INFIX, chat.as_str())
}
fn cancel_key(owner: &UserHash, run: &RunId) -> String {
    format!("{}:routine:cancel:{}", keys::tag(owner), run.as_str())
}
/// The drive key's name carries a hash of the user's key, never the key itself.
fn drive_key(owner: &UserHash, app: &str, key: &str) -> String {
    let digest = hex::encode(Sha256::digest(format!("{app}\n{key}").as_bytes()));
    format!("{}:routine:drive:{app}:{}", keys::tag(owner), &digest[..32])
}

impl RunStore {
    pub fn new(backend: Home, keyring: Arc<Keyring>) -> Self {
        let waiting_index = match backend {
            Home::Store(_) => Some(Arc::default()),
            Home::Cache(_) => None,
        };
        Self {
            backend,
            keyring,
            waiting_index,
        }
    }

    async fn seal(
        &self,
        owner: &UserHash,
        name: &str,
        plain: &[u8],
    ) -> Result<Vec<u8>, StoreFault> {
        Ok(self
            .keyring
            .seal(owner, name, Purpose::Routine, plain)
            .await?)
    }

    async fn open(
        &self,
        owner: &UserHash,
        name: &str,
        sealed: &[u8],
    ) -> Result<Vec<u8>, StoreFault> {
        Ok(self
            .keyring
            .open(owner, name, Purpose::Routine, sealed)
            .await?)
    }

    pub async fn put(
        &self,
        owner: &UserHash,
        run: &RunRecord,
        ttl: Duration,
    ) -> Result<(), StoreFault> {
        let key = run_key(owner, &run.run_id);
        let sealed = self.seal(owner, &key, &serde_json::to_vec(run)?).await?;
        self.backend.put(&key, sealed, ttl).await
    }

    pub async fn get(
        &self,
        owner: &UserHash,
        run: &RunId,
    ) -> Result<Option<RunRecord>, StoreFault> {
        let key = run_key(owner, run);
        let Some(sealed) = self.backend.get(&key).await? else {
            return Ok(None);
        };
        let plain = self.open(owner, &key, &sealed).await?;
        Ok(Some(serde_json::from_slice(&plain)?))
    }

    pub async fn delete(&self, owner: &UserHash, run: &RunId) -> Result<(), StoreFault> {
        self.backend.delete(&run_key(owner, run)).await?;
        self.backend.delete(&cancel_key(owner, run)).await
    }

    /// Makes `run` the chat's waiting run unless another one waits; whether it is now.
    pub async fn claim_waiting(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        run: &RunId,
        ttl: Duration,
    ) -> Result<bool, StoreFault> {
        if let Some(current) = self.waiting(owner, chat).await? {
            return Ok(&current == run);
        }
        let key = waiting_key(owner, chat);
        let sealed = self.seal(owner, &key, run.as_str().as_bytes()).await?;
        if let (Some(index), Home::Store(store)) = (&self.waiting_index, &self.backend) {
            index.insert(store.as_ref(), &key, ttl).await?;
        }
        let held = self.backend.claim(&key, sealed.clone(), ttl).await?;
        Ok(held == sealed)
    }

    /// The run that waits for the user's answer in the chat.
    pub async fn waiting(
        &self,
        owner: &UserHash,
        chat: &ChatId,
    ) -> Result<Option<RunId>, StoreFault> {
        let key = waiting_key(owner, chat);
        if let (Some(index), Home::Store(store)) = (&self.waiting_index, &self.backend)
            && !index.may_hold(store.as_ref(), &key).await?
        {
            return Ok(None);
        }
        let Some(sealed) = self.backend.get(&key).await? else {
            return Ok(None);
        };
        let plain = self.open(owner, &key, &sealed).await?;
        Ok(String::from_utf8(plain)
            .ok()
            .and_then(|s| RunId::parse(s).ok()))
    }

    pub async fn clear_waiting(&self, owner: &UserHash, chat: &ChatId) -> Result<(), StoreFault> {
        let key = waiting_key(owner, chat);
        // Out of the index first: a run claiming the chat meanwhile is indexed after this.
        if let Some(index) = &self.waiting_index {
            index.remove(&key);
        }
        self.backend.delete(&key).await
    }

    /// Asks whichever node runs `run` to stop it (it looks at each effect).
    pub async fn request_cancel(&self, owner: &UserHash, run: &RunId) -> Result<(), StoreFault> {
        self.backend
            .put(&cancel_key(owner, run), b"1".to_vec(), CANCEL_TTL)
            .await
    }

    pub async fn cancel_requested(
        &self,
        owner: &UserHash,
        run: &RunId,
    ) -> Result<bool, StoreFault> {
        Ok(self.backend.get(&cancel_key(owner, run)).await?.is_some())
    }

    pub async fn drive_get(
        &self,
        owner: &UserHash,
        app: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, StoreFault> {
        let name = drive_key(owner, app, key);
        let Some(sealed) = self.backend.get(&name).await? else {
            return Ok(None);
        };
        let plain = self.open(owner, &name, &sealed).await?;
        Ok(Some(serde_json::from_slice(&plain)?))
    }

    pub async fn drive_put(
        &self,
        owner: &UserHash,
        app: &str,
        key: &str,
        value: &serde_json::Value,
        ttl: Duration,
    ) -> Result<(), StoreFault> {
        let name = drive_key(owner, app, key);
        let sealed = self.seal(owner, &name, &serde_json::to_vec(value)?).await?;
        self.backend.put(&name, sealed, ttl).await
    }
}
