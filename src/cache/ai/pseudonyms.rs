//! A chat's pseudonym table (see [`crate::privacy`]), part of the chat's cached AI state:
//! the personal data of the chat and its placeholders, so a value keeps its placeholder
//! across turns and nodes. Stored as the privacy layer's bytes, sealed with the owner's key
//! and bound to the chat; kept as long as the AI cache keeps chats (`cache.ai_ttl`, from the
//! last change) and dropped with the chat.

use chatd_protocol::ChatId;

use super::super::backend::keys;
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

impl AiCache {
    /// The chat's table; `None` when the cache has none (never written, expired, or a value
    /// that does not open, which counts as absent: the chat starts a new table).
    pub async fn pseudonyms(
        &self,
        user: &UserHash,
        chat: &ChatId,
    ) -> Result<Option<Vec<u8>>, CacheFault> {
        let key = keys::chat_pseudonyms(user, chat.as_str());
        self.get_sealed(user, chat.as_str(), Purpose::Pseudonyms, &key)
            .await
    }

    /// Replaces the chat's table.
    pub async fn set_pseudonyms(
        &self,
        user: &UserHash,
        chat: &ChatId,
        table: &[u8],
    ) -> Result<(), CacheFault> {
        let key = keys::chat_pseudonyms(user, chat.as_str());
        self.put_sealed(user, chat.as_str(), Purpose::Pseudonyms, &key, table)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserId;

    #[tokio::test]
    async fn a_table_is_sealed_and_bound_to_its_chat() {
        let cache = AiCache::in_memory(3);
        let a = UserHash::of(&UserId::parse("a").unwrap());
        let b = UserHash::of(&UserId::parse("b").unwrap());
        let (c1, c2) = (ChatId::parse("c1").unwrap(), ChatId::parse("c2").unwrap());
        assert_eq!(cache.pseudonyms(&a, &c1).await.unwrap(), None);
        cache
            .set_pseudonyms(&a, &c1, b"ada@example.com")
            .await
            .unwrap();
        let got = cache.pseudonyms(&a, &c1).await.unwrap();
        assert_eq!(got.as_deref(), Some(&b"ada@example.com"[..]));
        assert_eq!(
            cache.pseudonyms(&b, &c1).await.unwrap(),
            None,
            "another user's"
        );
        // The sealed value moved under another chat's key does not open, and is not stored
        // in plaintext.
        let backend = cache.backend().clone();
        let sealed = backend
            .kv_get(&keys::chat_pseudonyms(&a, "c1"))
            .await
            .unwrap()
            .unwrap();
        assert!(!sealed.windows(15).any(|w| w == b"ada@example.com"));
        backend
            .kv_put(&keys::chat_pseudonyms(&a, "c2"), sealed, cache.policy().ttl)
            .await
            .unwrap();
        assert_eq!(cache.pseudonyms(&a, &c2).await.unwrap(), None);
        cache.delete(&a, &c1).await.unwrap();
        assert_eq!(
            cache.pseudonyms(&a, &c1).await.unwrap(),
            None,
            "dropped with the chat"
        );
    }
}
