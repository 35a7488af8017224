//! The summaries a turn carries (`pipeline.carry_summary`, see [`crate::pipeline::summary`]):
//! read in one cache call beside the turn's preparation, so the first token does not wait
//! for them; the chat's own (the cached one, else the client's copy) becomes the summary the
//! main prompt and postprocessing see, and the user's other cached chats' go to
//! preprocessing. A read that fails or is not in [`SUMMARY_WAIT`] after the preparation
//! counts as none cached (the client's copy still serves).

use std::time::Duration;

use tokio::task::JoinHandle;

use super::Turn;
use super::prepare::Ready;
use crate::cache::ai::ChatSummaries;
use crate::pipeline::summary;

/// How long a turn waits, once prepared, for a summary read still under way.
pub(in crate::turn) const SUMMARY_WAIT: Duration = Duration::from_millis(100);

/// A read of the chat's summaries started beside the preparation (`None`: carrying is off).
pub(in crate::turn) struct SummaryRead(Option<JoinHandle<Option<ChatSummaries>>>);

impl Turn<'_> {
    /// Starts reading the chat's summary and the user's other recent ones, on the turns'
    /// tracker.
    pub(in crate::turn) fn read_summaries(&self) -> SummaryRead {
        let app = self.deps.as_ref();
        if !app.pipeline.carry_summary {
            return SummaryRead(None);
        }
        let cache = app.ai_cache.clone();
        let (owner, chat) = (self.owner.clone(), self.chat.clone());
        let others = app.pipeline.recent_summaries;
        SummaryRead(Some(app.tasks.spawn(async move {
            cache
                .summaries(&owner, &chat, others)
                .await
                .inspect_err(|e| tracing::debug!(error = %e, "summaries unreadable: none carried"))
                .ok()
        })))
    }

    /// The chat's summary (the cached one, else the client's), bounded, becomes the turn's
    /// `chat_summary`; returns the other chats' summaries, bounded, for preprocessing.
    pub(in crate::turn) async fn carry_summaries(
        &self,
        read: SummaryRead,
        ready: &mut Ready,
    ) -> Vec<String> {
        let Some(read) = read.0 else {
            return Vec::new();
        };
        let cached = match tokio::time::timeout(SUMMARY_WAIT, read).await {
            Ok(Ok(Some(cached))) => cached,
            Ok(_) => ChatSummaries::default(),
            Err(_) => {
                tracing::debug!("summaries late: the turn carries the client's only");
                ChatSummaries::default()
            }
        };
        let max = self.deps.pipeline.summary_max_tokens;
        let own = cached.own.or_else(|| ready.opts.chat_summary.take());
        ready.opts.chat_summary = own.and_then(|s| summary::bounded(&s, max));
        let others = cached.others.iter();
        others.filter_map(|s| summary::bounded(s, max)).collect()
    }

    /// The chat's summary as the main request carries it (`None`: none, or carrying is off).
    pub(super) fn summary_block(&self, ready: &Ready) -> Option<String> {
        let summary = ready.opts.chat_summary.as_deref();
        summary
            .filter(|_| self.deps.pipeline.carry_summary)
            .map(summary::chat_block)
    }
}
