//! Building, running and stopping chatd: [`App::build`] binds the listener (port 0 in
//! tests) and wires the state from its parts (`parts.rs`); [`App::run_until_stopped`]
//! serves until the shutdown token fires, then drains (`drain.rs`): tells every device
//! (`server_shutting_down`), lets running answers finish, cancels what still runs, closes
//! sockets with 1012, all within the grace period.

mod drain;
mod parts;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, TokenKeys};
use crate::config::Config;
use crate::delivery::Delivery;
use crate::delivery::bus::Received;
use crate::links::LinkChecker;
use crate::llm::{self, LlmClient};
use crate::metrics::Metrics;
use crate::pipeline::instructions::Instructions;
use crate::pipeline::models::Models;
use crate::pipeline::speculation::Predictions;
use crate::routines::Routines;
use crate::session::quota;
use crate::skills::{Skills, SkillsError};
use crate::state::{AppState, Tasks};
use crate::turn::log::TurnLog;
use crate::turn::writer::Outlet;
use crate::turn::{TurnDeps, Turns};
use parts::{Shared, Storage, listen, memories};

pub use parts::{BuildError, cache_backend, key_provider};

pub struct App {
    listener: TcpListener,
    state: Arc<AppState>,
    /// What the bus receives (cluster mode), handled once the app runs.
    bus_received: Option<mpsc::Receiver<Received>>,
}

/// What the turns and the connections share, built before either view of it.
struct Parts {
    instructions: Arc<Instructions>,
    models: Models,
    focus: Arc<crate::focus::FocusCatalog>,
    storage: Storage,
    delivery: Arc<Delivery>,
    skills: Arc<Skills>,
    routines: Routines,
    memories: Arc<crate::memories::Memories>,
    metrics: Arc<Metrics>,
    links: Option<Arc<LinkChecker>>,
    tasks: Tasks,
}

impl App {
    pub async fn build(mut config: Config) -> Result<App, BuildError> {
        crate::llm::secrets::resolve(&mut config).await?;
        let keys = TokenKeys::load(&config)?;
        let llm = llm::from_config(&config.llm)?;
        Self::build_with_llm(config, keys, llm).await
    }

    /// As [`App::build`], with a given LLM client (tests and benchmarks).
    pub async fn build_with_llm(
        config: Config,
        keys: TokenKeys,
        llm: Arc<dyn LlmClient>,
    ) -> Result<App, BuildError> {
        let addr = config.server.listen;
        let listener = listen(addr, config.server.socket_send_buffer_bytes)
            .map_err(|source| BuildError::Bind { addr, source })?;
        let (instructions, focus) = instructions_and_focus(&config)?;
        let models = Models::from_config(&config, llm)?;
        let storage = Storage::open(&config).await?;
        let tasks = Tasks::default();
        let node = config.cluster.node();
        let shared = Shared::open(
            &config,
            &node,
            &tasks.connections,
            &tasks.connections_shutdown,
        )
        .await?;
        let delivery = Arc::new(shared.delivery(&node, &storage.keyring, &tasks));
        let ai_cache = &storage.ai_cache;
        let sanitizer = models.or_preprocessing(&config.skills.content_sanitization_model);
        let skills = Skills::load(
            &config.skills,
            &config.keys,
            ai_cache.clone(),
            sanitizer,
            tasks.turns.clone(),
        );
        let skills = Arc::new(skills?);
        // MCP servers live as long as the connections: stopped after the turns drained.
        skills.start_mcp(&tasks.connections, tasks.connections_shutdown.clone());
        let routines = Routines::new(
            &config.routines,
            crate::routines::Catalog::load(&config.skills.apps_dir)?,
            crate::routines::store::RunStore::new(
                storage.runs_home.clone(),
                storage.keyring.clone(),
            ),
            ai_cache.clone(),
            skills.clone(),
            &models,
        );
        let memories = memories(&config, ai_cache, storage.store.clone())?;
        let metrics = Arc::new(Metrics::new());
        let links = match config.links.enabled {
            true => {
                let stop = tasks.turns_shutdown.clone();
                Some(Arc::new(LinkChecker::new(
                    &config.links,
                    metrics.clone(),
                    stop,
                )?))
            }
            false => None,
        };
        let parts = Parts {
            instructions: Arc::new(instructions),
            models,
            focus,
            storage,
            delivery,
            skills,
            routines,
            memories,
            metrics,
            links,
            tasks,
        };
        let state = assemble(config, keys, parts, &shared)?;
        Ok(App {
            listener,
            state,
            bus_received: shared.received,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Serves until `shutdown` fires, then drains within `server.shutdown_grace`: stop
    /// accepting connections and messages, let running answers finish, cancel the ones
    /// still running near the end (their final frames go out), close sockets with 1012.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let App {
            listener,
            state,
            bus_received,
        } = self;
        // The node's own services run until the turns are cancelled, on the connections'
        // tracker: the drain waits on the turns' tracker for the answers alone.
        if let Some(rx) = bus_received {
            state
                .tasks
                .connections
                .spawn(crate::turn::node::run(state.turn.clone(), rx));
        }
        // Turns whose node was lost are ended and their chats handed on (see turn::reaper).
        state.tasks.connections.spawn(crate::turn::reaper::run(
            state.turn.clone(),
            std::time::Duration::from_secs(1),
        ));
        let router = crate::http::router(state.clone());
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        let stop = shutdown.clone();
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await });
        let drain = drain::drain(&state, shutdown);
        let (served, ()) = tokio::join!(serve, drain);
        served?;
        tracing::info!("chatd stopped");
        Ok(())
    }
}

/// The prompts and function definitions, extended with the apps' focus modes (the skills
/// registry reads the same manifests).
fn instructions_and_focus(
    config: &Config,
) -> Result<(Instructions, Arc<crate::focus::FocusCatalog>), BuildError> {
    let mut instructions = Instructions::load(&config.pipeline)?;
    let apps = crate::skills::manifest::load(&config.skills.apps_dir).map_err(SkillsError::from)?;
    let focus = Arc::new(crate::focus::FocusCatalog::new(
        apps.iter()
            .map(|a| (a.id.as_str(), a.focus_modes.as_slice())),
    ));
    focus.extend_instructions(&mut instructions);
    Ok((instructions, focus))
}

/// The state from its parts: the turns' view ([`TurnDeps`], with the outlet their writers
/// write to) and the connections' ([`AppState`]).
fn assemble(
    config: Config,
    keys: TokenKeys,
    p: Parts,
    shared: &Shared,
) -> Result<Arc<AppState>, BuildError> {
    let node = config.cluster.node();
    // What leaves the process is sealed; an in-process turn store is not.
    let seal = config.cluster.enabled.then(|| p.storage.keyring.clone());
    let limits = &config.limits;
    let turns = Turns::new(
        shared.turns.clone(),
        seal.clone(),
        node,
        config.cluster.lease,
        limits.max_queued_per_chat,
    );
    let turns = Arc::new(turns);
    let log = TurnLog::new(shared.turns.clone(), seal, config.cluster.resume_window);
    let records = parts::speculation(&config, &p.storage.keyring)?;
    let predictions = Arc::new(Predictions::new(records));
    let turn = Arc::new_cyclic(|deps| TurnDeps {
        pipeline: config.pipeline.clone(),
        max_output_tokens: config.llm.max_output_tokens,
        report_replaced_links: config.links.report_replaced,
        ai_cache: p.storage.ai_cache.clone(),
        instructions: p.instructions,
        models: p.models,
        predictions: predictions.clone(),
        skills: p.skills.clone(),
        routines: p.routines.clone(),
        links: p.links,
        metrics: p.metrics.clone(),
        outlet: Arc::new(Outlet::new(
            p.delivery.clone(),
            log,
            p.metrics.clone(),
            p.tasks.turns.clone(),
            crate::turn::follow_up::hook(deps.clone()),
        )),
        turns: turns.clone(),
        tasks: p.tasks.turns.clone(),
        shutdown: p.tasks.turns_shutdown.clone(),
        focus: p.focus.clone(),
        memories: p.memories.clone(),
        privacy: crate::privacy::Detector::for_config(&config.privacy),
    });
    let llm_probe = crate::llm::probe::LlmProbe::new(turn.models.main().client.clone());
    let auth = Authenticator::new(keys, crate::auth::oidc::Oidc::from_config(&config.auth)?);
    if let Some(jwks) = auth.jwks() {
        let stop = p.tasks.connections_shutdown.clone();
        p.tasks.connections.spawn(jwks.clone().run_refresher(stop));
    }
    let user_limiter = governor::RateLimiter::keyed(quota(limits.user_rate, limits.user_burst));
    Ok(Arc::new(AppState {
        llm_probe,
        auth,
        metrics: p.metrics,
        owners: Default::default(),
        ai_cache: p.storage.ai_cache,
        delivery: p.delivery,
        turns,
        outlet: turn.outlet.clone(),
        predictions,
        focus: p.focus,
        memories: p.memories,
        skills: p.skills,
        routines: p.routines,
        turn,
        user_limiter,
        tasks: p.tasks,
        store: p.storage.store,
        config,
    }))
}
