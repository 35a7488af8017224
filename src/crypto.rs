//! Server-side sealing of the caches the server must read (the AI cache, embeds,
//! settings/memories). Envelope encryption: a per-user key in the key service (Vault/OpenBao
//! transit, or the local provider) wraps data keys; data keys are cached in memory for a
//! bounded time and zeroized on drop; AES-256-GCM runs in-process with associated data that
//! binds owner, chat, purpose and key id. Client-encrypted data never comes here.

pub mod aead;
pub mod keyring;
mod local;
mod vault;

pub use keyring::{Keyring, OpenError, Purpose, SealError, StoreUnavailable, WrappedKeyStore};

use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

pub use local::LocalKeyProvider;
pub use vault::{SecretReadError, VaultKeyProvider, read_secrets, vault_token};

use crate::auth::UserId;

/// 32 secret bytes, wiped from memory on drop. `Debug` never shows them.
pub type SecretKey = Zeroizing<[u8; 32]>;

/// A hash of a user id, safe to use in cache keys, key names and logs.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct UserHash(String);

impl UserHash {
    pub fn of(user: &UserId) -> Self {
        let digest = Sha256::digest(format!("chatd-user:{}", user.as_str()).as_bytes());
        Self(hex::encode(&digest[..16]))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// A hash as [`UserHash::as_str`] gave it (32 lowercase hex characters).
    pub fn from_hex(s: &str) -> Option<Self> {
        (s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(s.to_string()))
    }
    /// The name of the user's key in the key service (never the raw user id).
    pub fn key_name(&self) -> String {
        format!("user_{}", self.0)
    }
}

/// A fresh data key: the plaintext for sealing and its wrapped (key-service-encrypted) form.
pub struct NewDataKey {
    pub key: SecretKey,
    pub wrapped: String,
}

impl std::fmt::Debug for NewDataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewDataKey([redacted])")
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyError {
    /// The key service cannot be reached, is sealed, or did not answer in time.
    #[error("key service unavailable: {0}")]
    Unavailable(String),
    /// The transit mount does not exist.
    #[error("transit mount `{0}` is missing on the key service")]
    MountMissing(String),
    /// The key service refused to unwrap (rotated past `min_decryption_version`, deleted
    /// key, tampered wrapped key).
    #[error("data key cannot be unwrapped: {0}")]
    Rejected(String),
}

/// Wraps and unwraps data keys under a per-user key.
pub trait KeyProvider: Send + Sync {
    /// A new data key for the user, creating the user's key on first use.
    fn new_data_key<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<NewDataKey, KeyError>>;
    /// Unwraps a data key made by `new_data_key`.
    fn unwrap_data_key<'a>(
        &'a self,
        user: &'a UserHash,
        wrapped: &'a str,
    ) -> BoxFuture<'a, Result<SecretKey, KeyError>>;
    /// Reachability for `/readyz`.
    fn check(&self) -> BoxFuture<'_, Result<(), KeyError>>;
    /// Calls made to the key service so far (for metrics and tests).
    fn calls(&self) -> u64;
}
