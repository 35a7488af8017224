//! A bounded read cache of chat owners in front of the permanent store, so the
//! per-message path does not query the store for a chat this node has already seen. An
//! owner never changes while the chat exists; deleting the chat forgets it here.

use chatd_protocol::ChatId;
use dashmap::DashMap;

use crate::auth::UserId;

/// Chats remembered before the cache starts over.
const MAX_OWNERS: usize = 50_000;

#[derive(Default)]
pub struct Owners {
    owners: DashMap<ChatId, UserId>,
}

impl Owners {
    /// True when `user` is known to own `chat`.
    pub fn known(&self, user: &UserId, chat: &ChatId) -> bool {
        self.owners.get(chat).is_some_and(|o| o.value() == user)
    }

    /// Remembers an owner the store confirmed.
    pub fn remember(&self, user: &UserId, chat: &ChatId) {
        if self.owners.len() >= MAX_OWNERS {
            self.owners.clear();
        }
        self.owners.insert(chat.clone(), user.clone());
    }

    pub fn forget(&self, chat: &ChatId) {
        self.owners.remove(chat);
    }
}
