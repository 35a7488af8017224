//! The nemesis: on a seeded schedule, one fault at a time, each recorded with how long it
//! lasted. Kinds: SIGKILL a node and restart it; SIGSTOP a node for longer than the lease,
//! then SIGCONT; restart Redis keeping its data, or empty; cut one node's Redis connection
//! (its proxy) and restore it; freeze PostgreSQL for a few seconds; kill PostgreSQL (every
//! process, as a crash would) and start it again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;

use chatd_test_harness::postgres::Postgres;

use super::history::Recorder;
use super::proxy::Proxy;
use super::rng::Rng;
use super::services::{Node, Redis, signal};

pub const KINDS: [&str; 7] = [
    "kill_node",
    "pause_node",
    "redis_restart_keep",
    "redis_restart_empty",
    "cut_redis",
    "pause_postgres",
    "kill_postgres",
];

pub struct Nemesis {
    pub rng: Rng,
    pub rec: Recorder,
    pub nodes: Arc<Vec<Node>>,
    /// One per node: a node's faults (kill, pause) wait for each other.
    pub node_locks: Arc<Vec<Mutex<()>>>,
    /// Shared with the run: a proxy lives as long as its node's Redis connection.
    pub proxies: Arc<Vec<Proxy>>,
    pub redis: Arc<Mutex<Redis>>,
    pub pg: Arc<Mutex<Postgres>>,
    /// The kinds of fault to inject (all of [`KINDS`] by default).
    pub kinds: Vec<&'static str>,
    /// Mean time between two faults' starts.
    pub every: Duration,
    /// How long a pause lasts (longer than the lease).
    pub pause: Duration,
}

impl Nemesis {
    /// The seeded order of faults: every kind once per round, the rounds shuffled.
    pub fn plan(rng: &mut Rng, kinds: &[&'static str], count: usize) -> Vec<&'static str> {
        let mut plan = Vec::new();
        while !kinds.is_empty() && plan.len() < count {
            let mut round = kinds.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
            plan.extend(round);
        }
        plan.truncate(count);
        plan
    }

    /// Injects faults until `deadline`, one at a time; every fault is over when this
    /// returns.
    pub async fn run(mut self, deadline: Instant) {
        let count = (deadline.saturating_duration_since(Instant::now()).as_secs()
            / self.every.as_secs().max(1)) as usize;
        let plan = Self::plan(&mut self.rng, &self.kinds, count + 1);
        for kind in plan {
            let jitter = self.rng.range(
                self.every.as_millis() as u64 / 2,
                self.every.as_millis() as u64,
            );
            tokio::time::sleep(Duration::from_millis(jitter)).await;
            if Instant::now() >= deadline {
                break;
            }
            self.strike(kind).await;
        }
        tokio::time::sleep_until(deadline).await;
    }

    /// Injects faults until `deadline`, every kind in its own lane at once: each lane
    /// `each` faults of its kind, spread evenly over the run. Faults of one node wait for
    /// each other, and so do Redis's and PostgreSQL's. Every fault is over when this
    /// returns.
    pub async fn run_lanes(mut self, deadline: Instant, each: u32) {
        let start = Instant::now();
        let interval = deadline.saturating_duration_since(start) / each.max(1);
        let mut lanes = JoinSet::new();
        for (i, kind) in self.kinds.clone().into_iter().enumerate() {
            let mut lane = Nemesis {
                rng: self.rng.fork(i as u64),
                kinds: vec![kind],
                ..self.share()
            };
            lanes.spawn(async move {
                for f in 0..each {
                    let jitter = lane.rng.below(interval.as_millis() as u64 / 2 + 1);
                    let at = start + interval * f + Duration::from_millis(jitter);
                    if at >= deadline {
                        break;
                    }
                    tokio::time::sleep_until(at).await;
                    lane.strike(kind).await;
                }
            });
        }
        while lanes.join_next().await.is_some() {}
        tokio::time::sleep_until(deadline).await;
    }

    /// A copy sharing the targets (its own rng and kinds set by the caller).
    fn share(&self) -> Nemesis {
        Nemesis {
            rng: Rng::new(0),
            rec: self.rec.clone(),
            nodes: self.nodes.clone(),
            node_locks: self.node_locks.clone(),
            proxies: self.proxies.clone(),
            redis: self.redis.clone(),
            pg: self.pg.clone(),
            kinds: Vec::new(),
            every: self.every,
            pause: self.pause,
        }
    }

    /// One fault of `kind` on a random node, recorded with how long it lasted.
    async fn strike(&mut self, kind: &'static str) {
        let started = Instant::now();
        let n = self.rng.below(self.nodes.len() as u64) as usize;
        let detail = match self.inject(kind, n).await {
            Ok(d) => d,
            Err(e) => format!("failed: {e:#}"),
        };
        let lasted = started.elapsed().as_millis() as u64;
        eprintln!("chaos: {kind} ({detail}), {lasted} ms");
        self.rec.fault(kind, n, detail, lasted);
    }

    async fn inject(&mut self, kind: &str, n: usize) -> anyhow::Result<String> {
        let node = self
            .nodes
            .get(n)
            .ok_or_else(|| anyhow::anyhow!("no node {n}"))?;
        match kind {
            "kill_node" => {
                let _node = self.node_locks[n].lock().await;
                node.kill().await?;
                let down = self.rng.range(500, 3000);
                tokio::time::sleep(Duration::from_millis(down)).await;
                node.restart().await?;
                Ok(format!("node {n} down {down} ms"))
            }
            "pause_node" => {
                let _node = self.node_locks[n].lock().await;
                let pid = node
                    .pid()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("node {n} is down"))?;
                signal(pid, "STOP").await?;
                tokio::time::sleep(self.pause).await;
                signal(pid, "CONT").await?;
                Ok(format!("node {n} paused {} ms", self.pause.as_millis()))
            }
            "redis_restart_keep" | "redis_restart_empty" => {
                let keep = kind == "redis_restart_keep";
                self.redis.lock().await.restart(keep).await?;
                Ok(format!("keep data: {keep}"))
            }
            "cut_redis" => {
                let proxy = self
                    .proxies
                    .get(n)
                    .ok_or_else(|| anyhow::anyhow!("no proxy {n}"))?;
                proxy.cut().await;
                let cut = self.rng.range(1000, 6000);
                tokio::time::sleep(Duration::from_millis(cut)).await;
                proxy.restore();
                Ok(format!("node {n} cut off {cut} ms"))
            }
            "pause_postgres" => {
                let pg = self.pg.lock().await;
                let pids = super::pg::processes(pg.port());
                super::pg::signal_all(&pids, "STOP").await?;
                let pause = self.rng.range(1000, 5000);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                super::pg::signal_all(&pids, "CONT").await?;
                Ok(format!("{} processes frozen {pause} ms", pids.len()))
            }
            "kill_postgres" => {
                let mut pg = self.pg.lock().await;
                let killed = super::pg::kill_all(pg.port()).await?;
                let started = Instant::now();
                pg.crash_and_restart().await?;
                Ok(format!(
                    "{killed} processes killed, back in {} ms",
                    started.elapsed().as_millis()
                ))
            }
            other => anyhow::bail!("unknown fault {other}"),
        }
    }
}

/// The kinds named in a comma-separated list (all of them for an empty list).
pub fn kinds(list: &str) -> anyhow::Result<Vec<&'static str>> {
    if list.trim().is_empty() {
        return Ok(KINDS.to_vec());
    }
    list.split(',')
        .map(|k| {
            let k = k.trim();
            KINDS
                .iter()
                .copied()
                .find(|x| *x == k)
                .ok_or_else(|| anyhow::anyhow!("unknown fault {k}: one of {KINDS:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_seeded_and_has_every_kind_once_per_round() {
        let a = Nemesis::plan(&mut Rng::new(9), &KINDS, 12);
        assert_eq!(a, Nemesis::plan(&mut Rng::new(9), &KINDS, 12));
        assert_eq!(a.len(), 12);
        for kind in KINDS {
            assert!(a[..KINDS.len()].contains(&kind));
        }
        let only = Nemesis::plan(&mut Rng::new(9), &["cut_redis"], 3);
        assert_eq!(only, vec!["cut_redis"; 3]);
    }
}
