//! The turn store on Redis (cluster mode), on one server or a Redis Cluster. Each chat's
//! keys share the hash tag `{c:<chat id>}` (its lease, generation, queue, cancel flags and
//! the logs of its turns, each a Stream), so every step is one Lua script on one slot. Two
//! keys live elsewhere, each written beside the chat's script: `{t:<task>}` (which chat a
//! task is in, for `cancel_ai_task`) and `{turns}:leases` (every lease's deadline, for the
//! nodes that look for lost turns, recorded before an admission too; a take-over
//! re-checks the lease inside its own script, so a stale entry there is harmless). This file owns the keys, the connection and a
//! lease's life (admit, renew, finish, cancel); taking over lost turns is in [`take_over`],
//! the turns' logs in [`logs`], reading script replies in [`reply`].

mod logs;
mod recent;
mod reply;
mod scripts;
mod take_over;

use std::time::Duration;

use ::redis::Script;
use chatd_protocol::{ChatId, TaskId};
use futures_util::future::BoxFuture;

use self::reply::{lease_at, number, strings, text};
use super::{
    Admit, Admitted, CancelReason, Finished, Lease, LogRead, LogSlot, NotedTurn, Renewed,
    TurnStore, TurnStoreError,
};
use crate::crypto::UserHash;
use crate::ids::NodeId;
use crate::redis::{Redis, RedisError};

/// How long a chat's turn keys live after their last use (leases, queues, generations).
const KEEP: Duration = Duration::from_secs(24 * 3600);
/// Every lease's deadline (a sorted set), for the nodes that look for lost turns.
const LEASES: &str = "{turns}:leases";

/// A key of the chat's turn state, in the chat's hash slot.
fn chat_key(chat: &ChatId, what: &str) -> String {
    format!("{{c:{chat}}}:{what}")
}
/// The Stream and the meta hash of a turn's log.
fn log_keys(chat: &ChatId, task: &TaskId) -> (String, String) {
    (
        chat_key(chat, &format!("log:{task}")),
        chat_key(chat, &format!("logmeta:{task}")),
    )
}
/// Which chat a task runs in.
fn task_key(task: &TaskId) -> String {
    format!("{{t:{task}}}:chat")
}

impl From<RedisError> for TurnStoreError {
    fn from(e: RedisError) -> Self {
        match e {
            RedisError::Timeout(d) => TurnStoreError::Timeout(d),
            RedisError::Unavailable(m) => TurnStoreError::Unavailable(m),
        }
    }
}

/// The turn store on Redis: the connection and the loaded scripts.
pub struct RedisTurnStore {
    redis: Redis,
    admit: Script,
    renew: Script,
    finish: Script,
    active: Script,
    take_over: Script,
    cancel: Script,
    log_append: Script,
    log_read: Script,
    log_end: Script,
    note_turn: Script,
}

impl RedisTurnStore {
    /// Connects lazily (`cluster`: `url` is a seed node of a Redis Cluster).
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> Result<Self, TurnStoreError> {
        let with = |body| Script::new(&scripts::with_prelude(body));
        Ok(Self {
            redis: Redis::new(url, cluster, timeout)?,
            admit: with(scripts::ADMIT),
            renew: with(scripts::RENEW),
            finish: with(scripts::FINISH),
            active: with(scripts::ACTIVE),
            take_over: with(scripts::TAKE_OVER),
            cancel: Script::new(scripts::CANCEL),
            log_append: Script::new(scripts::LOG_APPEND),
            log_read: Script::new(scripts::LOG_READ),
            log_end: Script::new(scripts::LOG_END),
            note_turn: Script::new(recent::NOTE),
        })
    }

    async fn zadd_lease(&self, chat: &ChatId, until: u64) {
        self.zadd_lease_with(chat, until, None).await;
    }

    /// Records a deadline for a lease about to be admitted, unless the chat has one: the
    /// lease is then never without one, even when its node stops (or is cut from Redis)
    /// between the admission and its reply. By this node's clock (the server's is not
    /// known before the script); a take-over re-checks the lease, and refreshes an early
    /// deadline.
    async fn zadd_lease_ahead(&self, chat: &ChatId, lease: Duration) {
        let until = crate::clock::unix_millis().max(0) as u64 + lease.as_millis() as u64;
        self.zadd_lease_with(chat, until, Some("NX")).await;
    }

    async fn zadd_lease_with(&self, chat: &ChatId, until: u64, only: Option<&str>) {
        let mut conn = match self.redis.conn().await {
            Ok(c) => c,
            Err(_) => return,
        };
        let mut cmd = ::redis::cmd("ZADD");
        cmd.arg(LEASES).arg(only).arg(until).arg(chat.as_str());
        if let Err(e) = self.redis.run(cmd.query_async::<()>(&mut conn)).await {
            tracing::debug!(error = %e, "cannot record a lease deadline");
        }
    }

    async fn zrem_lease(&self, chat: &ChatId) {
        if let Ok(mut conn) = self.redis.conn().await {
            let mut cmd = ::redis::cmd("ZREM");
            cmd.arg(LEASES).arg(chat.as_str());
            let _ = self.redis.run(cmd.query_async::<()>(&mut conn)).await;
        }
    }

    async fn set_task(&self, lease: &Lease) {
        if let Ok(mut conn) = self.redis.conn().await {
            let mut cmd = ::redis::cmd("SET");
            cmd.arg(task_key(&lease.task))
                .arg(lease.chat.as_str())
                .arg("PX")
                .arg(KEEP.as_millis() as u64);
            if let Err(e) = self.redis.run(cmd.query_async::<()>(&mut conn)).await {
                tracing::debug!(error = %e, "cannot record a task's chat");
            }
        }
    }
}

type Res<'a, T> = BoxFuture<'a, Result<T, TurnStoreError>>;

impl TurnStore for RedisTurnStore {
    fn admit<'a>(&'a self, req: Admit<'a>) -> Res<'a, Admitted> {
        Box::pin(async move {
            self.zadd_lease_ahead(req.chat, req.lease).await;
            let mut conn = self.redis.conn().await?;
            let mut call = self.admit.key(chat_key(req.chat, "lease"));
            call.key(chat_key(req.chat, "gen"))
                .key(chat_key(req.chat, "queue"))
                .key(chat_key(req.chat, "queued"))
                .arg(req.task.as_str())
                .arg(req.message.as_str())
                .arg(req.node.as_str())
                .arg(req.owner.as_str())
                .arg(req.lease.as_millis() as u64)
                .arg(req.value)
                .arg(req.max_queue)
                .arg(KEEP.as_millis() as u64);
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            if r.first().map(Vec::as_slice) == Some(b"foreign") {
                return Ok(Admitted::Foreign);
            }
            let (lease, until) = lease_at(req.chat, &r)?;
            Ok(match text(&r[0])? {
                "started" => {
                    self.zadd_lease(req.chat, until).await;
                    self.set_task(&lease).await;
                    Admitted::Started(lease)
                }
                "queued" => Admitted::Queued { active: lease },
                "running" => Admitted::Running { active: lease },
                _ => Admitted::QueueFull { active: lease },
            })
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> Res<'a, Renewed> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let mut call = self.renew.key(chat_key(&lease.chat, "lease"));
            call.key(chat_key(&lease.chat, &format!("cancel:{}", lease.task)))
                .key(chat_key(&lease.chat, "gen"))
                .arg(lease.task.as_str())
                .arg(lease.generation)
                .arg(ttl.as_millis() as u64)
                .arg(lease.message.as_str())
                .arg(lease.node.as_str())
                .arg(lease.owner.as_str())
                .arg(KEEP.as_millis() as u64);
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            let reclaimed = r.first().map(Vec::as_slice) == Some(b"reclaimed");
            let ok = reclaimed || r.first().map(Vec::as_slice) == Some(b"ok");
            if !ok || r.len() < 3 {
                return Err(TurnStoreError::Fenced);
            }
            self.zadd_lease(&lease.chat, number(&r[1])?).await;
            if reclaimed {
                self.set_task(lease).await;
            }
            let cancel = match text(&r[2])? {
                "revoked" => Some(CancelReason::Revoked),
                "chat_deleted" => Some(CancelReason::ChatDeleted),
                _ => None,
            };
            Ok(Renewed { cancel, reclaimed })
        })
    }

    fn finish<'a>(
        &'a self,
        lease: &'a Lease,
        next: &'a TaskId,
        ttl: Duration,
    ) -> Res<'a, Finished> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let chat = &lease.chat;
            let mut call = self.finish.key(chat_key(chat, "lease"));
            call.key(chat_key(chat, "gen"))
                .key(chat_key(chat, "queue"))
                .key(chat_key(chat, "queued"))
                .key(chat_key(chat, &format!("cancel:{}", lease.task)))
                .arg(lease.task.as_str())
                .arg(lease.generation)
                .arg(next.as_str())
                .arg(ttl.as_millis() as u64)
                .arg(KEEP.as_millis() as u64);
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            match r.first().map(Vec::as_slice) {
                Some(b"free") => {
                    self.zrem_lease(chat).await;
                    Ok(Finished::Free)
                }
                Some(b"next") => {
                    let (next_lease, until) = lease_at(chat, &r)?;
                    self.zadd_lease(chat, until).await;
                    self.set_task(&next_lease).await;
                    Ok(Finished::Next {
                        lease: next_lease,
                        queued: r[7..].to_vec(),
                    })
                }
                _ => Err(TurnStoreError::Fenced),
            }
        })
    }

    fn active<'a>(&'a self, chat: &'a ChatId) -> Res<'a, Option<Lease>> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let call = self.active.key(chat_key(chat, "lease"));
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            if r.first().map(Vec::as_slice) != Some(b"live") {
                return Ok(None);
            }
            Ok(Some(lease_at(chat, &r)?.0))
        })
    }

    fn find_task<'a>(&'a self, task: &'a TaskId) -> Res<'a, Option<Lease>> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let chat: Option<String> = self
                .redis
                .run(
                    ::redis::cmd("GET")
                        .arg(task_key(task))
                        .query_async(&mut conn),
                )
                .await?;
            let Some(chat) = chat.and_then(|c| ChatId::parse(c).ok()) else {
                return Ok(None);
            };
            Ok(self.active(&chat).await?.filter(|l| &l.task == task))
        })
    }

    fn request_cancel<'a>(
        &'a self,
        lease: &'a Lease,
        reason: CancelReason,
        ttl: Duration,
    ) -> Res<'a, ()> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let chat = &lease.chat;
            let mut call = self
                .cancel
                .key(chat_key(chat, &format!("cancel:{}", lease.task)));
            call.key(chat_key(chat, "queue"))
                .key(chat_key(chat, "queued"))
                .arg(match reason {
                    CancelReason::Revoked => "revoked",
                    CancelReason::ChatDeleted => "chat_deleted",
                })
                .arg(ttl.as_millis() as u64)
                .arg(u8::from(reason == CancelReason::ChatDeleted));
            self.redis.run(call.invoke_async::<()>(&mut conn)).await?;
            Ok(())
        })
    }

    fn take_over_expired<'a>(
        &'a self,
        node: &'a NodeId,
        ttl: Duration,
        limit: usize,
    ) -> Res<'a, Vec<Lease>> {
        Box::pin(take_over::expired(self, node, ttl, limit))
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
        Box::pin(logs::append(self, chat, task, slot, entry, max_len, keep))
    }

    fn log_read<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        after: u64,
    ) -> Res<'a, Option<LogRead>> {
        Box::pin(logs::read(self, chat, task, after))
    }

    fn log_end<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        generation: u64,
        keep: Duration,
    ) -> Res<'a, ()> {
        Box::pin(logs::end(self, chat, task, generation, keep))
    }

    fn note_turn<'a>(
        &'a self,
        owner: &'a UserHash,
        turn: &'a NotedTurn,
        keep: Duration,
    ) -> Res<'a, ()> {
        Box::pin(recent::note(self, owner, turn, keep))
    }

    fn recent_turns<'a>(&'a self, owner: &'a UserHash, since_ms: i64) -> Res<'a, Vec<NotedTurn>> {
        Box::pin(recent::since(self, owner, since_ms))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), TurnStoreError>> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            self.redis
                .run(::redis::cmd("PING").query_async::<()>(&mut conn))
                .await?;
            Ok(())
        })
    }
}
