//! Paging a large user's chats after the login sync: `load_more_chats` (metadata by
//! offset), `get_chat_messages` (one chat's messages) and `request_chat_content_batch`
//! (several chats' messages and embeds). They run on the connection's sync worker like a
//! phased sync (see `sync_worker.rs`), page sizes are bounded, and every chat is read
//! through its owner: a chat that is not the user's is `not_found`, never told apart from
//! one that does not exist.

use std::collections::HashSet;

use chatd_protocol::{
    ChatContentBatchResponse, ChatDetails, ChatMessagesResponse, GetChatMessages, LoadMoreChats,
    LoadMoreChatsResponse, MAX_CHAT_PAGE, MAX_CONTENT_BATCH, RequestChatContentBatch,
    ServerMessage,
};

use super::Session;
use super::sync::{CacheUse, Delta};
use crate::store::StoreError;

impl Session {
    /// `load_more_chats`: a page of chats' metadata by offset, and whether more follow.
    pub(super) async fn load_more_chats(&self, m: LoadMoreChats) -> Result<(), StoreError> {
        if m.limit == 0 || m.limit > MAX_CHAT_PAGE {
            self.invalid(format!("limit must be 1 to {MAX_CHAT_PAGE}"), None);
            return Ok(());
        }
        let user = &self.device.user;
        let store = &self.app.store;
        let chats = store.chats_at(user, m.offset, m.limit).await?;
        let total = store.count_chats(user).await?;
        let has_more = u64::from(m.offset) + (chats.len() as u64) < total;
        self.reply(ServerMessage::LoadMoreChatsResponse(Box::new(
            LoadMoreChatsResponse {
                chats,
                offset: m.offset,
                limit: m.limit,
                total_chat_count: total,
                has_more,
            },
        )));
        Ok(())
    }

    /// `get_chat_messages`: one chat's messages (`not_found` unless it is the user's).
    pub(super) async fn get_chat_messages(&self, m: GetChatMessages) -> Result<(), StoreError> {
        let Some(chat) = self.app.store.chat(&self.device.user, &m.chat_id).await? else {
            self.store_failed(StoreError::NotFound, Some(&m.chat_id), None);
            return Ok(());
        };
        let mut content = self.content(&[&chat], CacheUse::Read).await?;
        let messages = content.pop().map(|c| c.messages).unwrap_or_default();
        self.reply(ServerMessage::ChatMessagesResponse(Box::new(
            ChatMessagesResponse {
                chat_id: chat.chat_id,
                messages,
                versions: chat.versions,
            },
        )));
        Ok(())
    }

    /// `request_chat_content_batch`: the messages and embeds of several chats; the ids
    /// that are not the user's chats come back as `not_found`.
    pub(super) async fn request_chat_content_batch(
        &self,
        m: RequestChatContentBatch,
    ) -> Result<(), StoreError> {
        if m.chat_ids.is_empty() || m.chat_ids.len() > MAX_CONTENT_BATCH {
            self.invalid(
                format!("chat_ids must list 1 to {MAX_CONTENT_BATCH} chats"),
                None,
            );
            return Ok(());
        }
        let mut seen = HashSet::new();
        let mut found: Vec<ChatDetails> = Vec::with_capacity(m.chat_ids.len());
        let mut not_found = Vec::new();
        for id in m.chat_ids {
            if !seen.insert(id.clone()) {
                continue;
            }
            match self.app.store.chat(&self.device.user, &id).await? {
                Some(chat) => found.push(chat),
                None => not_found.push(id),
            }
        }
        let refs: Vec<&ChatDetails> = found.iter().collect();
        let chats = self.content(&refs, CacheUse::Read).await?;
        let (embeds, embed_keys) = self.embeds_for(&refs, &Delta::default()).await?;
        self.reply(ServerMessage::ChatContentBatchResponse(Box::new(
            ChatContentBatchResponse {
                chats,
                embeds,
                embed_keys,
                not_found,
            },
        )));
        Ok(())
    }
}
