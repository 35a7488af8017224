//! Where a device stands in one turn: the newest log index and update it had, the turn's
//! chat, the frames held while it resumes, and whether it had the final update. After the
//! final update, no other update of the turn reaches the device but a `correction` (an
//! answer replaced after its end, see `turn::reprocess`): a turn's ending is told
//! once, even when two nodes both end it (one was paused past its lease and another ended
//! the turn with `node_lost`, then Redis lost the record of that before the first woke up).

use std::collections::VecDeque;

use chatd_protocol::{ChatId, ServerMessage, TaskId};

use crate::delivery::outbox::EncodedFrame;

/// Turns whose positions a device remembers (the newest first; older ones are forgotten).
pub(super) const TRACKED_TURNS: usize = 8;
/// Older turns a device remembers it had the end of (24 bytes each).
const ENDED_TURNS: usize = 64;

pub(super) struct TurnPosition {
    pub(super) task: TaskId,
    /// The newest log index delivered.
    pub(super) index: u64,
    /// The `sequence` of the newest `ai_message_update` delivered (0: none yet).
    pub(super) sequence: u64,
    /// The turn's chat, once a frame naming it was delivered.
    pub(super) chat: Option<ChatId>,
    /// While resuming: live frames held back, in order.
    pub(super) held: Option<Vec<(u64, EncodedFrame, ServerMessage)>>,
    /// The final `ai_message_update` was delivered.
    ended: bool,
}

impl TurnPosition {
    /// Whether frame `index` (`msg`) is new to the device: not had, and not an update
    /// after the final one (a `correction`, which replaces an answer after its end, is).
    pub(super) fn takes(&self, index: u64, msg: &ServerMessage) -> bool {
        let after_end = match msg {
            ServerMessage::AiMessageUpdate(u) => self.ended && u.correction.is_none(),
            _ => false,
        };
        index > self.index && !after_end
    }

    /// A final update numbered at or below what the device had (a node that took the turn
    /// over ended it after a log that had lost its newest updates: Redis came back from a
    /// snapshot) renumbered to follow it: the ending is told once, after what the device
    /// had.
    pub(super) fn renumbered(&self, msg: &ServerMessage) -> Option<ServerMessage> {
        match msg {
            ServerMessage::AiMessageUpdate(u)
                if u.is_final_chunk && self.sequence > 0 && u.sequence <= self.sequence =>
            {
                let mut u = u.clone();
                u.sequence = self.sequence + 1;
                Some(ServerMessage::AiMessageUpdate(u))
            }
            _ => None,
        }
    }

    /// The device had the turn's final update.
    pub(super) fn has_ended(&self) -> bool {
        self.ended
    }

    /// The device had frame `index` (`msg`).
    pub(super) fn advance(&mut self, index: u64, msg: &ServerMessage) {
        self.index = index;
        if let ServerMessage::AiMessageUpdate(u) = msg {
            self.sequence = self.sequence.max(u.sequence);
            self.ended |= u.is_final_chunk;
        }
    }
}

pub(super) fn update_sequence(msg: &ServerMessage) -> Option<u64> {
    match msg {
        ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
        _ => None,
    }
}

/// A device's positions in its recent turns, and the ends of older turns it had.
#[derive(Default)]
pub(super) struct Positions {
    /// The newest first.
    turns: VecDeque<TurnPosition>,
    /// Turns whose position was forgotten after the device had their final update: what a
    /// catch-up or a frame sent again of such a turn is measured against (it never gets
    /// the turn again). The newest last.
    ended: VecDeque<Ended>,
}

/// Where a device stood when it forgot a turn it had the end of (a hash of the task id).
struct Ended {
    task: u64,
    index: u64,
    sequence: u64,
}

fn task_hash(task: &TaskId) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    task.hash(&mut h);
    h.finish()
}

impl Positions {
    pub(super) fn iter(&self) -> impl Iterator<Item = &TurnPosition> {
        self.turns.iter()
    }

    /// The device's position in `task`, created (and the oldest forgotten) when new; a
    /// turn it forgot after its end is ended again.
    pub(super) fn at(&mut self, task: &TaskId) -> &mut TurnPosition {
        if let Some(i) = self.turns.iter().position(|p| &p.task == task) {
            return &mut self.turns[i];
        }
        if self.turns.len() >= TRACKED_TURNS {
            // The oldest that no resume or catch-up holds is forgotten.
            let idle = self.turns.iter().rposition(|p| p.held.is_none());
            let gone = self.turns.remove(idle.unwrap_or(self.turns.len() - 1));
            if let Some(gone) = gone.filter(|p| p.ended) {
                if self.ended.len() >= ENDED_TURNS {
                    self.ended.pop_front();
                }
                self.ended.push_back(Ended {
                    task: task_hash(&gone.task),
                    index: gone.index,
                    sequence: gone.sequence,
                });
            }
        }
        let hash = task_hash(task);
        let was =
            (self.ended.iter().position(|e| e.task == hash)).and_then(|i| self.ended.remove(i));
        self.turns.push_front(TurnPosition {
            task: task.clone(),
            index: was.as_ref().map_or(0, |e| e.index),
            sequence: was.as_ref().map_or(0, |e| e.sequence),
            chat: None,
            held: None,
            ended: was.is_some(),
        });
        &mut self.turns[0]
    }
}

/// The chat a turn frame names (the answer's frames all do).
pub(super) fn turn_chat(msg: &ServerMessage) -> Option<ChatId> {
    match msg {
        ServerMessage::AiMessageUpdate(u) => Some(u.chat_id.clone()),
        ServerMessage::AiTypingStarted(t) => Some(t.chat_id.clone()),
        _ => None,
    }
}
