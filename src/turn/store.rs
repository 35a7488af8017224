//! The shared record of running turns, as opaque bytes the caller sealed: who runs each
//! chat's turn (a lease with a generation that fences a stale owner), the messages queued
//! behind it, cancel requests, and each turn's frame log (for resume and offline delivery).
//!
//! Two implementations: [`memory`] (embedded mode: one process) and [`redis`] (cluster
//! mode: one Redis server or a Redis Cluster; every key of a chat carries the hash tag
//! `{c:<chat id>}`, a task's lookup key `{t:<task id>}`, so each atomic step touches one
//! slot). One contract suite, `tests/it/turn_store_contract.rs`, runs against both.
//!
//! Nothing here seals or opens: values arrive sealed (user messages, frames) and leave as
//! they came. Nothing here knows the wire protocol.

pub mod memory;
pub mod patience;
pub mod redis;

use std::time::Duration;

use chatd_protocol::{ChatId, MessageId, TaskId};
use futures_util::future::BoxFuture;

use crate::crypto::UserHash;
use crate::ids::NodeId;

/// Turns noted per user at most ([`TurnStore::note_turn`]; the oldest go first).
pub const RECENT_TURNS: usize = 32;

/// A turn noted among its owner's recent ones ([`TurnStore::note_turn`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotedTurn {
    pub chat: ChatId,
    pub task: TaskId,
    /// When its log began (unix ms).
    pub at_ms: i64,
}

/// Who runs a chat's turn, and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub chat: ChatId,
    pub task: TaskId,
    /// The newest user message the turn answers.
    pub message: MessageId,
    /// Grows on every start, hand-over and take-over of the chat; a renewal or a log
    /// append under an older generation is refused with [`TurnStoreError::Fenced`].
    pub generation: u64,
    pub node: NodeId,
    /// The user whose chat it is.
    pub owner: UserHash,
}

/// A message that starts a turn or waits for one.
#[derive(Debug, Clone)]
pub struct Admit<'a> {
    pub chat: &'a ChatId,
    pub owner: &'a UserHash,
    /// The task id the turn gets if it starts now.
    pub task: &'a TaskId,
    pub node: &'a NodeId,
    pub message: &'a MessageId,
    /// The sealed message, kept only when it has to wait.
    pub value: Vec<u8>,
    /// How long the lease lasts without renewal.
    pub lease: Duration,
    pub max_queue: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// No lease: the caller's node now runs `task` under this lease (the message is not
    /// stored). A lease whose time ran out still holds the chat until a node takes it over
    /// ([`TurnStore::take_over_expired`]), so a lost turn is always ended before the next.
    Started(Lease),
    /// A turn runs: the message waits in the chat's queue. A message id already queued
    /// is replaced in place (a re-send with history).
    Queued { active: Lease },
    /// The running turn answers this very message (a re-send): nothing was stored.
    Running { active: Lease },
    /// A turn runs and its queue is full; nothing was stored.
    QueueFull { active: Lease },
    /// A turn of another owner runs in this chat; nothing was stored.
    Foreign,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Messages were queued: all of them (oldest first) belong to the next turn, which
    /// runs on the same node under `lease` (new task, next generation, fresh lease).
    Next { lease: Lease, queued: Vec<Vec<u8>> },
    /// Nothing was queued: the chat is free.
    Free,
}

/// Why someone asked the running turn to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// `cancel_ai_task` from one of the owner's devices.
    Revoked,
    /// The chat was deleted: the turn must write nothing back.
    ChatDeleted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// A cancel request recorded for this task (read on every renewal).
    pub cancel: Option<CancelReason>,
    /// The store had lost the chat (no lease, no newer generation: Redis restarted empty)
    /// and the lease is the running turn's again; what was queued behind it is gone.
    pub reclaimed: bool,
}

/// A turn's log read after a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRead {
    /// `(index, value)` in order; indexes start at 1 and are never reused.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// The smallest index the log still holds (entries before it were trimmed); `None`
    /// when the log holds no entries.
    pub first: Option<u64>,
    /// The index of the newest entry ever appended (0 when none).
    pub last: u64,
    /// [`TurnStore::log_end`] was called: no entry will follow.
    pub ended: bool,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum TurnStoreError {
    /// The lease (or the log) belongs to a newer generation: the caller lost its turn.
    #[error("the turn belongs to a newer generation")]
    Fenced,
    #[error("turn store unavailable: {0}")]
    Unavailable(String),
    #[error("turn store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("turn store answered something unexpected: {0}")]
    Protocol(String),
    /// A [`LogSlot::contiguous`] append found the log's newest entry at `last`, before the
    /// slot's index − 1: the log lost entries (the store restarted from an older snapshot,
    /// or without its data). Nothing was appended.
    #[error("the turn log lost entries after {last}")]
    Behind { last: u64 },
}

/// Where a log entry goes: the writer's lease generation (fencing) and the frame's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSlot {
    pub generation: u64,
    pub index: u64,
    /// The entry must follow the log's newest one: a log whose newest is older than
    /// `index − 1` refuses it with [`TurnStoreError::Behind`].
    pub contiguous: bool,
}

impl LogSlot {
    pub fn new(generation: u64, index: u64) -> Self {
        Self {
            generation,
            index,
            contiguous: false,
        }
    }

    /// The slot, refused when the log does not reach `index − 1`.
    pub fn contiguous(self) -> Self {
        Self {
            contiguous: true,
            ..self
        }
    }
}

pub trait TurnStore: Send + Sync {
    /// In one atomic step: starts the turn when the chat has no lease, otherwise queues
    /// the message (or refuses it when the queue is full, or when the running turn
    /// answers it already).
    fn admit<'a>(&'a self, req: Admit<'a>) -> BoxFuture<'a, Result<Admitted, TurnStoreError>>;

    /// Extends a running turn's lease by `ttl`; `Fenced` when the lease expired or moved
    /// to another generation. With no lease and no newer generation at all (the store lost
    /// its data), the lease is put back (`reclaimed`). Reports a recorded cancel request.
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Renewed, TurnStoreError>>;

    /// Ends the running turn: hands the queued messages to the next turn (`next`, same
    /// node, next generation, lease of `ttl`) or frees the chat. `Fenced` when `lease` is
    /// no longer the chat's lease.
    fn finish<'a>(
        &'a self,
        lease: &'a Lease,
        next: &'a TaskId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Finished, TurnStoreError>>;

    /// The chat's live lease.
    fn active<'a>(
        &'a self,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<Lease>, TurnStoreError>>;

    /// The live lease of a task (what `cancel_ai_task` names).
    fn find_task<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Option<Lease>, TurnStoreError>>;

    /// Records a cancel request for the lease's task, seen by its next renewal (kept
    /// for `ttl`). A `ChatDeleted` request also drops the chat's queue.
    fn request_cancel<'a>(
        &'a self,
        lease: &'a Lease,
        reason: CancelReason,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), TurnStoreError>>;

    /// Leases whose time ran out (their node stopped renewing), at most `limit`: each is
    /// moved to `node` with the next generation (same task, lease of `ttl`) and its task's
    /// log is fenced to that generation, so exactly one node ends each lost turn. A task
    /// with no log gets none: the taker's first append fences it, and until then the old
    /// node may put back a log the store lost (Redis came back holding the lease only).
    fn take_over_expired<'a>(
        &'a self,
        node: &'a NodeId,
        ttl: Duration,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Lease>, TurnStoreError>>;

    /// Appends one entry to the log of `(chat, task)` under the writer's index
    /// (`slot.index`: 1, 2, … as the turn's frames are numbered) and returns it. An index
    /// the log has passed is a repeat (a retried append that had landed): nothing is
    /// written. So the log's numbering is the writer's even when the store lost entries (a
    /// restart from an older snapshot, or without data). Refused with `Fenced` when the log
    /// is fenced to a newer generation than `slot.generation`, or was ended. Keeps at most
    /// `max_len` entries (the oldest go first) and expires `keep` after the newest append.
    fn log_append<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        slot: LogSlot,
        entry: Vec<u8>,
        max_len: usize,
        keep: Duration,
    ) -> BoxFuture<'a, Result<u64, TurnStoreError>>;

    /// The entries after index `after`; `None` when the log does not exist (never
    /// written, or expired).
    fn log_read<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        after: u64,
    ) -> BoxFuture<'a, Result<Option<LogRead>, TurnStoreError>>;

    /// Marks the log ended (no appends after this) and lets it expire `keep` from now.
    /// `Fenced` (and nothing changed) when the log is fenced to a newer generation than
    /// `generation` (a node that lost the turn cannot end it under its new owner).
    fn log_end<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        generation: u64,
        keep: Duration,
    ) -> BoxFuture<'a, Result<(), TurnStoreError>>;

    /// Notes that `owner` has the turn, which logs frames (its log's first entry, or
    /// again after the store lost its data; noted at `turn.at_ms`, when its log began),
    /// for nodes whose link to the others was down meanwhile ([`TurnStore::recent_turns`]).
    /// A user's newest [`RECENT_TURNS`] notes are kept, for `keep` after the last note.
    fn note_turn<'a>(
        &'a self,
        owner: &'a UserHash,
        turn: &'a NotedTurn,
        keep: Duration,
    ) -> BoxFuture<'a, Result<(), TurnStoreError>>;

    /// The turns noted for `owner` that began at or after `since_ms` (unix ms), oldest
    /// first.
    fn recent_turns<'a>(
        &'a self,
        owner: &'a UserHash,
        since_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<NotedTurn>, TurnStoreError>>;

    /// Reachability for `/readyz`.
    fn ping(&self) -> BoxFuture<'_, Result<(), TurnStoreError>>;
}
