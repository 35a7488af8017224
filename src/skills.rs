//! Skills: the tools the main model calls. Apps and skills come from manifests
//! ([`manifest`]); [`Skills`] is the registry and the pipeline's [`ToolRunner`]: it offers
//! tool definitions (each with a `requests` array whose items get an injected `id`), and runs
//! calls ([`runner`]) with embeds, cancellation, the output contract ([`contract`]) and the
//! prompt-injection check ([`sanitize`]).

pub mod contract;
mod docs;
mod exec_error;
pub mod executor;
mod external;
pub mod free_text;
mod invocation;
pub mod manifest;
pub mod mcp;
pub mod prefilter;
pub mod requests;
mod results;
pub mod routine_manifest;
pub mod runner;
pub mod sanitize;
mod web_read;

use std::sync::Arc;

use chatd_protocol::{EmbedId, SkillTaskId};
use dashmap::DashMap;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::auth::UserId;
use crate::cache::ai::AiCache;
use crate::config::SkillsConfig;
use crate::llm::{ToolCall, ToolDef};
use crate::pipeline::models::Model;
use crate::pipeline::tools::{PreparedCall, SkillInfo, ToolRunner, toon};
use crate::pipeline::{TurnContext, TurnSink};
use invocation::Invocation;
use manifest::{AppManifest, SkillManifest};
use sanitize::{Detector, DetectorPrompt};

#[derive(Debug, thiserror::Error)]
pub enum SkillsError {
    #[error("skills: {0}")]
    Manifest(#[from] manifest::ManifestError),
    #[error("skills: {0}")]
    Setup(String),
}

/// One skill, ready to run.
pub struct Skill {
    pub app_id: String,
    pub skill_id: String,
    /// `app_id-skill_id`, the tool name.
    pub full_id: String,
    pub manifest: SkillManifest,
    /// The tool definition, built once (see [`definition`]).
    definition: ToolDef,
    patterns: contract::Patterns,
    limiter: Option<governor::DefaultDirectRateLimiter>,
}

/// What running skills needs from the app.
pub struct Deps {
    pub config: SkillsConfig,
    pub http: reqwest::Client,
    pub cache: AiCache,
    pub detector: Detector,
    pub cancels: SkillCancels,
    /// Owns skill work (also calls that outlive their turn); drained at shutdown.
    pub tasks: tokio_util::task::TaskTracker,
    pub mcp: Arc<mcp::McpApps>,
}

/// Running skill invocations: who owns each and how to stop it.
#[derive(Default)]
pub struct SkillCancels {
    running: DashMap<SkillTaskId, Running>,
}

struct Running {
    owner: UserId,
    token: CancellationToken,
    embed_id: EmbedId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefused {
    NotFound,
    Forbidden,
}

impl SkillCancels {
    fn start(&self, id: SkillTaskId, owner: UserId, token: CancellationToken, embed_id: EmbedId) {
        self.running.insert(
            id,
            Running {
                owner,
                token,
                embed_id,
            },
        );
    }

    pub(crate) fn finish(&self, id: &SkillTaskId) {
        self.running.remove(id);
    }

    /// Invocations still registered (running, or waiting for their results).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Cancels an invocation on a request sealed with its owner's key (from another node).
    pub fn cancel_for(&self, owner: &crate::crypto::UserHash, id: &SkillTaskId) -> bool {
        match self.running.get(id) {
            Some(entry) if &crate::crypto::UserHash::of(&entry.owner) == owner => {
                entry.token.cancel();
                true
            }
            _ => false,
        }
    }

    /// Cancels the owner's running invocation; returns its embed.
    pub fn cancel(&self, user: &UserId, id: &SkillTaskId) -> Result<EmbedId, CancelRefused> {
        let Some(entry) = self.running.get(id) else {
            return Err(CancelRefused::NotFound);
        };
        if &entry.owner != user {
            return Err(CancelRefused::Forbidden);
        }
        entry.token.cancel();
        Ok(entry.embed_id.clone())
    }
}

pub struct Skills {
    skills: Arc<SkillList>,
    deps: Arc<Deps>,
}

/// The skills on offer: the manifests' own, and each MCP app's as last listed.
struct SkillList {
    list: std::sync::RwLock<Arc<Vec<Arc<Skill>>>>,
    /// Counts the publications (MCP listings).
    published: tokio::sync::watch::Sender<u64>,
}

impl SkillList {
    fn new(skills: Vec<Arc<Skill>>) -> SkillList {
        SkillList {
            list: std::sync::RwLock::new(Arc::new(skills)),
            published: tokio::sync::watch::Sender::new(0),
        }
    }

    fn all(&self) -> Arc<Vec<Arc<Skill>>> {
        self.list
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces one app's skills.
    fn publish(&self, app_id: &str, skills: Vec<Arc<Skill>>) {
        {
            let mut list = self
                .list
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut next: Vec<Arc<Skill>> = list
                .iter()
                .filter(|s| s.app_id != app_id)
                .cloned()
                .collect();
            next.extend(skills);
            *list = Arc::new(next);
        }
        self.published.send_modify(|n| *n += 1);
    }
}

impl Skills {
    /// Loads and lints the manifests (`skills.apps_dir`, or the built-in ones) and the
    /// detector prompt; `detector_model` runs the prompt-injection check.
    pub fn load(
        config: &SkillsConfig,
        keys: &crate::config::KeysConfig,
        cache: AiCache,
        detector_model: Model,
        tasks: tokio_util::task::TaskTracker,
    ) -> Result<Skills, SkillsError> {
        let apps = manifest::load(&config.apps_dir)?;
        let prompt =
            DetectorPrompt::load(&config.injection_prompt_file).map_err(SkillsError::Setup)?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| SkillsError::Setup(e.to_string()))?;
        let keys = Arc::new(keys.clone());
        // Opt-in apps (`enabled: false`) only where `skills.mcp_apps` names them.
        let servers = mcp::setup::servers(&apps, config, &keys).map_err(SkillsError::Setup)?;
        let mcp = mcp::McpApps::new(servers);
        Ok(Skills {
            skills: Arc::new(SkillList::new(build(&apps))),
            deps: Arc::new(Deps {
                mcp: Arc::new(mcp),
                config: config.clone(),
                http,
                cache,
                detector: Detector {
                    model: detector_model,
                    prompt,
                    config: config.clone(),
                },
                cancels: SkillCancels::default(),
                tasks,
            }),
        })
    }

    pub fn cancels(&self) -> &SkillCancels {
        &self.deps.cancels
    }

    /// Fires after each MCP listing changed the skills on offer.
    pub fn published(&self) -> tokio::sync::watch::Receiver<u64> {
        self.skills.published.subscribe()
    }

    fn find(&self, id: &str) -> Option<Arc<Skill>> {
        self.skills.all().iter().find(|s| s.full_id == id).cloned()
    }

    /// Starts a supervisor per MCP app on `tasks` (see [`mcp`]): it lists the app's tools
    /// and keeps them current until `shutdown`, then stops the server.
    pub fn start_mcp(
        &self,
        tasks: &tokio_util::task::TaskTracker,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        for server in self.deps.mcp.servers() {
            let list = self.skills.clone();
            let app_id = server.app_id.clone();
            tasks.spawn(mcp::supervise(
                server.clone(),
                move |manifests| {
                    let skills = manifests.iter().map(|m| skill(&app_id, m)).collect();
                    list.publish(&app_id, skills);
                },
                shutdown.clone(),
            ));
        }
    }
}

fn build(apps: &[AppManifest]) -> Vec<Arc<Skill>> {
    apps.iter()
        .flat_map(|app| app.skills.iter().map(move |s| skill(&app.id, s)))
        .collect()
}

fn skill(app_id: &str, s: &SkillManifest) -> Arc<Skill> {
    let full_id = format!("{app_id}-{}", s.id);
    Arc::new(Skill {
        app_id: app_id.to_string(),
        skill_id: s.id.clone(),
        definition: definition(&full_id, s),
        full_id,
        patterns: contract::Patterns::compile(&s.output),
        limiter: s.rate_limit.and_then(|r| {
            std::num::NonZeroU32::new(r.per_second)
                .map(|n| governor::RateLimiter::direct(governor::Quota::per_second(n)))
        }),
        manifest: s.clone(),
    })
}

/// The tool definition: the skill's request schema wrapped in a `requests` array, with the
/// `id` injected (a number or a string; required when there are several requests).
fn definition(full_id: &str, manifest: &SkillManifest) -> ToolDef {
    let mut properties = manifest.input.properties.clone();
    properties.insert(
        "id".into(),
        json!({"type": ["integer", "string"], "description": "unique per request (number or UUID); results come back under it"}),
    );
    ToolDef {
        name: full_id.to_string(),
        description: manifest.description.clone(),
        parameters: json!({
            "type": "object",
            "properties": {"requests": {
                "type": "array", "minItems": 1,
                "items": {"type": "object", "properties": properties,
                          "required": manifest.input.required},
            }},
            "required": ["requests"],
        })
        .into(),
    }
}

impl ToolRunner for Skills {
    fn skills(&self) -> Vec<SkillInfo> {
        self.skills
            .all()
            .iter()
            .map(|s| SkillInfo {
                id: s.full_id.clone(),
                description: s.manifest.description.clone(),
                requires_account: s.manifest.requires_account.then(|| s.app_id.clone()),
            })
            .collect()
    }

    fn always_include(&self) -> Vec<String> {
        self.skills
            .all()
            .iter()
            .filter(|s| s.manifest.always_include)
            .map(|s| s.full_id.clone())
            .collect()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        ids.iter()
            .filter_map(|id| self.find(id))
            .map(|s| s.definition.clone())
            .collect()
    }

    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        cancel: CancellationToken,
    ) -> PreparedCall {
        let Some(skill) = self.find(&call.name) else {
            return PreparedCall::answer(crate::pipeline::tools::refused(&call.name));
        };
        // A skill that declares `personal_data` gets the values behind the placeholders.
        let arguments = match &ctx.privacy {
            Some(p) if skill.manifest.personal_data => p.reveal(&call.arguments, true),
            _ => call.arguments,
        };
        let requests = match requests::parse_requests(&skill, &arguments) {
            Ok(r) => r,
            Err(reason) => {
                return PreparedCall::answer(toon(&json!({
                    "status": "error",
                    "error": format!("invalid arguments for {}: {reason}", skill.full_id),
                    "app_id": skill.app_id, "skill_id": skill.skill_id,
                })));
            }
        };
        let invocation = Invocation {
            skill,
            deps: self.deps.clone(),
            sink: sink.clone(),
            ctx: ctx.clone(),
            skill_task_id: SkillTaskId::random(),
            embed_id: EmbedId::random(),
            requests,
            cancel,
            long_wait: std::sync::Mutex::new(None),
        };
        self.deps.cancels.start(
            invocation.skill_task_id.clone(),
            ctx.user.clone(),
            invocation.cancel.clone(),
            invocation.embed_id.clone(),
        );
        // The placeholder and the `processing` status go out now, before the reference
        // block is streamed; the placeholder is cached when the call starts.
        sink.emit(
            ctx,
            crate::pipeline::TurnEvent::Embed(invocation.placeholder()),
        );
        invocation.announce();
        PreparedCall {
            reference: Some(invocation.reference()),
            run: Box::pin(invocation.run()),
        }
    }
}

/// Lints a directory of manifests (`chatd lint-skills`): the number of skills, or the first
/// problem.
pub fn lint_dir(dir: &std::path::Path) -> Result<usize, SkillsError> {
    Ok(manifest::load(dir)?.iter().map(|a| a.skills.len()).sum())
}
