//! The `embeds` and `embed_keys` tables: each embed the client's encrypted body under its
//! owner (ids unique per owner), versioned; each key a wrapped embed key under its owner.
//! Every statement filters on the owner.

use chatd_protocol::{EmbedId, EmbedKey, StoreEmbed};

use super::StoreError;
use super::db::{MAX_IN, Query, Row, decode, encode, query, to_i64, to_u64};
use super::sql::SqlStore;
use crate::auth::UserId;

fn key_from_row(row: &Row) -> Result<EmbedKey, StoreError> {
    let chat: String = row.get(2)?;
    Ok(EmbedKey {
        hashed_embed_id: row.get(0)?,
        key_type: row.get(1)?,
        hashed_chat_id: (!chat.is_empty()).then_some(chat),
        encrypted_embed_key: row.get(3)?,
        created_at: row.get(4)?,
    })
}

/// Writes one wrapped key (a newer one for the same embed, kind and chat replaces it).
fn upsert_key<'q>(owner: &'q UserId, k: &'q EmbedKey) -> Query<'q> {
    query(
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
}

impl SqlStore {
    pub(super) async fn do_put_embed(
        &self,
        owner: &UserId,
        embed: &StoreEmbed,
    ) -> Result<(), StoreError> {
        if !embed.embed_keys.is_empty() {
            return self.put_embed_with_keys(owner, embed).await;
        }
        let body = encode(embed)?;
        let done = query(
            "INSERT INTO embeds (embed_id, owner, hashed_chat_id, version_number, body) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (owner, embed_id) DO UPDATE SET hashed_chat_id = excluded.hashed_chat_id, \
               version_number = excluded.version_number, body = excluded.body \
             WHERE embeds.version_number <= excluded.version_number",
        )
        .bind(embed.embed_id.as_str())
        .bind(owner.as_str())
        .bind(embed.hashed_chat_id.as_deref())
        .bind(to_i64(embed.version_number))
        .bind(&body)
        .execute(&self.pool)
        .await?;
        if done > 0 {
            return Ok(());
        }
        let mine = query("SELECT version_number FROM embeds WHERE embed_id = $1 AND owner = $2")
            .bind(embed.embed_id.as_str())
            .bind(owner.as_str())
            .fetch_optional(&self.pool)
            .await?;
        // Ids are their owner's: the only conflict left is a newer stored version.
        match mine {
            Some(row) => Err(StoreError::StaleVersion {
                sent: embed.version_number,
                stored: to_u64(row.get(0)?),
            }),
            None => Err(StoreError::NotFound),
        }
    }

    /// An embed with its keys, in one transaction, the first copy of a version kept: a
    /// second copy of the same version (another device's encryption of the same result) is
    /// dropped whole, so the stored body and keys always belong together.
    async fn put_embed_with_keys(
        &self,
        owner: &UserId,
        embed: &StoreEmbed,
    ) -> Result<(), StoreError> {
        let body = encode(&StoreEmbed {
            embed_keys: Vec::new(),
            ..embed.clone()
        })?;
        let mut tx = self.pool.begin().await?;
        let done = query(
            "INSERT INTO embeds (embed_id, owner, hashed_chat_id, version_number, body) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (owner, embed_id) DO UPDATE SET hashed_chat_id = excluded.hashed_chat_id, \
               version_number = excluded.version_number, body = excluded.body \
             WHERE embeds.version_number < excluded.version_number",
        )
        .bind(embed.embed_id.as_str())
        .bind(owner.as_str())
        .bind(embed.hashed_chat_id.as_deref())
        .bind(to_i64(embed.version_number))
        .bind(&body)
        .execute(&mut tx)
        .await?;
        if done == 0 {
            let stored =
                query("SELECT version_number FROM embeds WHERE embed_id = $1 AND owner = $2")
                    .bind(embed.embed_id.as_str())
                    .bind(owner.as_str())
                    .fetch_optional(&mut tx)
                    .await?;
            tx.commit().await?;
            return match stored.map(|row| row.get::<i64>(0)).transpose()? {
                Some(v) if to_u64(v) == embed.version_number => Ok(()),
                Some(v) => Err(StoreError::StaleVersion {
                    sent: embed.version_number,
                    stored: to_u64(v),
                }),
                None => Err(StoreError::NotFound),
            };
        }
        for k in &embed.embed_keys {
            upsert_key(owner, k).execute(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn do_embed(
        &self,
        owner: &UserId,
        embed: &EmbedId,
    ) -> Result<Option<StoreEmbed>, StoreError> {
        let row = query("SELECT body FROM embeds WHERE embed_id = $1 AND owner = $2")
            .bind(embed.as_str())
            .bind(owner.as_str())
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(Some(decode(&row.get::<String>(0)?)?)),
            None => Ok(None),
        }
    }

    pub(super) async fn do_embeds_for_chats(
        &self,
        owner: &UserId,
        hashed: &[String],
    ) -> Result<Vec<StoreEmbed>, StoreError> {
        let mut out = Vec::new();
        for part in hashed.chunks(MAX_IN) {
            let rows = Query::owned_in(
                "SELECT body FROM embeds WHERE owner = ",
                owner.as_str(),
                "hashed_chat_id",
                part.iter().map(String::as_str),
                " ORDER BY embed_id",
            )
            .fetch_all(&self.pool)
            .await?;
            for row in rows {
                out.push(decode(&row.get::<String>(0)?)?);
            }
        }
        Ok(out)
    }

    pub(super) async fn do_put_embed_keys(
        &self,
        owner: &UserId,
        keys: &[EmbedKey],
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut n = 0;
        for k in keys {
            n += upsert_key(owner, k).execute(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    pub(super) async fn do_embed_keys(
        &self,
        owner: &UserId,
        hashed: &[String],
    ) -> Result<Vec<EmbedKey>, StoreError> {
        let mut out = Vec::new();
        for part in hashed.chunks(MAX_IN) {
            let rows = Query::owned_in(
                "SELECT hashed_embed_id, key_type, hashed_chat_id, encrypted_embed_key, \
                 created_at FROM embed_keys WHERE owner = ",
                owner.as_str(),
                "hashed_embed_id",
                part.iter().map(String::as_str),
                " ORDER BY hashed_embed_id, key_type, hashed_chat_id",
            )
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                out.push(key_from_row(row)?);
            }
        }
        Ok(out)
    }
}
