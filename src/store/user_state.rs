//! The `user_state` table: per owner, the chat they opened last (`set_active_chat`).

use chatd_protocol::{ChatDetails, ChatId};

use super::StoreError;
use super::db::query;
use super::sql::SqlStore;
use crate::auth::UserId;

impl SqlStore {
    pub(super) async fn do_set_last_opened(
        &self,
        owner: &UserId,
        chat: &ChatId,
    ) -> Result<(), StoreError> {
        query(
            "INSERT INTO user_state (owner, last_opened_chat) VALUES ($1, $2) \
             ON CONFLICT (owner) DO UPDATE SET last_opened_chat = excluded.last_opened_chat",
        )
        .bind(owner.as_str())
        .bind(chat.as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The chat the owner opened last, if it is still stored and theirs.
    pub(super) async fn do_last_opened(
        &self,
        owner: &UserId,
    ) -> Result<Option<ChatDetails>, StoreError> {
        let row = query("SELECT last_opened_chat FROM user_state WHERE owner = $1")
            .bind(owner.as_str())
            .fetch_optional(&self.pool)
            .await?;
        let id: Option<String> = match row {
            Some(row) => row.get(0)?,
            None => None,
        };
        match id.map(ChatId::parse) {
            Some(Ok(chat)) => self.get_chat(owner, &chat).await,
            _ => Ok(None),
        }
    }
}
