//! `chatd-load chaos` (issue 37): three chatd nodes in cluster mode on one redis-server
//! (each through its own TCP proxy) and PostgreSQL, a paced fake LLM, users with 1-3
//! devices taking turns, cancelling, dropping and resuming on other nodes, storing their
//! answers; meanwhile a seeded nemesis kills, pauses and cuts nodes and restarts Redis.
//! Every frame is recorded; the checker judges the history afterwards, and the run exits
//! non-zero on any violation. See load-tests/README.md.

mod checker;
mod conn;
mod held;
mod history;
mod nemesis;
mod pg;
mod proxy;
mod report;
mod resources;
mod rng;
mod services;
mod turn;
mod user;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use chatd_test_harness::postgres::Postgres;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::fake_llm::{Mode, Script};
use crate::procs::{Server, mint, token_keys};
use conn::Ctx;
use history::Recorder;
use nemesis::Nemesis;
use proxy::Proxy;
use rng::Rng;
use services::{Node, Redis, node_env};
use user::{MARKER, User};

/// `chatd-load chaos`: three chatd nodes under faults (node kills and pauses, Redis
/// restarts, a node cut off Redis, PostgreSQL frozen) while users chat (issue 37).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run length in minutes (default 10)...
    #[arg(long)]
    pub minutes: Option<u64>,
    /// ...or in seconds.
    #[arg(long)]
    pub seconds: Option<u64>,
    #[arg(long, default_value_t = 30)]
    pub users: usize,
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Mean seconds between two faults.
    #[arg(long, default_value_t = 15)]
    pub every: u64,
    /// Every kind of fault in its own lane at once, this many of each spread over the
    /// run (instead of one fault every `--every` seconds).
    #[arg(long)]
    pub each: Option<u32>,
    /// No faults: the same clients and checks on a calm cluster.
    #[arg(long)]
    pub calm: bool,
    /// Clients never cancel a turn or drop a device on purpose.
    #[arg(long)]
    pub steady: bool,
    /// Only these faults (comma-separated): kill_node, pause_node, redis_restart_keep,
    /// redis_restart_empty, cut_redis, pause_postgres, kill_postgres; default all.
    #[arg(long, default_value = "")]
    pub faults: String,
}

impl Args {
    fn duration(&self) -> Duration {
        Duration::from_secs(self.seconds.unwrap_or(self.minutes.unwrap_or(10) * 60))
    }
}

/// Everything the run started; dropped (stopped) at its end.
struct Cluster {
    pg: Arc<Mutex<Postgres>>,
    redis: Arc<Mutex<Redis>>,
    proxies: Arc<Vec<Proxy>>,
    nodes: Arc<Vec<Node>>,
    _llm: Arc<Server>,
}

/// Starts the services; node `i` appends its log to `logs/node-{i}.log`.
async fn start(
    n: usize,
    logs: &std::path::Path,
    tasks: &mut JoinSet<()>,
) -> anyhow::Result<Cluster> {
    std::fs::create_dir_all(logs)?;
    let pg = Postgres::start().await?;
    pg.create_database("chaos").await?;
    let redis = Redis::start().await?;
    let script = Script {
        mode: Mode::Paced,
        tokens: 96,
        pace: Duration::from_millis(25),
        think: Duration::ZERO,
        preprocess: None,
    };
    let llm = Arc::new(tokio::task::spawn_blocking(move || Server::fake_llm(&script)).await??);
    let mut proxies = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..n {
        let proxy = Proxy::start(redis.addr(), tasks).await?;
        let log = logs.join(format!("node-{i}.log"));
        let env = node_env(i, &proxy.url(), &pg.url("chaos"), &log);
        nodes.push(Node::start(env, llm.clone()).await?);
        proxies.push(proxy);
    }
    Ok(Cluster {
        pg: Arc::new(Mutex::new(pg)),
        redis: Arc::new(Mutex::new(redis)),
        proxies: Arc::new(proxies),
        nodes: Arc::new(nodes),
        _llm: llm,
    })
}

pub async fn run(p: Args, out: &std::path::Path) -> anyhow::Result<()> {
    let mut background = JoinSet::new();
    let logs = out.join("chaos").join("nodes");
    let cluster = start(p.nodes.max(1), &logs, &mut background).await?;
    let started = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let rec = Recorder::new();
    let ctx = Ctx {
        rec: rec.clone(),
        nodes: cluster.nodes.clone(),
        next_conn: Arc::new(AtomicU64::new(1)),
    };
    let mut rng = Rng::new(p.seed);
    let deadline = Instant::now() + p.duration();
    let (calm_tx, calm_rx) = watch::channel(false);
    let keys = token_keys();
    let mut users = JoinSet::new();
    let mut devices = 0;
    for u in 0..p.users as u32 {
        let mut urng = rng.fork(u64::from(u));
        let n = urng.range(1, 3) as u32;
        devices += n as usize;
        let mut user = User::new(
            u,
            n,
            urng,
            ctx.clone(),
            mint(&keys, &format!("chaos-user-{u}"))?,
        );
        user.restless = !p.steady;
        users.spawn(user.run(deadline, calm_rx.clone()));
    }
    if !p.calm {
        let nemesis = Nemesis {
            rng: rng.fork(u64::MAX),
            rec: rec.clone(),
            nodes: cluster.nodes.clone(),
            node_locks: Arc::new(cluster.nodes.iter().map(|_| Mutex::new(())).collect()),
            proxies: cluster.proxies.clone(),
            redis: cluster.redis.clone(),
            pg: cluster.pg.clone(),
            kinds: nemesis::kinds(&p.faults)?,
            every: Duration::from_secs(p.every.max(1)),
            pause: Duration::from_secs(6),
        };
        match p.each {
            Some(each) => nemesis.run_lanes(deadline, each).await,
            None => nemesis.run(deadline).await,
        }
    } else {
        tokio::time::sleep_until(deadline).await;
    }
    // Leases of lost turns run out and other nodes take them over before the read-back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = calm_tx.send(true);
    while users.join_next().await.is_some() {}
    let held = resources::measure(&cluster.nodes).await;
    let events = rec.take();
    let (redis_keys, redis_hits) = cluster.redis.lock().await.find(MARKER).await?;
    let pg_hits = pg_marker(&*cluster.pg.lock().await).await?;
    for node in cluster.nodes.iter() {
        node.stop().await;
    }
    let verdict = checker::check(&events);
    let extra = report::Extra {
        seed: p.seed,
        seconds: p.duration().as_secs(),
        users: p.users,
        devices,
        redis_keys,
        redis_hits,
        pg_hits,
        held,
        started,
    };
    let failed = verdict.violations.len()
        + extra.redis_hits.len()
        + extra.pg_hits.len()
        + extra.held.iter().filter(|h| !h.ok()).count();
    write_out(out, &events, &verdict, &extra)?;
    background.shutdown().await;
    anyhow::ensure!(
        failed == 0,
        "{failed} violations (see above and {})",
        out.join("chaos").display()
    );
    Ok(())
}

fn write_out(
    out: &std::path::Path,
    events: &[history::Event],
    verdict: &checker::Verdict,
    extra: &report::Extra,
) -> anyhow::Result<()> {
    let dir = out.join("chaos");
    std::fs::create_dir_all(&dir)?;
    let violations = report::violations(events, verdict, report::SHOWN_PER_KIND);
    let every = report::violations(events, verdict, usize::MAX);
    let mut marker = String::new();
    for key in &extra.redis_hits {
        marker.push_str(&format!(
            "VIOLATION plaintext_in_redis: key {key} holds the marker\n"
        ));
    }
    for table in &extra.pg_hits {
        marker.push_str(&format!(
            "VIOLATION plaintext_in_postgres: table {table} holds the marker\n"
        ));
    }
    let (_, held) = resources::report(&extra.held);
    marker.push_str(&held);
    let summary = report::summary(verdict, extra);
    print!("{violations}{marker}{summary}");
    let history: String = events.iter().map(|e| report::line(e) + "\n").collect();
    std::fs::write(dir.join("history.txt"), history)?;
    std::fs::write(dir.join("violations.txt"), format!("{every}{marker}"))?;
    std::fs::write(dir.join("summary.txt"), summary)?;
    Ok(())
}

/// Tables of the store with a row whose text holds the marker.
async fn pg_marker(pg: &Postgres) -> anyhow::Result<Vec<String>> {
    let tables = pg
        .psql(
            "chaos",
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
        )
        .await?;
    let mut hits = Vec::new();
    for table in tables.lines().map(str::trim).filter(|t| !t.is_empty()) {
        let sql = format!("SELECT count(*) FROM \"{table}\" x WHERE x::text LIKE '%{MARKER}%'");
        let n = pg.psql("chaos", &sql).await?;
        if n.trim() != "0" {
            hits.push(format!("{table} ({} rows)", n.trim()));
        }
    }
    Ok(hits)
}
