//! Reading the Redis turn store's script replies: arrays of strings (numbers as text) and
//! the lease each lease-bearing reply carries.

use ::redis::Value;
use chatd_protocol::{ChatId, MessageId, TaskId};

use super::super::{Lease, TurnStoreError};
use crate::crypto::UserHash;
use crate::ids::NodeId;

/// A reply that is not what the scripts send.
pub(super) fn protocol(what: &str) -> TurnStoreError {
    TurnStoreError::Protocol(what.to_string())
}

/// Strings out of a script's array reply (bulk strings and integers alike).
pub(super) fn strings(v: Value) -> Result<Vec<Vec<u8>>, TurnStoreError> {
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

/// A reply item as UTF-8 text.
pub(super) fn text(b: &[u8]) -> Result<&str, TurnStoreError> {
    std::str::from_utf8(b).map_err(|_| protocol("not UTF-8"))
}

/// A reply item as a number.
pub(super) fn number(b: &[u8]) -> Result<u64, TurnStoreError> {
    text(b)?.parse().map_err(|_| protocol("not a number"))
}

/// A lease from a script's reply `[kind, task, message, gen, node, owner, until, ...]`.
pub(super) fn lease_at(chat: &ChatId, r: &[Vec<u8>]) -> Result<(Lease, u64), TurnStoreError> {
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
