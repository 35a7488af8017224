//! The end of a device's hold on a turn's live frames (a resume, or a catch-up from the
//! log): the held frames go out once they follow what the device had. When the log it
//! replayed had lost its tail (Redis came back from an older snapshot), the node running
//! the turn logs that tail again before its next frame (a frame is published after its
//! append), so once the next frame is held, the log read again has the tail.

use std::future::Future;
use std::time::Duration;

use chatd_protocol::{ServerMessage, TaskId};

use super::log::{self, LogEntry, Logged};
use crate::delivery::{Audience, Device};

/// Times the log is read again for a gap before the held frames go out regardless (the
/// tail is lost for good when the turn's node had finished or died).
const REREADS: usize = 2;
/// How long a gap waits for the turn's next live frame before the log is read again: that
/// frame comes after its node logged again what the store had lost.
const REFILL_WAIT: Duration = Duration::from_secs(1);

/// Ends `device`'s hold on `task`, reading the log again (`read`) and replaying it while
/// the held frames skip an update: each time once the turn's next live frame is held (or
/// [`REFILL_WAIT`] passed).
pub async fn release_when_whole<F, Fut>(device: &Device, task: &TaskId, mut read: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<Logged>>,
{
    for _ in 0..REREADS {
        let next = device.next_held();
        tokio::pin!(next);
        next.as_mut().enable();
        if device.end_resume_if_whole(task) {
            return;
        }
        tracing::debug!("held frames skip an update: reading the turn's log again");
        let _ = tokio::time::timeout(REFILL_WAIT, next).await;
        let Some(logged) = read().await else {
            break;
        };
        for (index, frame) in catch_up_frames(&logged.entries) {
            device.replay(task, index, &frame);
        }
    }
    device.end_resume(task);
}

/// The frames of a log's `entries` a device catching up gets (the ones for all devices or
/// for devices showing the chat), in order, chunks with their cumulative text. From the
/// first entry there, also when the store lost the log's head (Redis restarted empty and
/// the turn's last node wrote back what it had appended): each device takes only what it
/// lacks, and the ending is there.
pub fn catch_up_frames(entries: &[(u64, LogEntry)]) -> Vec<(u64, ServerMessage)> {
    log::frames(entries)
        .filter(|(_, audience, _)| matches!(audience, Audience::All | Audience::Showing(_)))
        .map(|(index, _, frame)| (index, frame))
        .collect()
}

#[cfg(test)]
mod tests {
    use chatd_protocol::{AiMessageUpdate, ChatId, MessageId};

    use super::*;

    /// A log whose head the store lost (only the ending its last node wrote back is there)
    /// still gives a device catching up that ending, and nothing for other devices.
    #[test]
    fn a_log_without_its_head_still_gives_its_ending() {
        let ending = AiMessageUpdate::new(
            TaskId::parse("t1").unwrap(),
            ChatId::parse("c1").unwrap(),
            MessageId::parse("m1").unwrap(),
            "text so far".into(),
            2,
            true,
        );
        let frame = |audience, update: &AiMessageUpdate| LogEntry::Frame {
            audience,
            frame: ServerMessage::AiMessageUpdate(update.clone()),
        };
        let entries = vec![
            (7, frame(Audience::Only(vec![1]), &ending)),
            (8, frame(Audience::All, &ending)),
        ];
        let frames = catch_up_frames(&entries);
        assert_eq!(frames.len(), 1);
        assert!(matches!(&frames[0], (8, ServerMessage::AiMessageUpdate(u)) if u.is_final_chunk));
    }
}
