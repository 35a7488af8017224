//! The turn store in process (embedded mode, and tests of several nodes in one process):
//! the same contract as the Redis store, with expiry on tokio's clock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ChatId, MessageId, TaskId};
use futures_util::future::{BoxFuture, ready};
use tokio::time::Instant;

use super::{
    Admit, Admitted, CancelReason, Finished, Lease, LogRead, LogSlot, NotedTurn, Renewed,
    TurnStore, TurnStoreError,
};
use crate::crypto::UserHash;
use crate::ids::NodeId;

mod log;
mod recent;

use log::Log;

/// Operations between two sweeps of idle chats.
const SWEEP_EVERY: u32 = 1024;
/// Logs kept at most (the oldest go first): a busy node's resume window stays bounded.
const MAX_LOGS: usize = 5_000;

#[derive(Default)]
struct Chat {
    lease: Option<(Lease, Instant)>,
    /// The newest generation handed out for the chat.
    generation: u64,
    queue: VecDeque<(MessageId, Vec<u8>)>,
    /// Cancel requests by task, until they expire.
    cancels: HashMap<TaskId, (CancelReason, Instant)>,
}

#[derive(Default)]
struct State {
    chats: HashMap<ChatId, Chat>,
    logs: HashMap<(ChatId, TaskId), Log>,
    /// Logs in the order they were created, with the earliest they can expire (their
    /// expiry only moves later), to expire and cap them without a scan.
    log_order: VecDeque<(Instant, (ChatId, TaskId))>,
    ops: u32,
}

impl State {
    /// The chat's lease if it is still live.
    fn live(&self, chat: &ChatId, now: Instant) -> Option<&Lease> {
        let (lease, until) = self.chats.get(chat)?.lease.as_ref()?;
        (*until > now).then_some(lease)
    }

    /// Drops expired logs from the front of the creation order (and the oldest beyond
    /// the cap), and now and then idle chats (bounded memory).
    fn sweep(&mut self, now: Instant) {
        while let Some((earliest, key)) = self.log_order.front() {
            let over = self.logs.len() > MAX_LOGS;
            // Looked up only when it may have expired.
            if !over && *earliest > now {
                break;
            }
            if !over && self.logs.get(key).is_some_and(|l| l.expires > now) {
                // Still in use: it goes to the back, with its current expiry.
                if let Some((_, key)) = self.log_order.pop_front() {
                    let expires = self.logs.get(&key).map_or(now, |l| l.expires);
                    self.log_order.push_back((expires, key));
                }
                break;
            }
            if let Some((_, key)) = self.log_order.pop_front() {
                self.logs.remove(&key);
            }
        }
        self.ops += 1;
        if self.ops < SWEEP_EVERY {
            return;
        }
        self.ops = 0;
        self.chats.retain(|_, c| {
            c.cancels.retain(|_, (_, until)| *until > now);
            c.lease.is_some() || !c.queue.is_empty() || !c.cancels.is_empty()
        });
    }
}

/// A handle over the state; every method is one critical section.
#[derive(Default)]
pub struct MemoryTurnStore {
    /// A std Mutex: each operation is a few map updates, never an await, and one lock
    /// makes every operation atomic as the Redis scripts are.
    state: Mutex<State>,
    recent: recent::Recent,
}

impl MemoryTurnStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type Res<'a, T> = BoxFuture<'a, Result<T, TurnStoreError>>;

impl TurnStore for MemoryTurnStore {
    fn admit<'a>(&'a self, req: Admit<'a>) -> Res<'a, Admitted> {
        let now = Instant::now();
        let mut s = self.lock();
        s.sweep(now);
        // Any lease holds the chat, an expired one until it is taken over.
        let held = s.chats.get(req.chat).and_then(|c| c.lease.as_ref());
        if let Some((active, _)) = held.cloned() {
            if &active.owner != req.owner {
                return Box::pin(ready(Ok(Admitted::Foreign)));
            }
            if &active.message == req.message {
                return Box::pin(ready(Ok(Admitted::Running { active })));
            }
            let chat = s.chats.entry(req.chat.clone()).or_default();
            if let Some(q) = chat.queue.iter_mut().find(|(m, _)| m == req.message) {
                q.1 = req.value;
                return Box::pin(ready(Ok(Admitted::Queued { active })));
            }
            if chat.queue.len() >= req.max_queue {
                return Box::pin(ready(Ok(Admitted::QueueFull { active })));
            }
            chat.queue.push_back((req.message.clone(), req.value));
            return Box::pin(ready(Ok(Admitted::Queued { active })));
        }
        let chat = s.chats.entry(req.chat.clone()).or_default();
        chat.generation += 1;
        let lease = Lease {
            chat: req.chat.clone(),
            task: req.task.clone(),
            message: req.message.clone(),
            generation: chat.generation,
            node: req.node.clone(),
            owner: req.owner.clone(),
        };
        chat.lease = Some((lease.clone(), now + req.lease));
        Box::pin(ready(Ok(Admitted::Started(lease))))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> Res<'a, Renewed> {
        let now = Instant::now();
        let mut s = self.lock();
        let chat = s.chats.entry(lease.chat.clone()).or_default();
        let mut reclaimed = false;
        match &mut chat.lease {
            Some((held, until)) if held == lease && *until > now => *until = now + ttl,
            // Lost (the store forgot the chat): the running turn holds it again.
            None if chat.generation <= lease.generation => {
                chat.generation = lease.generation;
                chat.lease = Some((lease.clone(), now + ttl));
                reclaimed = true;
            }
            _ => return Box::pin(ready(Err(TurnStoreError::Fenced))),
        }
        let cancel = chat
            .cancels
            .get(&lease.task)
            .filter(|(_, until)| *until > now)
            .map(|(r, _)| *r);
        Box::pin(ready(Ok(Renewed { cancel, reclaimed })))
    }

    fn finish<'a>(
        &'a self,
        lease: &'a Lease,
        next: &'a TaskId,
        ttl: Duration,
    ) -> Res<'a, Finished> {
        let now = Instant::now();
        let mut s = self.lock();
        let Some(chat) = s.chats.get_mut(&lease.chat) else {
            return Box::pin(ready(Err(TurnStoreError::Fenced)));
        };
        if chat.lease.as_ref().is_none_or(|(held, _)| held != lease) {
            return Box::pin(ready(Err(TurnStoreError::Fenced)));
        }
        chat.cancels.remove(&lease.task);
        if chat.queue.is_empty() {
            chat.lease = None;
            return Box::pin(ready(Ok(Finished::Free)));
        }
        let queued: Vec<(MessageId, Vec<u8>)> = chat.queue.drain(..).collect();
        chat.generation += 1;
        let next_lease = Lease {
            task: next.clone(),
            message: queued
                .last()
                .map_or_else(|| lease.message.clone(), |(m, _)| m.clone()),
            generation: chat.generation,
            ..lease.clone()
        };
        chat.lease = Some((next_lease.clone(), now + ttl));
        Box::pin(ready(Ok(Finished::Next {
            lease: next_lease,
            queued: queued.into_iter().map(|(_, v)| v).collect(),
        })))
    }

    fn active<'a>(&'a self, chat: &'a ChatId) -> Res<'a, Option<Lease>> {
        let s = self.lock();
        Box::pin(ready(Ok(s.live(chat, Instant::now()).cloned())))
    }

    fn find_task<'a>(&'a self, task: &'a TaskId) -> Res<'a, Option<Lease>> {
        let now = Instant::now();
        let s = self.lock();
        let found = s
            .chats
            .values()
            .filter_map(|c| c.lease.as_ref())
            .find(|(l, until)| &l.task == task && *until > now)
            .map(|(l, _)| l.clone());
        Box::pin(ready(Ok(found)))
    }

    fn request_cancel<'a>(
        &'a self,
        lease: &'a Lease,
        reason: CancelReason,
        ttl: Duration,
    ) -> Res<'a, ()> {
        let now = Instant::now();
        let mut s = self.lock();
        let chat = s.chats.entry(lease.chat.clone()).or_default();
        chat.cancels.insert(lease.task.clone(), (reason, now + ttl));
        if reason == CancelReason::ChatDeleted {
            chat.queue.clear();
        }
        Box::pin(ready(Ok(())))
    }

    fn take_over_expired<'a>(
        &'a self,
        node: &'a NodeId,
        ttl: Duration,
        limit: usize,
    ) -> Res<'a, Vec<Lease>> {
        let now = Instant::now();
        let mut s = self.lock();
        let mut taken = Vec::new();
        for chat in s.chats.values_mut() {
            if taken.len() >= limit {
                break;
            }
            let Some((lease, until)) = &chat.lease else {
                continue;
            };
            if *until > now {
                continue;
            }
            chat.generation += 1;
            let moved = Lease {
                generation: chat.generation,
                node: node.clone(),
                ..lease.clone()
            };
            chat.lease = Some((moved.clone(), now + ttl));
            taken.push(moved);
        }
        for lease in &taken {
            if let Some(log) = s.logs.get_mut(&(lease.chat.clone(), lease.task.clone())) {
                log.fence = log.fence.max(lease.generation);
            }
        }
        Box::pin(ready(Ok(taken)))
    }

    fn log_append<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        slot: LogSlot,
        entry: Vec<u8>,
        max_len: usize,
        keep: Duration,
    ) -> Res<'a, u64> {
        let generation = slot.generation;
        let now = Instant::now();
        let mut s = self.lock();
        s.sweep(now);
        let State {
            logs, log_order, ..
        } = &mut *s;
        let log = match logs.entry((chat.clone(), task.clone())) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            // A writer that wants no hole gets nothing written (see below).
            std::collections::hash_map::Entry::Vacant(_) if slot.contiguous && slot.index > 1 => {
                return Box::pin(ready(Err(TurnStoreError::Behind { last: 0 })));
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                log_order.push_back((now + keep, v.key().clone()));
                v.insert(Log::new(generation, now + keep))
            }
        };
        if log.expires <= now {
            *log = Log::new(generation, now + keep);
        }
        if log.ended || generation < log.fence {
            return Box::pin(ready(Err(TurnStoreError::Fenced)));
        }
        if slot.contiguous && slot.index > log.last + 1 {
            let last = log.last;
            return Box::pin(ready(Err(TurnStoreError::Behind { last })));
        }
        log.fence = generation;
        if slot.index <= log.last {
            return Box::pin(ready(Ok(slot.index)));
        }
        log.last = slot.index;
        log.entries.push_back((log.last, entry));
        while log.entries.len() > max_len.max(1) {
            log.entries.pop_front();
        }
        log.expires = now + keep;
        Box::pin(ready(Ok(log.last)))
    }

    fn log_read<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        after: u64,
    ) -> Res<'a, Option<LogRead>> {
        let now = Instant::now();
        let s = self.lock();
        let read = s
            .logs
            .get(&(chat.clone(), task.clone()))
            .filter(|l| l.expires > now)
            .map(|l| LogRead {
                entries: l
                    .entries
                    .iter()
                    .filter(|(i, _)| *i > after)
                    .cloned()
                    .collect(),
                first: l.entries.front().map(|(i, _)| *i),
                last: l.last,
                ended: l.ended,
            });
        Box::pin(ready(Ok(read)))
    }

    fn log_end<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        generation: u64,
        keep: Duration,
    ) -> Res<'a, ()> {
        let now = Instant::now();
        let mut s = self.lock();
        if let Some(log) = s.logs.get_mut(&(chat.clone(), task.clone())) {
            if generation < log.fence {
                return Box::pin(ready(Err(TurnStoreError::Fenced)));
            }
            log.ended = true;
            log.expires = now + keep;
        }
        Box::pin(ready(Ok(())))
    }

    fn note_turn<'a>(
        &'a self,
        owner: &'a UserHash,
        turn: &'a NotedTurn,
        keep: Duration,
    ) -> Res<'a, ()> {
        self.recent.note(owner, turn, keep);
        Box::pin(ready(Ok(())))
    }

    fn recent_turns<'a>(&'a self, owner: &'a UserHash, since_ms: i64) -> Res<'a, Vec<NotedTurn>> {
        Box::pin(ready(Ok(self.recent.since(owner, since_ms))))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), TurnStoreError>> {
        Box::pin(ready(Ok(())))
    }
}
