//! The `messages` table: each message the client's encrypted body under its owner and
//! chat (ids are unique per owner and chat), with the chat's `messages_v` raised by each
//! change. Every statement filters on the owner.

use chatd_protocol::{ChatId, ChatVersions, EmbedId, EncryptedMessage, MessageId, Role};

use super::chats::{VERSIONS_SQL, claim, versions_from_row};
use super::db::{MAX_IN, Query, Tx, corrupt, decode, encode, query};
use super::sql::SqlStore;
use super::{MessageAdded, StoreError};
use crate::auth::UserId;

/// The owner's chat's versions inside `tx`.
async fn versions(tx: &mut Tx, owner: &UserId, chat: &ChatId) -> Result<ChatVersions, StoreError> {
    let row = query(VERSIONS_SQL)
        .bind(chat.as_str())
        .bind(owner.as_str())
        .fetch_one(tx)
        .await?;
    versions_from_row(&row, 0)
}

impl SqlStore {
    pub(super) async fn do_add_message(
        &self,
        owner: &UserId,
        chat: &ChatId,
        message: &EncryptedMessage,
    ) -> Result<MessageAdded, StoreError> {
        let body = encode(message)?;
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        };
        let mut tx = self.pool.begin().await?;
        claim(&mut tx, self.present.as_ref(), owner, chat).await?;
        let inserted = query(
            "INSERT INTO messages (message_id, chat_id, owner, role, created_at, body) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (owner, chat_id, message_id) DO NOTHING",
        )
        .bind(message.message_id.as_str())
        .bind(chat.as_str())
        .bind(owner.as_str())
        .bind(role)
        .bind(message.created_at)
        .bind(&body)
        .execute(&mut tx)
        .await?;
        if inserted > 0 {
            query(
                "UPDATE chats SET messages_v = messages_v + 1, \
                   last_edited_overall_timestamp = CASE WHEN $3 > last_edited_overall_timestamp \
                       THEN $3 ELSE last_edited_overall_timestamp END \
                 WHERE chat_id = $1 AND owner = $2",
            )
            .bind(chat.as_str())
            .bind(owner.as_str())
            .bind(message.created_at)
            .execute(&mut tx)
            .await?;
        }
        // Not inserted: stored before, in this chat of this owner (ids are theirs alone).
        let versions = versions(&mut tx, owner, chat).await?;
        tx.commit().await?;
        Ok(MessageAdded {
            is_new: inserted > 0,
            versions,
        })
    }

    pub(super) async fn do_replace_message(
        &self,
        owner: &UserId,
        chat: &ChatId,
        message: &EncryptedMessage,
    ) -> Result<ChatVersions, StoreError> {
        let body = encode(message)?;
        let mut tx = self.pool.begin().await?;
        let changed = query(
            "UPDATE messages SET body = $1 WHERE message_id = $2 AND owner = $3 \
             AND chat_id = $4 AND role <> 'user'",
        )
        .bind(&body)
        .bind(message.message_id.as_str())
        .bind(owner.as_str())
        .bind(chat.as_str())
        .execute(&mut tx)
        .await?;
        if changed == 0 {
            return Err(StoreError::NotFound);
        }
        let row = query(
            "UPDATE chats SET messages_v = messages_v + 1 WHERE chat_id = $1 AND owner = $2 \
             RETURNING messages_v, title_v, last_edited_overall_timestamp",
        )
        .bind(chat.as_str())
        .bind(owner.as_str())
        .fetch_one(&mut tx)
        .await?;
        let versions = versions_from_row(&row, 0)?;
        tx.commit().await?;
        Ok(versions)
    }

    pub(super) async fn do_messages(
        &self,
        owner: &UserId,
        chats: &[ChatId],
    ) -> Result<Vec<(ChatId, EncryptedMessage)>, StoreError> {
        let mut out = Vec::new();
        for part in chats.chunks(MAX_IN) {
            let rows = Query::owned_in(
                "SELECT chat_id, body FROM messages WHERE owner = ",
                owner.as_str(),
                "chat_id",
                part.iter().map(|c| c.as_str()),
                " ORDER BY chat_id, created_at, seq",
            )
            .fetch_all(&self.pool)
            .await?;
            for row in rows {
                let chat = ChatId::parse(row.get::<String>(0)?).map_err(corrupt)?;
                out.push((chat, decode(&row.get::<String>(1)?)?));
            }
        }
        Ok(out)
    }

    pub(super) async fn do_delete_message(
        &self,
        owner: &UserId,
        chat: &ChatId,
        message: &MessageId,
        embeds: &[EmbedId],
    ) -> Result<ChatVersions, StoreError> {
        let mut tx = self.pool.begin().await?;
        let bumped =
            query("UPDATE chats SET messages_v = messages_v + 1 WHERE chat_id = $1 AND owner = $2")
                .bind(chat.as_str())
                .bind(owner.as_str())
                .execute(&mut tx)
                .await?;
        if bumped == 0 {
            drop(tx);
            return Err(self.missing(owner, chat).await);
        }
        let gone =
            query("DELETE FROM messages WHERE message_id = $1 AND chat_id = $2 AND owner = $3")
                .bind(message.as_str())
                .bind(chat.as_str())
                .bind(owner.as_str())
                .execute(&mut tx)
                .await?;
        if gone == 0 {
            // Ids are their owner's: another user's message of that id is not here.
            return Err(StoreError::NotFound);
        }
        for part in embeds.chunks(MAX_IN) {
            Query::owned_in(
                "DELETE FROM embeds WHERE owner = ",
                owner.as_str(),
                "embed_id",
                part.iter().map(|e| e.as_str()),
                "",
            )
            .execute(&mut tx)
            .await?;
        }
        let versions = versions(&mut tx, owner, chat).await?;
        tx.commit().await?;
        Ok(versions)
    }
}
