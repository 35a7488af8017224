//! Each user's recent turns on Redis: a sorted set `{u:<user hash>}:turns` of `chat\ntask`
//! scored by when the turn was noted (unix ms), capped and expiring as a whole.

use std::time::Duration;

use chatd_protocol::{ChatId, TaskId};

use super::super::{RECENT_TURNS, TurnStoreError};
use super::RedisTurnStore;
use crate::crypto::UserHash;

/// KEYS: the user's set. ARGV: member, now (ms), most kept, keep (ms).
pub(super) const NOTE: &str = r#"
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[3]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
"#;

fn key(owner: &UserHash) -> String {
    format!("{{u:{}}}:turns", owner.as_str())
}

pub(super) async fn note(
    store: &RedisTurnStore,
    owner: &UserHash,
    chat: &ChatId,
    task: &TaskId,
    keep: Duration,
) -> Result<(), TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let mut call = store.note_turn.key(key(owner));
    call.arg(format!("{chat}\n{task}"))
        .arg(crate::clock::unix_millis())
        .arg(RECENT_TURNS)
        .arg(keep.as_millis() as u64);
    store.redis.run(call.invoke_async::<()>(&mut conn)).await?;
    Ok(())
}

pub(super) async fn since(
    store: &RedisTurnStore,
    owner: &UserHash,
    since_ms: i64,
) -> Result<Vec<(ChatId, TaskId)>, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let mut cmd = ::redis::cmd("ZRANGEBYSCORE");
    cmd.arg(key(owner)).arg(since_ms).arg("+inf");
    let members: Vec<String> = store.redis.run(cmd.query_async(&mut conn)).await?;
    Ok(members
        .iter()
        .filter_map(|m| {
            let (chat, task) = m.split_once('\n')?;
            Some((ChatId::parse(chat).ok()?, TaskId::parse(task).ok()?))
        })
        .collect())
}
