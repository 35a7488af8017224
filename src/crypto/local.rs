//! The embedded key provider: the same interface as Vault transit, backed by a master key
//! from `CHATD_MASTER_KEY` (64 hex chars) or a 0600 file in the data directory. Each user's
//! key-encryption key is derived from the master key with HKDF-SHA256.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::future::BoxFuture;
use hkdf::Hkdf;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::{KeyError, KeyProvider, NewDataKey, SecretKey, UserHash, aead};

const PREFIX: &str = "local:v1:";

pub struct LocalKeyProvider {
    master: SecretKey,
    calls: AtomicU64,
}

impl LocalKeyProvider {
    pub fn new(master: SecretKey) -> Self {
        Self {
            master,
            calls: AtomicU64::new(0),
        }
    }

    /// The master key from `CHATD_MASTER_KEY`, else `path` (created with mode 0600).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let hex_key = match std::env::var("CHATD_MASTER_KEY") {
            Ok(v) => Zeroizing::new(v.into_bytes()),
            Err(_) => Zeroizing::new(
                crate::auth::load_or_create_secret(path)
                    .map_err(|e| KeyError::Unavailable(e.to_string()))?,
            ),
        };
        let mut master = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(hex_key.trim_ascii(), master.as_mut_slice())
            .map_err(|_| KeyError::Unavailable("master key must be 64 hex characters".into()))?;
        Ok(Self::new(master))
    }

    fn kek(&self, user: &UserHash) -> SecretKey {
        let hk = Hkdf::<Sha256>::new(None, self.master.as_slice());
        let mut kek = Zeroizing::new([0u8; 32]);
        // 32 bytes is always a valid HKDF-SHA256 output length.
        let _ = hk.expand(
            format!("chatd-kek:{}", user.key_name()).as_bytes(),
            kek.as_mut_slice(),
        );
        kek
    }
}

impl KeyProvider for LocalKeyProvider {
    fn new_data_key<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<NewDataKey, KeyError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let key: SecretKey = Zeroizing::new(rand::random());
            let sealed = aead::seal(&self.kek(user), user.key_name().as_bytes(), key.as_slice())
                .map_err(|e| KeyError::Unavailable(e.to_string()))?;
            Ok(NewDataKey {
                key,
                wrapped: format!("{PREFIX}{}", B64.encode(sealed)),
            })
        })
    }

    fn unwrap_data_key<'a>(
        &'a self,
        user: &'a UserHash,
        wrapped: &'a str,
    ) -> BoxFuture<'a, Result<SecretKey, KeyError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let body = wrapped
                .strip_prefix(PREFIX)
                .ok_or_else(|| KeyError::Rejected("not a local wrapped key".into()))?;
            let sealed = B64
                .decode(body)
                .map_err(|_| KeyError::Rejected("bad encoding".into()))?;
            let plain = Zeroizing::new(
                aead::open(&self.kek(user), user.key_name().as_bytes(), &sealed)
                    .map_err(|_| KeyError::Rejected("wrapped key does not open".into()))?,
            );
            let mut key = Zeroizing::new([0u8; 32]);
            if plain.len() != 32 {
                return Err(KeyError::Rejected(
                    "wrapped key has the wrong length".into(),
                ));
            }
            key.copy_from_slice(&plain);
            Ok(key)
        })
    }

    fn check(&self) -> BoxFuture<'_, Result<(), KeyError>> {
        Box::pin(async { Ok(()) })
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserId;

    #[tokio::test]
    async fn wraps_per_user() {
        let p = LocalKeyProvider::new(Zeroizing::new([1u8; 32]));
        let alice = UserHash::of(&UserId::parse("alice").unwrap());
        let bob = UserHash::of(&UserId::parse("bob").unwrap());
        let dk = p.new_data_key(&alice).await.unwrap();
        let back = p.unwrap_data_key(&alice, &dk.wrapped).await.unwrap();
        assert_eq!(back.as_slice(), dk.key.as_slice());
        assert!(matches!(
            p.unwrap_data_key(&bob, &dk.wrapped).await,
            Err(KeyError::Rejected(_))
        ));
        assert!(!format!("{dk:?}").contains(&hex::encode(dk.key.as_slice())));
    }
}
