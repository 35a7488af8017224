//! The `chats` table: who owns a chat (the first writer), its encrypted metadata, its
//! versions, listings, the rejected suggestion hashes, and deleting a chat with everything
//! stored under it. Every statement filters on the owner.

use chatd_protocol::{ChatDetails, ChatId, ChatVersions, EmbedId};

use super::db::{MAX_IN, Query, Row, Tx, corrupt, encode, json_list, query, to_i64, to_u64};
use super::present::PresentChats;
use super::sql::SqlStore;
use super::{ChatCursor, ChatPatch, DeletedChat, MAX_REJECTED_HASHES, StoreError, hash_id};
use crate::auth::UserId;

/// Columns of `chats` in the order [`chat_from_row`] reads them.
const CHAT_COLUMNS: &str = "chat_id, encrypted_title, encrypted_icon, encrypted_category, \
     encrypted_chat_key, encrypted_chat_summary, encrypted_chat_tags, \
     encrypted_follow_up_suggestions, encrypted_new_chat_suggestions, \
     encrypted_top_recommended_apps_for_chat, encrypted_quick_tip_slugs, \
     encrypted_share_cta_text, rejected_suggestion_hashes, messages_v, title_v, \
     last_edited_overall_timestamp";

/// The versions of the owner's chat, as [`versions_from_row`] reads them.
pub(super) const VERSIONS_SQL: &str = "SELECT messages_v, title_v, last_edited_overall_timestamp \
     FROM chats WHERE chat_id = $1 AND owner = $2";

const UPDATE_SQL: &str = "UPDATE chats SET \
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
       AND ($16 OR $6 IS NULL OR encrypted_chat_key IS NULL OR encrypted_chat_key = $6)";

fn chat_from_row(row: &Row) -> Result<ChatDetails, StoreError> {
    Ok(ChatDetails {
        chat_id: ChatId::parse(row.get::<String>(0)?).map_err(corrupt)?,
        encrypted_title: row.get(1)?,
        encrypted_icon: row.get(2)?,
        encrypted_category: row.get(3)?,
        encrypted_chat_key: row.get(4)?,
        encrypted_chat_summary: row.get(5)?,
        encrypted_chat_tags: row.get(6)?,
        encrypted_follow_up_suggestions: row.get(7)?,
        encrypted_new_chat_suggestions: json_list(row.get(8)?),
        encrypted_top_recommended_apps_for_chat: row.get(9)?,
        encrypted_quick_tip_slugs: row.get(10)?,
        encrypted_share_cta_text: row.get(11)?,
        rejected_suggestion_hashes: json_list(row.get(12)?),
        versions: ChatVersions {
            messages_v: to_u64(row.get(13)?),
            title_v: to_u64(row.get(14)?),
            last_edited_overall_timestamp: row.get(15)?,
        },
    })
}

/// A row of (`messages_v`, `title_v`, `last_edited_overall_timestamp`) from column `first`.
pub(super) fn versions_from_row(row: &Row, first: usize) -> Result<ChatVersions, StoreError> {
    Ok(ChatVersions {
        messages_v: to_u64(row.get(first)?),
        title_v: to_u64(row.get(first + 1)?),
        last_edited_overall_timestamp: row.get(first + 2)?,
    })
}

/// Creates the chat for `owner` if no one has it; `Forbidden` if another owner does.
pub(super) async fn claim(
    tx: &mut Tx,
    present: Option<&PresentChats>,
    owner: &UserId,
    chat: &ChatId,
) -> Result<(), StoreError> {
    // Noted before the row exists (see `present`).
    if let Some(present) = present {
        present.note(chat);
    }
    query("INSERT INTO chats (chat_id, owner) VALUES ($1, $2) ON CONFLICT (chat_id) DO NOTHING")
        .bind(chat.as_str())
        .bind(owner.as_str())
        .execute(&mut *tx)
        .await?;
    let mine = query("SELECT 1 FROM chats WHERE chat_id = $1 AND owner = $2")
        .bind(chat.as_str())
        .bind(owner.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if mine.is_none() {
        return Err(StoreError::Forbidden);
    }
    Ok(())
}

/// `SELECT {CHAT_COLUMNS} FROM chats WHERE {filter}`.
fn select_chats(filter: &str) -> Query<'static> {
    query(format!("SELECT {CHAT_COLUMNS} FROM chats WHERE {filter}"))
}

impl SqlStore {
    async fn exists_foreign(&self, owner: &UserId, chat: &ChatId) -> Result<bool, StoreError> {
        let row = query("SELECT 1 FROM chats WHERE chat_id = $1 AND owner <> $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    /// `NotFound` or `Forbidden` for a chat the owner does not have.
    pub(super) async fn missing(&self, owner: &UserId, chat: &ChatId) -> StoreError {
        match self.exists_foreign(owner, chat).await {
            Ok(true) => StoreError::Forbidden,
            Ok(false) => StoreError::NotFound,
            Err(e) => e,
        }
    }

    pub(super) async fn do_authorize(
        &self,
        owner: &UserId,
        chat: &ChatId,
    ) -> Result<(), StoreError> {
        if self.exists_foreign(owner, chat).await? {
            return Err(StoreError::Forbidden);
        }
        Ok(())
    }

    pub(super) async fn do_chat_versions(
        &self,
        owner: &UserId,
        chat: &ChatId,
    ) -> Result<Option<ChatVersions>, StoreError> {
        if self.present.as_ref().is_some_and(|p| !p.may_hold(chat)) {
            return Ok(None);
        }
        let row = query(
            "SELECT owner, messages_v, title_v, last_edited_overall_timestamp \
             FROM chats WHERE chat_id = $1",
        )
        .bind(chat.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        if row.get::<String>(0)? != owner.as_str() {
            return Err(StoreError::Forbidden);
        }
        versions_from_row(&row, 1).map(Some)
    }

    pub(super) async fn get_chat(
        &self,
        owner: &UserId,
        chat: &ChatId,
    ) -> Result<Option<ChatDetails>, StoreError> {
        let row = select_chats("chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(chat_from_row).transpose()
    }

    pub(super) async fn do_update_chat(
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
        let done = query(UPDATE_SQL)
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
            .bind(to_i64(patch.title_v.unwrap_or(0)))
            .bind(patch.last_edited.unwrap_or(0))
            .bind(patch.allow_key_rotation)
            .execute(&mut tx)
            .await?;
        if done == 0 {
            // The chat is the owner's (claimed above), so only the key check failed.
            return Err(StoreError::ChatKeyMismatch);
        }
        let row = select_chats("chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .fetch_one(&mut tx)
            .await?;
        let details = chat_from_row(&row)?;
        tx.commit().await?;
        Ok(details)
    }

    pub(super) async fn do_chats_page(
        &self,
        owner: &UserId,
        after: Option<&ChatCursor>,
        limit: u32,
    ) -> Result<Vec<ChatDetails>, StoreError> {
        let order = "ORDER BY last_edited_overall_timestamp DESC, chat_id ASC";
        let q = match after {
            None => select_chats(&format!("owner = $1 {order} LIMIT $2"))
                .bind(owner.as_str())
                .bind(i64::from(limit)),
            Some(c) => select_chats(&format!(
                "owner = $1 AND (last_edited_overall_timestamp < $2 \
                 OR (last_edited_overall_timestamp = $2 AND chat_id > $3)) {order} LIMIT $4"
            ))
            .bind(owner.as_str())
            .bind(c.last_edited)
            .bind(c.chat_id.as_str())
            .bind(i64::from(limit)),
        };
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter().map(chat_from_row).collect()
    }

    pub(super) async fn do_chats_at(
        &self,
        owner: &UserId,
        offset: u32,
        limit: u32,
    ) -> Result<Vec<ChatDetails>, StoreError> {
        let rows = select_chats(
            "owner = $1 ORDER BY last_edited_overall_timestamp DESC, chat_id ASC \
             LIMIT $2 OFFSET $3",
        )
        .bind(owner.as_str())
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(chat_from_row).collect()
    }

    pub(super) async fn do_count_chats(&self, owner: &UserId) -> Result<u64, StoreError> {
        let row = query("SELECT COUNT(*) FROM chats WHERE owner = $1")
            .bind(owner.as_str())
            .fetch_one(&self.pool)
            .await?;
        Ok(to_u64(row.get(0)?))
    }

    pub(super) async fn do_reject_suggestion(
        &self,
        owner: &UserId,
        chat: &ChatId,
        hash: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        claim(&mut tx, self.present.as_ref(), owner, chat).await?;
        // Locks the row until commit (PostgreSQL; SQLite's writer already holds the
        // database), so two rejections in one chat never lose one another.
        query("UPDATE chats SET owner = owner WHERE chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .execute(&mut tx)
            .await?;
        let row =
            query("SELECT rejected_suggestion_hashes FROM chats WHERE chat_id = $1 AND owner = $2")
                .bind(chat.as_str())
                .bind(owner.as_str())
                .fetch_one(&mut tx)
                .await?;
        let mut hashes = json_list(row.get(0)?);
        if hashes.iter().any(|h| h == hash) {
            return Ok(false);
        }
        hashes.push(hash.to_string());
        let excess = hashes.len().saturating_sub(MAX_REJECTED_HASHES);
        hashes.drain(..excess);
        let list = encode(&hashes)?;
        query("UPDATE chats SET rejected_suggestion_hashes = $3 WHERE chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .bind(&list)
            .execute(&mut tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Deletes the chat row, its messages, the owner's pointer to it, and its embeds with
    /// their keys (by hashed or plain chat id, and by the deleted embeds' hashed ids).
    pub(super) async fn do_delete_chat(
        &self,
        owner: &UserId,
        chat: &ChatId,
    ) -> Result<DeletedChat, StoreError> {
        let mut tx = self.pool.begin().await?;
        let gone = query("DELETE FROM chats WHERE chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .execute(&mut tx)
            .await?;
        if gone == 0 {
            drop(tx);
            return Err(self.missing(owner, chat).await);
        }
        query("UPDATE user_state SET last_opened_chat = NULL WHERE owner = $1 AND last_opened_chat = $2")
            .bind(owner.as_str())
            .bind(chat.as_str())
            .execute(&mut tx)
            .await?;
        let messages = query("DELETE FROM messages WHERE chat_id = $1 AND owner = $2")
            .bind(chat.as_str())
            .bind(owner.as_str())
            .execute(&mut tx)
            .await?;
        let embeds = delete_chat_embeds(&mut tx, owner, chat).await?;
        tx.commit().await?;
        Ok(DeletedChat { messages, embeds })
    }
}

/// The embeds and embed keys of a chat being deleted; the ids of the embeds removed.
async fn delete_chat_embeds(
    tx: &mut Tx,
    owner: &UserId,
    chat: &ChatId,
) -> Result<Vec<EmbedId>, StoreError> {
    let hashed = hash_id(chat.as_str());
    let by_chat = |sql: &'static str| {
        query(sql)
            .bind(owner.as_str())
            .bind(hashed.as_str())
            .bind(chat.as_str())
    };
    let rows = by_chat(
        "SELECT embed_id FROM embeds WHERE owner = $1 \
         AND (hashed_chat_id = $2 OR hashed_chat_id = $3)",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut embeds = Vec::with_capacity(rows.len());
    for row in &rows {
        embeds.push(EmbedId::parse(row.get::<String>(0)?).map_err(corrupt)?);
    }
    by_chat("DELETE FROM embeds WHERE owner = $1 AND (hashed_chat_id = $2 OR hashed_chat_id = $3)")
        .execute(&mut *tx)
        .await?;
    by_chat(
        "DELETE FROM embed_keys WHERE owner = $1 AND (hashed_chat_id = $2 OR hashed_chat_id = $3)",
    )
    .execute(&mut *tx)
    .await?;
    for part in embeds.chunks(MAX_IN) {
        let hashed_ids: Vec<String> = part.iter().map(|e| hash_id(e.as_str())).collect();
        Query::owned_in(
            "DELETE FROM embed_keys WHERE owner = ",
            owner.as_str(),
            "hashed_embed_id",
            hashed_ids.iter().map(String::as_str),
            "",
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(embeds)
}
