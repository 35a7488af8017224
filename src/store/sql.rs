//! [`SqlStore`]: the [`Store`] of both SQL backends. The same statements run on SQLite and
//! PostgreSQL (`db` binds them to one or the other); each table's statements live in its
//! own file (`chats`, `messages`, `embeds`, `user_state`, `values`) as methods of this
//! struct, and this file only answers the trait with them. Every statement filters on
//! the owner.

use chatd_protocol::{
    ChatDetails, ChatId, ChatVersions, EmbedId, EmbedKey, EncryptedMessage, MessageId, StoreEmbed,
};
use futures_util::future::BoxFuture;

use super::db::{Pool, query};
use super::present::PresentChats;
use super::{ChatCursor, ChatPatch, DeletedChat, MessageAdded, PING_TIMEOUT, Store, StoreError};
use crate::auth::UserId;

pub struct SqlStore {
    pub(super) pool: Pool,
    /// Which chats the store may hold: SQLite only, where this process is the only writer;
    /// None on PostgreSQL, which several nodes write (see `present`).
    pub(super) present: Option<PresentChats>,
}

impl SqlStore {
    pub(super) fn new(pool: Pool, present: Option<PresentChats>) -> Self {
        Self { pool, present }
    }

    async fn do_ping(&self) -> Result<(), StoreError> {
        let probe = query("SELECT 1");
        match tokio::time::timeout(PING_TIMEOUT, probe.execute(&self.pool)).await {
            Ok(done) => done.map(|_| ()),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {PING_TIMEOUT:?}"
            ))),
        }
    }
}

impl Store for SqlStore {
    fn backend_name(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.do_ping())
    }

    fn authorize<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.do_authorize(owner, chat))
    }

    fn chat_versions<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<ChatVersions>, StoreError>> {
        Box::pin(self.do_chat_versions(owner, chat))
    }

    fn update_chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        patch: &'a ChatPatch,
    ) -> BoxFuture<'a, Result<ChatDetails, StoreError>> {
        Box::pin(self.do_update_chat(owner, chat, patch))
    }

    fn add_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a EncryptedMessage,
    ) -> BoxFuture<'a, Result<MessageAdded, StoreError>> {
        Box::pin(self.do_add_message(owner, chat, message))
    }

    fn replace_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a EncryptedMessage,
    ) -> BoxFuture<'a, Result<ChatVersions, StoreError>> {
        Box::pin(self.do_replace_message(owner, chat, message))
    }

    fn chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<ChatDetails>, StoreError>> {
        Box::pin(self.get_chat(owner, chat))
    }

    fn chats_page<'a>(
        &'a self,
        owner: &'a UserId,
        after: Option<&'a ChatCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatDetails>, StoreError>> {
        Box::pin(self.do_chats_page(owner, after, limit))
    }

    fn chats_at<'a>(
        &'a self,
        owner: &'a UserId,
        offset: u32,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatDetails>, StoreError>> {
        Box::pin(self.do_chats_at(owner, offset, limit))
    }

    fn count_chats<'a>(&'a self, owner: &'a UserId) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.do_count_chats(owner))
    }

    fn set_last_opened<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.do_set_last_opened(owner, chat))
    }

    fn last_opened<'a>(
        &'a self,
        owner: &'a UserId,
    ) -> BoxFuture<'a, Result<Option<ChatDetails>, StoreError>> {
        Box::pin(self.do_last_opened(owner))
    }

    fn messages<'a>(
        &'a self,
        owner: &'a UserId,
        chats: &'a [ChatId],
    ) -> BoxFuture<'a, Result<Vec<(ChatId, EncryptedMessage)>, StoreError>> {
        Box::pin(self.do_messages(owner, chats))
    }

    fn delete_chat<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<DeletedChat, StoreError>> {
        Box::pin(self.do_delete_chat(owner, chat))
    }

    fn delete_message<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        message: &'a MessageId,
        embeds: &'a [EmbedId],
    ) -> BoxFuture<'a, Result<ChatVersions, StoreError>> {
        Box::pin(self.do_delete_message(owner, chat, message, embeds))
    }

    fn put_embed<'a>(
        &'a self,
        owner: &'a UserId,
        embed: &'a StoreEmbed,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.do_put_embed(owner, embed))
    }

    fn embed<'a>(
        &'a self,
        owner: &'a UserId,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<StoreEmbed>, StoreError>> {
        Box::pin(self.do_embed(owner, embed))
    }

    fn embeds_for_chats<'a>(
        &'a self,
        owner: &'a UserId,
        hashed_chat_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<StoreEmbed>, StoreError>> {
        Box::pin(self.do_embeds_for_chats(owner, hashed_chat_ids))
    }

    fn put_embed_keys<'a>(
        &'a self,
        owner: &'a UserId,
        keys: &'a [EmbedKey],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.do_put_embed_keys(owner, keys))
    }

    fn embed_keys<'a>(
        &'a self,
        owner: &'a UserId,
        hashed_embed_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<EmbedKey>, StoreError>> {
        Box::pin(self.do_embed_keys(owner, hashed_embed_ids))
    }

    fn reject_suggestion<'a>(
        &'a self,
        owner: &'a UserId,
        chat: &'a ChatId,
        hash: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.do_reject_suggestion(owner, chat, hash))
    }
}
