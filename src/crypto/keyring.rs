//! Seals and opens values with per-user data keys. The current data key of a user is
//! cached in memory for `keys.data_key_ttl` (zeroized on drop), so the key service is not
//! on the per-message path; its wrapped form is kept in a [`WrappedKeyStore`] (the cache
//! backend) under `dek:{user_hash}:{key_id}` so any node (or this one after a restart) can
//! unwrap it.
//!
//! Sealed value: `0x01 || key_id (16 bytes) || nonce (12) || ciphertext+tag`, with associated
//! data `chatd:v1|{user_hash}|{chat}|{purpose}|{key_id}`: a value moved to another user,
//! chat, purpose or key does not open.
//!
//! The store may lose the wrapped copy (a Redis restarted empty) while a node still seals
//! with the key in memory. Two things keep values openable on every node then: the current
//! key's wrapped copy is written again at most every [`REWRITE_EVERY`] while it is in use,
//! and a *portable* value ([`Keyring::seal_portable`], for frames on their way to other
//! nodes) carries the wrapped key itself: `0x02 || key_id || len (u16 BE) || wrapped key ||
//! nonce || ciphertext+tag` (the key id is the wrapped key's digest, so it cannot be
//! swapped).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use futures_util::future::BoxFuture;

use super::{KeyError, KeyProvider, SecretKey, UserHash, aead};

/// Where wrapped data keys are kept, shared by every node (the cache backend implements
/// it in `crate::cache`).
pub trait WrappedKeyStore: Send + Sync {
    fn get_wrapped<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreUnavailable>>;
    fn put_wrapped<'a>(
        &'a self,
        name: &'a str,
        wrapped: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreUnavailable>>;
}

/// The store of wrapped keys did not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct StoreUnavailable(pub String);

const VERSION: u8 = 1;
const KEY_ID_LEN: usize = 16;
/// Wrapped data keys outlive the values they sealed (whose TTLs are refreshed on use).
const WRAPPED_KEY_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// A portable sealed value (carries its wrapped key).
const PORTABLE: u8 = 2;
/// How often the wrapped copy of a key in use is written again (a store that lost it has it
/// back within this long).
const REWRITE_EVERY: Duration = Duration::from_secs(5);

type KeyId = [u8; KEY_ID_LEN];

/// What a sealed value is for; part of its associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    AiMessage,
    Embed,
    SettingsMemory,
    /// A frame in a turn's log.
    TurnLog,
    /// A user message waiting behind a running turn.
    QueuedMessage,
    /// A frame on its way to another node.
    BusFrame,
    /// An answer no device has stored yet.
    PendingAnswer,
    /// A chat's active focus mode.
    FocusState,
    /// A routine run's record and journal, or a routine's drive value.
    Routine,
    /// The user's app preferences (apps and skills switched off).
    AppPreferences,
    /// A chat's speculation record (its last plan and how its guesses fared).
    Speculation,
    /// A chat's latest summary (from postprocessing), carried into its next turns.
    ChatSummary,
    /// A chat's pseudonym table (personal data ↔ placeholders).
    Pseudonyms,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::AiMessage => "ai_message",
            Purpose::Embed => "embed",
            Purpose::SettingsMemory => "settings_memory",
            Purpose::TurnLog => "turn_log",
            Purpose::QueuedMessage => "queued_message",
            Purpose::BusFrame => "bus_frame",
            Purpose::PendingAnswer => "pending_answer",
            Purpose::FocusState => "focus_state",
            Purpose::Routine => "routine",
            Purpose::AppPreferences => "app_preferences",
            Purpose::Speculation => "speculation",
            Purpose::ChatSummary => "chat_summary",
            Purpose::Pseudonyms => "pseudonyms",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("wrapped key store: {0}")]
    Store(#[from] StoreUnavailable),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    /// The value cannot be opened: unknown or rejected key, tampered bytes, wrong binding.
    /// For the caller this is a cache miss, never an error shown to the user.
    #[error("value does not open")]
    Failed,
    /// The key service or the cache backend is down: retry later.
    #[error(transparent)]
    Unavailable(#[from] SealError),
}

struct CachedKey {
    id: KeyId,
    key: SecretKey,
    loaded: Instant,
    /// The wrapped form (kept for the current key: portable values carry it).
    wrapped: Option<Arc<str>>,
    /// When the wrapped copy was last written to the store (the current key only).
    written: std::sync::Mutex<Instant>,
}

impl CachedKey {
    /// The wrapped copy is written again at the next seal.
    fn rewrite_when_used(&self) {
        if let Some(due) = Instant::now().checked_sub(REWRITE_EVERY) {
            *self
                .written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = due;
        }
    }

    fn new(id: KeyId, key: SecretKey, wrapped: Option<Arc<str>>) -> Self {
        let now = Instant::now();
        Self {
            id,
            key,
            loaded: now,
            wrapped,
            written: std::sync::Mutex::new(now),
        }
    }
}

pub struct Keyring {
    provider: Arc<dyn KeyProvider>,
    backend: Arc<dyn WrappedKeyStore>,
    ttl: Duration,
    /// user → the data key new values are sealed with.
    current: DashMap<UserHash, Arc<CachedKey>>,
    /// (user, key id) → unwrapped keys for opening.
    opened: DashMap<(UserHash, KeyId), Arc<CachedKey>>,
}

fn key_id(wrapped: &str) -> KeyId {
    let digest = Sha256::digest(wrapped.as_bytes());
    let mut id = [0u8; KEY_ID_LEN];
    id.copy_from_slice(&digest[..KEY_ID_LEN]);
    id
}

fn wrapped_key_name(user: &UserHash, id: &KeyId) -> String {
    format!("dek:{}:{}", user.as_str(), hex::encode(id))
}

fn aad(user: &UserHash, scope: &str, purpose: Purpose, id: &KeyId) -> Vec<u8> {
    format!(
        "chatd:v1|{}|{scope}|{}|{}",
        user.as_str(),
        purpose.as_str(),
        hex::encode(id)
    )
    .into_bytes()
}

impl Keyring {
    pub fn new(
        provider: Arc<dyn KeyProvider>,
        backend: Arc<dyn WrappedKeyStore>,
        ttl: Duration,
    ) -> Self {
        Self {
            provider,
            backend,
            ttl,
            current: DashMap::new(),
            opened: DashMap::new(),
        }
    }

    pub fn provider(&self) -> &Arc<dyn KeyProvider> {
        &self.provider
    }

    fn fresh(&self, k: &CachedKey) -> bool {
        !self.ttl.is_zero() && k.loaded.elapsed() < self.ttl
    }

    async fn current_key(&self, user: &UserHash) -> Result<Arc<CachedKey>, SealError> {
        if let Some(k) = self.current.get(user).map(|k| k.clone())
            && self.fresh(&k)
        {
            self.rewrite_if_due(user, &k).await;
            return Ok(k);
        }
        let new = self.provider.new_data_key(user).await?;
        let id = key_id(&new.wrapped);
        self.backend
            .put_wrapped(
                &wrapped_key_name(user, &id),
                new.wrapped.clone().into_bytes(),
                WRAPPED_KEY_TTL,
            )
            .await?;
        let cached = Arc::new(CachedKey::new(id, new.key, Some(Arc::from(new.wrapped))));
        if !self.ttl.is_zero() {
            self.current.insert(user.clone(), cached.clone());
            self.opened.insert((user.clone(), id), cached.clone());
        }
        Ok(cached)
    }

    /// The key a value was sealed with: cached, or unwrapped from the wrapped copy the value
    /// carries (`inline`, a portable value; it must hash to `id`) or the store holds.
    async fn key_for_open(
        &self,
        user: &UserHash,
        id: KeyId,
        inline: Option<&[u8]>,
    ) -> Result<Arc<CachedKey>, OpenError> {
        if let Some(k) = self.opened.get(&(user.clone(), id)).map(|k| k.clone())
            && self.fresh(&k)
        {
            return Ok(k);
        }
        let wrapped = match inline {
            Some(w) => w.to_vec(),
            None => self
                .backend
                .get_wrapped(&wrapped_key_name(user, &id))
                .await
                .map_err(|e| OpenError::Unavailable(e.into()))?
                .ok_or(OpenError::Failed)?,
        };
        let wrapped = String::from_utf8(wrapped).map_err(|_| OpenError::Failed)?;
        if inline.is_some() && key_id(&wrapped) != id {
            return Err(OpenError::Failed);
        }
        let key = match self.provider.unwrap_data_key(user, &wrapped).await {
            Ok(k) => k,
            Err(KeyError::Rejected(_)) => return Err(OpenError::Failed),
            Err(e) => return Err(OpenError::Unavailable(e.into())),
        };
        let cached = Arc::new(CachedKey::new(id, key, None));
        if !self.ttl.is_zero() {
            self.opened.insert((user.clone(), id), cached.clone());
        }
        Ok(cached)
    }

    /// Writes the current key's wrapped copy again when it was last written
    /// [`REWRITE_EVERY`] ago (best effort: a store that is down is tried again at the next
    /// seal).
    async fn rewrite_if_due(&self, user: &UserHash, k: &CachedKey) {
        let Some(wrapped) = &k.wrapped else {
            return;
        };
        {
            let mut written = k
                .written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if written.elapsed() < REWRITE_EVERY {
                return;
            }
            *written = Instant::now();
        }
        let name = wrapped_key_name(user, &k.id);
        let put = self
            .backend
            .put_wrapped(&name, wrapped.as_bytes().to_vec(), WRAPPED_KEY_TTL);
        if let Err(e) = put.await {
            tracing::debug!(error = %e, "cannot rewrite a wrapped data key; tried again when next used");
            k.rewrite_when_used();
        }
    }

    /// Seals `plaintext` for `user`, bound to `scope` (a chat id) and `purpose`.
    pub async fn seal(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let key = self.current_key(user).await?;
        let body = aead::seal(&key.key, &aad(user, scope, purpose, &key.id), plaintext)
            .map_err(|e| SealError::Key(KeyError::Unavailable(e.to_string())))?;
        let mut out = Vec::with_capacity(1 + KEY_ID_LEN + body.len());
        out.push(VERSION);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Seals like [`Keyring::seal`], carrying the wrapped key in the value: any node can
    /// open it with the key service alone, whatever the store of wrapped keys still holds.
    pub async fn seal_portable(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let key = self.current_key(user).await?;
        let wrapped = key.wrapped.as_deref().unwrap_or_default().as_bytes();
        let len = u16::try_from(wrapped.len())
            .map_err(|_| SealError::Key(KeyError::Unavailable("wrapped key too long".into())))?;
        let body = aead::seal(&key.key, &aad(user, scope, purpose, &key.id), plaintext)
            .map_err(|e| SealError::Key(KeyError::Unavailable(e.to_string())))?;
        let mut out = Vec::with_capacity(1 + KEY_ID_LEN + 2 + wrapped.len() + body.len());
        out.push(PORTABLE);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(wrapped);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Opens a value sealed by [`Keyring::seal`] or [`Keyring::seal_portable`] with the
    /// same binding.
    pub async fn open(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        sealed: &[u8],
    ) -> Result<Vec<u8>, OpenError> {
        let (Some(&version), Some(id)) = (sealed.first(), sealed.get(1..1 + KEY_ID_LEN)) else {
            return Err(OpenError::Failed);
        };
        let mut key_id = [0u8; KEY_ID_LEN];
        key_id.copy_from_slice(id);
        let rest = &sealed[1 + KEY_ID_LEN..];
        let (key, body) = match version {
            VERSION => (self.key_for_open(user, key_id, None).await?, rest),
            PORTABLE => {
                let len = rest
                    .get(..2)
                    .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
                    .ok_or(OpenError::Failed)?;
                let wrapped = rest.get(2..2 + len).ok_or(OpenError::Failed)?;
                let key = self.key_for_open(user, key_id, Some(wrapped)).await?;
                (key, &rest[2 + len..])
            }
            _ => return Err(OpenError::Failed),
        };
        aead::open(&key.key, &aad(user, scope, purpose, &key_id), body)
            .map_err(|_| OpenError::Failed)
    }

    /// The store of wrapped keys may have lost them (it restarted): each current key's
    /// wrapped copy is written again the next time it seals, before the value it seals
    /// reaches the store (another node can then open that value).
    pub fn rewrite_when_used(&self) {
        for k in self.current.iter() {
            k.rewrite_when_used();
        }
    }

    /// Forgets every cached data key (tests, and a future key-rotation hook).
    pub fn forget_keys(&self) {
        self.current.clear();
        self.opened.clear();
    }
}

#[cfg(test)]
mod tests;
