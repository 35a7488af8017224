//! What a turn needs, and nothing else: built once by the app, shared by every turn (the
//! connection layer's state stays out of it).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Turns;
use super::writer::Outlet;
use crate::cache::ai::AiCache;
use crate::config::PipelineConfig;
use crate::links::LinkChecker;
use crate::metrics::Metrics;
use crate::pipeline::instructions::Instructions;
use crate::pipeline::models::Models;
use crate::pipeline::speculation::Predictions;
use crate::skills::Skills;

pub struct TurnDeps {
    pub pipeline: PipelineConfig,
    /// `llm.max_output_tokens`: the longest answer.
    pub max_output_tokens: u32,
    /// `links.report_replaced`: list replaced links on the final frame.
    pub report_replaced_links: bool,
    /// The sealed AI cache (messages and embeds).
    pub ai_cache: AiCache,
    /// Prompts and function definitions (`config/instructions.yml`).
    pub instructions: Arc<Instructions>,
    /// The model catalog and each stage's default model.
    pub models: Models,
    /// The guesses of speculative main calls, from the speculation record (in process, or
    /// shared by the nodes on Redis).
    pub predictions: Arc<Predictions>,
    /// The skills the main model may call (the pipeline's tool runner).
    pub skills: Arc<Skills>,
    /// The apps' routines and their runs (a part of the turn's tools).
    pub routines: crate::routines::Routines,
    /// Background link validation of answers; `None` when `links.enabled` is off.
    pub links: Option<Arc<LinkChecker>>,
    pub metrics: Arc<Metrics>,
    /// Where the turn's writer writes: the user's devices on this node and the others, and
    /// the turn's log (for devices that resume).
    pub outlet: Arc<Outlet>,
    /// Which turn runs in each chat, and what waits behind it.
    pub turns: Arc<Turns>,
    /// Owns every turn task and what it spawns (postprocessing, follow-ups).
    pub tasks: TaskTracker,
    /// Fired at shutdown: running turns end with `interrupted_by_shutdown`.
    pub shutdown: CancellationToken,
    /// The apps' focus modes.
    pub focus: Arc<crate::focus::FocusCatalog>,
    /// App settings/memories: categories and the chat-scoped sealed cache.
    pub memories: Arc<crate::memories::Memories>,
    /// The personal data to hide from the models (`None`: `privacy.pseudonymize` is empty).
    pub privacy: Option<Arc<crate::privacy::Detector>>,
}
