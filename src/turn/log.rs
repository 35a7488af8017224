//! A turn's log: every frame the turn's writer delivered, sealed with the owner's server
//! key (bound to chat and task), in the turn store (a Redis Stream in cluster mode, memory
//! in embedded mode), for devices that resume after a reconnect. A stream chunk is logged
//! as the text it added (or the whole text when it changed otherwise, as link repair does),
//! so a log holds each answer about once; [`replay`] rebuilds the cumulative text.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{AiMessageUpdate, ChatId, ServerMessage, TaskId};
use serde::{Deserialize, Serialize};

use super::store::patience::{Passing, patiently};
use super::store::{LogSlot, TurnStore, TurnStoreError};
use crate::crypto::{Keyring, OpenError, Purpose, SealError, UserHash};
use crate::delivery::Audience;

/// One logged frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LogEntry {
    /// A frame as delivered, with its audience.
    Frame {
        audience: Audience,
        frame: ServerMessage,
    },
    /// An `ai_message_update` before the final one; `update.full_content_so_far` holds
    /// the text added since the previous chunk (`append`), or the whole text.
    Chunk {
        append: bool,
        update: AiMessageUpdate,
    },
}

impl LogEntry {
    /// The entry for a frame the writer delivered; `previous` is the answer's text so far.
    pub fn of(audience: &Audience, frame: &ServerMessage, previous: &str) -> LogEntry {
        match frame {
            ServerMessage::AiMessageUpdate(u) if !u.is_final_chunk => chunk(u, previous),
            _ => LogEntry::Frame {
                audience: audience.clone(),
                frame: frame.clone(),
            },
        }
    }

    /// The stored form (JSON) of [`LogEntry::of`], given the frame as it went on the wire
    /// (`wire`: its JSON, which a `Frame` entry embeds as it is instead of encoding the
    /// frame a second time).
    pub fn encode(
        audience: &Audience,
        frame: &ServerMessage,
        wire: &str,
        previous: &str,
    ) -> Vec<u8> {
        match frame {
            ServerMessage::AiMessageUpdate(u) if !u.is_final_chunk => {
                serde_json::to_vec(&chunk(u, previous)).unwrap_or_default()
            }
            _ => {
                let audience = serde_json::to_string(audience).unwrap_or_default();
                let mut out = Vec::with_capacity(wire.len() + audience.len() + 32);
                out.extend_from_slice(br#"{"Frame":{"audience":"#);
                out.extend_from_slice(audience.as_bytes());
                out.extend_from_slice(br#","frame":"#);
                out.extend_from_slice(wire.as_bytes());
                out.extend_from_slice(b"}}");
                out
            }
        }
    }
}

/// A chunk as the text it added to `previous` (or the whole text when it changed otherwise),
/// without copying the whole text first.
fn chunk(u: &AiMessageUpdate, previous: &str) -> LogEntry {
    let append = u.full_content_so_far.starts_with(previous);
    let text = match append {
        true => &u.full_content_so_far[previous.len()..],
        false => &u.full_content_so_far[..],
    };
    let update = AiMessageUpdate {
        task_id: u.task_id.clone(),
        chat_id: u.chat_id.clone(),
        message_id: u.message_id.clone(),
        user_message_id: u.user_message_id.clone(),
        full_content_so_far: text.to_string(),
        sequence: u.sequence,
        is_final_chunk: u.is_final_chunk,
        delta: false,
        content_delta: None,
        model_name: u.model_name.clone(),
        category: u.category.clone(),
        interrupted_by_revocation: u.interrupted_by_revocation,
        interrupted_by_shutdown: u.interrupted_by_shutdown,
        error_code: u.error_code,
        rejection_reason: u.rejection_reason,
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        trimmed_history_messages: u.trimmed_history_messages,
        replaced_links: u.replaced_links.clone(),
        correction: u.correction,
    };
    LogEntry::Chunk { append, update }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Store(#[from] TurnStoreError),
    #[error("sealing a log entry: {0}")]
    Seal(#[from] SealError),
}

impl Passing for LogError {
    /// The turn store, or the store of wrapped keys (the same Redis), coming back.
    fn passing(&self) -> bool {
        match self {
            Self::Store(e) => e.passing(),
            Self::Seal(e) => matches!(e, SealError::Store(_)),
        }
    }
}

/// A log as read back: entries in order, opened.
#[derive(Debug, Clone, Default)]
pub struct Logged {
    pub entries: Vec<(u64, LogEntry)>,
    /// The first index the log still holds.
    pub first: Option<u64>,
    /// The turn ended: nothing will follow.
    pub ended: bool,
}

/// The logs of turns: sealing over the turn store.
#[derive(Clone)]
pub struct TurnLog {
    store: Arc<dyn TurnStore>,
    /// Seals entries with the owner's key; `None` for a store inside this process (embedded
    /// mode: nothing leaves the process, so nothing is sealed for it).
    keyring: Option<Arc<Keyring>>,
    /// Entries kept per turn (the oldest go first).
    pub max_len: usize,
    /// How long a log is kept after its newest entry (`cluster.resume_window`).
    pub keep: Duration,
}

fn scope(chat: &ChatId, task: &TaskId) -> String {
    format!("{chat}/{task}")
}

impl TurnLog {
    pub fn new(store: Arc<dyn TurnStore>, keyring: Option<Arc<Keyring>>, keep: Duration) -> Self {
        Self {
            store,
            keyring,
            max_len: 10_000,
            keep,
        }
    }

    pub fn store(&self) -> &Arc<dyn TurnStore> {
        &self.store
    }

    /// The store may have restarted without its data: the sealing keys' wrapped copies are
    /// written again when next used ([`Keyring::rewrite_when_used`]).
    pub fn store_may_have_restarted(&self) {
        if let Some(keyring) = &self.keyring {
            keyring.rewrite_when_used();
        }
    }

    /// True when the log lives in this process (embedded mode): its appends never wait,
    /// so writers append as they write instead of through a flusher task.
    pub fn in_process(&self) -> bool {
        self.keyring.is_none()
    }

    /// Appends an entry in its stored form ([`LogEntry::encode`]), sealed when the log
    /// leaves the process.
    pub async fn append(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        task: &TaskId,
        slot: LogSlot,
        plain: &[u8],
    ) -> Result<u64, LogError> {
        let sealed = match &self.keyring {
            Some(k) => {
                k.seal(owner, &scope(chat, task), Purpose::TurnLog, plain)
                    .await?
            }
            // Unsealed, the entry still names its owner: a reader must be that user.
            None => [owner.as_str().as_bytes(), plain].concat(),
        };
        Ok(self
            .store
            .log_append(chat, task, slot, sealed, self.max_len, self.keep)
            .await?)
    }

    /// [`TurnLog::append`], tried again while the store cannot be reached for a moment
    /// ([`patiently`]): the log keeps every frame in order (the frames behind it wait), so
    /// devices on other nodes can catch up from it. Fenced and gone are final. Not tried
    /// again after `until` (when the turn's lease lapses by this node's clock: an append
    /// that went on trying took a frame into the log after another node had ended the turn).
    pub async fn append_patiently(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        task: &TaskId,
        slot: LogSlot,
        plain: &[u8],
        until: Option<tokio::time::Instant>,
    ) -> Result<u64, LogError> {
        patiently(until, || self.append(owner, chat, task, slot, plain)).await
    }

    /// The whole log, opened with `owner`'s key; `None` when there is no log, or an entry
    /// does not open (another user's task, a retired key: the same as no log).
    pub async fn read(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        task: &TaskId,
    ) -> Result<Option<Logged>, LogError> {
        let Some(read) = self.store.log_read(chat, task, 0).await? else {
            return Ok(None);
        };
        let mut entries = Vec::with_capacity(read.entries.len());
        for (index, sealed) in read.entries {
            let plain = match &self.keyring {
                Some(k) => match k
                    .open(owner, &scope(chat, task), Purpose::TurnLog, &sealed)
                    .await
                {
                    Ok(p) => p,
                    Err(OpenError::Failed) => return Ok(None),
                    Err(OpenError::Unavailable(e)) => return Err(e.into()),
                },
                None => match sealed.strip_prefix(owner.as_str().as_bytes()) {
                    Some(plain) => plain.to_vec(),
                    None => return Ok(None),
                },
            };
            let Ok(entry) = serde_json::from_slice::<LogEntry>(&plain) else {
                return Ok(None);
            };
            entries.push((index, entry));
        }
        Ok(Some(Logged {
            entries,
            first: read.first,
            ended: read.ended,
        }))
    }

    /// [`TurnLog::read`], tried again while the store cannot be reached for a moment
    /// ([`patiently`]).
    pub async fn read_patiently(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        task: &TaskId,
    ) -> Result<Option<Logged>, LogError> {
        patiently(None, || self.read(owner, chat, task)).await
    }

    /// Ends the log (refused with `Fenced` when another node took the turn over).
    pub async fn end(&self, chat: &ChatId, task: &TaskId, generation: u64) -> Result<(), LogError> {
        Ok(self
            .store
            .log_end(chat, task, generation, self.keep)
            .await?)
    }
}

/// What a device resuming a turn gets from its log.
#[derive(Debug, PartialEq)]
pub struct Replay {
    /// The log index of the device's position (the chunk numbered `last_sequence`; 0 from
    /// the start): the device had every frame up to it, so a live copy of one is not sent.
    pub after: u64,
    /// Every frame after it, with its log index.
    pub frames: Vec<(u64, ServerMessage)>,
}

/// The frames a device resuming after `last_sequence` gets: every frame for all devices or
/// for devices showing the chat, logged after the chunk numbered `last_sequence` (0: from
/// the start), chunks with their cumulative text. `None` when the position is not in the
/// log (ahead of it, or trimmed away).
pub fn replay(log: &Logged, last_sequence: u64) -> Option<Replay> {
    if log.first.is_some_and(|f| f > 1) {
        return None;
    }
    let mut found = last_sequence == 0;
    let mut after = 0;
    let mut out = Vec::new();
    for (index, audience, frame) in frames(&log.entries) {
        let sequence = match &frame {
            ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
            _ => None,
        };
        if found && matches!(audience, Audience::All | Audience::Showing(_)) {
            out.push((index, frame));
        } else if !found && sequence == Some(last_sequence) {
            found = true;
            after = index;
        }
    }
    found.then_some(Replay { after, frames: out })
}

/// The frames of a log's entries (from its first), in order with their audiences, chunks
/// with their cumulative text.
pub fn frames(
    entries: &[(u64, LogEntry)],
) -> impl Iterator<Item = (u64, Audience, ServerMessage)> + '_ {
    let mut text = String::new();
    entries.iter().map(move |(index, entry)| match entry {
        LogEntry::Chunk { append, update } => {
            if !append {
                text.clear();
            }
            text.push_str(&update.full_content_so_far);
            let mut update = update.clone();
            update.full_content_so_far = text.clone();
            (
                *index,
                Audience::All,
                ServerMessage::AiMessageUpdate(update),
            )
        }
        LogEntry::Frame { audience, frame } => (*index, audience.clone(), frame.clone()),
    })
}

/// Whether the device's position is ahead of what the log holds yet: the turn goes on and
/// no chunk numbered `last_sequence` or later is logged (the node running it delivers a
/// frame before its log write lands, so a device that moves to another node at once can
/// be a frame ahead of the log for a moment).
pub fn behind(log: &Logged, last_sequence: u64) -> bool {
    last_sequence > 0
        && !log.ended
        && log.first.is_none_or(|f| f <= 1)
        && !log.entries.iter().any(|(_, entry)| {
            let sequence = match entry {
                LogEntry::Chunk { update, .. } => Some(update.sequence),
                LogEntry::Frame {
                    frame: ServerMessage::AiMessageUpdate(u),
                    ..
                } => Some(u.sequence),
                LogEntry::Frame { .. } => None,
            };
            sequence.is_some_and(|s| s >= last_sequence)
        })
}

/// For a device that starts showing a chat while its turn runs: the latest
/// `ai_typing_started` and the latest `ai_message_update` (cumulative), with the index of
/// the newest entry (the device's position afterwards).
pub fn latest(log: &Logged) -> (Vec<(u64, ServerMessage)>, u64) {
    let mut typing = None;
    let mut update: Option<(u64, AiMessageUpdate)> = None;
    let mut text = String::new();
    for (index, entry) in &log.entries {
        match entry {
            LogEntry::Frame {
                frame: frame @ ServerMessage::AiTypingStarted(_),
                ..
            } => typing = Some((*index, frame.clone())),
            LogEntry::Frame {
                frame: ServerMessage::AiMessageUpdate(u),
                ..
            } => update = Some((*index, u.clone())),
            LogEntry::Chunk { append, update: u } => {
                if !append {
                    text.clear();
                }
                text.push_str(&u.full_content_so_far);
                let mut u = u.clone();
                u.full_content_so_far = text.clone();
                update = Some((*index, u));
            }
            LogEntry::Frame { .. } => {}
        }
    }
    let last = log.entries.last().map_or(0, |(i, _)| *i);
    let mut out: Vec<(u64, ServerMessage)> = typing.into_iter().collect();
    out.extend(update.map(|(i, u)| (i, ServerMessage::AiMessageUpdate(u))));
    (out, last)
}

#[cfg(test)]
mod tests;
