//! Reprocessing an answer that postprocessing judged harmful (its `harmful_response` at or
//! above `pipeline.harmful_response_threshold`, as the seeds suggest): the model answers
//! once more in the context it answered in (the tool results it had included; no new tool
//! calls) with a caution added, and the new text replaces the first. Bounded like an
//! answer (its output limit and a deadline) and cancellable; nothing is streamed: the
//! caller sends the whole corrected text at once.

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::TurnError;
use super::answer::AnswerLimits;
use crate::llm::{LlmClient, LlmError, LlmEvent, LlmMessage, LlmRequest, ToolChoice};

/// The answer to `request` generated again with `caution`; `Ok(None)` when cancelled.
pub async fn regenerate(
    llm: &dyn LlmClient,
    mut request: LlmRequest,
    caution: &str,
    limits: &AnswerLimits,
    cancel: &CancellationToken,
) -> Result<Option<String>, TurnError> {
    request
        .messages
        .push(LlmMessage::System(caution.to_string()));
    if !request.tools.is_empty() {
        request.tool_choice = ToolChoice::None;
    }
    let max_bytes = limits.max_bytes();
    let work = async {
        let mut stream = llm.stream(request).await?;
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event? {
                LlmEvent::TextDelta(delta) => {
                    text.push_str(&delta);
                    if text.len() > max_bytes {
                        return Err(TurnError::AnswerTooLong);
                    }
                }
                LlmEvent::Done { .. } => return Ok(text),
                LlmEvent::ReasoningDelta(_)
                | LlmEvent::ToolCallDelta { .. }
                | LlmEvent::Usage(_) => {}
            }
        }
        Err(LlmError::Stream("stream ended without completion".into()).into())
    };
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Ok(None),
        done = tokio::time::timeout_at(limits.deadline, work) => match done {
            Ok(text) => text.map(Some),
            Err(_) => Err(TurnError::Deadline),
        },
    }
}
