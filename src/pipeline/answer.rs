//! Main processing: the streamed model answer turned into paragraph chunks (cumulative
//! text; the turn's writer numbers them), with the tool loop: when the model calls tools, the calls run
//! concurrently, their results go back to the model and the answer continues in the same
//! cumulative text; at most `max_rounds` model calls, the last one told to answer without
//! tools. Cancellation drops the provider stream at once (for HTTP providers that closes the
//! connection). A provider failure before the first token is retried once when retryable;
//! after tokens were streamed the turn ends with what it has. Whatever the provider does,
//! the answer ends at its [`AnswerLimits`]: a length (the provider stopping for length, or
//! the text growing past it) and a deadline (mid-stream or mid-tool-call), each with a
//! typed error and the text so far. This file owns the answer across its rounds and the
//! tool loop; one model call is in [`round`].

mod round;

use std::sync::Arc;

use futures_util::future::{BoxFuture, join_all};
use tokio_util::sync::CancellationToken;

use self::round::RoundEnd;
use super::chunker::ParagraphChunker;
use super::preprocess::normalize_tool_name;
use super::speculation::Early;
use super::tools::{self, ToolRunner};
use super::{Interruption, TurnContext, TurnError, TurnEvent, TurnOutcome, TurnSink};
use crate::llm::{LlmClient, LlmMessage, LlmRequest, ToolCall, ToolChoice, Usage};

/// Why the turn's cancellation token fired; read when it does.
pub trait CancelReason: Send + Sync {
    fn reason(&self) -> Interruption;
}

impl<F: Fn() -> Interruption + Send + Sync> CancelReason for F {
    fn reason(&self) -> Interruption {
        self()
    }
}

/// Sees each completed paragraph of the answer as it streams (link checking); must not
/// block.
pub trait ParagraphHook: Send + Sync {
    fn paragraph(&self, text: &str);
}

/// Where an answer stops, whatever the provider does.
#[derive(Debug, Clone, Copy)]
pub struct AnswerLimits {
    /// The provider was asked for at most this many tokens (`max_tokens`, set by whoever
    /// built the request); one that streams on regardless is cut at [`BYTES_PER_TOKEN`]
    /// bytes per token.
    pub max_output_tokens: u32,
    /// The turn ends here, mid-stream or mid-tool-call.
    pub deadline: tokio::time::Instant,
}

/// More bytes per token than any real answer averages: the cut for a provider that
/// ignores `max_tokens`, never reached by one that honours it.
pub const BYTES_PER_TOKEN: usize = 8;

impl AnswerLimits {
    pub(crate) fn max_bytes(&self) -> usize {
        (self.max_output_tokens as usize).saturating_mul(BYTES_PER_TOKEN)
    }
}

/// One answer to stream: the model, where its events go, and its limits.
pub struct AnswerStream<'a> {
    pub llm: &'a dyn LlmClient,
    pub sink: &'a Arc<dyn TurnSink>,
    pub ctx: &'a TurnContext,
    pub cancel: &'a CancellationToken,
    pub cancel_reason: &'a dyn CancelReason,
    /// Runs the tool calls of `request.tools`; `None`: tool calls are ignored.
    pub tools: Option<&'a dyn ToolRunner>,
    /// Model calls per answer (at least 1); the last one has `tool_choice: none`.
    pub max_rounds: u32,
    /// Told about every completed paragraph, after its chunk was emitted.
    pub paragraphs: Option<&'a dyn ParagraphHook>,
    pub limits: AnswerLimits,
}

/// The answer being built across rounds.
struct Progress {
    chunker: ParagraphChunker,
    usage: Option<Usage>,
    streamed_any: bool,
    retried: bool,
    tool_rounds: u32,
    /// 429s waited out so far.
    rate_limited: u32,
    /// Reasoning bytes streamed (bounded like the answer).
    reasoning_bytes: usize,
    /// The model is streaming reasoning (`thinking_complete` is due before its text).
    thinking: bool,
}

impl AnswerStream<'_> {
    /// Streams the answer to `request`, emitting `Chunk` events; returns the outcome
    /// (the caller emits `Finished`) and the request with the tool rounds' calls and results
    /// (what the answer was written from: reprocessing asks again from there). `early`, when given, is `request`'s first model call,
    /// already opened (a speculative main call that preprocessing confirmed).
    pub async fn run(
        &self,
        mut request: LlmRequest,
        early: Option<Early<'_>>,
    ) -> (TurnOutcome, LlmRequest) {
        let outcome = self.rounds(&mut request, early).await;
        (outcome, request)
    }

    /// The model calls of an answer; `request` ends holding the context the final text
    /// was written in (each tool round's calls and results appended).
    async fn rounds(&self, request: &mut LlmRequest, early: Option<Early<'_>>) -> TurnOutcome {
        let mut early = early;
        let mut p = Progress {
            chunker: ParagraphChunker::default(),
            usage: None,
            streamed_any: false,
            retried: false,
            tool_rounds: 0,
            rate_limited: 0,
            reasoning_bytes: 0,
            thinking: false,
        };
        let offered: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let max_rounds = self.max_rounds.max(1);
        for round in 1..=max_rounds {
            if round == max_rounds && !request.tools.is_empty() {
                request.tool_choice = ToolChoice::None;
            }
            let round_start = p.chunker.text().len();
            let calls = match self.round(request, early.take(), &mut p).await {
                RoundEnd::Done(calls) => calls,
                RoundEnd::Interrupted(why) => return self.outcome(&p, Some(why), None),
                RoundEnd::Failed(e) => return self.finish(p, None, Some(e)),
            };
            let Some(runner) = self
                .tools
                .filter(|_| !calls.is_empty() && round < max_rounds)
            else {
                return self.finish(p, None, None);
            };
            let said = p.chunker.text()[round_start..].to_string();
            if !said.is_empty() && !said.ends_with("\n\n") {
                let sep = if said.ends_with('\n') { "\n" } else { "\n\n" };
                self.push_text(&mut p, sep);
            }
            let results = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    return self.outcome(&p, Some(self.cancel_reason.reason()), None);
                }
                () = tokio::time::sleep_until(self.limits.deadline) => {
                    return self.finish(p, None, Some(TurnError::Deadline));
                }
                r = self.run_tools(runner, &offered, &calls, &mut p) => r,
            };
            p.tool_rounds += 1;
            request.messages.push(LlmMessage::Assistant {
                content: said,
                tool_calls: calls.clone(),
            });
            for (call, content) in calls.iter().zip(results) {
                request.messages.push(LlmMessage::Tool {
                    tool_call_id: call.id.clone(),
                    content,
                });
            }
        }
        self.finish(p, None, None)
    }

    /// Runs a round's calls concurrently; a tool that was not offered is refused, not run.
    /// Each call's embed reference is streamed before the calls run.
    async fn run_tools(
        &self,
        runner: &dyn ToolRunner,
        offered: &[String],
        calls: &[ToolCall],
        p: &mut Progress,
    ) -> Vec<String> {
        let mut runs = Vec::with_capacity(calls.len());
        for call in calls {
            let name = normalize_tool_name(&call.name);
            if !offered.contains(&name) {
                tracing::warn!(tool = %name, "model called a tool it was not offered");
                let refusal = tools::refused(&name);
                runs.push(Box::pin(async move { refusal }) as BoxFuture<'static, String>);
                continue;
            }
            let mut call = call.clone();
            call.name = name;
            let prepared = runner.prepare(call, self.ctx, self.sink, self.cancel.child_token());
            if let Some(reference) = prepared.reference {
                self.push_text(p, &reference);
            }
            runs.push(prepared.run);
        }
        join_all(runs).await
    }

    fn push_text(&self, p: &mut Progress, delta: &str) {
        for range in p.chunker.push(delta) {
            self.emit_chunk(&p.chunker.text()[..range.end]);
            if let Some(hook) = self.paragraphs {
                hook.paragraph(&p.chunker.text()[range]);
            }
        }
    }

    fn emit_chunk(&self, text: &str) {
        self.sink.emit(
            self.ctx,
            TurnEvent::Chunk {
                text: Arc::from(text),
            },
        );
    }

    /// Flushes the last paragraph as a chunk, then builds the outcome.
    fn finish(
        &self,
        mut p: Progress,
        interrupted: Option<Interruption>,
        error: Option<TurnError>,
    ) -> TurnOutcome {
        if interrupted.is_none()
            && let Some(range) = p.chunker.finish()
        {
            self.emit_chunk(&p.chunker.text()[..range.end]);
            if let Some(hook) = self.paragraphs {
                hook.paragraph(&p.chunker.text()[range]);
            }
        }
        self.outcome(&p, interrupted, error)
    }

    fn outcome(
        &self,
        p: &Progress,
        interrupted: Option<Interruption>,
        error: Option<TurnError>,
    ) -> TurnOutcome {
        TurnOutcome {
            text: Arc::from(p.chunker.text()),
            interrupted,
            error,
            usage: p.usage,
            tool_rounds: p.tool_rounds,
            ..TurnOutcome::default()
        }
    }
}
