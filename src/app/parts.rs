//! What the app is built from: the configured cache backend and key provider, the sealed
//! storage (store, AI cache, keyring), what the nodes of a cluster share (turn store, bus)
//! and the delivery over it, the listening socket, the apps' settings/memories.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
use crate::links::LinkError;
use crate::pipeline::instructions::InstructionsError;
use crate::pipeline::speculation::record::memory::MemoryRecords;
use crate::pipeline::speculation::record::redis::RedisRecords;
use crate::pipeline::speculation::record::{RecordError, SpeculationRecords};
use crate::routines::store::Home;
use crate::skills::SkillsError;
use crate::state::Tasks;
use crate::store::{Store, StoreError};
use crate::turn::store::TurnStore;
use crate::turn::store::memory::MemoryTurnStore;
use crate::turn::store::redis::RedisTurnStore;

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
    #[error(transparent)]
    Speculation(#[from] RecordError),
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

/// The sealed state: the permanent store, the AI cache with its keyring, and where
/// routine runs live.
pub(super) struct Storage {
    pub store: Arc<dyn Store>,
    pub keyring: Arc<Keyring>,
    pub ai_cache: AiCache,
    pub runs_home: Home,
}

impl Storage {
    pub async fn open(config: &Config) -> Result<Storage, BuildError> {
        let backend = cache_backend(config)?;
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
            Home::Store(store.clone())
        } else {
            Home::Cache(backend.clone())
        };
        let keyring = Arc::new(Keyring::new(
            key_provider(config)?,
            wrapped_keys,
            config.keys.data_key_ttl,
        ));
        let policy = AiPolicy {
            ttl: config.cache.ai_ttl,
            max_messages: config.cache.ai_max_messages,
            max_chats: config.cache.ai_max_chats,
        };
        let ai_cache = AiCache::new(backend, keyring.clone(), policy);
        Ok(Storage {
            store,
            keyring,
            ai_cache,
            runs_home,
        })
    }
}

/// What the nodes of a cluster share besides the cache and the store: the turn store and
/// the bus (in embedded mode, a turn store in process and no bus).
pub(super) struct Shared {
    pub turns: Arc<dyn TurnStore>,
    pub bus: Option<Arc<dyn Bus>>,
    pub received: Option<mpsc::Receiver<Received>>,
}

impl Shared {
    pub async fn open(
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

    /// Frames to the user's devices: this node's hub, and in cluster mode the bus (its
    /// publisher runs on the connections' tracker).
    pub fn delivery(&self, node: &NodeId, keyring: &Arc<Keyring>, tasks: &Tasks) -> Delivery {
        let hub = Arc::new(Hub::default());
        let Some(bus) = self.bus.clone() else {
            return Delivery::local(hub);
        };
        let (delivery, publisher) = Delivery::clustered(
            hub,
            bus,
            node.clone(),
            keyring.clone(),
            tasks.connections_shutdown.clone(),
        );
        tasks.connections.spawn(publisher);
        delivery
    }
}

/// The speculation record (each chat's last plan and how guesses fared): in process, or
/// in cluster mode shared by every node on Redis, its chats' records sealed with `keyring`;
/// either way a chat's record is kept as long as the AI cache keeps a chat.
pub(super) fn speculation(
    config: &Config,
    keyring: &Arc<Keyring>,
) -> Result<Arc<dyn SpeculationRecords>, RecordError> {
    let c = &config.cache;
    if !config.cluster.enabled {
        return Ok(Arc::new(MemoryRecords::new(SPECULATION_RECORDS, c.ai_ttl)));
    }
    let keyring = keyring.clone();
    let records = RedisRecords::new(&c.redis_url, c.redis_cluster, c.timeout, keyring, c.ai_ttl)?;
    Ok(Arc::new(records))
}

/// Chats whose speculation record a node keeps in process (then it starts over).
const SPECULATION_RECORDS: usize = 50_000;

/// Received publications waiting for the node loop.
const BUS_QUEUE: usize = 4096;

/// The listening socket; accepted sockets inherit its send buffer size (Linux).
pub(super) fn listen(
    addr: std::net::SocketAddr,
    send_buffer: usize,
) -> std::io::Result<TcpListener> {
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
pub(super) fn memories(
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
