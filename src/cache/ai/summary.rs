//! A chat's latest summary (what postprocessing wrote after its last answer), kept beside
//! the chat's cached messages so its next turns and the user's other chats can use it
//! (`pipeline.carry_summary`). Sealed with the owner's key and bound to the chat; kept as
//! long as the AI cache keeps chats (`cache.ai_ttl`, counted from the last write) and
//! dropped with the chat's messages (deleted or evicted).

use chatd_protocol::ChatId;

use super::super::backend::keys;
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

/// The summaries a turn reads, opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatSummaries {
    /// The turn's chat's own summary.
    pub own: Option<String>,
    /// The user's other cached chats' summaries, the most recently used first.
    pub others: Vec<String>,
}

impl AiCache {
    /// Keeps `text` as the chat's latest summary.
    pub async fn set_summary(
        &self,
        user: &UserHash,
        chat: &ChatId,
        text: &str,
    ) -> Result<(), CacheFault> {
        let key = keys::chat_summary(user, chat.as_str());
        self.put_sealed(
            user,
            chat.as_str(),
            Purpose::ChatSummary,
            &key,
            text.as_bytes(),
        )
        .await
    }

    /// The chat's summary and those of up to `others` other chats the cache holds, in one
    /// backend call. A value that does not open counts as absent.
    pub async fn summaries(
        &self,
        user: &UserHash,
        chat: &ChatId,
        others: usize,
    ) -> Result<ChatSummaries, CacheFault> {
        let sealed = self.backend.ai_summaries(user, chat, others).await?;
        let own = match sealed.own {
            Some(value) => self.open_summary(user, chat, &value).await?,
            None => None,
        };
        let mut opened = Vec::with_capacity(sealed.others.len());
        for (other, value) in &sealed.others {
            opened.extend(self.open_summary(user, other, value).await?);
        }
        Ok(ChatSummaries {
            own,
            others: opened,
        })
    }

    async fn open_summary(
        &self,
        user: &UserHash,
        chat: &ChatId,
        sealed: &[u8],
    ) -> Result<Option<String>, CacheFault> {
        let plain = (self.open_sealed(user, chat.as_str(), Purpose::ChatSummary, sealed)).await?;
        Ok(plain.and_then(|p| String::from_utf8(p).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserId;
    use crate::cache::ai::CachedMessage;
    use chatd_protocol::{MessageId, Role};

    fn message(id: &str) -> CachedMessage {
        CachedMessage {
            message_id: MessageId::parse(id).unwrap(),
            role: Role::User,
            content: "hi".into(),
            created_at: 0,
            category: None,
            model_name: None,
            token_count: None,
            replaces_through: None,
        }
    }

    #[tokio::test]
    async fn a_summary_is_sealed_and_bound_to_its_user_and_chat() {
        let cache = AiCache::in_memory(3);
        let a = UserHash::of(&UserId::parse("a").unwrap());
        let b = UserHash::of(&UserId::parse("b").unwrap());
        let (c1, c2) = (ChatId::parse("c1").unwrap(), ChatId::parse("c2").unwrap());
        assert_eq!(cache.summaries(&a, &c1, 3).await.unwrap().own, None);
        cache.set_summary(&a, &c1, "Planning a trip").await.unwrap();
        let read = cache.summaries(&a, &c1, 3).await.unwrap();
        assert_eq!(read.own.as_deref(), Some("Planning a trip"));
        assert_eq!(cache.summaries(&b, &c1, 3).await.unwrap().own, None);
        let backend = cache.backend().clone();
        let sealed = backend
            .kv_get(&keys::chat_summary(&a, "c1"))
            .await
            .unwrap()
            .unwrap();
        assert!(!sealed.windows(4).any(|w| w == b"trip"), "sealed at rest");
        // Moved under another chat's or another user's key, it does not open.
        let ttl = std::time::Duration::from_secs(60);
        let moved = [keys::chat_summary(&a, "c2"), keys::chat_summary(&b, "c1")];
        for key in &moved {
            backend.kv_put(key, sealed.clone(), ttl).await.unwrap();
        }
        assert_eq!(cache.summaries(&a, &c2, 3).await.unwrap().own, None);
        assert_eq!(cache.summaries(&b, &c1, 3).await.unwrap().own, None);
    }

    #[tokio::test]
    async fn other_chats_summaries_come_from_the_cached_chats_of_the_same_user() {
        let cache = AiCache::in_memory(3);
        let a = UserHash::of(&UserId::parse("a").unwrap());
        let b = UserHash::of(&UserId::parse("b").unwrap());
        let chat = |c: &str| ChatId::parse(c).unwrap();
        for c in ["c1", "c2", "c3"] {
            cache.append(&a, &chat(c), &[message("m1")]).await.unwrap();
            cache.set_summary(&a, &chat(c), c).await.unwrap();
        }
        cache
            .append(&b, &chat("b1"), &[message("m1")])
            .await
            .unwrap();
        cache.set_summary(&b, &chat("b1"), "b1").await.unwrap();
        let read = cache.summaries(&a, &chat("c3"), 3).await.unwrap();
        assert_eq!(read.own.as_deref(), Some("c3"));
        assert_eq!(
            read.others,
            ["c2", "c1"],
            "most recent first, not another user's"
        );
        assert_eq!(
            cache.summaries(&a, &chat("c3"), 1).await.unwrap().others,
            ["c2"]
        );
        // A fourth chat evicts the first, its summary with it; a deleted chat's goes too.
        cache
            .append(&a, &chat("c4"), &[message("m1")])
            .await
            .unwrap();
        let read = cache.summaries(&a, &chat("c4"), 3).await.unwrap();
        assert_eq!(
            (read.own, read.others),
            (None, vec!["c3".into(), "c2".into()])
        );
        assert_eq!(cache.summaries(&a, &chat("c1"), 0).await.unwrap().own, None);
        cache.delete(&a, &chat("c2")).await.unwrap();
        let read = cache.summaries(&a, &chat("c2"), 3).await.unwrap();
        assert_eq!((read.own, read.others), (None, vec!["c3".into()]));
    }
}
