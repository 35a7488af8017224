//! The state of one tool call of one skill ([`Invocation`]), its requests ([`Request`]) and
//! how each request ended ([`Ended`]). The behaviour lives beside it: running the call in
//! `runner.rs`, its requests in `requests.rs`, their results in `results.rs`, the injection
//! check in `external.rs`.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{EmbedId, SkillTaskId};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::executor;
use super::{Deps, Skill};
use crate::pipeline::{TurnContext, TurnSink};

/// One request of a call, its id settled.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: Value,
    /// The parameters, without `id`.
    pub params: Value,
}

/// How one request ended.
pub(super) enum Ended {
    Results(executor::Output),
    Failed(String),
    Cancelled,
}

/// Everything one invocation needs, owned (it runs as a `'static` future).
pub struct Invocation {
    pub skill: Arc<Skill>,
    pub deps: Arc<Deps>,
    /// The turn's writer: every event of this call goes through it.
    pub sink: Arc<dyn TurnSink>,
    pub ctx: TurnContext,
    pub skill_task_id: SkillTaskId,
    pub embed_id: EmbedId,
    pub requests: Vec<Request>,
    pub cancel: CancellationToken,
    /// Fired (once) when a rate-limit wait exceeds `skills.long_wait`.
    pub long_wait: std::sync::Mutex<Option<oneshot::Sender<Duration>>>,
}

/// However an invocation ends (also dropped unrun when its turn is cancelled), it leaves the
/// registry of running skills.
impl Drop for Invocation {
    fn drop(&mut self) {
        self.deps.cancels.finish(&self.skill_task_id);
    }
}
