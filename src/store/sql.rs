//! The [`Store`](super::Store) implementation shared by both backends: the same SQL (`$N`
//! parameters work in SQLite and PostgreSQL; no backend-specific functions), expanded once
//! per pool type. Every statement filters on `owner`. This file holds the chats and
//! messages; `embeds` the embeds and their keys; `store_trait` the [`Store`](super::Store) impl;
//! `in_list` the bounded `IN (...)` lists.

pub(super) mod embeds;
mod in_list;
pub(super) mod store_trait;

pub use in_list::{MAX_IN, owned_in};

/// Columns of `chats` in the order [`chat_from_row`] reads them.
pub const CHAT_COLUMNS: &str = "chat_id, encrypted_title, encrypted_icon, encrypted_category, \
     encrypted_chat_key, encrypted_chat_summary, encrypted_chat_tags, \
     encrypted_follow_up_suggestions, encrypted_new_chat_suggestions, \
     encrypted_top_recommended_apps_for_chat, encrypted_quick_tip_slugs, \
     encrypted_share_cta_text, rejected_suggestion_hashes, messages_v, title_v, \
     last_edited_overall_timestamp";

pub fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

macro_rules! impl_store {
    ($store:ty, $db:ty, $name:literal) => {
        use chatd_protocol::{
            ChatDetails, ChatId, ChatVersions, EmbedId, EmbedKey, EncryptedMessage, MessageId,
            StoreEmbed,
        };
        use futures_util::future::BoxFuture;
        use sqlx::Row;

        use crate::auth::UserId;
        use crate::store::sql::{CHAT_COLUMNS, MAX_IN, json_list, owned_in, to_i64, to_u64};
        use crate::store::{
            ChatCursor, ChatPatch, DeletedChat, MessageAdded, Store, StoreError, hash_id,
        };

        fn chat_from_row(row: &<$db as sqlx::Database>::Row) -> Result<ChatDetails, StoreError> {
            let chat_id: String = row.try_get(0)?;
            Ok(ChatDetails {
                chat_id: ChatId::parse(chat_id).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                encrypted_title: row.try_get(1)?,
                encrypted_icon: row.try_get(2)?,
                encrypted_category: row.try_get(3)?,
                encrypted_chat_key: row.try_get(4)?,
                encrypted_chat_summary: row.try_get(5)?,
                encrypted_chat_tags: row.try_get(6)?,
                encrypted_follow_up_suggestions: row.try_get(7)?,
                encrypted_new_chat_suggestions: json_list(row.try_get(8)?),
                encrypted_top_recommended_apps_for_chat: row.try_get(9)?,
                encrypted_quick_tip_slugs: row.try_get(10)?,
                encrypted_share_cta_text: row.try_get(11)?,
                rejected_suggestion_hashes: json_list(row.try_get(12)?),
                versions: ChatVersions {
                    messages_v: to_u64(row.try_get(13)?),
                    title_v: to_u64(row.try_get(14)?),
                    last_edited_overall_timestamp: row.try_get(15)?,
                },
            })
        }

        fn versions_from_row(
            row: &<$db as sqlx::Database>::Row,
        ) -> Result<ChatVersions, StoreError> {
            Ok(ChatVersions {
                messages_v: to_u64(row.try_get(0)?),
                title_v: to_u64(row.try_get(1)?),
                last_edited_overall_timestamp: row.try_get(2)?,
            })
        }

        fn decode<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, StoreError> {
            serde_json::from_str(body).map_err(|e| StoreError::Corrupt(e.to_string()))
        }

        fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
            serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
        }

        /// Creates the chat for `owner` if no one has it; `Forbidden` if another owner does.
        async fn claim(
            conn: &mut <$db as sqlx::Database>::Connection,
            present: Option<&super::present::PresentChats>,
            owner: &UserId,
            chat: &ChatId,
        ) -> Result<(), StoreError> {
            // Noted before the row exists (see `present`).
            if let Some(present) = present {
                present.note(chat);
            }
            sqlx::query(
                "INSERT INTO chats (chat_id, owner) VALUES ($1, $2) ON CONFLICT (chat_id) DO NOTHING",
            )
            .bind(chat.as_str())
            .bind(owner.as_str())
            .execute(&mut *conn)
            .await?;
            let mine = sqlx::query("SELECT 1 FROM chats WHERE chat_id = $1 AND owner = $2")
                .bind(chat.as_str())
                .bind(owner.as_str())
                .fetch_optional(&mut *conn)
                .await?;
            if mine.is_none() {
                return Err(StoreError::Forbidden);
            }
            Ok(())
        }

        impl $store {
            async fn exists_foreign(&self, owner: &UserId, chat: &ChatId) -> Result<bool, StoreError> {
                let row = sqlx::query("SELECT 1 FROM chats WHERE chat_id = $1 AND owner <> $2")
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.is_some())
            }

            /// `NotFound` or `Forbidden` for a chat the owner does not have.
            async fn missing(&self, owner: &UserId, chat: &ChatId) -> StoreError {
                match self.exists_foreign(owner, chat).await {
                    Ok(true) => StoreError::Forbidden,
                    Ok(false) => StoreError::NotFound,
                    Err(e) => e,
                }
            }

            async fn get_chat(
                &self,
                owner: &UserId,
                chat: &ChatId,
            ) -> Result<Option<ChatDetails>, StoreError> {
                let sql = format!("SELECT {CHAT_COLUMNS} FROM chats WHERE chat_id = $1 AND owner = $2");
                let row = sqlx::query(&sql)
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(chat_from_row).transpose()
            }

            async fn do_update_chat(
                &self,
                owner: &UserId,
                chat: &ChatId,
                patch: &ChatPatch,
            ) -> Result<ChatDetails, StoreError> {
                let mut tx = self.pool.begin().await?;
                claim(&mut tx, self.present.as_ref(), owner, chat).await?;
                let new_suggestions = match &patch.encrypted_new_chat_suggestions {
                    Some(list) => Some(encode(list)?),
                    None => None,
                };
                let title_v = to_i64(patch.title_v.unwrap_or(0));
                let done = sqlx::query(
                    "UPDATE chats SET \
                       encrypted_title = COALESCE($3, encrypted_title), \
                       encrypted_icon = COALESCE($4, encrypted_icon), \
                       encrypted_category = COALESCE($5, encrypted_category), \
                       encrypted_chat_key = COALESCE($6, encrypted_chat_key), \
                       encrypted_chat_summary = COALESCE($7, encrypted_chat_summary), \
                       encrypted_chat_tags = COALESCE($8, encrypted_chat_tags), \
                       encrypted_follow_up_suggestions = COALESCE($9, encrypted_follow_up_suggestions), \
                       encrypted_new_chat_suggestions = COALESCE($10, encrypted_new_chat_suggestions), \
                       encrypted_top_recommended_apps_for_chat = COALESCE($11, encrypted_top_recommended_apps_for_chat), \
                       encrypted_quick_tip_slugs = COALESCE($12, encrypted_quick_tip_slugs), \
                       encrypted_share_cta_text = COALESCE($13, encrypted_share_cta_text), \
                       title_v = CASE WHEN $3 IS NULL OR $3 = encrypted_title THEN title_v \
                                      WHEN $14 > title_v THEN $14 ELSE title_v + 1 END, \
                       last_edited_overall_timestamp = CASE WHEN $15 > last_edited_overall_timestamp \
                                      THEN $15 ELSE last_edited_overall_timestamp END \
                     WHERE chat_id = $1 AND owner = $2 \
                       AND ($16 OR $6 IS NULL OR encrypted_chat_key IS NULL OR encrypted_chat_key = $6)",
                )
                .bind(chat.as_str())
                .bind(owner.as_str())
                .bind(patch.encrypted_title.as_deref())
                .bind(patch.encrypted_icon.as_deref())
                .bind(patch.encrypted_category.as_deref())
                .bind(patch.encrypted_chat_key.as_deref())
                .bind(patch.encrypted_chat_summary.as_deref())
                .bind(patch.encrypted_chat_tags.as_deref())
                .bind(patch.encrypted_follow_up_suggestions.as_deref())
                .bind(new_suggestions.as_deref())
                .bind(patch.encrypted_top_recommended_apps_for_chat.as_deref())
                .bind(patch.encrypted_quick_tip_slugs.as_deref())
                .bind(patch.encrypted_share_cta_text.as_deref())
                .bind(title_v)
                .bind(patch.last_edited.unwrap_or(0))
                .bind(patch.allow_key_rotation)
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() == 0 {
                    // The chat is the owner's (claimed above), so only the key check failed.
                    return Err(StoreError::ChatKeyMismatch);
                }
                let sql = format!("SELECT {CHAT_COLUMNS} FROM chats WHERE chat_id = $1 AND owner = $2");
                let row = sqlx::query(&sql)
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                let details = chat_from_row(&row)?;
                tx.commit().await?;
                Ok(details)
            }

            async fn do_add_message(
                &self,
                owner: &UserId,
                chat: &ChatId,
                message: &EncryptedMessage,
            ) -> Result<MessageAdded, StoreError> {
                let body = encode(message)?;
                let role = match message.role {
                    chatd_protocol::Role::User => "user",
                    chatd_protocol::Role::Assistant => "assistant",
                    chatd_protocol::Role::System => "system",
                };
                let mut tx = self.pool.begin().await?;
                claim(&mut tx, self.present.as_ref(), owner, chat).await?;
                let inserted = sqlx::query(
                    "INSERT INTO messages (message_id, chat_id, owner, role, created_at, body) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (owner, chat_id, message_id) DO NOTHING",
                )
                .bind(message.message_id.as_str())
                .bind(chat.as_str())
                .bind(owner.as_str())
                .bind(role)
                .bind(message.created_at)
                .bind(&body)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let versions_sql = "SELECT messages_v, title_v, last_edited_overall_timestamp \
                                    FROM chats WHERE chat_id = $1 AND owner = $2";
                if inserted == 0 {
                    // Stored before, in this chat of this owner (ids are theirs alone).
                    let row = sqlx::query(versions_sql)
                        .bind(chat.as_str())
                        .bind(owner.as_str())
                        .fetch_one(&mut *tx)
                        .await?;
                    let versions = versions_from_row(&row)?;
                    tx.commit().await?;
                    return Ok(MessageAdded { is_new: false, versions });
                }
                sqlx::query(
                    "UPDATE chats SET messages_v = messages_v + 1, \
                       last_edited_overall_timestamp = CASE WHEN $3 > last_edited_overall_timestamp \
                           THEN $3 ELSE last_edited_overall_timestamp END \
                     WHERE chat_id = $1 AND owner = $2",
                )
                .bind(chat.as_str())
                .bind(owner.as_str())
                .bind(message.created_at)
                .execute(&mut *tx)
                .await?;
                let row = sqlx::query(versions_sql)
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                let versions = versions_from_row(&row)?;
                tx.commit().await?;
                Ok(MessageAdded { is_new: true, versions })
            }

            async fn do_chats_page(
                &self,
                owner: &UserId,
                after: Option<&ChatCursor>,
                limit: u32,
            ) -> Result<Vec<ChatDetails>, StoreError> {
                let rows = match after {
                    None => {
                        let sql = format!(
                            "SELECT {CHAT_COLUMNS} FROM chats WHERE owner = $1 \
                             ORDER BY last_edited_overall_timestamp DESC, chat_id ASC LIMIT $2"
                        );
                        sqlx::query(&sql)
                            .bind(owner.as_str())
                            .bind(i64::from(limit))
                            .fetch_all(&self.pool)
                            .await?
                    }
                    Some(c) => {
                        let sql = format!(
                            "SELECT {CHAT_COLUMNS} FROM chats WHERE owner = $1 \
                             AND (last_edited_overall_timestamp < $2 \
                                  OR (last_edited_overall_timestamp = $2 AND chat_id > $3)) \
                             ORDER BY last_edited_overall_timestamp DESC, chat_id ASC LIMIT $4"
                        );
                        sqlx::query(&sql)
                            .bind(owner.as_str())
                            .bind(c.last_edited)
                            .bind(c.chat_id.as_str())
                            .bind(i64::from(limit))
                            .fetch_all(&self.pool)
                            .await?
                    }
                };
                rows.iter().map(chat_from_row).collect()
            }

            async fn do_messages(
                &self,
                owner: &UserId,
                chats: &[ChatId],
            ) -> Result<Vec<(ChatId, EncryptedMessage)>, StoreError> {
                let mut out = Vec::new();
                for part in chats.chunks(MAX_IN) {
                    let mut q = owned_in::<$db, _>(
                        "SELECT chat_id, body FROM messages WHERE owner = ",
                        owner.as_str(),
                        "chat_id",
                        part.iter().map(|c| c.as_str()),
                        " ORDER BY chat_id, created_at, seq",
                    );
                    let rows = q.build().fetch_all(&self.pool).await?;
                    for row in rows {
                        let chat: String = row.try_get(0)?;
                        let body: String = row.try_get(1)?;
                        let chat =
                            ChatId::parse(chat).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                        out.push((chat, decode(&body)?));
                    }
                }
                Ok(out)
            }

            async fn do_delete_chat(
                &self,
                owner: &UserId,
                chat: &ChatId,
            ) -> Result<DeletedChat, StoreError> {
                let mut tx = self.pool.begin().await?;
                let gone = sqlx::query("DELETE FROM chats WHERE chat_id = $1 AND owner = $2")
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if gone == 0 {
                    drop(tx);
                    return Err(self.missing(owner, chat).await);
                }
                sqlx::query(
                    "UPDATE user_state SET last_opened_chat = NULL \
                     WHERE owner = $1 AND last_opened_chat = $2",
                )
                .bind(owner.as_str())
                .bind(chat.as_str())
                .execute(&mut *tx)
                .await?;
                let messages = sqlx::query("DELETE FROM messages WHERE chat_id = $1 AND owner = $2")
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                let hashed = hash_id(chat.as_str());
                let rows = sqlx::query(
                    "SELECT embed_id FROM embeds WHERE owner = $1 \
                     AND (hashed_chat_id = $2 OR hashed_chat_id = $3)",
                )
                .bind(owner.as_str())
                .bind(&hashed)
                .bind(chat.as_str())
                .fetch_all(&mut *tx)
                .await?;
                let mut embeds = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: String = row.try_get(0)?;
                    embeds.push(EmbedId::parse(id).map_err(|e| StoreError::Corrupt(e.to_string()))?);
                }
                sqlx::query(
                    "DELETE FROM embeds WHERE owner = $1 AND (hashed_chat_id = $2 OR hashed_chat_id = $3)",
                )
                .bind(owner.as_str())
                .bind(&hashed)
                .bind(chat.as_str())
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "DELETE FROM embed_keys WHERE owner = $1 AND (hashed_chat_id = $2 OR hashed_chat_id = $3)",
                )
                .bind(owner.as_str())
                .bind(&hashed)
                .bind(chat.as_str())
                .execute(&mut *tx)
                .await?;
                for part in embeds.chunks(MAX_IN) {
                    let mut q = owned_in::<$db, _>(
                        "DELETE FROM embed_keys WHERE owner = ",
                        owner.as_str(),
                        "hashed_embed_id",
                        part.iter().map(|e| hash_id(e.as_str())),
                        "",
                    );
                    q.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(DeletedChat { messages, embeds })
            }

            async fn do_delete_message(
                &self,
                owner: &UserId,
                chat: &ChatId,
                message: &MessageId,
                embeds: &[EmbedId],
            ) -> Result<ChatVersions, StoreError> {
                let mut tx = self.pool.begin().await?;
                let bumped = sqlx::query(
                    "UPDATE chats SET messages_v = messages_v + 1 WHERE chat_id = $1 AND owner = $2",
                )
                .bind(chat.as_str())
                .bind(owner.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if bumped == 0 {
                    drop(tx);
                    return Err(self.missing(owner, chat).await);
                }
                let gone = sqlx::query(
                    "DELETE FROM messages WHERE message_id = $1 AND chat_id = $2 AND owner = $3",
                )
                .bind(message.as_str())
                .bind(chat.as_str())
                .bind(owner.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if gone == 0 {
                    // Ids are their owner's: another user's message of that id is not here.
                    drop(tx);
                    return Err(StoreError::NotFound);
                }
                for part in embeds.chunks(MAX_IN) {
                    let mut q = owned_in::<$db, _>(
                        "DELETE FROM embeds WHERE owner = ",
                        owner.as_str(),
                        "embed_id",
                        part.iter().map(|e| e.as_str()),
                        "",
                    );
                    q.build().execute(&mut *tx).await?;
                }
                let row = sqlx::query(
                    "SELECT messages_v, title_v, last_edited_overall_timestamp \
                     FROM chats WHERE chat_id = $1 AND owner = $2",
                )
                .bind(chat.as_str())
                .bind(owner.as_str())
                .fetch_one(&mut *tx)
                .await?;
                let versions = versions_from_row(&row)?;
                tx.commit().await?;
                Ok(versions)
            }
        }

        crate::store::sql::embeds::impl_embeds!($store, $db);

        crate::store::sql::store_trait::impl_store_trait!($store, $name);
    };
}

pub(crate) use impl_store;
