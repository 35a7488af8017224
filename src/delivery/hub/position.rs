//! Where a device stands in one turn: the newest log index and update it had, the turn's
//! chat, the frames held while it resumes, and whether it had the final update (or, not
//! showing the chat, `ai_background_response_completed`). After the final update, no other update of the turn reaches the device but a `correction` (an
//! answer replaced after its end, see `turn::reprocess`): a turn's ending is told
//! once, even when two nodes both end it (one was paused past its lease and another ended
//! the turn with `node_lost`, then Redis lost the record of that before the first woke up).

use std::collections::VecDeque;

use chatd_protocol::{ChatId, ServerMessage, TaskId};

use crate::delivery::outbox::EncodedFrame;

/// Turns whose positions a device remembers (the newest first; older ones are forgotten).
pub(super) const TRACKED_TURNS: usize = 8;
/// Older turns whose positions a device remembers in short (32 bytes each).
const FORGOTTEN_TURNS: usize = 64;

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
    /// The device resumed the turn, naming where it stood (0: from the start).
    resumed: bool,
}

impl TurnPosition {
    /// Whether frame `index` (`msg`) is new to the device: not had, and not an update
    /// after the final one (a `correction`, which replaces an answer after its end, is).
    /// The update that follows the device's newest is new wherever it stands in the log:
    /// a frame after it reached the device first (its node died before sending it, and a
    /// catch-up from the log brings it now).
    pub(super) fn takes(&self, index: u64, msg: &ServerMessage) -> bool {
        match msg {
            ServerMessage::AiMessageUpdate(u) if self.ended => {
                u.correction.is_some() && index > self.index
            }
            ServerMessage::AiMessageUpdate(u) => {
                index > self.index || (self.index < u64::MAX && u.sequence == self.sequence + 1)
            }
            _ => index > self.index,
        }
    }

    /// A final update not numbered right after the device's newest, renumbered to be: the
    /// ending is told once, after what the device had. Numbered at or below it: a node
    /// that took the turn over ended it after a log that had lost its newest updates
    /// (Redis came back from a snapshot). Above it, once the log was read for what lies
    /// between and had nothing (its head was lost with the node that wrote it): the final
    /// update holds the whole text, so the device lacks nothing it shows. A device that
    /// had no update is measured so only when it resumed from the start: one that came in
    /// later starts wherever the turn stands.
    fn renumbered(&self, msg: &ServerMessage) -> Option<ServerMessage> {
        match msg {
            ServerMessage::AiMessageUpdate(u)
                if u.is_final_chunk && self.placed() && u.sequence != self.sequence + 1 =>
            {
                let mut u = u.clone();
                u.sequence = self.sequence + 1;
                Some(ServerMessage::AiMessageUpdate(u))
            }
            _ => None,
        }
    }

    /// Whether the device's next update must be numbered right after its newest: it had
    /// one, or it resumed the turn from a position it named (0: from the start).
    pub(super) fn placed(&self) -> bool {
        self.sequence > 0 || self.resumed
    }

    /// The device resumes the turn, naming where it stands: what it had is measured
    /// against that from now on (the replay sends again what it had before). A device
    /// that had the turn's end without its text (`ai_background_response_completed`, not
    /// showing the chat) gets the updates too.
    pub(super) fn restart(&mut self) {
        self.index = 0;
        self.sequence = 0;
        self.ended = false;
        self.resumed = true;
    }

    /// Nothing more of the turn reaches the device (held or later).
    pub(super) fn drop_all(&mut self) {
        self.index = u64::MAX;
        self.held = None;
    }

    /// The device had the turn's final update.
    pub(super) fn has_ended(&self) -> bool {
        self.ended
    }

    /// The device gets frame `index` (`msg`): its position moves to it, and a final update
    /// to renumber comes back renumbered ([`TurnPosition::renumbered`]), to send instead.
    pub(super) fn take(&mut self, index: u64, msg: &ServerMessage) -> Option<ServerMessage> {
        let renumbered = self.renumbered(msg);
        self.advance(index, renumbered.as_ref().unwrap_or(msg));
        renumbered
    }

    /// The device had frame `index` (`msg`).
    pub(super) fn advance(&mut self, index: u64, msg: &ServerMessage) {
        self.index = self.index.max(index);
        match msg {
            ServerMessage::AiMessageUpdate(u) => {
                self.sequence = self.sequence.max(u.sequence);
                self.ended |= u.is_final_chunk;
            }
            // A device not showing the chat gets this instead of the final update.
            ServerMessage::AiBackgroundResponseCompleted(_) => self.ended = true,
            _ => {}
        }
    }
}

pub(super) fn update_sequence(msg: &ServerMessage) -> Option<u64> {
    match msg {
        ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
        _ => None,
    }
}

/// A device's positions in its recent turns, and in short where it stood in older ones.
#[derive(Default)]
pub(super) struct Positions {
    /// The newest first.
    turns: VecDeque<TurnPosition>,
    /// Where the device stood in older turns, whose positions were forgotten: what a
    /// catch-up or a frame sent again of such a turn is measured against (it never gets
    /// what it had again, nor anything of a turn it had the end of). The newest last.
    forgotten: VecDeque<Forgotten>,
}

/// A forgotten position (a hash of the task id).
struct Forgotten {
    task: u64,
    index: u64,
    sequence: u64,
    ended: bool,
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
    /// forgotten one comes back as it was.
    pub(super) fn at(&mut self, task: &TaskId) -> &mut TurnPosition {
        if let Some(i) = self.turns.iter().position(|p| &p.task == task) {
            return &mut self.turns[i];
        }
        if self.turns.len() >= TRACKED_TURNS {
            // The oldest that no resume or catch-up holds is forgotten.
            let idle = self.turns.iter().rposition(|p| p.held.is_none());
            let gone = self.turns.remove(idle.unwrap_or(self.turns.len() - 1));
            if let Some(gone) = gone.filter(|p| p.index > 0) {
                if self.forgotten.len() >= FORGOTTEN_TURNS {
                    self.forgotten.pop_front();
                }
                self.forgotten.push_back(Forgotten {
                    task: task_hash(&gone.task),
                    index: gone.index,
                    sequence: gone.sequence,
                    ended: gone.ended,
                });
            }
        }
        let hash = task_hash(task);
        let was = (self.forgotten.iter().position(|e| e.task == hash))
            .and_then(|i| self.forgotten.remove(i));
        self.turns.push_front(TurnPosition {
            task: task.clone(),
            index: was.as_ref().map_or(0, |e| e.index),
            sequence: was.as_ref().map_or(0, |e| e.sequence),
            chat: None,
            held: None,
            ended: was.is_some_and(|e| e.ended),
            resumed: false,
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
