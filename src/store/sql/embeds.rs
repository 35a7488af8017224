//! The embeds' part of the shared SQL store ([`impl_store`](super::impl_store)): embeds and
//! embed keys, each row the client's ciphertext under its owner. Expanded inside
//! `impl_store!` (its imports and helpers are in scope there). Every statement filters on
//! `owner`.

macro_rules! impl_embeds {
    ($store:ty, $db:ty) => {
        impl $store {
            async fn do_put_embed(&self, owner: &UserId, embed: &StoreEmbed) -> Result<(), StoreError> {
                let body = encode(embed)?;
                let version = to_i64(embed.version_number);
                let done = sqlx::query(
                    "INSERT INTO embeds (embed_id, owner, hashed_chat_id, version_number, body) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (owner, embed_id) DO UPDATE SET hashed_chat_id = excluded.hashed_chat_id, \
                       version_number = excluded.version_number, body = excluded.body \
                     WHERE embeds.version_number <= excluded.version_number",
                )
                .bind(embed.embed_id.as_str())
                .bind(owner.as_str())
                .bind(embed.hashed_chat_id.as_deref())
                .bind(version)
                .bind(&body)
                .execute(&self.pool)
                .await?
                .rows_affected();
                if done > 0 {
                    return Ok(());
                }
                let mine = sqlx::query(
                    "SELECT version_number FROM embeds WHERE embed_id = $1 AND owner = $2",
                )
                .bind(embed.embed_id.as_str())
                .bind(owner.as_str())
                .fetch_optional(&self.pool)
                .await?;
                // Ids are their owner's: the only conflict left is a newer stored version.
                match mine {
                    Some(row) => Err(StoreError::StaleVersion {
                        sent: embed.version_number,
                        stored: to_u64(row.try_get(0)?),
                    }),
                    None => Err(StoreError::NotFound),
                }
            }

            async fn do_embed(
                &self,
                owner: &UserId,
                embed: &EmbedId,
            ) -> Result<Option<StoreEmbed>, StoreError> {
                let row = sqlx::query("SELECT body FROM embeds WHERE embed_id = $1 AND owner = $2")
                    .bind(embed.as_str())
                    .bind(owner.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                match row {
                    Some(row) => {
                        let body: String = row.try_get(0)?;
                        Ok(Some(decode(&body)?))
                    }
                    None => Ok(None),
                }
            }

            async fn do_embeds_for_chats(
                &self,
                owner: &UserId,
                hashed: &[String],
            ) -> Result<Vec<StoreEmbed>, StoreError> {
                let mut out = Vec::new();
                for part in hashed.chunks(MAX_IN) {
                    let mut q = owned_in::<$db, _>(
                        "SELECT body FROM embeds WHERE owner = ",
                        owner.as_str(),
                        "hashed_chat_id",
                        part.iter().map(|h| h.as_str()),
                        " ORDER BY embed_id",
                    );
                    for row in q.build().fetch_all(&self.pool).await? {
                        let body: String = row.try_get(0)?;
                        out.push(decode(&body)?);
                    }
                }
                Ok(out)
            }

            async fn do_put_embed_keys(&self, owner: &UserId, keys: &[EmbedKey]) -> Result<u64, StoreError> {
                let mut tx = self.pool.begin().await?;
                let mut n = 0;
                for k in keys {
                    n += sqlx::query(
                        "INSERT INTO embed_keys (owner, hashed_embed_id, key_type, hashed_chat_id, \
                           encrypted_embed_key, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (owner, hashed_embed_id, key_type, hashed_chat_id) \
                         DO UPDATE SET encrypted_embed_key = excluded.encrypted_embed_key, \
                           created_at = excluded.created_at",
                    )
                    .bind(owner.as_str())
                    .bind(&k.hashed_embed_id)
                    .bind(&k.key_type)
                    .bind(k.hashed_chat_id.as_deref().unwrap_or(""))
                    .bind(&k.encrypted_embed_key)
                    .bind(k.created_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                }
                tx.commit().await?;
                Ok(n)
            }

            async fn do_embed_keys(
                &self,
                owner: &UserId,
                hashed: &[String],
            ) -> Result<Vec<EmbedKey>, StoreError> {
                let mut out = Vec::new();
                for part in hashed.chunks(MAX_IN) {
                    let mut q = owned_in::<$db, _>(
                        "SELECT hashed_embed_id, key_type, hashed_chat_id, encrypted_embed_key, \
                         created_at FROM embed_keys WHERE owner = ",
                        owner.as_str(),
                        "hashed_embed_id",
                        part.iter().map(|h| h.as_str()),
                        " ORDER BY hashed_embed_id, key_type, hashed_chat_id",
                    );
                    for row in q.build().fetch_all(&self.pool).await? {
                        let chat: String = row.try_get(2)?;
                        out.push(EmbedKey {
                            hashed_embed_id: row.try_get(0)?,
                            key_type: row.try_get(1)?,
                            hashed_chat_id: (!chat.is_empty()).then_some(chat),
                            encrypted_embed_key: row.try_get(3)?,
                            created_at: row.try_get(4)?,
                        });
                    }
                }
                Ok(out)
            }
        }
    };
}

pub(crate) use impl_embeds;
