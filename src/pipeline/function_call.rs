//! One forced function call to a model (the preprocessing and postprocessing stages):
//! stream the reply, take the named tool call, and hand out its arguments' members as each
//! completes ([`super::arguments`]), so a stage can act on the first fields before the model
//! has written the rest. A provider that sends the arguments in one piece, or only with the
//! finished call, gives the same members at the end. Bounded by a deadline and by the
//! turn's cancellation.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::arguments::Members;
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
    request: LlmRequest,
    deadline: Duration,
    cancel: &CancellationToken,
) -> Result<Called, StageError> {
    let mut arguments = Map::new();
    let usage = stream_function(client, request, deadline, cancel, |key, value| {
        arguments.entry(key).or_insert(value);
    })
    .await?;
    Ok(Called {
        arguments: Value::Object(arguments),
        usage,
    })
}

/// Like [`call_function`], handing each member of the arguments to `on_member` as soon as it
/// is complete (in the order the model wrote them). `Ok` only when the arguments were one
/// well-formed object; members handed out before a failure stay handed out.
pub async fn stream_function(
    client: &dyn LlmClient,
    mut request: LlmRequest,
    deadline: Duration,
    cancel: &CancellationToken,
    mut on_member: impl FnMut(String, Value) + Send,
) -> Result<Option<Usage>, StageError> {
    let Some(function) = request.tools.first().map(|t| t.name.clone()) else {
        return Err(StageError::NoCall(String::new()));
    };
    request.tool_choice = ToolChoice::Function(function.clone());
    let bad = |reason: &str| StageError::BadArguments {
        function: function.clone(),
        reason: reason.into(),
    };
    let work = async {
        let mut stream = client.stream(request).await?;
        let mut usage = None;
        let mut calls = Calls::default();
        let mut members = Members::default();
        while let Some(event) = stream.next().await {
            match event? {
                LlmEvent::Usage(u) => usage = Some(u),
                LlmEvent::ToolCallDelta {
                    index,
                    name,
                    arguments,
                    ..
                } => {
                    if let Some(fragment) = calls.push(index, name, &arguments, &function) {
                        members
                            .push(&fragment)
                            .into_iter()
                            .for_each(|(k, v)| on_member(k, v));
                    }
                }
                LlmEvent::Done { tool_calls, .. } => {
                    let Some(call) = tool_calls.into_iter().find(|c| c.name == function) else {
                        return Err(StageError::NoCall(function.clone()));
                    };
                    // A provider that streamed no fragments of the call: all of it at once.
                    if members.is_empty() {
                        members
                            .push(&call.arguments)
                            .into_iter()
                            .for_each(|(k, v)| on_member(k, v));
                    }
                    return if members.is_complete() {
                        Ok(usage)
                    } else {
                        Err(bad("not one complete JSON object"))
                    };
                }
                LlmEvent::TextDelta(_) | LlmEvent::ReasoningDelta(_) => {}
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

/// The streamed calls' names and arguments so far, to find the fragments of the forced
/// function's call (its name may arrive after some of its arguments, or in pieces).
#[derive(Default)]
struct Calls {
    calls: Vec<(String, String)>,
    /// The index of the forced function's call, once its name is complete.
    target: Option<usize>,
}

impl Calls {
    /// The arguments text to scan next: the fragment, or, the moment the call is found to
    /// be the forced function's, everything it streamed so far.
    fn push(
        &mut self,
        index: usize,
        name: Option<String>,
        args: &str,
        function: &str,
    ) -> Option<String> {
        if let Some(target) = self.target {
            return (target == index).then(|| args.to_string());
        }
        // Forced calls come first; a provider numbering beyond a few is not followed early.
        if index >= 8 {
            return None;
        }
        if self.calls.len() <= index {
            self.calls.resize(index + 1, (String::new(), String::new()));
        }
        let (call_name, call_args) = &mut self.calls[index];
        if let Some(name) = name {
            call_name.push_str(&name);
        }
        call_args.push_str(args);
        if call_name == function {
            self.target = Some(index);
            return Some(std::mem::take(call_args));
        }
        None
    }
}
