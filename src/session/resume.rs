//! A device catching up: the answers no device stored (`pending_ai_response`, on every
//! connection), `resume_ai_task` (every frame after the position the device names, then the
//! live ones) and the catch-up of `set_active_chat` for a chat whose turn runs (the typing
//! frame and the latest answer at once). Both hold the turn's live
//! frames for this device while they read the log, so nothing is missed or sent twice.

use chatd_protocol::{AiTaskResumed, ChatId, ResumeAiTask, ServerMessage, TaskId};

use std::time::Duration;

use super::Session;
use crate::turn::log::{self, Logged};
use crate::turn::rejoin;

/// How long a resume waits for another node's log to reach the device's position.
const LOG_CATCH_UP: Duration = Duration::from_millis(500);
/// How often the log is read again meanwhile.
const LOG_RETRY: Duration = Duration::from_millis(10);

impl Session {
    pub(super) async fn resume_ai_task(&self, m: ResumeAiTask) {
        // Held from the start: a catch-up on the task (after a bus outage) while the chat's
        // owner is checked would send frames the replay then sends again.
        self.device.begin_resume(&m.task_id, m.last_sequence);
        if !self.stored_chat_allowed(&m.chat_id, None).await {
            return self.device.end_resume(&m.task_id);
        }
        // A device that resumes an answer shows its chat (the live chunks follow).
        self.device.set_active_chat(Some(m.chat_id.clone()));
        let read = self
            .read_log_reaching(&m.chat_id, &m.task_id, m.last_sequence)
            .await;
        let replayed = read.as_ref().and_then(|l| log::replay(l, m.last_sequence));
        if replayed.is_none() {
            // "Nothing more": live frames of the task that come later are not sent either.
            self.device.drop_turn(&m.task_id);
        }
        self.reply(ServerMessage::AiTaskResumed(AiTaskResumed {
            chat_id: m.chat_id.clone(),
            task_id: m.task_id.clone(),
            recovered: replayed.is_some(),
        }));
        if let Some(replayed) = replayed {
            // What the device had: a live copy of it (another node's frame that arrived
            // after the log was read) is not sent again.
            let had = (replayed.after, m.last_sequence);
            self.device.skip_to(&m.task_id, had.0, had.1);
            for (index, frame) in replayed.frames {
                self.device.replay(&m.task_id, index, &frame);
            }
        }
        let again = || self.read_log(&m.chat_id, &m.task_id);
        rejoin::release_when_whole(&self.device, &m.task_id, again).await;
    }

    /// Sends the new connection every answer no device has stored yet.
    pub async fn send_pending(&self) {
        let pending = match self.app.ai_cache.pending(&self.device.user_hash).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read pending answers");
                return;
            }
        };
        let mut answers: Vec<chatd_protocol::PendingAiResponse> = pending
            .iter()
            .filter_map(|p| serde_json::from_slice(p).ok())
            .collect();
        answers.sort_by_key(|a| a.created_at);
        for answer in answers {
            self.reply(ServerMessage::PendingAiResponse(Box::new(answer)));
        }
    }

    /// The device now shows `chat`: if a turn of it runs, the typing frame and the answer
    /// so far go out at once (to a device that had updates of it: the ones it missed), then
    /// its live frames.
    pub(super) async fn catch_up(&self, chat: &ChatId) {
        let Some(task) = self.app.turns.active_task(&self.device.user, chat).await else {
            return;
        };
        // What this device already had of the turn is not sent again (nor anything while
        // a resume of it is under way, or after its end).
        let followed = self.device.sequence_in(&task) > 0;
        if !self.device.begin_catch_up(&task) {
            return;
        }
        let Some(read) = self.read_log(chat, &task).await else {
            return self.device.end_resume(&task);
        };
        // A device that had updates of the turn (it showed the chat before) gets the ones
        // it missed, in order; one that had none, the newest at once.
        let (frames, last) = match followed {
            true => (rejoin::catch_up_frames(&read.entries), 0),
            false => log::latest(&read),
        };
        for (index, frame) in frames {
            self.device.replay(&task, index, &frame);
        }
        self.device.skip_to(&task, last, 0);
        let again = || self.read_log(chat, &task);
        rejoin::release_when_whole(&self.device, &task, again).await;
    }

    /// [`Session::read_log`], read again while the device is ahead of the log (it had a
    /// frame from the node running the turn whose log write has not landed yet, or the log
    /// was lost and is being written again), for at most [`LOG_CATCH_UP`]; with no log at
    /// all, for a lease while the task still runs: within it, its node writes the log again
    /// or the turn is found lost and ended in the log.
    async fn read_log_reaching(
        &self,
        chat: &ChatId,
        task: &TaskId,
        last_sequence: u64,
    ) -> Option<Logged> {
        let asked = tokio::time::Instant::now();
        let mut deadline = asked + LOG_CATCH_UP;
        let mut extended = false;
        loop {
            let read = self.read_log(chat, task).await;
            // No log yet while the device had a frame: the store lost it (Redis came back
            // empty) and the writer puts it back with its next frame.
            let ahead = match &read {
                Some(l) => log::behind(l, last_sequence),
                None => last_sequence > 0,
            };
            if !ahead {
                return read;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                let running = self.app.turns.active_task(&self.device.user, chat).await;
                if extended || read.is_some() || running.as_ref() != Some(task) {
                    return read;
                }
                extended = true;
                deadline = asked + self.app.turns.lease + LOG_CATCH_UP;
            }
            let pause = if extended { LOG_RETRY * 5 } else { LOG_RETRY };
            tokio::time::sleep(pause).await;
        }
    }

    /// Waits until the frames this node wrote are in the log and reads it (`None`: no log,
    /// or not this user's), again while the store cannot be reached for a moment. The
    /// device holds the task's live frames meanwhile.
    async fn read_log(&self, chat: &ChatId, task: &TaskId) -> Option<Logged> {
        let outlet = &self.app.outlet;
        outlet.flushed(task).await;
        let owner = &self.device.user_hash;
        match outlet.log.read_patiently(owner, chat, task).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a turn log");
                None
            }
        }
    }
}
