//! The turn store on Redis (cluster mode), on one server or a Redis Cluster. Each chat's
//! keys share the hash tag `{c:<chat id>}` (its lease, generation, queue, cancel flags and
//! the logs of its turns, each a Stream), so every step is one Lua script on one slot. Two
//! keys live elsewhere, each written beside the chat's script: `{t:<task>}` (which chat a
//! task is in, for `cancel_ai_task`) and `{turns}:leases` (every lease's deadline, for the
//! nodes that look for lost turns; a take-over re-checks the lease inside its own script,
//! so a stale entry there is harmless).

mod scripts;

use std::time::Duration;

use ::redis::{Script, Value};
use chatd_protocol::{ChatId, MessageId, TaskId};
use futures_util::future::BoxFuture;

use super::{
    Admit, Admitted, CancelReason, Finished, Lease, LogRead, Renewed, TurnStore, TurnStoreError,
};
use crate::crypto::UserHash;
use crate::ids::NodeId;
use crate::redis::{Redis, RedisError};

/// How long a chat's turn keys live after their last use (leases, queues, generations).
const KEEP: Duration = Duration::from_secs(24 * 3600);
const LEASES: &str = "{turns}:leases";

fn chat_key(chat: &ChatId, what: &str) -> String {
    format!("{{c:{chat}}}:{what}")
}
fn log_keys(chat: &ChatId, task: &TaskId) -> (String, String) {
    (
        chat_key(chat, &format!("log:{task}")),
        chat_key(chat, &format!("logmeta:{task}")),
    )
}
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
        })
    }

    async fn zadd_lease(&self, chat: &ChatId, until: u64) {
        let mut conn = match self.redis.conn().await {
            Ok(c) => c,
            Err(_) => return,
        };
        let mut cmd = ::redis::cmd("ZADD");
        cmd.arg(LEASES).arg(until).arg(chat.as_str());
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

fn protocol(what: &str) -> TurnStoreError {
    TurnStoreError::Protocol(what.to_string())
}

/// Strings out of a script's array reply (bulk strings and integers alike).
fn strings(v: Value) -> Result<Vec<Vec<u8>>, TurnStoreError> {
    let Value::Array(items) = v else {
        return Err(protocol("expected an array"));
    };
    items
        .into_iter()
        .map(|i| match i {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            Value::Int(n) => Ok(n.to_string().into_bytes()),
            _ => Err(protocol("unexpected item")),
        })
        .collect()
}

fn text(b: &[u8]) -> Result<&str, TurnStoreError> {
    std::str::from_utf8(b).map_err(|_| protocol("not UTF-8"))
}

fn number(b: &[u8]) -> Result<u64, TurnStoreError> {
    text(b)?.parse().map_err(|_| protocol("not a number"))
}

/// A lease from a script's reply `[kind, task, message, gen, node, owner, until, ...]`.
fn lease_at(chat: &ChatId, r: &[Vec<u8>]) -> Result<(Lease, u64), TurnStoreError> {
    if r.len() < 7 {
        return Err(protocol("short lease reply"));
    }
    let bad = |_| protocol("bad id in a lease");
    let lease = Lease {
        chat: chat.clone(),
        task: TaskId::parse(text(&r[1])?).map_err(bad)?,
        message: MessageId::parse(text(&r[2])?).map_err(bad)?,
        generation: number(&r[3])?,
        node: NodeId::parse(text(&r[4])?).map_err(|_| protocol("bad node id"))?,
        owner: UserHash::from_hex(text(&r[5])?).ok_or_else(|| protocol("bad owner"))?,
    };
    Ok((lease, number(&r[6])?))
}

type Res<'a, T> = BoxFuture<'a, Result<T, TurnStoreError>>;

impl TurnStore for RedisTurnStore {
    fn admit<'a>(&'a self, req: Admit<'a>) -> Res<'a, Admitted> {
        Box::pin(async move {
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
                .arg(ttl.as_millis() as u64);
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            if r.first().map(Vec::as_slice) == Some(b"gone") {
                return Err(TurnStoreError::Gone);
            }
            if r.first().map(Vec::as_slice) != Some(b"ok") || r.len() < 3 {
                return Err(TurnStoreError::Fenced);
            }
            self.zadd_lease(&lease.chat, number(&r[1])?).await;
            let cancel = match text(&r[2])? {
                "revoked" => Some(CancelReason::Revoked),
                "chat_deleted" => Some(CancelReason::ChatDeleted),
                _ => None,
            };
            Ok(Renewed { cancel })
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
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            // The server's clock, which the lease deadlines were written with.
            let (secs, micros): (u64, u64) = self
                .redis
                .run(::redis::cmd("TIME").query_async(&mut conn))
                .await?;
            let now_ms = secs * 1000 + micros / 1000;
            let mut cmd = ::redis::cmd("ZRANGEBYSCORE");
            cmd.arg(LEASES)
                .arg(0)
                .arg(now_ms)
                .arg("LIMIT")
                .arg(0)
                .arg(limit);
            let chats: Vec<String> = self.redis.run(cmd.query_async(&mut conn)).await?;
            let mut taken = Vec::new();
            for chat in chats {
                let Ok(chat) = ChatId::parse(chat) else {
                    continue;
                };
                let Some(held) = self.lease_record(&chat).await? else {
                    self.zrem_lease(&chat).await;
                    continue;
                };
                let (_, meta) = log_keys(&chat, &held);
                let mut call = self.take_over.key(chat_key(&chat, "lease"));
                call.key(chat_key(&chat, "gen"))
                    .key(meta)
                    .arg(held.as_str())
                    .arg(node.as_str())
                    .arg(ttl.as_millis() as u64);
                let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
                match r.first().map(Vec::as_slice) {
                    Some(b"taken") => {
                        let (lease, until) = lease_at(&chat, &r)?;
                        self.zadd_lease(&chat, until).await;
                        taken.push(lease);
                    }
                    Some(b"gone") => self.zrem_lease(&chat).await,
                    // Renewed or moved meanwhile: its deadline is current again.
                    _ => {
                        if let Some(until) = r.get(1).and_then(|u| number(u).ok()) {
                            self.zadd_lease(&chat, until).await;
                        }
                    }
                }
            }
            Ok(taken)
        })
    }

    fn log_append<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        generation: u64,
        entry: Vec<u8>,
        max_len: usize,
        keep: Duration,
    ) -> Res<'a, u64> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let (stream, meta) = log_keys(chat, task);
            let mut call = self.log_append.key(stream);
            call.key(meta)
                .arg(generation)
                .arg(entry)
                .arg(max_len.max(1))
                .arg(keep.as_millis() as u64);
            let index: i64 = self.redis.run(call.invoke_async(&mut conn)).await?;
            u64::try_from(index).map_err(|_| TurnStoreError::Fenced)
        })
    }

    fn log_read<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        after: u64,
    ) -> Res<'a, Option<LogRead>> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let (stream, meta) = log_keys(chat, task);
            let mut call = self.log_read.key(stream);
            call.key(meta).arg(after);
            let r = strings(self.redis.run(call.invoke_async(&mut conn)).await?)?;
            if r.len() < 3 {
                return Ok(None);
            }
            let first = number(&r[2])?;
            let mut entries = Vec::with_capacity((r.len() - 3) / 2);
            for pair in r[3..].chunks(2) {
                if let [index, value] = pair {
                    entries.push((number(index)?, value.clone()));
                }
            }
            Ok(Some(LogRead {
                entries,
                first: (first > 0).then_some(first),
                last: number(&r[0])?,
                ended: r[1] == b"1",
            }))
        })
    }

    fn log_end<'a>(
        &'a self,
        chat: &'a ChatId,
        task: &'a TaskId,
        generation: u64,
        keep: Duration,
    ) -> Res<'a, ()> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let (stream, meta) = log_keys(chat, task);
            let mut call = self.log_end.key(stream);
            call.key(meta).arg(keep.as_millis() as u64).arg(generation);
            let ended: i64 = self.redis.run(call.invoke_async(&mut conn)).await?;
            if ended < 0 {
                return Err(TurnStoreError::Fenced);
            }
            Ok(())
        })
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

impl RedisTurnStore {
    /// The task of the chat's lease record (live or expired).
    async fn lease_record(&self, chat: &ChatId) -> Result<Option<TaskId>, TurnStoreError> {
        let mut conn = self.redis.conn().await?;
        let task: Option<String> = self
            .redis
            .run(
                ::redis::cmd("HGET")
                    .arg(chat_key(chat, "lease"))
                    .arg("task")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(task.and_then(|t| TaskId::parse(t).ok()))
    }
}
