//! The logs of turns on Redis: one Stream per turn beside its meta hash (generation,
//! end), appended, read and ended by the turn's lease holder through Lua scripts.

use std::time::Duration;

use chatd_protocol::{ChatId, TaskId};

use super::super::{LogRead, LogSlot, TurnStoreError};
use super::reply::{number, strings};
use super::{RedisTurnStore, log_keys};

/// Appends `entry` to the turn's log at `slot.index` (fenced by `slot.generation`; a
/// repeat of an index the log has passed writes nothing; a contiguous slot after a hole
/// writes nothing either: `Behind`); returns the index.
pub(super) async fn append(
    store: &RedisTurnStore,
    chat: &ChatId,
    task: &TaskId,
    slot: LogSlot,
    entry: Vec<u8>,
    max_len: usize,
    keep: Duration,
) -> Result<u64, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let (stream, meta) = log_keys(chat, task);
    let mut call = store.log_append.key(stream);
    call.key(meta)
        .arg(slot.generation)
        .arg(entry)
        .arg(max_len.max(1))
        .arg(keep.as_millis() as u64)
        .arg(slot.index)
        .arg(if slot.contiguous { "1" } else { "0" });
    let index: i64 = store.redis.run(call.invoke_async(&mut conn)).await?;
    match index {
        -1 => Err(TurnStoreError::Fenced),
        // The script's answer to a contiguous slot the log does not reach: -2 - last.
        i if i < -1 => Err(TurnStoreError::Behind {
            last: i.unsigned_abs() - 2,
        }),
        i => Ok(i.unsigned_abs()),
    }
}

/// The turn's log after index `after`; `None` when there is no log.
pub(super) async fn read(
    store: &RedisTurnStore,
    chat: &ChatId,
    task: &TaskId,
    after: u64,
) -> Result<Option<LogRead>, TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let (stream, meta) = log_keys(chat, task);
    let mut call = store.log_read.key(stream);
    call.key(meta).arg(after);
    let r = strings(store.redis.run(call.invoke_async(&mut conn)).await?)?;
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
}

/// Marks the turn's log ended (fenced by `generation`), kept for `keep`.
pub(super) async fn end(
    store: &RedisTurnStore,
    chat: &ChatId,
    task: &TaskId,
    generation: u64,
    keep: Duration,
) -> Result<(), TurnStoreError> {
    let mut conn = store.redis.conn().await?;
    let (stream, meta) = log_keys(chat, task);
    let mut call = store.log_end.key(stream);
    call.key(meta).arg(keep.as_millis() as u64).arg(generation);
    let ended: i64 = store.redis.run(call.invoke_async(&mut conn)).await?;
    if ended < 0 {
        return Err(TurnStoreError::Fenced);
    }
    Ok(())
}
