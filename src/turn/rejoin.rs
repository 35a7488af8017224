//! The end of a device's hold on a turn's live frames (a resume, or a catch-up from the
//! log): the held frames go out once they follow what the device had. When the log it
//! replayed had lost its tail (Redis came back from an older snapshot), the node running
//! the turn logs that tail again before its next frame (a frame is published after its
//! append), so once the next frame is held, the log read again has the tail.

use std::future::Future;
use std::time::Duration;

use chatd_protocol::TaskId;

use super::log::{self, Logged};
use crate::delivery::Device;

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
        let Some(replay) = read().await.and_then(|l| log::replay(&l, 0)) else {
            break;
        };
        for (index, frame) in &replay.frames {
            device.replay(task, *index, frame);
        }
    }
    device.end_resume(task);
}
