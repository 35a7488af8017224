//! The speculation record on Redis (cluster mode), on one server or a Redis Cluster.
//!
//! - A chat's record is one string, `{u:<user hash>}:speculation:<chat digest>`: in the
//!   user's hash slot like the rest of the user's keys, the chat id only as a digest (no
//!   key names a chat), the value sealed with the user's data key and bound to the chat
//!   and its purpose (a plan names the chat's category, language and tools: what the
//!   user's messages are about). It lives as long as the AI cache keeps a chat
//!   (`cache.ai_ttl`) from the chat's last turn.
//! - The shared record is one hash, `{speculation}:shared` (fields `h`, `m`, `w`: hits,
//!   misses, waste), counts of every user's turns together and nothing of any one user,
//!   so not sealed; a Lua script adds a turn's outcome atomically, whichever node sends it,
//!   and keeps it [`SHARED_TTL`] from the last turn.
//!
//! A read is the chat's `GET` and the shared `HMGET`, a write the chat's `SET` and the
//! script: each pair sent together on the multiplexed connection (on a Cluster the two
//! keys live in different slots, so each goes to its own node at once), one round trip.

use std::sync::Arc;
use std::time::Duration;

use ::redis::Script;
use chatd_protocol::ChatId;
use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::{ChatRecord, Outcome, RecordError, SharedRecord, Snapshot, SpeculationRecords, Tally};
use crate::cache::backend::keys;
use crate::crypto::{Keyring, OpenError, Purpose, UserHash};
use crate::redis::{Redis, RedisError};

/// The shared record of every node.
pub const SHARED: &str = "{speculation}:shared";
/// How long the shared record outlives the last turn that added to it.
pub const SHARED_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Adds one outcome to the shared record (the steps of `SharedRecord::add`).
/// KEYS[1] the shared hash; ARGV: hit (1/0), speculated (1/0), window, alpha, TTL in ms.
const ADD: &str = r"
local v = redis.call('HMGET', KEYS[1], 'h', 'm', 'w')
local h, m, w = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
local window, alpha = tonumber(ARGV[3]), tonumber(ARGV[4])
if h + m >= window then h = h / 2; m = m / 2 end
local hit = ARGV[1] == '1'
if hit then h = h + 1 else m = m + 1 end
local wasted = 0
if ARGV[2] == '1' and not hit then wasted = 1 end
w = w + alpha * (wasted - w)
redis.call('HSET', KEYS[1], 'h', tostring(h), 'm', tostring(m), 'w', tostring(w))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// The key of a chat's record: the user's hash tag and a digest of the chat id.
pub fn chat_key(user: &UserHash, chat: &ChatId) -> String {
    let digest = Sha256::new()
        .chain_update(b"chatd-chat:")
        .chain_update(chat.as_str())
        .finalize();
    format!(
        "{}:speculation:{}",
        keys::tag(user),
        hex::encode(&digest[..16])
    )
}

impl From<RedisError> for RecordError {
    fn from(e: RedisError) -> Self {
        match e {
            RedisError::Timeout(d) => RecordError::Timeout(d),
            RedisError::Unavailable(m) => RecordError::Unavailable(m),
        }
    }
}

pub struct RedisRecords {
    redis: Redis,
    keyring: Arc<Keyring>,
    /// A chat record's lifetime.
    ttl: Duration,
    add: Script,
}

impl RedisRecords {
    /// Connects lazily (`cluster`: `url` is a seed node of a Redis Cluster); chat records
    /// are sealed with `keyring` and kept `ttl`.
    pub fn new(
        url: &str,
        cluster: bool,
        timeout: Duration,
        keyring: Arc<Keyring>,
        ttl: Duration,
    ) -> Result<Self, RecordError> {
        Ok(Self {
            redis: Redis::new(url, cluster, timeout)?,
            keyring,
            ttl,
            add: Script::new(ADD),
        })
    }

    /// A sealed chat record opened; `None` when it does not open (another binding, a key
    /// gone) or does not parse.
    async fn open(
        &self,
        user: &UserHash,
        chat: &ChatId,
        sealed: &[u8],
    ) -> Result<Option<ChatRecord>, RecordError> {
        let purpose = Purpose::Speculation;
        match self
            .keyring
            .open(user, chat.as_str(), purpose, sealed)
            .await
        {
            Ok(plain) => Ok(serde_json::from_slice(&plain).ok()),
            Err(OpenError::Failed) => Ok(None),
            Err(OpenError::Unavailable(e)) => Err(RecordError::Unavailable(e.to_string())),
        }
    }

    async fn read_both(&self, user: &UserHash, chat: &ChatId) -> Result<Snapshot, RecordError> {
        let conn = self.redis.conn().await?;
        let (mut a, mut b) = (conn.clone(), conn);
        let mut get = ::redis::cmd("GET");
        get.arg(chat_key(user, chat));
        let mut hmget = ::redis::cmd("HMGET");
        hmget.arg(SHARED).arg("h").arg("m").arg("w");
        let both = async {
            tokio::try_join!(
                get.query_async::<Option<Vec<u8>>>(&mut a),
                hmget.query_async::<Vec<Option<String>>>(&mut b),
            )
        };
        let (sealed, shared) = self.redis.run(both).await?;
        let chat = match sealed {
            Some(sealed) => self.open(user, chat, &sealed).await?,
            None => None,
        };
        Ok(Snapshot {
            chat,
            shared: shared_of(&shared),
        })
    }

    async fn write_both(
        &self,
        user: &UserHash,
        chat: &ChatId,
        record: ChatRecord,
        outcome: Option<Outcome>,
    ) -> Result<(), RecordError> {
        let plain = serde_json::to_vec(&record).unwrap_or_default();
        let sealed = self
            .keyring
            .seal(user, chat.as_str(), Purpose::Speculation, &plain)
            .await
            .map_err(|e| RecordError::Unavailable(e.to_string()))?;
        let conn = self.redis.conn().await?;
        let (mut a, mut b) = (conn.clone(), conn);
        let mut set = ::redis::cmd("SET");
        set.arg(chat_key(user, chat))
            .arg(sealed)
            .arg("PX")
            .arg(self.ttl.as_millis() as u64);
        let add = outcome.map(|o| {
            let mut call = self.add.key(SHARED);
            call.arg(u8::from(o.hit))
                .arg(u8::from(o.speculated))
                .arg(Tally::WINDOW)
                .arg(SharedRecord::ALPHA)
                .arg(SHARED_TTL.as_millis() as u64);
            call
        });
        let both = async {
            let added = async {
                match &add {
                    Some(call) => call.invoke_async::<()>(&mut b).await,
                    None => Ok(()),
                }
            };
            tokio::try_join!(set.query_async::<()>(&mut a), added)
        };
        self.redis.run(both).await?;
        Ok(())
    }
}

/// The shared record from its hash fields (absent or unreadable ones count as zero).
fn shared_of(fields: &[Option<String>]) -> SharedRecord {
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.as_deref())
            .and_then(|f| f.parse::<f32>().ok())
            .filter(|f| f.is_finite())
            .unwrap_or(0.0)
    };
    SharedRecord {
        tally: Tally {
            hits: field(0),
            misses: field(1),
        },
        waste: field(2),
    }
}

impl SpeculationRecords for RedisRecords {
    fn read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Snapshot, RecordError>> {
        Box::pin(self.read_both(user, chat))
    }

    fn write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        record: ChatRecord,
        outcome: Option<Outcome>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(self.write_both(user, chat, record, outcome))
    }

    fn forget<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            let mut conn = self.redis.conn().await?;
            let mut del = ::redis::cmd("DEL");
            del.arg(chat_key(user, chat));
            self.redis.run(del.query_async::<()>(&mut conn)).await?;
            Ok(())
        })
    }
}
