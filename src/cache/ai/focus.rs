//! A chat's focus-mode record, part of the chat's cached AI state: which focus mode is
//! active, or that the user ended it (so a client still sending an old `active_focus_id`
//! does not bring it back). Sealed with the owner's key and bound to the chat; kept as long
//! as the AI cache keeps chats (`cache.ai_ttl`, counted from the last change) and dropped
//! with the chat.

use chatd_protocol::ChatId;
use serde::{Deserialize, Serialize};

use super::super::backend::keys;
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

/// What the server knows of a chat's focus mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusRecord {
    /// `app_id-focus_id`; `None`: no focus mode (ended on purpose).
    pub active: Option<String>,
}

impl AiCache {
    /// The chat's focus record; `None` when the cache has none (never set, expired, or a
    /// value that does not open, which counts as absent).
    pub async fn focus(
        &self,
        user: &UserHash,
        chat: &ChatId,
    ) -> Result<Option<FocusRecord>, CacheFault> {
        let key = keys::chat_focus(user, chat.as_str());
        let plain = self
            .get_sealed(user, chat.as_str(), Purpose::FocusState, &key)
            .await?;
        Ok(plain.and_then(|p| serde_json::from_slice(&p).ok()))
    }

    /// Records the chat's focus mode (`None`: none, on purpose).
    pub async fn set_focus(
        &self,
        user: &UserHash,
        chat: &ChatId,
        record: &FocusRecord,
    ) -> Result<(), CacheFault> {
        let plain = serde_json::to_vec(record).unwrap_or_default();
        let key = keys::chat_focus(user, chat.as_str());
        self.put_sealed(user, chat.as_str(), Purpose::FocusState, &key, &plain)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserId;

    #[tokio::test]
    async fn a_focus_record_round_trips_sealed_and_bound_to_its_chat() {
        let cache = AiCache::in_memory(3);
        let a = UserHash::of(&UserId::parse("a").unwrap());
        let b = UserHash::of(&UserId::parse("b").unwrap());
        let (c1, c2) = (ChatId::parse("c1").unwrap(), ChatId::parse("c2").unwrap());
        assert_eq!(cache.focus(&a, &c1).await.unwrap(), None);
        let on = FocusRecord {
            active: Some("docs-deep_dive".into()),
        };
        cache.set_focus(&a, &c1, &on).await.unwrap();
        assert_eq!(cache.focus(&a, &c1).await.unwrap(), Some(on));
        assert_eq!(cache.focus(&b, &c1).await.unwrap(), None, "another user's");
        // The sealed value moved under another chat's key does not open.
        let backend = cache.backend().clone();
        let sealed = backend
            .kv_get(&keys::chat_focus(&a, "c1"))
            .await
            .unwrap()
            .unwrap();
        assert!(!sealed.windows(4).any(|w| w == b"docs"), "sealed at rest");
        backend
            .kv_put(
                &keys::chat_focus(&a, "c2"),
                sealed,
                std::time::Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert_eq!(cache.focus(&a, &c2).await.unwrap(), None);
        let off = FocusRecord { active: None };
        cache.set_focus(&a, &c1, &off).await.unwrap();
        assert_eq!(cache.focus(&a, &c1).await.unwrap(), Some(off));
        cache.delete(&a, &c1).await.unwrap();
        assert_eq!(
            cache.focus(&a, &c1).await.unwrap(),
            None,
            "gone with the chat"
        );
    }
}
