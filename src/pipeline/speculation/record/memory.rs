//! The speculation record in process (embedded mode): the chats' records in a map bounded
//! by entries (a hint, so simply cleared when full) and by their lifetime, on tokio's
//! clock; the shared record behind a lock. Nothing here leaves the process, so nothing is
//! sealed (like the in-process turn store).

use std::sync::Mutex;
use std::time::Duration;

use chatd_protocol::ChatId;
use dashmap::DashMap;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{ChatRecord, Outcome, RecordError, SharedRecord, Snapshot, SpeculationRecords};
use crate::crypto::UserHash;

pub struct MemoryRecords {
    chats: DashMap<(UserHash, ChatId), (ChatRecord, Instant)>,
    /// Held only to copy or add to (never across an await).
    shared: Mutex<SharedRecord>,
    max_entries: usize,
    ttl: Duration,
}

impl Default for MemoryRecords {
    fn default() -> Self {
        Self::new(50_000, Duration::from_secs(24 * 3600))
    }
}

impl MemoryRecords {
    /// At most `max_entries` chats, each kept `ttl` from its last write.
    pub fn new(max_entries: usize, ttl: Duration) -> Self {
        Self {
            chats: DashMap::new(),
            shared: Mutex::new(SharedRecord::default()),
            max_entries,
            ttl,
        }
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, SharedRecord> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn chat(&self, user: &UserHash, chat: &ChatId) -> Option<ChatRecord> {
        let key = (user.clone(), chat.clone());
        let now = Instant::now();
        let found = self.chats.get(&key).map(|e| (e.0.clone(), e.1 > now))?;
        match found {
            (record, true) => Some(record),
            (_, false) => {
                self.chats.remove_if(&key, |_, (_, until)| *until <= now);
                None
            }
        }
    }
}

impl SpeculationRecords for MemoryRecords {
    fn read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Snapshot, RecordError>> {
        let snapshot = Snapshot {
            chat: self.chat(user, chat),
            shared: *self.shared(),
        };
        Box::pin(std::future::ready(Ok(snapshot)))
    }

    fn write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        record: ChatRecord,
        outcome: Option<Outcome>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        if let Some(outcome) = outcome {
            self.shared().add(outcome);
        }
        let key = (user.clone(), chat.clone());
        if self.chats.len() >= self.max_entries && !self.chats.contains_key(&key) {
            self.chats.clear();
        }
        self.chats.insert(key, (record, Instant::now() + self.ttl));
        Box::pin(std::future::ready(Ok(())))
    }

    fn forget<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        self.chats.remove(&(user.clone(), chat.clone()));
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{StoredPlan, Tally};
    use super::*;

    fn record() -> ChatRecord {
        ChatRecord {
            plan: StoredPlan {
                model: "m".into(),
                category: "general".into(),
                language: "en".into(),
                skills: Vec::new(),
                focus_mode: None,
                injection_caution: false,
            },
            tally: Tally::default(),
        }
    }

    /// Expiry on tokio's clock, so paused time drives it; a full map starts over.
    #[tokio::test(start_paused = true)]
    async fn records_expire_and_the_map_stays_bounded() {
        let records = MemoryRecords::new(2, Duration::from_secs(100));
        let user = UserHash::from_hex(&"a".repeat(32)).unwrap();
        let chat = |c: &str| ChatId::parse(c).unwrap();
        records
            .write(&user, &chat("c1"), record(), None)
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(99)).await;
        let read = records.read(&user, &chat("c1")).await.ok();
        assert!(read.and_then(|s| s.chat).is_some(), "kept for its TTL");
        tokio::time::advance(Duration::from_secs(2)).await;
        let read = records.read(&user, &chat("c1")).await.ok();
        assert!(read.and_then(|s| s.chat).is_none(), "expired");
        assert!(records.chats.is_empty(), "an expired record is dropped");
        for c in ["c1", "c2", "c3"] {
            records
                .write(&user, &chat(c), record(), None)
                .await
                .unwrap();
        }
        assert_eq!(
            records.chats.len(),
            1,
            "cleared when full, then the new one"
        );
    }
}
