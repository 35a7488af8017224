//! The [`Store`](crate::store::Store) trait over the shared SQL store's methods
//! ([`impl_store`](super::impl_store)), with the statements small enough to live here.
//! Expanded inside `impl_store!` (its imports and helpers are in scope there).

macro_rules! impl_store_trait {
    ($store:ty, $name:literal) => {
        impl Store for $store {
            fn backend_name(&self) -> &'static str {
                $name
            }

            fn reject_suggestion<'a>(
                &'a self,
                owner: &'a UserId,
                chat: &'a ChatId,
                hash: &'a str,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let mut tx = self.pool.begin().await?;
                    claim(&mut tx, self.present.as_ref(), owner, chat).await?;
                    // Locks the row until commit (PostgreSQL; SQLite's writer already holds
                    // the database), so two rejections in one chat never lose one another.
                    sqlx::query("UPDATE chats SET owner = owner WHERE chat_id = $1 AND owner = $2")
                        .bind(chat.as_str())
                        .bind(owner.as_str())
                        .execute(&mut *tx)
                        .await?;
                    let row = sqlx::query(
                        "SELECT rejected_suggestion_hashes FROM chats WHERE chat_id = $1 AND owner = $2",
                    )
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                    let mut hashes = json_list(row.try_get(0)?);
                    if hashes.iter().any(|h| h == hash) {
                        return Ok(false);
                    }
                    hashes.push(hash.to_string());
                    let excess = hashes.len().saturating_sub(crate::store::MAX_REJECTED_HASHES);
                    hashes.drain(..excess);
                    sqlx::query(
                        "UPDATE chats SET rejected_suggestion_hashes = $3 WHERE chat_id = $1 AND owner = $2",
                    )
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .bind(encode(&hashes)?)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(true)
                })
            }

            fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
                Box::pin(async move {
                    let probe = sqlx::query("SELECT 1").execute(&self.pool);
                    match tokio::time::timeout(crate::store::PING_TIMEOUT, probe).await {
                        Ok(done) => {
                            done?;
                            Ok(())
                        }
                        Err(_) => Err(StoreError::Unavailable(format!(
                            "no answer within {:?}",
                            crate::store::PING_TIMEOUT
                        ))),
                    }
                })
            }

            fn authorize<'a>(
                &'a self,
                owner: &'a UserId,
                chat: &'a ChatId,
            ) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(async move {
                    if self.exists_foreign(owner, chat).await? {
                        return Err(StoreError::Forbidden);
                    }
                    Ok(())
                })
            }

            fn chat_versions<'a>(
                &'a self,
                owner: &'a UserId,
                chat: &'a ChatId,
            ) -> BoxFuture<'a, Result<Option<ChatVersions>, StoreError>> {
                Box::pin(async move {
                    if self.present.as_ref().is_some_and(|p| !p.may_hold(chat)) {
                        return Ok(None);
                    }
                    let row = sqlx::query(
                        "SELECT owner, messages_v, title_v, last_edited_overall_timestamp \
                         FROM chats WHERE chat_id = $1",
                    )
                    .bind(chat.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                    let Some(row) = row else {
                        return Ok(None);
                    };
                    let stored_owner: String = row.try_get(0)?;
                    if stored_owner != owner.as_str() {
                        return Err(StoreError::Forbidden);
                    }
                    Ok(Some(ChatVersions {
                        messages_v: to_u64(row.try_get(1)?),
                        title_v: to_u64(row.try_get(2)?),
                        last_edited_overall_timestamp: row.try_get(3)?,
                    }))
                })
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

            fn replace_message<'a>(
                &'a self,
                owner: &'a UserId,
                chat: &'a ChatId,
                message: &'a EncryptedMessage,
            ) -> BoxFuture<'a, Result<ChatVersions, StoreError>> {
                Box::pin(async move {
                    let body = encode(message)?;
                    let mut tx = self.pool.begin().await?;
                    let changed = sqlx::query(
                        "UPDATE messages SET body = $1 WHERE message_id = $2 AND owner = $3 \
                         AND chat_id = $4 AND role <> 'user'",
                    )
                    .bind(&body)
                    .bind(message.message_id.as_str())
                    .bind(owner.as_str())
                    .bind(chat.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if changed == 0 {
                        return Err(StoreError::NotFound);
                    }
                    let row = sqlx::query(
                        "UPDATE chats SET messages_v = messages_v + 1 WHERE chat_id = $1 AND owner = $2 \
                         RETURNING messages_v, title_v, last_edited_overall_timestamp",
                    )
                    .bind(chat.as_str())
                    .bind(owner.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                    let versions = versions_from_row(&row)?;
                    tx.commit().await?;
                    Ok(versions)
                })
            }

            fn chats_at<'a>(
                &'a self,
                owner: &'a UserId,
                offset: u32,
                limit: u32,
            ) -> BoxFuture<'a, Result<Vec<ChatDetails>, StoreError>> {
                Box::pin(async move {
                    let sql = format!(
                        "SELECT {CHAT_COLUMNS} FROM chats WHERE owner = $1 \
                         ORDER BY last_edited_overall_timestamp DESC, chat_id ASC LIMIT $2 OFFSET $3"
                    );
                    let rows = sqlx::query(&sql)
                        .bind(owner.as_str())
                        .bind(i64::from(limit))
                        .bind(i64::from(offset))
                        .fetch_all(&self.pool)
                        .await?;
                    rows.iter().map(chat_from_row).collect()
                })
            }

            fn set_last_opened<'a>(
                &'a self,
                owner: &'a UserId,
                chat: &'a ChatId,
            ) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(async move {
                    sqlx::query(
                        "INSERT INTO user_state (owner, last_opened_chat) VALUES ($1, $2) \
                         ON CONFLICT (owner) DO UPDATE SET last_opened_chat = excluded.last_opened_chat",
                    )
                    .bind(owner.as_str())
                    .bind(chat.as_str())
                    .execute(&self.pool)
                    .await?;
                    Ok(())
                })
            }

            fn last_opened<'a>(
                &'a self,
                owner: &'a UserId,
            ) -> BoxFuture<'a, Result<Option<ChatDetails>, StoreError>> {
                Box::pin(async move {
                    let row = sqlx::query("SELECT last_opened_chat FROM user_state WHERE owner = $1")
                        .bind(owner.as_str())
                        .fetch_optional(&self.pool)
                        .await?;
                    let id: Option<String> = match row {
                        Some(row) => row.try_get(0)?,
                        None => None,
                    };
                    match id.map(ChatId::parse) {
                        Some(Ok(chat)) => self.get_chat(owner, &chat).await,
                        _ => Ok(None),
                    }
                })
            }

            fn count_chats<'a>(&'a self, owner: &'a UserId) -> BoxFuture<'a, Result<u64, StoreError>> {
                Box::pin(async move {
                    let row = sqlx::query("SELECT COUNT(*) FROM chats WHERE owner = $1")
                        .bind(owner.as_str())
                        .fetch_one(&self.pool)
                        .await?;
                    Ok(to_u64(row.try_get(0)?))
                })
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
        }
    };
}

pub(crate) use impl_store_trait;
