//! Taking over the turns of lost nodes: the chats whose lease deadline passed (by the
//! server's clock, from `{turns}:leases`), each re-checked and taken inside its own
//! script; a stale entry in the deadline set is dropped or refreshed.

use std::time::Duration;

use chatd_protocol::{ChatId, TaskId};

use super::super::{Lease, TurnStoreError};
use super::reply::{lease_at, number, strings};
use super::{LEASES, RedisTurnStore, chat_key, log_keys};
use crate::ids::NodeId;

/// Takes over at most `limit` expired leases for `node`; returns the leases taken.
pub(super) async fn expired(
    store: &RedisTurnStore,
    node: &NodeId,
    ttl: Duration,
    limit: usize,
) -> Result<Vec<Lease>, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    // The server's clock, which the lease deadlines were written with.
    let (secs, micros): (u64, u64) = store
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
    let chats: Vec<String> = store.redis.run(cmd.query_async(&mut conn)).await?;
    let mut taken = Vec::new();
    for chat in chats {
        let Ok(chat) = ChatId::parse(chat) else {
            continue;
        };
        let Some(held) = lease_record(store, &chat).await? else {
            store.zrem_lease(&chat).await;
            continue;
        };
        let (_, meta) = log_keys(&chat, &held);
        let mut call = store.take_over.key(chat_key(&chat, "lease"));
        call.key(chat_key(&chat, "gen"))
            .key(meta)
            .arg(held.as_str())
            .arg(node.as_str())
            .arg(ttl.as_millis() as u64);
        let r = strings(store.redis.run(call.invoke_async(&mut conn)).await?)?;
        match r.first().map(Vec::as_slice) {
            Some(b"taken") => {
                let (lease, until) = lease_at(&chat, &r)?;
                store.zadd_lease(&chat, until).await;
                taken.push(lease);
            }
            Some(b"gone") => store.zrem_lease(&chat).await,
            // Renewed or moved meanwhile: its deadline is current again.
            _ => {
                if let Some(until) = r.get(1).and_then(|u| number(u).ok()) {
                    store.zadd_lease(&chat, until).await;
                }
            }
        }
    }
    Ok(taken)
}

/// The task of the chat's lease record (live or expired).
async fn lease_record(
    store: &RedisTurnStore,
    chat: &ChatId,
) -> Result<Option<TaskId>, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let task: Option<String> = store
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
