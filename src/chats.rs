//! Chat ownership and the in-process history the model reads. A chat belongs to the user
//! who first wrote to it; every later write or read checks the owner.
//! Interim store: the encrypted AI cache (and the permanent store for ownership) replace
//! the history part in the cache issue; the interface stays.

use std::collections::HashSet;

use chatd_protocol::{ChatId, MessageId};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::auth::UserId;
use crate::pipeline::HistoryEntry;

/// Most messages kept per chat for the model.
pub const MAX_MESSAGES_PER_CHAT: usize = 100;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("chat belongs to another user")]
pub struct Forbidden;

struct ChatRecord {
    owner: UserId,
    messages: Vec<HistoryEntry>,
    message_ids: HashSet<MessageId>,
    /// Messages ever added (the chat's `messages_v`).
    messages_v: u64,
    last_edited: i64,
}

/// Result of adding a user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub messages_v: u64,
    pub last_edited: i64,
    /// False when the message id was already in the chat (a re-send): nothing was added.
    pub is_new: bool,
}

#[derive(Default)]
pub struct Chats {
    /// chat → record. Entry guards are held only for in-memory updates, never across awaits.
    chats: DashMap<ChatId, ChatRecord>,
}

impl Chats {
    /// Checks that `user` owns `chat` (an unknown chat is free to claim).
    pub fn authorize(&self, user: &UserId, chat: &ChatId) -> Result<(), Forbidden> {
        match self.chats.get(chat) {
            Some(r) if &r.owner != user => Err(Forbidden),
            _ => Ok(()),
        }
    }

    /// Adds a message, claiming the chat for `user` if it is new.
    pub fn append(
        &self,
        user: &UserId,
        chat: &ChatId,
        message_id: &MessageId,
        entry: HistoryEntry,
    ) -> Result<Appended, Forbidden> {
        let mut record = match self.chats.entry(chat.clone()) {
            Entry::Occupied(o) => {
                if &o.get().owner != user {
                    return Err(Forbidden);
                }
                o.into_ref()
            }
            Entry::Vacant(v) => v.insert(ChatRecord {
                owner: user.clone(),
                messages: Vec::new(),
                message_ids: HashSet::new(),
                messages_v: 0,
                last_edited: 0,
            }),
        };
        if !record.message_ids.insert(message_id.clone()) {
            return Ok(Appended {
                messages_v: record.messages_v,
                last_edited: record.last_edited,
                is_new: false,
            });
        }
        record.last_edited = record.last_edited.max(entry.created_at);
        record.messages.push(entry);
        record.messages_v += 1;
        if record.messages.len() > MAX_MESSAGES_PER_CHAT {
            let excess = record.messages.len() - MAX_MESSAGES_PER_CHAT;
            record.messages.drain(..excess);
        }
        Ok(Appended {
            messages_v: record.messages_v,
            last_edited: record.last_edited,
            is_new: true,
        })
    }

    /// The chat's messages, oldest first (empty for an unknown or foreign chat).
    pub fn history(&self, user: &UserId, chat: &ChatId) -> Vec<HistoryEntry> {
        match self.chats.get(chat) {
            Some(r) if &r.owner == user => r.messages.clone(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::HistoryRole;

    fn entry(t: i64) -> HistoryEntry {
        HistoryEntry {
            role: HistoryRole::User,
            content: format!("m{t}"),
            created_at: t,
        }
    }

    #[test]
    fn first_writer_owns_the_chat() {
        let chats = Chats::default();
        let (a, b) = (UserId::parse("a").unwrap(), UserId::parse("b").unwrap());
        let chat = ChatId::parse("c").unwrap();
        let m1 = MessageId::parse("m1").unwrap();
        let r = chats.append(&a, &chat, &m1, entry(1)).unwrap();
        assert_eq!((r.messages_v, r.is_new), (1, true));
        assert_eq!(
            chats.append(&b, &chat, &MessageId::parse("m2").unwrap(), entry(2)),
            Err(Forbidden)
        );
        assert_eq!(chats.authorize(&b, &chat), Err(Forbidden));
        assert!(chats.history(&b, &chat).is_empty());
        let again = chats.append(&a, &chat, &m1, entry(1)).unwrap();
        assert_eq!((again.messages_v, again.is_new), (1, false));
        assert_eq!(chats.history(&a, &chat).len(), 1);
    }

    #[test]
    fn history_is_capped() {
        let chats = Chats::default();
        let a = UserId::parse("a").unwrap();
        let chat = ChatId::parse("c").unwrap();
        for i in 0..150 {
            let id = MessageId::parse(format!("m{i}")).unwrap();
            chats.append(&a, &chat, &id, entry(i)).unwrap();
        }
        let h = chats.history(&a, &chat);
        assert_eq!(h.len(), MAX_MESSAGES_PER_CHAT);
        assert_eq!(h[0].created_at, 50);
    }
}
