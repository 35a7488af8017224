//! Each user's recent turns on Redis: a sorted set `{u:<user hash>}:turns` of `chat\ntask`
//! scored by when the turn's log began (unix ms), capped and expiring as a whole.

use std::time::Duration;

use chatd_protocol::{ChatId, TaskId};

use super::super::{NotedTurn, RECENT_TURNS, TurnStoreError};
use super::RedisTurnStore;
use crate::crypto::UserHash;

/// KEYS: the user's set. ARGV: member, began (ms), most kept, keep (ms).
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
    turn: &NotedTurn,
    keep: Duration,
) -> Result<(), TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let mut call = store.note_turn.key(key(owner));
    call.arg(format!("{}\n{}", turn.chat, turn.task))
        .arg(turn.at_ms)
        .arg(RECENT_TURNS)
        .arg(keep.as_millis() as u64);
    store.redis.run(call.invoke_async::<()>(&mut conn)).await?;
    Ok(())
}

pub(super) async fn since(
    store: &RedisTurnStore,
    owner: &UserHash,
    since_ms: i64,
) -> Result<Vec<NotedTurn>, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let mut cmd = ::redis::cmd("ZRANGEBYSCORE");
    cmd.arg(key(owner))
        .arg(since_ms)
        .arg("+inf")
        .arg("WITHSCORES");
    let members: Vec<(String, i64)> = store.redis.run(cmd.query_async(&mut conn)).await?;
    Ok(members
        .iter()
        .filter_map(|(m, at_ms)| {
            let (chat, task) = m.split_once('\n')?;
            Some(NotedTurn {
                chat: ChatId::parse(chat).ok()?,
                task: TaskId::parse(task).ok()?,
                at_ms: *at_ms,
            })
        })
        .collect())
}
