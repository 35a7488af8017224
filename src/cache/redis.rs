//! The Redis cache backend: one Redis server (a
//! multiplexed connection manager that reconnects on its own) or a Redis Cluster (the
//! crate's cluster client, which follows the slots), our own deadline around every call,
//! and Lua scripts for the compound operations so each is atomic on the server.
//! Every key a script or an atomic pipeline touches is a key of one user, tagged
//! `{u:<hash>}` (see `backend::keys`), so on a Cluster they share a slot.

use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, Script, ScriptInvocation, Value};
use tokio::sync::OnceCell;

use super::backend::{AiPolicy, CacheBackend, CacheError, PENDING_MAX, Pending, WriteMode, keys};
use crate::crypto::UserHash;
use crate::redis::RedisConn as Conn;

mod scripts;
use scripts::{
    AI_DELETE, AI_READ, AI_READ_APPEND, AI_WRITE, COUNTER_BUMP, FIELD_CLAIM, PENDING_PUT,
    SYNC_CLEAR,
};

pub struct RedisBackend {
    target: Target,
    timeout: Duration,
    ai_write: Script,
    ai_read_append: Script,
    ai_read: Script,
    ai_delete: Script,
    sync_clear: Script,
    counter_bump: Script,
    field_claim: Script,
    pending_put: Script,
}

/// Where the cache lives.
enum Target {
    Single(ConnectionManager),
    /// Connected on first use (the cluster client needs a seed that answers); the
    /// connection then follows slot moves and reconnects by itself.
    Cluster {
        client: Box<ClusterClient>,
        conn: OnceCell<ClusterConnection>,
    },
}

impl RedisBackend {
    /// Connects lazily: the server starts even while Redis is down, and `/readyz` says so.
    /// With `cluster`, `url` is a seed node of a Redis Cluster.
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> Result<Self, CacheError> {
        let bad_url =
            |e: redis::RedisError| CacheError::Unavailable(format!("cache.redis_url: {e}"));
        let target = if cluster {
            let client = ClusterClient::builder([url])
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .map_err(bad_url)?;
            Target::Cluster {
                client: Box::new(client),
                conn: OnceCell::new(),
            }
        } else {
            let client = redis::Client::open(url).map_err(bad_url)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500));
            let conn = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| CacheError::Unavailable(e.to_string()))?;
            Target::Single(conn)
        };
        Ok(Self {
            target,
            timeout,
            ai_write: Script::new(AI_WRITE),
            ai_read_append: Script::new(AI_READ_APPEND),
            ai_read: Script::new(AI_READ),
            ai_delete: Script::new(AI_DELETE),
            sync_clear: Script::new(SYNC_CLEAR),
            counter_bump: Script::new(COUNTER_BUMP),
            field_claim: Script::new(FIELD_CLAIM),
            pending_put: Script::new(PENDING_PUT),
        })
    }

    /// Runs one call on a connection, connecting first if needed, all within the deadline.
    async fn run<T, F, Fut>(&self, call: F) -> Result<T, CacheError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let unavailable = |e: redis::RedisError| CacheError::Unavailable(e.to_string());
        let work = async {
            let conn = match &self.target {
                Target::Single(c) => Conn::Single(c.clone()),
                Target::Cluster { client, conn } => Conn::Cluster(
                    conn.get_or_try_init(|| client.get_async_connection())
                        .await
                        .map_err(unavailable)?
                        .clone(),
                ),
            };
            call(conn).await.map_err(unavailable)
        };
        match tokio::time::timeout(self.timeout, work).await {
            Err(_) => Err(CacheError::Timeout(self.timeout)),
            Ok(result) => result,
        }
    }

    /// Runs a script invocation.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        inv: ScriptInvocation<'_>,
    ) -> Result<T, CacheError> {
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: Cmd) -> Result<T, CacheError> {
        self.run(|mut c| async move { cmd.query_async(&mut c).await })
            .await
    }

    async fn query_pipe<T: redis::FromRedisValue>(&self, pipe: Pipeline) -> Result<T, CacheError> {
        self.run(|mut c| async move { pipe.query_async(&mut c).await })
            .await
    }
}

/// A recency score: microseconds since the epoch, strictly increasing within this process.
fn score() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let prev = LAST.fetch_max(now, Ordering::Relaxed);
    if prev >= now {
        LAST.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        now
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

fn bytes_list(v: Value) -> Result<Option<Vec<Vec<u8>>>, CacheError> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::BulkString(b) => Ok(b),
                other => Err(CacheError::Protocol(format!(
                    "expected bytes, got {other:?}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(CacheError::Protocol(format!(
            "expected a list, got {other:?}"
        ))),
    }
}

/// The arguments of the AI write scripts (see [`scripts::AI_WRITE`]).
fn ai_write_invocation<'s>(
    script: &'s Script,
    mode: &str,
    user: &UserHash,
    chat: &ChatId,
    entries: &[Vec<u8>],
    policy: AiPolicy,
) -> ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    inv.key(keys::ai_messages(user, chat.as_str()))
        .key(keys::ai_lru(user))
        .arg(mode)
        .arg(secs(policy.ttl))
        .arg(policy.max_messages)
        .arg(policy.max_chats)
        .arg(score())
        .arg(keys::tag(user))
        .arg(chat.as_str());
    for e in entries {
        inv.arg(e.as_slice());
    }
    inv
}

impl CacheBackend for RedisBackend {
    fn ai_write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        mode: WriteMode,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Vec<ChatId>, CacheError>> {
        Box::pin(async move {
            let mode = match mode {
                WriteMode::Append => "append",
                WriteMode::Replace => "replace",
            };
            let inv = ai_write_invocation(&self.ai_write, mode, user, chat, &entries, policy);
            let evicted: Vec<String> = self.invoke(inv).await?;
            Ok(evicted
                .into_iter()
                .filter_map(|c| ChatId::parse(c).ok())
                .collect())
        })
    }

    fn ai_read_append<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(async move {
            let mode = if create { "create" } else { "existing" };
            let inv = ai_write_invocation(&self.ai_read_append, mode, user, chat, &entries, policy);
            let v: Value = self.invoke(inv).await?;
            bytes_list(v)
        })
    }

    fn ai_read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(async move {
            let mut inv = self.ai_read.prepare_invoke();
            inv.key(keys::ai_messages(user, chat.as_str()))
                .key(keys::ai_lru(user))
                .arg(secs(policy.ttl))
                .arg(score())
                .arg(chat.as_str());
            let v: Value = self.invoke(inv).await?;
            bytes_list(v)
        })
    }

    fn ai_delete<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut inv = self.ai_delete.prepare_invoke();
            inv.key(keys::ai_lru(user))
                .arg(keys::tag(user))
                .arg(chat.as_str());
            let _: i64 = self.invoke(inv).await?;
            Ok(())
        })
    }

    fn embed_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        embed: &'a EmbedId,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let index = keys::embed_index(user, chat.as_str());
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("SET")
                .arg(keys::embed(user, embed.as_str()))
                .arg(value)
                .arg("EX")
                .arg(secs(ttl))
                .ignore()
                .cmd("SADD")
                .arg(&index)
                .arg(embed.as_str())
                .ignore()
                .cmd("EXPIRE")
                .arg(&index)
                .arg(secs(ttl))
                .ignore();
            self.query_pipe(pipe).await
        })
    }

    fn embed_get<'a>(
        &'a self,
        user: &'a UserHash,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(self.kv_get_owned(keys::embed(user, embed.as_str())))
    }

    fn settings_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let index = keys::settings_index(user, chat.as_str());
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("SET")
                .arg(keys::settings(user, chat.as_str(), app_key))
                .arg(value)
                .arg("EX")
                .arg(secs(ttl))
                .ignore()
                .cmd("SADD")
                .arg(&index)
                .arg(app_key)
                .ignore()
                .cmd("EXPIRE")
                .arg(&index)
                .arg(secs(ttl))
                .ignore();
            self.query_pipe(pipe).await
        })
    }

    fn settings_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(self.kv_get_owned(keys::settings(user, chat.as_str(), app_key)))
    }

    fn sync_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        blobs: Vec<Vec<u8>>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let key = keys::sync(user, chat.as_str());
            let index = keys::sync_index(user);
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("DEL").arg(&key).ignore();
            if !blobs.is_empty() {
                pipe.cmd("RPUSH").arg(&key).arg(blobs).ignore();
                pipe.cmd("EXPIRE").arg(&key).arg(secs(ttl)).ignore();
            }
            pipe.cmd("SADD")
                .arg(&index)
                .arg(chat.as_str())
                .ignore()
                .cmd("EXPIRE")
                .arg(&index)
                .arg(secs(ttl))
                .ignore();
            self.query_pipe(pipe).await
        })
    }

    fn sync_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(async move {
            let key = keys::sync(user, chat.as_str());
            let mut pipe = redis::pipe();
            pipe.cmd("EXISTS")
                .arg(&key)
                .cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1);
            let (exists, items): (bool, Vec<Vec<u8>>) = self.query_pipe(pipe).await?;
            Ok(exists.then_some(items))
        })
    }

    fn sync_clear<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut inv = self.sync_clear.prepare_invoke();
            inv.key(keys::sync_index(user)).arg(keys::tag(user));
            let _: i64 = self.invoke(inv).await?;
            Ok(())
        })
    }

    fn kv_put<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(value).arg("EX").arg(secs(ttl));
            self.query(cmd).await
        })
    }

    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(self.kv_get_owned(key.to_string()))
    }

    fn kv_claim<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key)
                .arg(&value)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(ttl.as_millis() as u64);
            let held: Option<Vec<u8>> = self.query(cmd).await?;
            Ok(held.unwrap_or(value))
        })
    }

    fn field_claim<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
        max_fields: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        Box::pin(async move {
            let mut inv = self.field_claim.prepare_invoke();
            inv.key(key)
                .arg(field)
                .arg(value)
                .arg(ttl.as_millis() as u64)
                .arg(max_fields);
            self.invoke(inv).await
        })
    }

    fn field_put<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HSET")
                .arg(key)
                .arg(field)
                .arg(value)
                .ignore()
                .cmd("PEXPIRE")
                .arg(key)
                .arg(ttl.as_millis() as u64)
                .ignore();
            self.query_pipe::<()>(pipe).await
        })
    }

    fn field_delete<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(key).arg(field);
            self.query::<()>(cmd).await
        })
    }

    fn counter_bump<'a>(
        &'a self,
        key: &'a str,
        seed: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        Box::pin(async move {
            let mut call = self.counter_bump.key(key);
            call.arg(seed.map_or(-1, |s| s as i64))
                .arg(ttl.as_millis() as u64);
            let n: Option<u64> = self.invoke(call).await?;
            Ok(n)
        })
    }

    fn counter_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(key);
            let v: Option<u64> = self.query(cmd).await?;
            Ok(v)
        })
    }

    fn pending_put<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut call = self.pending_put.key(keys::pending(user));
            call.key(keys::pending_order(user))
                .arg(id)
                .arg(value)
                .arg(score())
                .arg(PENDING_MAX)
                .arg(ttl.as_millis() as u64);
            self.invoke::<()>(call).await
        })
    }

    fn pending_list<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<Vec<Pending>, CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(keys::pending(user));
            let all: Vec<Pending> = self.query(cmd).await?;
            Ok(all)
        })
    }

    fn pending_delete<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .hdel(keys::pending(user), id)
                .ignore()
                .zrem(keys::pending_order(user), id)
                .ignore();
            self.query_pipe::<()>(pipe).await
        })
    }

    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            self.query(cmd).await
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), CacheError>> {
        Box::pin(async move {
            let _: String = self.query(redis::cmd("PING")).await?;
            Ok(())
        })
    }
}

impl RedisBackend {
    async fn kv_get_owned(&self, key: String) -> Result<Option<Vec<u8>>, CacheError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        self.query(cmd).await
    }
}
