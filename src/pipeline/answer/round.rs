//! One model call of an answer: its stream opened (a 429 waited out as the provider says, a
//! retryable failure before the first token retried once), then its events taken into the
//! answer until the call ends, the turn is cancelled or its deadline passes.

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::super::speculation::Early;
use super::super::{Interruption, TurnError, TurnEvent};
use super::{AnswerStream, Progress};
use crate::llm::{LlmError, LlmEvent, LlmRequest, LlmStream, ToolCall, Usage};

/// How one model call ended.
pub(super) enum RoundEnd {
    Done(Vec<ToolCall>),
    Interrupted(Interruption),
    Failed(TurnError),
}

/// What woke a streaming round.
enum Step {
    Event(Option<Result<LlmEvent, LlmError>>),
    Cancelled,
    Deadline,
}

impl AnswerStream<'_> {
    /// One model call: opens the stream (retrying once before the first token) and streams
    /// text into the chunker.
    pub(super) async fn round(
        &self,
        request: &LlmRequest,
        early: Option<Early<'_>>,
        p: &mut Progress,
    ) -> RoundEnd {
        let mut stream = match self.open(request, early, p).await {
            Ok(s) => s,
            Err(end) => return end,
        };
        // One timer and one cancellation waiter for the round, not one per streamed event.
        let deadline = tokio::time::sleep_until(self.limits.deadline);
        let cancelled = self.cancel.cancelled();
        tokio::pin!(deadline, cancelled);
        loop {
            let step = tokio::select! {
                biased;
                () = &mut cancelled => Step::Cancelled,
                () = &mut deadline => Step::Deadline,
                ev = stream.next() => Step::Event(ev),
            };
            let event = match step {
                Step::Cancelled => {
                    drop(stream);
                    return RoundEnd::Interrupted(self.cancel_reason.reason());
                }
                Step::Deadline => return RoundEnd::Failed(TurnError::Deadline),
                Step::Event(None) => {
                    return RoundEnd::Failed(
                        LlmError::Stream("stream ended without completion".into()).into(),
                    );
                }
                Step::Event(Some(Err(e))) => match self.reopen(request, e, p).await {
                    Ok(s) => {
                        stream = s;
                        continue;
                    }
                    Err(end) => return end,
                },
                Step::Event(Some(Ok(event))) => event,
            };
            if let Some(end) = self.take_event(event, p) {
                return end;
            }
        }
    }

    /// A stream that failed with `e`: opened again once when nothing was streamed yet and
    /// `e` is retryable; otherwise the round fails with it.
    async fn reopen(
        &self,
        request: &LlmRequest,
        e: LlmError,
        p: &mut Progress,
    ) -> Result<LlmStream, RoundEnd> {
        if !p.streamed_any && !p.retried && e.is_retryable() {
            p.retried = true;
            tracing::warn!(error = %e, "provider failed before the first token; retrying once");
            return self
                .llm
                .stream(request.clone())
                .await
                .map_err(|e| RoundEnd::Failed(e.into()));
        }
        Err(RoundEnd::Failed(e.into()))
    }

    /// Takes one streamed event into the answer; `Some` when the round ends with it.
    fn take_event(&self, event: LlmEvent, p: &mut Progress) -> Option<RoundEnd> {
        if p.thinking && !matches!(event, LlmEvent::ReasoningDelta(_) | LlmEvent::Usage(_)) {
            p.thinking = false;
            self.sink.emit(self.ctx, TurnEvent::ThinkingComplete);
        }
        match event {
            LlmEvent::ReasoningDelta(delta) => {
                p.streamed_any = true;
                p.thinking = true;
                p.reasoning_bytes += delta.len();
                if p.reasoning_bytes > self.limits.max_bytes() {
                    return Some(RoundEnd::Failed(TurnError::AnswerTooLong));
                }
                self.sink.emit(self.ctx, TurnEvent::Thinking { delta });
            }
            LlmEvent::TextDelta(delta) => {
                p.streamed_any = true;
                self.push_text(p, &delta);
                if p.chunker.text().len() > self.limits.max_bytes() {
                    // A provider that ignores `max_tokens`: the connection closes here.
                    return Some(RoundEnd::Failed(TurnError::AnswerTooLong));
                }
            }
            LlmEvent::ToolCallDelta { .. } => p.streamed_any = true,
            LlmEvent::Usage(u) => {
                let total = p.usage.get_or_insert_with(Usage::default);
                total.prompt_tokens += u.prompt_tokens;
                total.completion_tokens += u.completion_tokens;
            }
            LlmEvent::Done { finish_reason, .. } if finish_reason.as_deref() == Some("length") => {
                return Some(RoundEnd::Failed(TurnError::AnswerTooLong));
            }
            LlmEvent::Done { tool_calls, .. } => return Some(RoundEnd::Done(tool_calls)),
        }
        None
    }

    async fn open(
        &self,
        request: &LlmRequest,
        mut early: Option<Early<'_>>,
        p: &mut Progress,
    ) -> Result<LlmStream, RoundEnd> {
        loop {
            let attempt: BoxFuture<'_, Result<LlmStream, LlmError>> = match early.take() {
                Some(e) => Box::pin(e.opened()),
                None => self.llm.stream(request.clone()),
            };
            let opened = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    return Err(RoundEnd::Interrupted(self.cancel_reason.reason()));
                }
                opened = attempt => opened,
            };
            match opened {
                Ok(s) => return Ok(s),
                Err(LlmError::RateLimited { retry_after }) => {
                    self.wait_out_rate_limit(retry_after, p).await?;
                }
                Err(e) if !p.streamed_any && !p.retried && e.is_retryable() => {
                    p.retried = true;
                    tracing::warn!(error = %e, "provider failed before streaming; retrying once");
                }
                Err(e) => return Err(RoundEnd::Failed(e.into())),
            }
        }
    }

    /// A 429 is waited out as the provider says (`Retry-After`, else 1, 2, 4… s), as often
    /// as the turn's deadline allows; the devices are told the answer waits. Fails the
    /// round only when the wait would pass the deadline.
    async fn wait_out_rate_limit(
        &self,
        retry_after: Option<std::time::Duration>,
        p: &mut Progress,
    ) -> Result<(), RoundEnd> {
        let backoff = std::time::Duration::from_secs(1 << p.rate_limited.min(5));
        let wait = retry_after.unwrap_or(backoff);
        p.rate_limited += 1;
        if tokio::time::Instant::now() + wait >= self.limits.deadline {
            return Err(RoundEnd::Failed(
                LlmError::RateLimited { retry_after }.into(),
            ));
        }
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            "provider rate-limited the answer; waiting"
        );
        self.sink
            .emit(self.ctx, TurnEvent::Waiting { retry_after: wait });
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(RoundEnd::Interrupted(self.cancel_reason.reason())),
            () = tokio::time::sleep(wait) => Ok(()),
        }
    }
}
