//! The chat-scoped settings/memories cache and the records of pending requests and
//! proposals, all in the cache backend and all sealed with the user's server key, bound to
//! the user, the purpose and the key they are stored under (a value copied elsewhere does
//! not open). Entries live under `{u:<hash>}:chat:<chat>:app_settings_memories:<app>:<cat>`
//! with the chat's index, so evicting or deleting the chat removes them (see
//! `cache::redis::scripts`). What was asked in a chat (a pending request id, or `declined`)
//! is kept as fields of `{u:<hash>}:chat:<chat>:app_settings_memories_asked`.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{ChatId, ProposalAction};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use zeroize::Zeroizing;

use crate::cache::ai::CacheFault;
use crate::cache::backend::{CacheBackend, CacheError, keys};
use crate::crypto::{Keyring, OpenError, Purpose, UserHash};

/// How long a request or a proposal waits for the user (minutes or days later is fine).
pub const PENDING_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The asked-state marker of a declined key.
const DECLINED: &[u8] = b"declined";
/// Markers kept per chat (a bounded best effort).
const MAX_ASKED: usize = 256;

/// A request waiting for `app_settings_memories_confirmed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRequest {
    pub chat_id: ChatId,
    /// `app_id:category` keys asked for.
    pub keys: Vec<String>,
}

/// A proposal waiting for `app_settings_memories_proposal_result`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingProposal {
    pub chat_id: ChatId,
    pub app_id: String,
    pub category: String,
    pub action: ProposalAction,
    pub entry: Value,
}

/// Whether a key may be asked for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Claimed for this request.
    Asked,
    /// A request for it is unanswered, or the user said no.
    Held,
}

#[derive(Clone)]
pub struct MemoryStore {
    backend: Arc<dyn CacheBackend>,
    keyring: Arc<Keyring>,
    /// The AI cache's TTL: entries live as long as the chat's messages.
    ttl: Duration,
}

fn asked_key(user: &UserHash, chat: &ChatId) -> String {
    format!(
        "{}:chat:{}:app_settings_memories_asked",
        keys::tag(user),
        chat.as_str()
    )
}

fn request_key(user: &UserHash, id: &str) -> String {
    format!("{}:app_settings_memories_request:{id}", keys::tag(user))
}

fn proposal_key(user: &UserHash, id: &str) -> String {
    format!("{}:app_settings_memories_proposal:{id}", keys::tag(user))
}

/// Request and proposal ids are chatd's UUIDs; anything else is not looked up.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

impl MemoryStore {
    pub fn new(backend: Arc<dyn CacheBackend>, keyring: Arc<Keyring>, ttl: Duration) -> Self {
        Self {
            backend,
            keyring,
            ttl,
        }
    }

    /// The cached entries of `app_key` (`app_id:category`) in the chat, if any open.
    pub async fn entries(
        &self,
        user: &UserHash,
        chat: &ChatId,
        app_key: &str,
    ) -> Result<Option<Vec<Value>>, CacheFault> {
        let Some(sealed) = self.backend.settings_get(user, chat, app_key).await? else {
            return Ok(None);
        };
        self.open(user, &entry_scope(chat, app_key), &sealed).await
    }

    /// Replaces the cached entries of `app_key` in the chat (an empty list removes nothing
    /// but is stored as "none", which is still an answer).
    pub async fn put_entries(
        &self,
        user: &UserHash,
        chat: &ChatId,
        app_key: &str,
        entries: &[Value],
    ) -> Result<(), CacheFault> {
        let sealed = self
            .seal(user, &entry_scope(chat, app_key), &entries)
            .await?;
        self.backend
            .settings_put(user, chat, app_key, sealed, self.ttl)
            .await?;
        Ok(())
    }

    /// Claims `app_key` for `request_id` unless a request for it is unanswered or the user
    /// declined it; `force` (the user named the category) claims it anyway.
    pub async fn claim_ask(
        &self,
        user: &UserHash,
        chat: &ChatId,
        app_key: &str,
        request_id: &str,
        force: bool,
    ) -> Result<Ask, CacheError> {
        let key = asked_key(user, chat);
        let mine = request_id.as_bytes().to_vec();
        if force {
            self.backend
                .field_put(&key, app_key, mine, PENDING_TTL)
                .await?;
            return Ok(Ask::Asked);
        }
        let held = self
            .backend
            .field_claim(&key, app_key, mine.clone(), PENDING_TTL, MAX_ASKED)
            .await?;
        Ok(if held == mine { Ask::Asked } else { Ask::Held })
    }

    /// The user said no to `app_key` in this chat: not asked again unless named.
    pub async fn decline(
        &self,
        user: &UserHash,
        chat: &ChatId,
        app_key: &str,
    ) -> Result<(), CacheError> {
        self.backend
            .field_put(
                &asked_key(user, chat),
                app_key,
                DECLINED.to_vec(),
                PENDING_TTL,
            )
            .await
    }

    /// `app_key` was answered with entries: asking is decided by the cache again.
    pub async fn answered(
        &self,
        user: &UserHash,
        chat: &ChatId,
        app_key: &str,
    ) -> Result<(), CacheError> {
        self.backend
            .field_delete(&asked_key(user, chat), app_key)
            .await
    }

    pub async fn save_request(
        &self,
        user: &UserHash,
        id: &str,
        request: &PendingRequest,
    ) -> Result<(), CacheFault> {
        self.put_pending(
            user,
            &request_key(user, id),
            &format!("request:{id}"),
            request,
        )
        .await
    }

    /// The pending request, if it is the user's and still waits.
    pub async fn request(
        &self,
        user: &UserHash,
        id: &str,
    ) -> Result<Option<PendingRequest>, CacheFault> {
        if !valid_id(id) {
            return Ok(None);
        }
        let Some(sealed) = self.backend.kv_get(&request_key(user, id)).await? else {
            return Ok(None);
        };
        self.open(user, &format!("request:{id}"), &sealed).await
    }

    /// The request was answered (a second answer finds nothing).
    pub async fn forget_request(&self, user: &UserHash, id: &str) -> Result<(), CacheError> {
        self.backend.kv_delete(&request_key(user, id)).await
    }

    pub async fn save_proposal(
        &self,
        user: &UserHash,
        id: &str,
        proposal: &PendingProposal,
    ) -> Result<(), CacheFault> {
        self.put_pending(
            user,
            &proposal_key(user, id),
            &format!("proposal:{id}"),
            proposal,
        )
        .await
    }

    /// Seals `value` under `scope` and keeps it at `key` while it waits for the user.
    async fn put_pending<T: Serialize>(
        &self,
        user: &UserHash,
        key: &str,
        scope: &str,
        value: &T,
    ) -> Result<(), CacheFault> {
        let sealed = self.seal(user, scope, value).await?;
        self.backend.kv_put(key, sealed, PENDING_TTL).await?;
        Ok(())
    }

    pub async fn take_proposal(
        &self,
        user: &UserHash,
        id: &str,
    ) -> Result<Option<PendingProposal>, CacheFault> {
        self.take(user, &proposal_key(user, id), &format!("proposal:{id}"))
            .await
    }

    async fn take<T: DeserializeOwned>(
        &self,
        user: &UserHash,
        key: &str,
        scope: &str,
    ) -> Result<Option<T>, CacheFault> {
        if !valid_id(key.rsplit(':').next().unwrap_or_default()) {
            return Ok(None);
        }
        let Some(sealed) = self.backend.kv_get(key).await? else {
            return Ok(None);
        };
        self.backend.kv_delete(key).await?;
        self.open(user, scope, &sealed).await
    }

    async fn seal<T: Serialize + ?Sized>(
        &self,
        user: &UserHash,
        scope: &str,
        value: &T,
    ) -> Result<Vec<u8>, CacheFault> {
        let plain = Zeroizing::new(
            serde_json::to_vec(value).map_err(|e| CacheError::Protocol(e.to_string()))?,
        );
        Ok(self
            .keyring
            .seal(user, scope, Purpose::SettingsMemory, &plain)
            .await?)
    }

    async fn open<T: DeserializeOwned>(
        &self,
        user: &UserHash,
        scope: &str,
        sealed: &[u8],
    ) -> Result<Option<T>, CacheFault> {
        match self
            .keyring
            .open(user, scope, Purpose::SettingsMemory, sealed)
            .await
        {
            Ok(plain) => {
                let plain = Zeroizing::new(plain);
                Ok(serde_json::from_slice(&plain).ok())
            }
            Err(OpenError::Failed) => Ok(None),
            Err(OpenError::Unavailable(e)) => Err(e.into()),
        }
    }
}

/// An entry's AEAD scope: its chat and key.
fn entry_scope(chat: &ChatId, app_key: &str) -> String {
    format!("{}:{app_key}", chat.as_str())
}

/// Applies an accepted proposal to a category's entries: `add` appends, `update` replaces
/// the entry with the same `id` (or appends when none has it), `delete` removes the
/// entries equal to it or with its `id`.
pub fn apply(entries: &mut Vec<Value>, action: ProposalAction, entry: Value) {
    let id = entry.get("id").cloned();
    let same = |e: &Value| id.is_some() && e.get("id") == id.as_ref();
    match action {
        ProposalAction::Add => entries.push(entry),
        ProposalAction::Update => match entries.iter_mut().find(|e| same(e)) {
            Some(slot) => *slot = entry,
            None => entries.push(entry),
        },
        ProposalAction::Delete => entries.retain(|e| *e != entry && !same(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proposals_apply_by_id() {
        let mut e = vec![json!({"id": "1", "to": "Rome"})];
        apply(
            &mut e,
            ProposalAction::Add,
            json!({"id": "2", "to": "Oslo"}),
        );
        apply(
            &mut e,
            ProposalAction::Update,
            json!({"id": "1", "to": "Paris"}),
        );
        assert_eq!(e[0]["to"], "Paris");
        apply(&mut e, ProposalAction::Delete, json!({"id": "2"}));
        assert_eq!(e, vec![json!({"id": "1", "to": "Paris"})]);
    }
}
