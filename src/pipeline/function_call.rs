//! One forced function call to a model (the preprocessing and postprocessing stages):
//! stream the reply, take the named tool call, parse its arguments. Bounded by a deadline
//! and by the turn's cancellation.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::llm::{LlmClient, LlmError, LlmEvent, LlmRequest, ToolChoice, Usage};

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cancelled")]
    Cancelled,
    #[error("the model did not call `{0}`")]
    NoCall(String),
    #[error("the arguments of `{function}` are not valid JSON: {reason}")]
    BadArguments { function: String, reason: String },
}

pub struct Called {
    pub arguments: serde_json::Value,
    pub usage: Option<Usage>,
}

/// Sends `request` with `tool_choice` forced to `request.tools[0]` and returns its arguments.
pub async fn call_function(
    client: &dyn LlmClient,
    mut request: LlmRequest,
    deadline: Duration,
    cancel: &CancellationToken,
) -> Result<Called, StageError> {
    let Some(function) = request.tools.first().map(|t| t.name.clone()) else {
        return Err(StageError::NoCall(String::new()));
    };
    request.tool_choice = ToolChoice::Function(function.clone());
    let work = async {
        let mut stream = client.stream(request).await?;
        let mut usage = None;
        while let Some(event) = stream.next().await {
            match event? {
                LlmEvent::Usage(u) => usage = Some(u),
                LlmEvent::Done { tool_calls, .. } => {
                    let Some(call) = tool_calls.into_iter().find(|c| c.name == function) else {
                        return Err(StageError::NoCall(function.clone()));
                    };
                    let arguments = serde_json::from_str(&call.arguments).map_err(|e| {
                        StageError::BadArguments {
                            function: function.clone(),
                            reason: e.to_string(),
                        }
                    })?;
                    return Ok(Called { arguments, usage });
                }
                LlmEvent::TextDelta(_)
                | LlmEvent::ReasoningDelta(_)
                | LlmEvent::ToolCallDelta { .. } => {}
            }
        }
        Err(StageError::Llm(LlmError::Stream(
            "stream ended without completion".into(),
        )))
    };
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(StageError::Cancelled),
        r = tokio::time::timeout(deadline, work) => r.unwrap_or(Err(StageError::Timeout(deadline))),
    }
}
