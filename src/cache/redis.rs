//! The Redis cache backend: one Redis server (a
//! multiplexed connection manager that reconnects on its own) or a Redis Cluster (the
//! crate's cluster client, which follows the slots), our own deadline around every call,
//! and Lua scripts for the compound operations so each is atomic on the server.
//! Every key a script or an atomic pipeline touches is a key of one user, tagged
//! `{u:<hash>}` (see `backend::keys`), so on a Cluster they share a slot. This file owns
//! the connection and the deadline; the calls are in [`chats`] (a chat's AI list, embeds,
//! settings and sync blobs) and [`values`] (key/value entries, claims, counters, pending
//! answers).

use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, Script, ScriptInvocation};
use tokio::sync::OnceCell;

use super::backend::{
    AiPolicy, CacheBackend, CacheError, Pending, SealedSummaries, WriteMode, keys,
};
use crate::crypto::UserHash;
use crate::redis::RedisConn as Conn;

mod chats;
mod scripts;
mod values;
use scripts::{
    AI_DELETE, AI_READ, AI_READ_APPEND, AI_SUMMARIES, AI_WRITE, COUNTER_BUMP, FIELD_CLAIM,
    PENDING_PUT, SYNC_CLEAR,
};

/// The cache on Redis: the target, the deadline of every call, and the loaded scripts.
pub struct RedisBackend {
    target: Target,
    timeout: Duration,
    ai_write: Script,
    ai_read_append: Script,
    ai_read: Script,
    ai_delete: Script,
    ai_summaries: Script,
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
            ai_summaries: Script::new(AI_SUMMARIES),
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

/// A TTL in whole seconds, at least one.
fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
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
        Box::pin(chats::ai_write(self, user, chat, mode, entries, policy))
    }

    fn ai_read_append<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(chats::ai_read_append(
            self, user, chat, entries, policy, create,
        ))
    }

    fn ai_read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(chats::ai_read(self, user, chat, policy))
    }

    fn ai_delete<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(chats::ai_delete(self, user, chat))
    }

    fn ai_summaries<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        others: usize,
    ) -> BoxFuture<'a, Result<SealedSummaries, CacheError>> {
        Box::pin(chats::ai_summaries(self, user, chat, others))
    }

    fn embed_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        embed: &'a EmbedId,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(chats::embed_put(self, user, chat, embed, value, ttl))
    }

    fn embed_get<'a>(
        &'a self,
        user: &'a UserHash,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(values::kv_get(self, keys::embed(user, embed.as_str())))
    }

    fn settings_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(chats::settings_put(self, user, chat, app_key, value, ttl))
    }

    fn settings_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(values::kv_get(
            self,
            keys::settings(user, chat.as_str(), app_key),
        ))
    }

    fn sync_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        blobs: Vec<Vec<u8>>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(chats::sync_put(self, user, chat, blobs, ttl))
    }

    fn sync_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        Box::pin(chats::sync_get(self, user, chat))
    }

    fn sync_clear<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(chats::sync_clear(self, user))
    }

    fn kv_put<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::kv_put(self, key, value, ttl))
    }

    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        Box::pin(values::kv_get(self, key.to_string()))
    }

    fn kv_claim<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        Box::pin(values::kv_claim(self, key, value, ttl))
    }

    fn field_claim<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
        max_fields: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        Box::pin(values::field_claim(
            self, key, field, value, ttl, max_fields,
        ))
    }

    fn field_put<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::field_put(self, key, field, value, ttl))
    }

    fn field_delete<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::field_delete(self, key, field))
    }

    fn counter_bump<'a>(
        &'a self,
        key: &'a str,
        seed: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        Box::pin(values::counter_bump(self, key, seed, ttl))
    }

    fn counter_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        Box::pin(values::counter_get(self, key))
    }

    fn pending_put<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::pending_put(self, user, id, value, ttl))
    }

    fn pending_list<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<Vec<Pending>, CacheError>> {
        Box::pin(values::pending_list(self, user))
    }

    fn pending_delete<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::pending_delete(self, user, id))
    }

    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(values::kv_delete(self, key))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), CacheError>> {
        Box::pin(async move {
            let _: String = self.query(redis::cmd("PING")).await?;
            Ok(())
        })
    }
}
