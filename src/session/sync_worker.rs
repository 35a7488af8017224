//! The connection's sync worker: the reads it runs (`SyncJob`: a phased sync, see
//! `sync.rs`, or a page of chats, messages or content, see `paging.rs`), its queue and its
//! task. Started at the first request, owned by the connections tracker, stopped when the
//! connection closes; jobs run one after another in the order asked, so the connection's
//! read loop never waits for one.

use chatd_protocol::{
    ErrorCode, GetChatMessages, LoadMoreChats, PhasedSyncRequest, RequestChatContentBatch,
};

use super::Session;

/// Sync requests a connection may have waiting behind the running one.
const SYNC_QUEUE: usize = 4;

/// A read the connection's sync worker runs (one after another, off the read loop).
pub(super) enum SyncJob {
    Phased(PhasedSyncRequest),
    LoadMore(LoadMoreChats),
    Messages(GetChatMessages),
    Batch(RequestChatContentBatch),
}

impl Session {
    /// Hands a sync to the connection's sync worker, so the read loop goes on (a message
    /// sent during a long sync is answered at once). A connection's syncs run one after
    /// another in the order asked; closing the connection stops them.
    pub(super) fn queue_sync(&self, job: SyncJob) {
        let queue = self.syncs.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::channel(SYNC_QUEUE);
            self.app
                .tasks
                .connections
                .spawn(self.clone().sync_worker(rx));
            tx
        });
        if queue.try_send(job).is_err() {
            self.error(
                ErrorCode::RateLimited,
                format!("{SYNC_QUEUE} syncs are already queued on this connection"),
            );
        }
    }

    async fn sync_worker(self, mut queue: tokio::sync::mpsc::Receiver<SyncJob>) {
        loop {
            let job = tokio::select! {
                biased;
                _ = self.device.outbox.closing() => return,
                job = queue.recv() => match job {
                    Some(job) => job,
                    None => return,
                },
            };
            tokio::select! {
                biased;
                _ = self.device.outbox.closing() => return,
                _ = self.run_job(job) => {}
            }
        }
    }

    /// Runs one job; a store failure of a page is answered here (a phased sync answers
    /// its own).
    async fn run_job(&self, job: SyncJob) {
        let done = match job {
            SyncJob::Phased(req) => return self.phased_sync(req).await,
            SyncJob::LoadMore(m) => self.load_more_chats(m).await,
            SyncJob::Messages(m) => self.get_chat_messages(m).await,
            SyncJob::Batch(m) => self.request_chat_content_batch(m).await,
        };
        if let Err(e) = done {
            self.store_failed(e, None, None);
        }
    }
}
