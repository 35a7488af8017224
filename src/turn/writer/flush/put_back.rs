//! A flusher putting back the entries it keeps ([`super::Recent`]) that a log lost: before
//! its next append, or when another node took its turn over while the store had lost the
//! log (so the taker ends the turn after them).

use super::super::super::log::LogError;
use super::super::super::store::LogSlot;
use super::Flusher;

impl Flusher<'_> {
    /// The turn is another node's now (its lease lapsed here, and the taker holds it), but
    /// the store lost entries this flusher had logged (Redis came back empty while this
    /// node was cut off it or frozen): they are put back under this flusher's generation,
    /// the log not ended. A taker that found no log waits for it to come back (see
    /// `reaper::lost_log`) and then ends the turn right after them, where the devices here
    /// are (chaos run AJ: it ended the turn at sequence 1 from an empty log, and a device
    /// here that had ten updates never heard that the turn had ended). A taker that wrote
    /// its ending already fenced the log: nothing is put back.
    pub(super) async fn put_back(&self) {
        let (k, last) = (self.key, self.tip.index);
        if last == 0 {
            return;
        }
        let store = self.outlet.log.store();
        let had = match store.log_read(&k.chat, &k.task, last).await {
            Ok(read) => read.map_or(0, |r| r.last),
            Err(e) => {
                tracing::debug!(error = %e, "cannot check a taken-over turn's log");
                return;
            }
        };
        if had >= last {
            return;
        }
        if let Err(e) = self.put_kept_after(had).await {
            tracing::info!(error = %e, "a taken-over turn's log cannot be put back");
            return;
        }
        tracing::info!(
            had,
            last,
            "the store lost a taken-over turn's log; its logged entries were put back"
        );
    }

    /// Appends again, in their places, the kept entries after the log's index `last`.
    pub(super) async fn put_kept_after(&self, last: u64) -> Result<(), LogError> {
        for (index, entry) in self.recent.after(last) {
            self.put(LogSlot::new(self.key.generation, index), entry)
                .await?;
        }
        Ok(())
    }
}
