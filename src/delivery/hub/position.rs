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

/// The device's position in `task`, created (and the oldest forgotten) when new.
pub(super) fn position<'a>(
    turns: &'a mut VecDeque<TurnPosition>,
    task: &TaskId,
) -> &'a mut TurnPosition {
    let found = turns.iter().position(|p| &p.task == task);
    let at = match found {
        Some(i) => i,
        None => {
            if turns.len() >= TRACKED_TURNS {
                // The oldest that no resume or catch-up holds is forgotten.
                let idle = turns.iter().rposition(|p| p.held.is_none());
                turns.remove(idle.unwrap_or(turns.len() - 1));
            }
            turns.push_front(TurnPosition {
                task: task.clone(),
                index: 0,
                sequence: 0,
                chat: None,
                held: None,
                ended: false,
            });
            0
        }
    };
    &mut turns[at]
}

/// The chat a turn frame names (the answer's frames all do).
pub(super) fn turn_chat(msg: &ServerMessage) -> Option<ChatId> {
    match msg {
        ServerMessage::AiMessageUpdate(u) => Some(u.chat_id.clone()),
        ServerMessage::AiTypingStarted(t) => Some(t.chat_id.clone()),
        _ => None,
    }
}
