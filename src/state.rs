//! The state every connection shares: handles only, built only by `crate::app`.

use std::sync::Arc;

use governor::DefaultKeyedRateLimiter;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{Authenticator, UserId};
use crate::cache::ai::AiCache;
use crate::config::Config;
use crate::delivery::Delivery;
use crate::focus::FocusCatalog;
use crate::memories::Memories;
use crate::metrics::Metrics;
use crate::pipeline::speculation::Predictions;
use crate::routines::Routines;
use crate::skills::Skills;
use crate::store::Store;
use crate::turn::writer::Outlet;
use crate::turn::{TurnDeps, Turns};

/// Owners of every spawned task, in two groups shut down in order: turns first (so their
/// final frames still reach open sockets), then connections.
#[derive(Default)]
pub struct Tasks {
    pub turns: TaskTracker,
    /// Fired when shutdown begins: no new message is taken; running turns go on.
    pub draining: CancellationToken,
    /// Fired when the turns still running must end (`interrupted_by_shutdown`).
    pub turns_shutdown: CancellationToken,
    pub connections: TaskTracker,
    pub connections_shutdown: CancellationToken,
}

/// State shared by every connection and turn.
pub struct AppState {
    pub config: Config,
    /// Verifies session tokens (chatd's own, and an identity provider's when configured).
    pub auth: Authenticator,
    pub metrics: Arc<Metrics>,
    /// Chat owners the store confirmed (a bounded read cache).
    pub owners: crate::store::owners::Owners,
    /// The sealed AI cache (messages, embeds, per-user state).
    pub ai_cache: AiCache,
    /// Frames to the user's devices on this node and the others.
    pub delivery: Arc<Delivery>,
    /// Which turn runs in each chat, and what waits behind it.
    pub turns: Arc<Turns>,
    /// Where turns write: a device that resumes reads the turn log through it.
    pub outlet: Arc<Outlet>,
    /// Each chat's guess of its next main call (forgotten with the chat).
    pub predictions: Arc<Predictions>,
    /// The apps' focus modes.
    pub focus: Arc<FocusCatalog>,
    /// App settings/memories: categories and the chat-scoped sealed cache.
    pub memories: Arc<Memories>,
    /// The skills (a device cancels a running one).
    pub skills: Arc<Skills>,
    /// The apps' routines and their runs.
    pub routines: Routines,
    /// What a turn needs, for starting turns ([`crate::turn::spawn`]) only.
    pub turn: Arc<TurnDeps>,
    /// Per-user message rate across all of a user's devices.
    pub user_limiter: DefaultKeyedRateLimiter<UserId>,
    pub tasks: Tasks,
    /// The permanent store of client-encrypted chats (`store.url`).
    pub store: Arc<dyn Store>,
    /// Whether the main model's provider answers (`/readyz`).
    pub llm_probe: crate::llm::probe::LlmProbe,
}

impl AppState {
    /// Each dependency's reachability, for `/readyz` (in cluster mode also the turn
    /// store and the bus subscription).
    pub async fn readiness(&self) -> Vec<(&'static str, Result<(), String>)> {
        let (llm, cache, keys, store, turns) = tokio::join!(
            self.llm_probe.check(),
            self.ai_cache.backend().ping(),
            self.ai_cache.keyring().provider().check(),
            self.store.ping(),
            self.turns.store().ping(),
        );
        let mut out = vec![
            ("llm", llm),
            ("cache", cache.map_err(|e| e.to_string())),
            ("keys", keys.map_err(|e| e.to_string())),
            ("store", store.map_err(|e| e.to_string())),
        ];
        if let Some(bus) = self.delivery.bus() {
            out.push(("turns", turns.map_err(|e| e.to_string())));
            out.push(("bus", bus.ping().await.map_err(|e| e.to_string())));
        }
        out
    }
}
