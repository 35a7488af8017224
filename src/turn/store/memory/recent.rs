//! The memory store's notes of each user's recent turns ([`super::super::TurnStore::note_turn`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::super::{NotedTurn, RECENT_TURNS};
use crate::crypto::UserHash;

/// Notes between two sweeps of users whose notes all expired.
const SWEEP_EVERY: u32 = 1024;

/// A user's notes: when they expire, and each turn, the oldest (by when it began) first.
type Notes = (Instant, VecDeque<NotedTurn>);

#[derive(Default)]
struct Users {
    users: HashMap<UserHash, Notes>,
    notes: u32,
}

/// The notes of every user. A std Mutex: a few map updates, never held across an await.
#[derive(Default)]
pub(super) struct Recent(Mutex<Users>);

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Users> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn note(&self, owner: &UserHash, turn: &NotedTurn, keep: Duration) {
        let now = Instant::now();
        let mut s = self.lock();
        let s = &mut *s;
        s.notes = s.notes.wrapping_add(1);
        if s.notes.is_multiple_of(SWEEP_EVERY) {
            s.users.retain(|_, (until, _)| *until > now);
        }
        let entry = (s.users.entry(owner.clone())).or_insert_with(|| (now, VecDeque::new()));
        if entry.0 <= now {
            entry.1.clear();
        }
        entry.0 = now + keep;
        entry
            .1
            .retain(|n| !(n.chat == turn.chat && n.task == turn.task));
        entry.1.push_back(turn.clone());
        entry.1.make_contiguous().sort_by_key(|n| n.at_ms);
        while entry.1.len() > RECENT_TURNS {
            entry.1.pop_front();
        }
    }

    pub(super) fn since(&self, owner: &UserHash, since_ms: i64) -> Vec<NotedTurn> {
        let s = self.lock();
        let Some((until, notes)) = s.users.get(owner) else {
            return Vec::new();
        };
        if *until <= Instant::now() {
            return Vec::new();
        }
        (notes.iter())
            .filter(|n| n.at_ms >= since_ms)
            .cloned()
            .collect()
    }
}
