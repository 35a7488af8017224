//! The permanent, zero-knowledge store: chats, messages, embeds and embed keys, each held
//! as the client's ciphertext (opaque strings chatd never reads) plus the few clear fields
//! sync needs (ids, owner, versions, timestamps). One interface ([`Store`]), two backends
//! with the same contract: SQLite (embedded default, WAL) and PostgreSQL; both run their
//! versioned migrations at start-up.
//!
//! Ownership lives in the queries: every call takes the owner and reads or changes only
//! rows with that owner. A chat id belongs to the first owner who stores it (another owner
//! gets [`StoreError::Forbidden`] and nothing is changed); message ids are scoped to their
//! owner and chat and embed ids to their owner, so no user can claim another's id first
//! and block the owner's own write.

mod chats;
mod db;
mod embeds;
mod messages;
pub mod owners;
mod postgres;
mod present;
mod sql;
mod sqlite;
mod user_state;
pub mod values;

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{
    ChatDetails, ChatId, ChatVersions, EmbedId, EmbedKey, EncryptedMessage, MessageId, StoreEmbed,
};
use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};

use crate::auth::UserId;

pub use sql::SqlStore;

/// How long a caller waits for a pooled connection before the store counts as unavailable.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `/readyz` waits for the store.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The id exists under another owner.
    #[error("the object belongs to another user")]
    Forbidden,
    #[error("no such object")]
    NotFound,
    /// The chat has a different `encrypted_chat_key` and rotation was not allowed.
    #[error("the chat key differs from the stored one")]
    ChatKeyMismatch,
    /// An embed update with a lower version than stored.
    #[error("embed version {sent} is older than the stored version {stored}")]
    StaleVersion { sent: u64, stored: u64 },
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store data unreadable: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Unavailable(format!("migration failed: {e}"))
    }
}

/// Changes to a chat's metadata; `None` keeps the stored value.
#[derive(Debug, Clone, Default)]
pub struct ChatPatch {
    pub encrypted_title: Option<String>,
    pub encrypted_icon: Option<String>,
    pub encrypted_category: Option<String>,
    pub encrypted_chat_key: Option<String>,
    pub encrypted_chat_summary: Option<String>,
    pub encrypted_chat_tags: Option<String>,
    pub encrypted_follow_up_suggestions: Option<String>,
    pub encrypted_new_chat_suggestions: Option<Vec<String>>,
    pub encrypted_top_recommended_apps_for_chat: Option<String>,
    pub encrypted_quick_tip_slugs: Option<String>,
    pub encrypted_share_cta_text: Option<String>,
    /// Replace a different stored chat key instead of refusing.
    pub allow_key_rotation: bool,
    /// The client's title version; a new title sets `title_v` to at least this and at
    /// least one more than stored.
    pub title_v: Option<u64>,
    /// Raises `last_edited_overall_timestamp` to this if later.
    pub last_edited: Option<i64>,
}

impl ChatPatch {
    pub fn is_empty(&self) -> bool {
        self.encrypted_title.is_none()
            && self.encrypted_icon.is_none()
            && self.encrypted_category.is_none()
            && self.encrypted_chat_key.is_none()
            && self.encrypted_chat_summary.is_none()
            && self.encrypted_chat_tags.is_none()
            && self.encrypted_follow_up_suggestions.is_none()
            && self.encrypted_new_chat_suggestions.is_none()
            && self.encrypted_top_recommended_apps_for_chat.is_none()
            && self.encrypted_quick_tip_slugs.is_none()
            && self.encrypted_share_cta_text.is_none()
    }
}

/// Result of adding a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageAdded {
    /// False when the message id was already stored in this chat: nothing was written.
    pub is_new: bool,
    pub versions: ChatVersions,
}

/// Where a chat listing continues: after this chat in (last edited desc, chat id) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatCursor {
    pub last_edited: i64,
    pub chat_id: ChatId,
}

impl ChatCursor {
    pub fn after(chat: &ChatDetails) -> Self {
        Self {
            last_edited: chat.versions.last_edited_overall_timestamp,
            chat_id: chat.chat_id.clone(),
        }
    }
}

/// What deleting a chat removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletedChat {
    pub messages: u64,
    pub embeds: Vec<EmbedId>,
}

/// The permanent store. Every method takes the owner and touches only the owner's rows.
pub trait Store: values::SealedValues + Send + Sync {
    /// `sqlite` or `postgres`.
    fn backend_name(&self) -> &'static str;

    /// Reachability for `/readyz`.
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Checks that `owner` may write `chat`: Ok if it is theirs or does not exist yet.
    fn authorize<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The versions of `owner`'s chat (`None`: no one stored it yet); `Forbidden` when
    /// another owner has it. One read: the record of who owns a chat and how many
    /// messages it has.
    fn chat_versions<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<ChatVersions>, StoreError>>;

    /// Applies a metadata patch, creating the chat for `owner` if it does not exist.
    fn update_chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        patch: &'a ChatPatch,
    ) -> BoxFuture<'a, Result<ChatDetails, StoreError>>;

    /// Stores a message (creating the chat if needed); a message id already stored in this
    /// chat is acknowledged without writing (`is_new: false`). Each new message raises
    /// `messages_v` by one.
    fn add_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a EncryptedMessage,
    ) -> BoxFuture<'a, Result<MessageAdded, StoreError>>;

    /// Replaces the body of a stored assistant or system message (a corrected answer);
    /// raises `messages_v`. `NotFound` when the owner has no such message in the chat.
    fn replace_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a EncryptedMessage,
    ) -> BoxFuture<'a, Result<ChatVersions, StoreError>>;

    /// One chat's metadata (`None`: not the owner's).
    fn chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<ChatDetails>, StoreError>>;

    /// The owner's chats, most recently edited first, `limit` after `after`.
    fn chats_page<'a>(
        &'a self,
        owner: &'a UserId,
        after: Option<&'a ChatCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatDetails>, StoreError>>;

    /// The owner's chats, most recently edited first, `limit` from position `offset`.
    fn chats_at<'a>(
        &'a self,
        owner: &'a UserId,
        offset: u32,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatDetails>, StoreError>>;

    fn count_chats<'a>(&'a self, owner: &'a UserId) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// Remembers the chat the owner opened last (`set_active_chat`).
    fn set_last_opened<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The chat the owner opened last, if it is stored and theirs.
    fn last_opened<'a>(
        &'a self,
        owner: &'a UserId,
    ) -> BoxFuture<'a, Result<Option<ChatDetails>, StoreError>>;

    /// The messages of the given chats, each chat's oldest first.
    fn messages<'a>(
        &'a self,
        owner: &'a UserId,
        chats: &'a [ChatId],
    ) -> BoxFuture<'a, Result<Vec<(ChatId, EncryptedMessage)>, StoreError>>;

    /// Deletes a chat with its messages, its embeds (by hashed chat id) and their keys.
    fn delete_chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<DeletedChat, StoreError>>;

    /// Deletes one message of a chat (and the listed embeds); raises `messages_v`.
    /// `NotFound` when the owner has no such message in the chat.
    fn delete_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a MessageId,
        embeds: &'a [EmbedId],
    ) -> BoxFuture<'a, Result<ChatVersions, StoreError>>;

    /// Creates or updates an embed; a lower version than stored is `StaleVersion`.
    fn put_embed<'a>(
        &'a self,
        owner: &'a UserId,
        embed: &'a StoreEmbed,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    fn embed<'a>(
        &'a self,
        owner: &'a UserId,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<StoreEmbed>, StoreError>>;

    /// The owner's embeds stored under any of these hashed chat ids.
    fn embeds_for_chats<'a>(
        &'a self,
        owner: &'a UserId,
        hashed_chat_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<StoreEmbed>, StoreError>>;

    /// Stores (or replaces) wrapped embed keys; returns how many were written.
    fn put_embed_keys<'a>(
        &'a self,
        owner: &'a UserId,
        keys: &'a [EmbedKey],
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    fn embed_keys<'a>(
        &'a self,
        owner: &'a UserId,
        hashed_embed_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<EmbedKey>, StoreError>>;

    /// Adds a rejected settings/memory suggestion's hash to the owner's chat (claiming a
    /// chat no one stored yet; `Forbidden` when another owner has it). `false` when the hash
    /// was already there. The chat keeps the newest [`MAX_REJECTED_HASHES`].
    fn reject_suggestion<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        hash: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// Rejected suggestion hashes kept per chat.
pub const MAX_REJECTED_HASHES: usize = 500;

/// SHA-256 hex of an id, as the reference client hashes chat, message and embed ids.
pub fn hash_id(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`) and migrates it.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::open(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::open(url).await?))
    } else {
        Err(StoreError::Unavailable(
            "store.url must start with sqlite:// or postgres://".into(),
        ))
    }
}
