//! Building, running and stopping chatd: [`App::build`] binds the listener (port 0 in
//! tests) and wires the state; [`App::run_until_stopped`] serves until the shutdown token
//! fires, then cancels turns, tells every device (`server_shutting_down`), cancels turns, closes sockets with 1012 and drains within the grace period.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use chatd_protocol::{ServerMessage, ServerShuttingDown};

use crate::auth::{Authenticator, TokenKeys};
use crate::cache::ai::AiCache;
use crate::cache::memory::MemoryBackend;
use crate::cache::redis::RedisBackend;
use crate::cache::{AiPolicy, CacheBackend, CacheError, WrappedKeys};
use crate::config::{CacheBackendKind, Config, KeyProviderKind};
use crate::crypto::{KeyError, KeyProvider, Keyring, LocalKeyProvider, VaultKeyProvider};
use crate::delivery::bus::redis::RedisBus;
use crate::delivery::bus::{Bus, Received};
use crate::delivery::{Delivery, Hub};
use crate::ids::NodeId;
use crate::links::{LinkChecker, LinkError};
use crate::llm::{self, LlmClient};
use crate::metrics::Metrics;
use crate::pipeline::instructions::{Instructions, InstructionsError};
use crate::pipeline::models::Models;
use crate::pipeline::speculation::Predictions;
use crate::session::quota;
use crate::skills::{Skills, SkillsError};
use crate::state::{AppState, Tasks};
use crate::store::StoreError;
use crate::turn::log::TurnLog;
use crate::turn::store::TurnStore;
use crate::turn::store::memory::MemoryTurnStore;
use crate::turn::store::redis::RedisTurnStore;
use crate::turn::{TurnDeps, Turns};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
    #[error("auth.jwks_url: {0}")]
    Jwks(#[from] crate::auth::jwks::JwksError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    #[error("keys: {0}")]
    Keys(#[from] KeyError),
    #[error("instructions: {0}")]
    Instructions(#[from] InstructionsError),
    #[error(transparent)]
    Secrets(#[from] crate::llm::secrets::SecretError),
    #[error(transparent)]
    Skills(#[from] SkillsError),
    #[error(transparent)]
    Routines(#[from] crate::routines::RoutinesError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Links(#[from] LinkError),
    #[error("turn store: {0}")]
    Turns(#[from] crate::turn::store::TurnStoreError),
    #[error("bus: {0}")]
    Bus(#[from] crate::delivery::bus::BusError),
}

/// The configured cache backend (no connection is made here; Redis connects lazily and
/// reconnects on its own, so a Redis that is down at start-up shows in `/readyz`).
pub fn cache_backend(config: &Config) -> Result<Arc<dyn CacheBackend>, CacheError> {
    let c = &config.cache;
    Ok(match c.backend {
        CacheBackendKind::Memory => Arc::new(MemoryBackend::new(c.memory_max_entries)),
        CacheBackendKind::Redis => {
            Arc::new(RedisBackend::new(&c.redis_url, c.redis_cluster, c.timeout)?)
        }
    })
}

/// The configured key provider.
pub fn key_provider(config: &Config) -> Result<Arc<dyn KeyProvider>, KeyError> {
    let k = &config.keys;
    Ok(match k.provider {
        KeyProviderKind::Local => {
            let path = k
                .local_master_key_file
                .clone()
                .unwrap_or_else(|| config.server.data_dir.join("master_key"));
            Arc::new(LocalKeyProvider::load(&path)?)
        }
        KeyProviderKind::Vault => {
            let token = crate::crypto::vault_token(k)?;
            Arc::new(VaultKeyProvider::new(
                &k.vault_addr,
                &token,
                &k.transit_mount,
                k.vault_timeout,
            )?)
        }
    })
}

pub struct App {
    listener: TcpListener,
    state: Arc<AppState>,
    /// What the bus receives (cluster mode), handled once the app runs.
    bus_received: Option<mpsc::Receiver<Received>>,
}

/// What the nodes of a cluster share besides the cache and the store: the turn store and
/// the bus (in embedded mode, a turn store in process and no bus).
struct Shared {
    turns: Arc<dyn TurnStore>,
    bus: Option<Arc<dyn Bus>>,
    received: Option<mpsc::Receiver<Received>>,
}

impl Shared {
    async fn open(
        config: &Config,
        node: &NodeId,
        tracker: &TaskTracker,
        stop: &CancellationToken,
    ) -> Result<Shared, BuildError> {
        if !config.cluster.enabled {
            return Ok(Shared {
                turns: Arc::new(MemoryTurnStore::default()),
                bus: None,
                received: None,
            });
        }
        let c = &config.cache;
        let turns = RedisTurnStore::new(&c.redis_url, c.redis_cluster, c.timeout)?;
        let (tx, rx) = mpsc::channel(BUS_QUEUE);
        let bus = RedisBus::connect(
            &c.redis_url,
            c.redis_cluster,
            node,
            tx,
            c.timeout,
            tracker,
            stop.clone(),
        )
        .await?;
        tracing::info!(node = %node, "cluster mode: turns and frames shared through Redis");
        Ok(Shared {
            turns: Arc::new(turns),
            bus: Some(bus),
            received: Some(rx),
        })
    }
}

/// Received publications waiting for the node loop.
const BUS_QUEUE: usize = 4096;

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
        let mut instructions = Instructions::load(&config.pipeline)?;
        // The apps' focus modes (the skills registry reads the same manifests below).
        let apps =
            crate::skills::manifest::load(&config.skills.apps_dir).map_err(SkillsError::from)?;
        let focus = Arc::new(crate::focus::FocusCatalog::new(
            apps.iter()
                .map(|a| (a.id.as_str(), a.focus_modes.as_slice())),
        ));
        focus.extend_instructions(&mut instructions);
        let instructions = Arc::new(instructions);
        let models = Models::from_config(&config, llm)?;
        let backend = cache_backend(&config)?;
        let store = crate::store::open(&config.store_url()).await?;
        // What must outlive the process lives in Redis when the cache is Redis, else in
        // the store: the wrapped data keys, and routine runs (they open with those keys).
        let in_process = config.cache.backend == CacheBackendKind::Memory;
        let wrapped_keys: Arc<dyn crate::crypto::WrappedKeyStore> = if in_process {
            Arc::new(crate::store::values::StoreWrappedKeys(store.clone()))
        } else {
            Arc::new(WrappedKeys(backend.clone()))
        };
        let runs_home = if in_process {
            crate::routines::store::Home::Store(store.clone())
        } else {
            crate::routines::store::Home::Cache(backend.clone())
        };
        let keyring = Arc::new(Keyring::new(
            key_provider(&config)?,
            wrapped_keys,
            config.keys.data_key_ttl,
        ));
        let ai_cache = AiCache::new(
            backend,
            keyring.clone(),
            AiPolicy {
                ttl: config.cache.ai_ttl,
                max_messages: config.cache.ai_max_messages,
                max_chats: config.cache.ai_max_chats,
            },
        );
        let hub = Arc::new(Hub::default());
        let turn_tasks = TaskTracker::new();
        let connections = TaskTracker::new();
        let connections_shutdown = CancellationToken::new();
        let node = config.cluster.node();
        let shared = Shared::open(&config, &node, &connections, &connections_shutdown).await?;
        let delivery = match shared.bus.clone() {
            Some(bus) => {
                let (delivery, publisher) = Delivery::clustered(
                    hub,
                    bus,
                    node.clone(),
                    keyring.clone(),
                    connections_shutdown.clone(),
                );
                connections.spawn(publisher);
                delivery
            }
            None => Delivery::local(hub),
        };
        let turn_store = shared.turns.clone();
        // What leaves the process is sealed; an in-process turn store is not.
        let seal = config.cluster.enabled.then(|| keyring.clone());
        let skills = Arc::new(Skills::load(
            &config.skills,
            ai_cache.clone(),
            models.or_preprocessing(&config.skills.content_sanitization_model),
            turn_tasks.clone(),
        )?);
        // MCP servers live as long as the connections: stopped after the turns drained.
        skills.start_mcp(&connections, connections_shutdown.clone());
        let routines = crate::routines::Routines::new(
            &config.routines,
            crate::routines::Catalog::load(&config.skills.apps_dir)?,
            crate::routines::store::RunStore::new(runs_home, keyring.clone()),
            ai_cache.clone(),
            skills.clone(),
            &models,
        );
        let memories = memories(&config, &ai_cache, store.clone())?;
        let limits = &config.limits;
        let user_limiter = governor::RateLimiter::keyed(quota(limits.user_rate, limits.user_burst));
        let metrics = Arc::new(Metrics::new());
        let turns_shutdown = CancellationToken::new();
        let links = match config.links.enabled {
            true => Some(Arc::new(LinkChecker::new(
                &config.links,
                metrics.clone(),
                turns_shutdown.clone(),
            )?)),
            false => None,
        };
        let turn = Arc::new(TurnDeps {
            pipeline: config.pipeline.clone(),
            max_output_tokens: config.llm.max_output_tokens,
            report_replaced_links: config.links.report_replaced,
            ai_cache,
            instructions,
            models,
            predictions: Predictions::default(),
            skills,
            routines,
            links,
            metrics: metrics.clone(),
            delivery: Arc::new(delivery),
            turns: Turns::new(
                turn_store.clone(),
                seal.clone(),
                node,
                config.cluster.lease,
                config.limits.max_queued_per_chat,
            ),
            log: TurnLog::new(turn_store, seal, config.cluster.resume_window),
            writers: Default::default(),
            tasks: turn_tasks.clone(),
            shutdown: turns_shutdown.clone(),
            focus,
            memories,
        });
        let llm_probe = crate::llm::probe::LlmProbe::new(turn.models.main().client.clone());
        let auth = Authenticator::new(keys, crate::auth::oidc::Oidc::from_config(&config.auth)?);
        if let Some(jwks) = auth.jwks() {
            connections.spawn(jwks.clone().run_refresher(connections_shutdown.clone()));
        }
        let state = Arc::new(AppState {
            llm_probe,
            auth,
            metrics,
            owners: Default::default(),
            turn,
            user_limiter,
            tasks: Tasks {
                turns: turn_tasks,
                draining: CancellationToken::new(),
                turns_shutdown,
                connections,
                connections_shutdown,
            },
            store,
            config,
        });
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
        let drain = async {
            shutdown.cancelled().await;
            let deadline = tokio::time::Instant::now() + state.config.server.shutdown_grace;
            let tasks = &state.tasks;
            // Every device hears it first, wherever it looks, so clients reconnect at once.
            let told = state
                .turn
                .delivery
                .hub
                .send_everyone(&ServerMessage::ServerShuttingDown(ServerShuttingDown {
                    grace_ms: state.config.server.shutdown_grace.as_millis() as u64,
                    message: "This server is stopping; reconnect to continue.".into(),
                }));
            tracing::info!(devices = told, "shutting down");
            tasks.draining.cancel();
            tasks.turns.close();
            // Running answers may finish; what still runs near the end is cancelled, with
            // time left for its final frame.
            let grace = state.config.server.shutdown_grace;
            let cut = deadline - (grace / 4).min(std::time::Duration::from_secs(2));
            if tokio::time::timeout_at(cut, tasks.turns.wait())
                .await
                .is_err()
            {
                tracing::info!("cancelling the turns still running");
                tasks.turns_shutdown.cancel();
                if tokio::time::timeout_at(deadline, tasks.turns.wait())
                    .await
                    .is_err()
                {
                    tracing::warn!("turns still running after the grace period");
                }
            }
            tasks.turns_shutdown.cancel();
            tasks.connections_shutdown.cancel();
            tasks.connections.close();
            if tokio::time::timeout_at(deadline, tasks.connections.wait())
                .await
                .is_err()
            {
                tracing::warn!("connections still open after the grace period");
            }
        };
        let (served, ()) = tokio::join!(serve, drain);
        served?;
        tracing::info!("chatd stopped");
        Ok(())
    }
}

/// The listening socket; accepted sockets inherit its send buffer size (Linux).
fn listen(addr: std::net::SocketAddr, send_buffer: usize) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if send_buffer > 0 {
        socket.set_send_buffer_size(u32::try_from(send_buffer).unwrap_or(u32::MAX))?;
    }
    socket.bind(addr)?;
    socket.listen(4096)
}

/// The apps' settings/memories categories (from the same manifests as the skills) and
/// their sealed store on the AI cache's backend and keys.
fn memories(
    config: &Config,
    ai_cache: &AiCache,
    chats: Arc<dyn crate::store::Store>,
) -> Result<Arc<crate::memories::Memories>, SkillsError> {
    let apps = crate::skills::manifest::load(&config.skills.apps_dir)?;
    let categories = crate::memories::Categories::new(
        apps.iter()
            .filter_map(|a| a.settings_memories.as_ref().map(|s| (a.id.as_str(), s))),
    );
    Ok(Arc::new(crate::memories::Memories {
        categories,
        store: crate::memories::store::MemoryStore::new(
            ai_cache.backend().clone(),
            ai_cache.keyring().clone(),
            ai_cache.ttl(),
        ),
        chats,
    }))
}
