//! Main processing: one streamed model call turned into paragraph chunks with strictly
//! increasing sequence numbers. Cancellation drops the provider stream at once (for HTTP
//! providers that closes the connection). A provider failure before the first token is
//! retried once when retryable; after tokens were streamed the turn ends with what it has.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::chunker::ParagraphChunker;
use super::{Interruption, TurnContext, TurnEvent, TurnOutcome, TurnSink};
use crate::llm::{LlmClient, LlmError, LlmEvent, LlmRequest, Usage};

/// Why the turn's cancellation token fired; read when it does.
pub trait CancelReason: Send + Sync {
    fn reason(&self) -> Interruption;
}

impl<F: Fn() -> Interruption + Send + Sync> CancelReason for F {
    fn reason(&self) -> Interruption {
        self()
    }
}

pub struct AnswerStream<'a> {
    pub llm: &'a dyn LlmClient,
    pub sink: &'a dyn TurnSink,
    pub ctx: &'a TurnContext,
    pub cancel: &'a CancellationToken,
    pub cancel_reason: &'a dyn CancelReason,
}

enum Step {
    Event(Option<Result<LlmEvent, LlmError>>),
    Cancelled,
}

impl AnswerStream<'_> {
    /// Streams the answer to `request`, emitting `Chunk` events; returns the outcome
    /// (the caller emits `Finished`).
    pub async fn run(&self, request: LlmRequest) -> TurnOutcome {
        let mut chunker = ParagraphChunker::default();
        let mut sequence = 0u64;
        let mut usage: Option<Usage> = None;
        let mut attempt = 0;
        let mut stream = loop {
            attempt += 1;
            let opened = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    return self.outcome(&chunker, sequence, usage, Some(self.cancel_reason.reason()), None);
                }
                opened = self.llm.stream(request.clone()) => opened,
            };
            match opened {
                Ok(s) => break s,
                Err(e) if attempt == 1 && e.is_retryable() => {
                    tracing::warn!(error = %e, "provider failed before streaming; retrying once");
                }
                Err(e) => return self.outcome(&chunker, sequence, usage, None, Some(e)),
            }
        };
        let mut streamed_any = false;
        loop {
            let step = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Step::Cancelled,
                ev = stream.next() => Step::Event(ev),
            };
            let event = match step {
                Step::Cancelled => {
                    drop(stream);
                    return self.finish(
                        chunker,
                        sequence,
                        usage,
                        Some(self.cancel_reason.reason()),
                        None,
                    );
                }
                Step::Event(None) => {
                    let e = LlmError::Stream("stream ended without completion".into());
                    return self.finish(chunker, sequence, usage, None, Some(e));
                }
                Step::Event(Some(Err(e))) => {
                    if !streamed_any && attempt == 1 && e.is_retryable() {
                        attempt += 1;
                        tracing::warn!(error = %e, "provider failed before the first token; retrying once");
                        match self.llm.stream(request.clone()).await {
                            Ok(s) => {
                                stream = s;
                                continue;
                            }
                            Err(e) => return self.finish(chunker, sequence, usage, None, Some(e)),
                        }
                    }
                    return self.finish(chunker, sequence, usage, None, Some(e));
                }
                Step::Event(Some(Ok(event))) => event,
            };
            match event {
                LlmEvent::TextDelta(delta) => {
                    streamed_any = true;
                    for range in chunker.push(&delta) {
                        sequence += 1;
                        self.emit_chunk(&chunker.text()[..range.end], sequence);
                    }
                }
                LlmEvent::ToolCallDelta { .. } => streamed_any = true,
                LlmEvent::Usage(u) => usage = Some(u),
                LlmEvent::Done { .. } => {
                    return self.finish(chunker, sequence, usage, None, None);
                }
            }
        }
    }

    fn emit_chunk(&self, text: &str, sequence: u64) {
        self.sink.emit(
            self.ctx,
            TurnEvent::Chunk {
                text: Arc::from(text),
                sequence,
            },
        );
    }

    /// Flushes the last paragraph as a chunk, then builds the outcome.
    fn finish(
        &self,
        mut chunker: ParagraphChunker,
        mut sequence: u64,
        usage: Option<Usage>,
        interrupted: Option<Interruption>,
        error: Option<LlmError>,
    ) -> TurnOutcome {
        if interrupted.is_none()
            && let Some(range) = chunker.finish()
        {
            sequence += 1;
            self.emit_chunk(&chunker.text()[..range.end], sequence);
        }
        self.outcome(&chunker, sequence, usage, interrupted, error)
    }

    fn outcome(
        &self,
        chunker: &ParagraphChunker,
        sequence: u64,
        usage: Option<Usage>,
        interrupted: Option<Interruption>,
        error: Option<LlmError>,
    ) -> TurnOutcome {
        TurnOutcome {
            text: Arc::from(chunker.text()),
            sequence: sequence + 1,
            interrupted,
            error: error.map(Into::into),
            usage,
        }
    }
}
