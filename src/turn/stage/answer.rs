//! The third stage: the streamed answer with its tool loop (or the polite refusal, or
//! nothing when cancelled), with the rest of preprocessing's reply beside it (its title
//! step goes out when it arrives), then the repair of the answer's broken links.

use std::sync::Arc;

use chatd_protocol::RejectionReason;

use super::Turn;
use super::plan::Plan;
use super::prepare::Ready;
use super::steps::title_step;
use crate::pipeline::answer::{AnswerLimits, AnswerStream, ParagraphHook};
use crate::pipeline::preprocess::Preprocessed;
use crate::pipeline::tools::ToolRunner;
use crate::pipeline::{TurnContext, TurnEvent, TurnOutcome, TurnSink};
use crate::turn::post::Reprocess;

/// What the answer stage leaves for the last one.
pub(in crate::turn) struct Answered {
    pub(in crate::turn) outcome: TurnOutcome,
    pub(in crate::turn) ctx: TurnContext,
    /// Preprocessing's whole reply (title, tags, suggested categories included).
    pub(in crate::turn) whole: Preprocessed,
    /// The answer's model and context, for generating it again if it is judged harmful.
    pub(in crate::turn) reprocess: Option<Reprocess>,
    /// The answering model's context window (what history compression measures against).
    pub(in crate::turn) context_window: u32,
}

impl Turn<'_> {
    pub(in crate::turn) async fn answer(
        &self,
        ready: &Ready,
        plan: Plan<'_>,
        tools: &dyn ToolRunner,
    ) -> Answered {
        let (app, ticket) = (self.deps.as_ref(), self.ticket);
        let Plan {
            pre,
            rest,
            plan,
            main,
            early,
            ctx,
        } = plan;
        let sink: &dyn TurnSink = self.writer.as_ref();
        let links = app.links.as_ref().map(|c| c.answer());
        let reason = || ticket.interruption();
        let answer = async {
            match main {
                Some((request, dropped)) if !ticket.cancel.is_cancelled() => {
                    let sink: Arc<dyn TurnSink> = self.writer.clone();
                    let (mut outcome, request) = AnswerStream {
                        llm: plan.model.client.as_ref(),
                        sink: &sink,
                        ctx: &ctx,
                        cancel: &ticket.cancel,
                        cancel_reason: &reason,
                        tools: Some(tools),
                        max_rounds: app.pipeline.max_tool_rounds,
                        paragraphs: links.as_ref().map(|l| l as &dyn ParagraphHook),
                        limits: AnswerLimits {
                            max_output_tokens: app.max_output_tokens,
                            deadline: tokio::time::Instant::from_std(self.started)
                                + app.pipeline.turn_deadline,
                        },
                    }
                    .run(request, early)
                    .await;
                    outcome.trimmed_history = dropped;
                    (outcome, Some(request))
                }
                _ => match pre.rejection {
                    Some(rejection) if !ticket.cancel.is_cancelled() => {
                        (self.reject(sink, &ctx, rejection), None)
                    }
                    _ => (
                        TurnOutcome {
                            interrupted: Some(ticket.interruption()),
                            ..TurnOutcome::default()
                        },
                        None,
                    ),
                },
            }
        };
        let rest = async {
            let whole = rest?.await;
            let title = title_step(&whole, ready.first_message, ready.has_title);
            sink.emit(&ctx, TurnEvent::Step(title));
            Some(whole)
        };
        let ((mut outcome, answered_from), whole) = tokio::join!(answer, rest);
        if let Some(links) = links {
            self.repair_links(sink, &ctx, links, &mut outcome).await;
        }
        let reprocess = answered_from
            .filter(|_| app.pipeline.harmful_response_threshold > 0)
            .map(|request| Reprocess {
                llm: plan.model.client.clone(),
                request,
            });
        Answered {
            outcome,
            ctx,
            whole: whole.unwrap_or(pre),
            reprocess,
            context_window: plan.model.spec.context_window,
        }
    }

    /// The polite refusal, streamed as the assistant's answer (no main model call).
    fn reject(
        &self,
        sink: &dyn TurnSink,
        ctx: &TurnContext,
        rejection: RejectionReason,
    ) -> TurnOutcome {
        let texts = &self.deps.instructions.prompts.rejection;
        let text: Arc<str> = Arc::from(
            match rejection {
                RejectionReason::HarmfulOrIllegalDetected => &texts.harmful_or_illegal_detected,
                RejectionReason::MisuseDetected => &texts.misuse_detected,
            }
            .trim(),
        );
        sink.emit(ctx, TurnEvent::Chunk { text: text.clone() });
        TurnOutcome {
            text,
            rejection: Some(rejection),
            ..TurnOutcome::default()
        }
    }

    /// Replaces the answer's broken links once its checks are done: the corrected text goes
    /// out as one more `ai_message_update` and becomes the outcome's text (so the final
    /// frame and the AI cache carry it). Interrupted and refused answers are left as they are.
    async fn repair_links(
        &self,
        sink: &dyn TurnSink,
        ctx: &TurnContext,
        links: crate::links::AnswerLinks,
        outcome: &mut TurnOutcome,
    ) {
        let cancel = &self.ticket.cancel;
        if outcome.interrupted.is_some() || outcome.rejection.is_some() || cancel.is_cancelled() {
            return;
        }
        let Some(repair) = links.repair(&outcome.text, cancel).await else {
            return;
        };
        let text: Arc<str> = Arc::from(repair.text);
        sink.emit(ctx, TurnEvent::Chunk { text: text.clone() });
        outcome.text = text;
        if self.deps.report_replaced_links {
            outcome.replaced_links = repair.replaced;
        }
    }
}
