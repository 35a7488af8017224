//! A flusher's frame that would reach devices here past an update they have not had: the
//! gap is filled before the frame goes out.

use std::sync::Arc;

use chatd_protocol::ServerMessage;

use super::super::super::rejoin::catch_up_frames;
use super::Flusher;
use crate::delivery::Device;

impl Flusher<'_> {
    /// Devices here that this frame would reach past an update they have not had (they
    /// resumed from a log read before the store got back entries it had lost, or this
    /// node took the turn over and the dead node's last frames never reached them) get the
    /// turn's frames from the kept ones, in order, then the held ones; when the kept ones
    /// do not reach back to the update a device lacks, from the log (this flusher appended
    /// it up to this frame).
    pub(super) async fn fill_gaps(&self, devices: &[Arc<Device>]) {
        let k = self.key;
        let kept = self.recent.replayable();
        let first_kept = kept.iter().find_map(|(_, f)| match f {
            ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
            _ => None,
        });
        tracing::debug!(
            devices = devices.len(),
            "devices here missed frames; filling"
        );
        let mut logged = None;
        for device in devices {
            let lacks = device.sequence_in(&k.task) + 1;
            let frames = match first_kept.is_some_and(|s| s <= lacks) {
                true => &kept,
                false => {
                    if logged.is_none() {
                        let read = self.outlet.log.read_patiently(&k.owner, &k.chat, &k.task);
                        let read = read.await.ok().flatten();
                        logged = Some(read.map_or_else(Vec::new, |l| catch_up_frames(&l.entries)));
                    }
                    logged.as_ref().unwrap_or(&kept)
                }
            };
            for (index, frame) in frames {
                device.replay(&k.task, *index, frame);
            }
            device.end_resume(&k.task);
        }
    }
}
