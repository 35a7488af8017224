//! Chat ownership and version counters. A chat belongs to the user who first wrote to it;
//! every later write or read checks the owner. `messages_v` counts the chat's messages, so
//! a turn knows how many earlier messages the AI cache should hold.
//! Kept in process (lost on restart, where the client's `chat_has_title` tells an existing
//! chat from a new one); the permanent store (`crate::store`) is the lasting record of owners
//! and is asked first for chats this process has not seen.

use std::collections::HashMap;

use chatd_protocol::{ChatId, MessageId};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::auth::UserId;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("chat belongs to another user")]
pub struct Forbidden;

struct ChatRecord {
    owner: UserId,
    /// message id → messages in the chat before it.
    positions: HashMap<MessageId, u64>,
    /// Messages ever added (the chat's `messages_v`).
    messages_v: u64,
    last_edited: i64,
}

/// Result of recording a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub messages_v: u64,
    pub last_edited: i64,
    /// False when the message id was already in the chat (a re-send): nothing was added.
    pub is_new: bool,
    /// Messages the chat had before this one.
    pub prior: u64,
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

    /// True when this process already knows `chat` as `user`'s (it was claimed here, after
    /// the permanent store agreed), so the store need not be asked again.
    pub fn known_owner(&self, user: &UserId, chat: &ChatId) -> bool {
        self.chats.get(chat).is_some_and(|r| &r.owner == user)
    }

    /// Records a message, claiming the chat for `user` if it is new.
    pub fn record(
        &self,
        user: &UserId,
        chat: &ChatId,
        message_id: &MessageId,
        created_at: i64,
    ) -> Result<Recorded, Forbidden> {
        let mut record = match self.chats.entry(chat.clone()) {
            Entry::Occupied(o) => {
                if &o.get().owner != user {
                    return Err(Forbidden);
                }
                o.into_ref()
            }
            Entry::Vacant(v) => v.insert(ChatRecord {
                owner: user.clone(),
                positions: HashMap::new(),
                messages_v: 0,
                last_edited: 0,
            }),
        };
        if let Some(&prior) = record.positions.get(message_id) {
            return Ok(Recorded {
                messages_v: record.messages_v,
                last_edited: record.last_edited,
                is_new: false,
                prior,
            });
        }
        let prior = record.messages_v;
        record.positions.insert(message_id.clone(), prior);
        record.last_edited = record.last_edited.max(created_at);
        record.messages_v += 1;
        Ok(Recorded {
            messages_v: record.messages_v,
            last_edited: record.last_edited,
            is_new: true,
            prior,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_writer_owns_the_chat_and_resends_are_not_counted() {
        let chats = Chats::default();
        let (a, b) = (UserId::parse("a").unwrap(), UserId::parse("b").unwrap());
        let chat = ChatId::parse("c").unwrap();
        let m1 = MessageId::parse("m1").unwrap();
        let m2 = MessageId::parse("m2").unwrap();
        let r = chats.record(&a, &chat, &m1, 1).unwrap();
        assert_eq!((r.messages_v, r.is_new, r.prior), (1, true, 0));
        assert_eq!(chats.record(&b, &chat, &m2, 2), Err(Forbidden));
        assert_eq!(chats.authorize(&b, &chat), Err(Forbidden));
        let r2 = chats.record(&a, &chat, &m2, 2).unwrap();
        assert_eq!((r2.messages_v, r2.prior), (2, 1));
        let again = chats.record(&a, &chat, &m1, 1).unwrap();
        assert_eq!((again.messages_v, again.is_new, again.prior), (2, false, 0));
    }
}
