//! The scenarios and what they share: the three servers (fake LLM, floor relay, chatd) as
//! child processes, and pools of client connections (one benchmark user per connection,
//! so chatd's fan-out to a user's other devices never multiplies frames).

pub mod active;
pub mod idle;
pub mod slow;
pub mod soak;
pub mod storm;
pub mod stream;
pub mod ttft;
pub mod ttft_policy;

use std::sync::Arc;
use std::time::Duration;

use chatd::auth::TokenKeys;
use tokio::task::JoinSet;

use crate::client::{Conn, Kind, Target, TurnTiming};
use crate::fake_llm::Script;
use crate::procs::{self, Server};
use crate::stats::Hist;

pub struct Servers {
    pub llm: Server,
    pub floor: Server,
    /// The floor relay making chatd's three model calls per chat.
    pub floor3: Server,
    pub chatd: Server,
    pub keys: Arc<TokenKeys>,
}

impl Servers {
    pub fn start(script: &Script) -> anyhow::Result<Servers> {
        let llm = Server::fake_llm(script)?;
        let floor = Server::floor(&llm)?;
        let floor3 = Server::floor_calls(&llm, 3)?;
        let chatd = Server::chatd(&llm)?;
        Ok(Servers {
            llm,
            floor,
            floor3,
            chatd,
            keys: Arc::new(procs::token_keys()),
        })
    }

    pub fn server(&self, kind: Kind) -> &Server {
        match kind {
            Kind::Direct => &self.llm,
            Kind::Floor => &self.floor,
            Kind::Chatd => &self.chatd,
        }
    }

    pub fn target(&self, kind: Kind) -> Target {
        Target {
            kind,
            addr: self.server(kind).addr,
        }
    }

    /// Opens `n` more connections to `kind`, ids from `first_id`, `parallel` at a time.
    pub async fn open(
        &self,
        kind: Kind,
        first_id: u64,
        n: usize,
        parallel: usize,
    ) -> (Vec<Conn>, usize) {
        self.open_at(self.target(kind), first_id, n, parallel).await
    }

    /// [`Servers::open`] for any target (e.g. the three-call floor).
    pub async fn open_at(
        &self,
        target: Target,
        first_id: u64,
        n: usize,
        parallel: usize,
    ) -> (Vec<Conn>, usize) {
        open_pool(target, self.keys.clone(), first_id, n, parallel).await
    }
}

/// Opens `n` connections to `target`, ids from `first_id`, `parallel` at a time; returns
/// them in no particular order and the number that failed.
pub async fn open_pool(
    target: Target,
    keys: Arc<TokenKeys>,
    first_id: u64,
    n: usize,
    parallel: usize,
) -> (Vec<Conn>, usize) {
    let mut conns = Vec::with_capacity(n);
    let mut errors = 0;
    let mut next = 0usize;
    let mut set = JoinSet::new();
    while next < n || !set.is_empty() {
        while next < n && set.len() < parallel.max(1) {
            let id = first_id + next as u64;
            let (target, keys) = (target.clone(), keys.clone());
            set.spawn(async move { connect(&target, &keys, id).await });
            next += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(c))) => conns.push(c),
            Some(_) => errors += 1,
            None => break,
        }
    }
    (conns, errors)
}

pub async fn connect(target: &Target, keys: &TokenKeys, id: u64) -> anyhow::Result<Conn> {
    let token = match target.kind {
        Kind::Chatd => Some(procs::mint(keys, &format!("load-user-{id}"))?),
        _ => None,
    };
    Conn::open(target, id, token.as_deref()).await
}

/// How many raw first-frame times a batch keeps.
pub const RAW_CAP: usize = 100_000;

/// What a batch of clients measured.
#[derive(Default, Clone)]
pub struct Batch {
    pub ok: u64,
    pub errors: u64,
    /// Turns whose longest gap between frames exceeded the stall threshold.
    pub stalls: u64,
    pub first: Hist,
    /// The first-frame times themselves (up to [`RAW_CAP`]), for exact medians where the
    /// histogram's 3 significant digits are too coarse (131 µs steps at 200 ms).
    pub first_raw: Vec<Duration>,
    pub main_first: Hist,
    pub model_selected: Hist,
    pub done: Hist,
    pub max_gap: Hist,
    pub first_error: Option<String>,
}

impl Batch {
    /// The exact median first-frame time in µs (from the raw samples).
    pub fn first_median_us(&self) -> f64 {
        crate::stats::median(
            self.first_raw
                .iter()
                .map(|d| d.as_secs_f64() * 1e6)
                .collect(),
        )
    }

    fn add_turn(&mut self, t: &TurnTiming, stall: Duration) {
        self.ok += 1;
        self.first.record(t.first);
        if self.first_raw.len() < RAW_CAP {
            self.first_raw.push(t.first);
        }
        if let Some(m) = t.main_first {
            self.main_first.record(m);
        }
        if let Some(m) = t.model_selected {
            self.model_selected.record(m);
        }
        self.done.record(t.done);
        self.max_gap.record(t.max_gap);
        if t.max_gap > stall {
            self.stalls += 1;
        }
    }

    fn merge(&mut self, o: &Batch) {
        self.ok += o.ok;
        self.errors += o.errors;
        self.stalls += o.stalls;
        self.first.add(&o.first);
        let room = RAW_CAP.saturating_sub(self.first_raw.len());
        self.first_raw
            .extend(o.first_raw.iter().take(room).copied());
        self.main_first.add(&o.main_first);
        self.model_selected.add(&o.model_selected);
        self.done.add(&o.done);
        self.max_gap.add(&o.max_gap);
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }
}

/// How long each client keeps running turns.
#[derive(Clone, Copy)]
pub enum Until {
    Turns(usize),
    Deadline(tokio::time::Instant),
}

/// Every connection runs turns back to back (closed loop per chat) until `until`; a
/// connection that fails is dropped from the pool. Returns the pool and the batch.
pub async fn run_turns(conns: Vec<Conn>, until: Until, stall: Duration) -> (Vec<Conn>, Batch) {
    let mut set = JoinSet::new();
    for mut conn in conns {
        set.spawn(async move {
            let mut b = Batch::default();
            let mut n = 0usize;
            loop {
                match until {
                    Until::Turns(k) if n >= k => break,
                    Until::Deadline(d) if tokio::time::Instant::now() >= d => break,
                    _ => {}
                }
                n += 1;
                match conn.turn().await {
                    Ok(t) => b.add_turn(&t, stall),
                    Err(e) => {
                        b.errors += 1;
                        b.first_error.get_or_insert_with(|| format!("{e:#}"));
                        return (None, b);
                    }
                }
            }
            (Some(conn), b)
        });
    }
    let mut pool = Vec::new();
    let mut all = Batch::default();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((conn, b)) => {
                all.merge(&b);
                pool.extend(conn);
            }
            Err(_) => all.errors += 1,
        }
    }
    (pool, all)
}

pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}

pub fn kib(bytes: f64) -> f64 {
    bytes / 1024.0
}
