//! Which chats the embedded store may hold. Every first message in a chat this node has not
//! seen asks the store for the chat's owner; nearly always the chat is new and the answer
//! "no such chat". On SQLite that read is a hop to the connection's worker thread and back
//! (two thread wake-ups) on the path to the answer's first token.
//!
//! The filter answers "surely not stored" from memory: a Bloom filter of every chat id
//! the store holds, read once at start-up and then kept by this process, the embedded
//! store's only writer. An id is noted *before* the row that holds it is written, so no
//! reader sees a stored chat the filter denies. An id the filter may hold (a chat that
//! exists, one deleted since, or a false positive) is read from the store as before. Its
//! size is fixed: past [`EXPECTED_CHATS`] the false positives (reads) grow, never the
//! memory. PostgreSQL has no filter: several nodes write it.

use chatd_protocol::ChatId;
use fastbloom::AtomicBloomFilter;

/// The chats the filter is sized for at [`FALSE_POSITIVES`] (about 1.2 MB of bits).
const EXPECTED_CHATS: usize = 1_000_000;
const FALSE_POSITIVES: f64 = 0.01;

pub struct PresentChats {
    filter: AtomicBloomFilter,
}

impl PresentChats {
    /// An empty filter (the store's chats are noted as they are read at start-up).
    pub fn new() -> Self {
        Self {
            filter: AtomicBloomFilter::with_false_pos(FALSE_POSITIVES)
                .expected_items(EXPECTED_CHATS),
        }
    }

    /// Notes a chat about to be written (before the write).
    pub fn note(&self, chat: &ChatId) {
        self.note_id(chat.as_str());
    }

    /// Notes a chat id as the store holds it.
    pub fn note_id(&self, id: &str) {
        self.filter.insert(id);
    }

    /// False when the store surely does not hold `chat`.
    pub fn may_hold(&self, chat: &ChatId) -> bool {
        self.filter.contains(chat.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(s: &str) -> ChatId {
        ChatId::parse(s.to_string()).unwrap()
    }

    #[test]
    fn holds_what_was_stored_and_noted() {
        let present = PresentChats::new();
        present.note_id("a");
        present.note_id("b");
        assert!(present.may_hold(&chat("a")));
        assert!(present.may_hold(&chat("b")));
        present.note(&chat("c"));
        assert!(present.may_hold(&chat("c")));
        // A filter of three ids at 1% denies nearly every other id.
        let denied = (0..1000)
            .filter(|i| !present.may_hold(&chat(&format!("other-{i}"))))
            .count();
        assert!(denied > 950, "{denied} of 1000 denied");
    }
}
