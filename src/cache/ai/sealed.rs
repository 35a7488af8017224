//! The one way a value of the AI cache is kept: sealed with the owner's key, bound to its
//! scope (a chat, an embed, the user's preferences) and to what it is (`Purpose`), under its
//! key for the cache's TTL (from the last write). A value that does not open counts as
//! absent.

use super::{AiCache, CacheFault};
use crate::crypto::{OpenError, Purpose, UserHash};

impl AiCache {
    /// Seals `plain` for `user`'s `scope` and stores it under `key`.
    pub(super) async fn put_sealed(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        key: &str,
        plain: &[u8],
    ) -> Result<(), CacheFault> {
        let sealed = self.keyring.seal(user, scope, purpose, plain).await?;
        Ok(self.backend.kv_put(key, sealed, self.policy.ttl).await?)
    }

    /// The value under `key`, opened; `None` when absent or when it does not open.
    pub(super) async fn get_sealed(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        key: &str,
    ) -> Result<Option<Vec<u8>>, CacheFault> {
        let Some(sealed) = self.backend.kv_get(key).await? else {
            return Ok(None);
        };
        self.open_sealed(user, scope, purpose, &sealed).await
    }

    /// A sealed value opened; `None` when it does not open (another user's or scope's, or
    /// under a retired key).
    pub(super) async fn open_sealed(
        &self,
        user: &UserHash,
        scope: &str,
        purpose: Purpose,
        sealed: &[u8],
    ) -> Result<Option<Vec<u8>>, CacheFault> {
        match self.keyring.open(user, scope, purpose, sealed).await {
            Ok(plain) => Ok(Some(plain)),
            Err(OpenError::Failed) => Ok(None),
            Err(OpenError::Unavailable(e)) => Err(e.into()),
        }
    }
}
