//! What the AI cache keeps about a chat besides its messages: its `messages_v` counter, who
//! claimed a chat no client stored yet, which message ids were sent (so a re-used id is
//! not answered twice), and answers no device has stored yet (sealed, until one does).

use chatd_protocol::{ChatId, MessageId, TaskId};

use super::super::backend::{CacheError, keys};
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

/// What the cache knows of a message id in a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageSeen {
    /// First time: the id is now claimed.
    New,
    /// Sent before and not answered yet (its turn runs or waits).
    Sent,
    /// Sent before; its turn asked the client for the chat's history.
    AwaitingHistory,
    /// Sent before and answered, by this turn when the record names it.
    Answered(Option<TaskId>),
}

/// A message sent and not answered yet: `sent:<until>:<nonce>` (the nonce tells this
/// call's claim from an older one); its turn asked for the history: `history:<until>`;
/// answered: `answered:<task>` (`answered` before the turn was named). `<until>` (ms since
/// the epoch) is when an unsettled claim lapses: longer than any turn and its wait in the
/// queue, short enough that a message whose claim was never settled (the cache failed
/// between taking it and answering it) can be sent again later.
const ANSWERED: &str = "answered";
const UNSETTLED_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// Message ids remembered per chat at most (a fuller chat starts over).
const MAX_SEEN: usize = 10_000;

fn answered(task: &TaskId) -> Vec<u8> {
    format!("{ANSWERED}:{}", task.as_str()).into_bytes()
}

fn unsettled(state: &str) -> Vec<u8> {
    let until = crate::clock::unix_millis() + UNSETTLED_FOR.as_millis() as i64;
    format!("{state}:{until}:{}", rand::random::<u32>()).into_bytes()
}

/// The state in a marker, `None` once an unsettled one lapsed.
fn read(marker: &[u8]) -> Option<MessageSeen> {
    let text = std::str::from_utf8(marker).ok()?;
    if text == ANSWERED {
        return Some(MessageSeen::Answered(None));
    }
    if let Some(task) = text
        .strip_prefix(ANSWERED)
        .and_then(|t| t.strip_prefix(':'))
    {
        return Some(MessageSeen::Answered(TaskId::parse(task).ok()));
    }
    let mut parts = text.split(':');
    let state = parts.next()?;
    let until: i64 = parts.next()?.parse().ok()?;
    if until <= crate::clock::unix_millis() {
        return None;
    }
    match state {
        "sent" => Some(MessageSeen::Sent),
        "history" => Some(MessageSeen::AwaitingHistory),
        _ => None,
    }
}

impl AiCache {
    /// Counts one more message in the chat's `messages_v` (kept for the AI cache's TTL):
    /// returns the new value, or `None` when the cache has no count and no `seed` (the
    /// permanent store's count) was given.
    pub async fn bump_messages_v(
        &self,
        user: &UserHash,
        chat: &ChatId,
        seed: Option<u64>,
    ) -> Result<Option<u64>, CacheError> {
        let key = keys::chat_versions(user, chat.as_str());
        self.backend.counter_bump(&key, seed, self.policy.ttl).await
    }

    /// Keeps an answer no device has stored yet (sealed; expires with the AI cache).
    pub async fn keep_pending(
        &self,
        user: &UserHash,
        id: &str,
        plain: &[u8],
    ) -> Result<(), CacheFault> {
        let sealed = self
            .keyring
            .seal(user, "pending", Purpose::PendingAnswer, plain)
            .await?;
        Ok(self
            .backend
            .pending_put(user, id, sealed, self.policy.ttl)
            .await?)
    }

    /// The user's pending answers, opened (ones that do not open are skipped).
    pub async fn pending(&self, user: &UserHash) -> Result<Vec<Vec<u8>>, CacheFault> {
        let mut out = Vec::new();
        for (_, sealed) in self.backend.pending_list(user).await? {
            let plain = self.open_sealed(user, "pending", Purpose::PendingAnswer, &sealed);
            out.extend(plain.await?);
        }
        Ok(out)
    }

    /// A device stored the answer `id`: it is no longer pending.
    pub async fn drop_pending(&self, user: &UserHash, id: &str) -> Result<(), CacheFault> {
        Ok(self.backend.pending_delete(user, id).await?)
    }

    /// Claims a chat no client has stored yet for `user` (its first writer, for as long as
    /// the AI cache keeps chats); false when another user holds it.
    pub async fn claim_chat(&self, user: &UserHash, chat: &ChatId) -> Result<bool, CacheError> {
        let key = keys::chat_claim(chat.as_str());
        let held = self
            .backend
            .kv_claim(&key, user.as_str().as_bytes().to_vec(), self.policy.ttl)
            .await?;
        Ok(held == user.as_str().as_bytes())
    }

    /// True when another user claimed this not-yet-stored chat.
    pub async fn claimed_by_another(
        &self,
        user: &UserHash,
        chat: &ChatId,
    ) -> Result<bool, CacheError> {
        let key = keys::chat_claim(chat.as_str());
        let held = self.backend.kv_get(&key).await?;
        Ok(held.is_some_and(|h| h != user.as_str().as_bytes()))
    }

    /// The chat's `messages_v` as the cache counts it.
    pub async fn messages_v(
        &self,
        user: &UserHash,
        chat: &ChatId,
    ) -> Result<Option<u64>, CacheError> {
        let key = keys::chat_versions(user, chat.as_str());
        self.backend.counter_get(&key).await
    }

    /// Claims the message id in the chat (remembered as long as the chat stays in the AI
    /// cache, and forgotten with it), or says what became of it when it was sent before.
    pub async fn claim_message(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
    ) -> Result<MessageSeen, CacheError> {
        let key = keys::messages_seen(user, chat.as_str());
        let mine = unsettled("sent");
        let held = self
            .backend
            .field_claim(
                &key,
                message.as_str(),
                mine.clone(),
                self.policy.ttl,
                MAX_SEEN,
            )
            .await?;
        if held == mine {
            return Ok(MessageSeen::New);
        }
        match read(&held) {
            Some(seen) => Ok(seen),
            None => {
                // A lapsed claim: taken over.
                self.set_seen(user, chat, message, mine).await?;
                Ok(MessageSeen::New)
            }
        }
    }

    async fn set_seen(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
        marker: Vec<u8>,
    ) -> Result<(), CacheError> {
        let key = keys::messages_seen(user, chat.as_str());
        self.backend
            .field_put(&key, message.as_str(), marker, self.policy.ttl)
            .await
    }

    /// The message was answered by `task`: a later copy of it is a duplicate.
    pub async fn message_answered(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
        task: &TaskId,
    ) -> Result<(), CacheError> {
        self.set_seen(user, chat, message, answered(task)).await
    }

    /// [`AiCache::message_answered`], unless the cache knows something of the message
    /// already (a turn whose log was written back after the cache lost its data: a copy
    /// taken as new since is left to its own turn).
    pub async fn message_answered_unless_known(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
        task: &TaskId,
    ) -> Result<(), CacheError> {
        let key = keys::messages_seen(user, chat.as_str());
        let marker = answered(task);
        (self.backend)
            .field_claim(&key, message.as_str(), marker, self.policy.ttl, MAX_SEEN)
            .await
            .map(drop)
    }

    /// The message's turn asked for the chat's history: the copy that brings it (or a
    /// copy without it, which is refused as such) is no duplicate.
    pub async fn message_awaits_history(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
    ) -> Result<(), CacheError> {
        self.set_seen(user, chat, message, unsettled("history"))
            .await
    }

    /// Forgets a message that was not taken or not answered (it may be sent again).
    pub async fn release_message(
        &self,
        user: &UserHash,
        chat: &ChatId,
        message: &MessageId,
    ) -> Result<(), CacheError> {
        let key = keys::messages_seen(user, chat.as_str());
        self.backend.field_delete(&key, message.as_str()).await
    }
}
