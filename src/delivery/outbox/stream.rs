//! How one device gets a task's streamed text: whole (`full_content_so_far`, the default)
//! or as deltas (`?stream=delta`). For delta devices it remembers, per recent task, what
//! the device has been given (a length and a hash, never the text), and turns each
//! cumulative `ai_message_update` into the text added since; a frame that does not extend
//! what was given (link repair's correction) and the final frame go out whole.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

use chatd_protocol::{AiMessageUpdate, TaskId};

/// Tasks whose position a delta device keeps (a device follows one or two at a time).
const TRACKED_TASKS: usize = 8;

/// How a socket wants answers streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamMode {
    /// Every `ai_message_update` carries the whole text so far.
    #[default]
    Cumulative,
    /// Non-final updates carry only the new text (`delta: true`, `content_delta`).
    Delta,
}

impl StreamMode {
    /// The `stream` query parameter: absent, `cumulative` or `delta`.
    pub fn parse(value: Option<&str>) -> Result<Self, &'static str> {
        match value {
            None | Some("cumulative") => Ok(Self::Cumulative),
            Some("delta") => Ok(Self::Delta),
            Some(_) => Err("stream must be `cumulative` or `delta`"),
        }
    }
}

/// What a device was given of a task's text: its first `len` bytes, hashing to `hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Given {
    len: usize,
    hash: u64,
}

impl Default for Given {
    /// Nothing yet: the empty text.
    fn default() -> Self {
        Self::of("")
    }
}

impl Given {
    pub fn of(text: &str) -> Self {
        Self {
            len: text.len(),
            hash: hash(text),
        }
    }

    /// The text `full` adds to this, if it extends it.
    fn added<'a>(&self, full: &'a str) -> Option<&'a str> {
        let prefix = full.get(..self.len)?;
        (hash(prefix) == self.hash).then(|| &full[self.len..])
    }
}

fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// A delta device's positions in its recent tasks.
#[derive(Default)]
pub struct Positions {
    tasks: VecDeque<(TaskId, Given)>,
}

impl Positions {
    /// What the device has been given of `task` (nothing yet: empty).
    pub fn given(&self, task: &TaskId) -> Given {
        self.tasks
            .iter()
            .find(|(t, _)| t == task)
            .map(|(_, g)| *g)
            .unwrap_or_default()
    }

    pub fn set(&mut self, task: &TaskId, given: Given) {
        self.tasks.retain(|(t, _)| t != task);
        if self.tasks.len() >= TRACKED_TASKS {
            self.tasks.pop_back();
        }
        self.tasks.push_front((task.clone(), given));
    }

    pub fn forget(&mut self, task: &TaskId) {
        self.tasks.retain(|(t, _)| t != task);
    }
}

/// The frame a delta device gets for `update`, given `base`: a delta when the text extends
/// it, else the update unchanged (whole).
pub fn as_delta(update: &AiMessageUpdate, base: Given) -> Option<AiMessageUpdate> {
    if update.is_final_chunk {
        return None;
    }
    let added = base.added(&update.full_content_so_far)?;
    Some(AiMessageUpdate {
        full_content_so_far: String::new(),
        delta: true,
        content_delta: Some(added.to_string()),
        ..update.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(text: &str, sequence: u64, is_final_chunk: bool) -> AiMessageUpdate {
        AiMessageUpdate::new(
            TaskId::parse("t1").unwrap(),
            chatd_protocol::ChatId::parse("c1").unwrap(),
            chatd_protocol::MessageId::parse("m1").unwrap(),
            text.into(),
            sequence,
            is_final_chunk,
        )
    }

    #[test]
    fn deltas_extend_what_was_given_and_corrections_go_whole() {
        let first = as_delta(&update("Hello ", 1, false), Given::default()).unwrap();
        assert_eq!(first.content_delta.as_deref(), Some("Hello "));
        assert!(first.delta && first.full_content_so_far.is_empty());
        let next = as_delta(&update("Hello wörld", 2, false), Given::of("Hello ")).unwrap();
        assert_eq!(next.content_delta.as_deref(), Some("wörld"));
        assert_eq!(next.sequence, 2);
        // A correction (not an extension) and the final frame go whole.
        assert!(as_delta(&update("Bye", 3, false), Given::of("Hello ")).is_none());
        assert!(as_delta(&update("Hello wörld", 4, true), Given::of("Hello ")).is_none());
        // A length inside a multi-byte character is no prefix.
        assert!(as_delta(&update("wörld", 5, false), Given { len: 2, hash: 0 }).is_none());
        assert_eq!(StreamMode::parse(Some("delta")), Ok(StreamMode::Delta));
        assert_eq!(StreamMode::parse(None), Ok(StreamMode::Cumulative));
        assert!(StreamMode::parse(Some("bogus")).is_err());
    }
}
