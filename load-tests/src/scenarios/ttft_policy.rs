//! `ttft-policy`: time to first token with a two-speed model, speculation off / on / auto
//! side by side (issue 31 item 4). The fake LLM answers chatd's preprocessing call after
//! `P` with a realistic arguments object streamed one token-sized fragment every `T` (the
//! eleven decision fields first), and main calls after `M`. Five lanes run against the same
//! fake LLM, interleaved per round with the order rotating: direct (the fake LLM's own
//! main-call TTFT), the one-call floor relay, and three chatd children with
//! `pipeline.speculative_main_call` = off / on / auto (all with `llm.metered = true`, so
//! `auto` treats the loopback model as a paid one). The chatd lanes run a mixed workload
//! ([`crate::workload`]): chats that keep their topic, with a share of turns switching
//! category, which a guess from the chat's previous plan misses.
//!
//! Per lane: the whole TTFT (median of exact round medians) and its ratio to the floor's
//! (median of the per-round ratios). Per policy, from chatd's `/metrics` (the difference
//! between a scrape after the warm-up and one after the measured rounds): the decision
//! latency (`chatd_main_call_decision_seconds`: mean, and a median estimated from the
//! buckets) and the wasted input tokens as a share of all main-call input tokens
//! (`chatd_speculative_wasted_input_tokens_total` / `chatd_main_call_input_tokens_total`).
//! A metric chatd does not export prints "n/a". The metrics are read in [`figures`]; the
//! summary table, `report.json`'s results and the chart are made in [`report`].

use std::sync::Arc;
use std::time::Duration;

use super::{Batch, Until, open_pool, run_turns};
use crate::client::{Conn, Kind, Target};
use crate::fake_llm::{self, Mode, Preprocess, Script};
use crate::procs::{self, Server};
use crate::prom::{self, Scrape};
use crate::report::Report;
use crate::workload::{Census, Workload};
use figures::PolicyFigures;

mod figures;
mod report;

pub struct Params {
    pub rounds: usize,
    /// Turns per connection per round (at least 5 per connection).
    pub turns: usize,
    pub concurrency: usize,
    /// Tokens of a main call's answer.
    pub tokens: usize,
    /// P: the preprocessing call's wait before its first byte.
    pub preprocess_think: Duration,
    /// T: between two fragments of the preprocessing arguments.
    pub arg_pace: Duration,
    /// About how many fragments (tokens) the preprocessing arguments have.
    pub arg_tokens: usize,
    /// M: a main call's wait before its first byte.
    pub main_think: Duration,
    pub workload: Workload,
    /// Leave chatd's postprocessing on (off by default: it is no part of the TTFT and its
    /// model call would run beside the next turn).
    pub postprocessing: bool,
}

/// The chatd policies, in lane order after direct and floor.
const POLICIES: [&str; 3] = ["off", "on", "auto"];
const LANES: [&str; 5] = ["direct", "floor", "chatd-off", "chatd-on", "chatd-auto"];
/// The first chatd lane in [`LANES`] (the one with `POLICIES[0]`).
const FIRST_CHATD: usize = 2;
const WARMUP_TURNS: usize = 3;
const STALL: Duration = Duration::from_secs(3600);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn is_chatd(lane: usize) -> bool {
    lane >= FIRST_CHATD
}

/// What follows from the parameters before anything runs.
struct Setup {
    /// Connections per lane.
    c: usize,
    /// Turns per connection per lane per round.
    per_conn: usize,
    /// How the fake LLM cuts its arguments, (fragments, the fragment that completes the
    /// decision fields): [general, code] × [a later message, a chat's first].
    shapes: [(usize, usize); 4],
    /// The latest fragment that completes the decision fields.
    decided_at: usize,
    /// The decision fields are complete this long after the preprocessing call's first
    /// byte (its first fragment comes with it, then one every T).
    decision_fields: Duration,
    /// The measured chatd turns of the workload (warm-up excluded).
    census: Census,
}

impl Setup {
    fn new(p: &Params) -> Self {
        let c = p.concurrency.max(1);
        let per_conn = (p.turns / c).max(5);
        let shapes =
            [0, 1, 2, 3].map(|v| fake_llm::preprocess_shape(v >= 2, v % 2 == 1, p.arg_tokens));
        let decided_at = shapes.iter().map(|s| s.1).max().unwrap_or(0);
        let measured_from = WARMUP_TURNS as u64;
        let measured_to = measured_from + (p.rounds * per_conn) as u64;
        Setup {
            c,
            per_conn,
            shapes,
            decided_at,
            decision_fields: p.arg_pace * decided_at.saturating_sub(1) as u32,
            census: p.workload.census(c as u64, measured_from, measured_to),
        }
    }
}

/// What the lanes measured over the rounds, per lane in [`LANES`] order.
struct Measured {
    totals: Vec<Batch>,
    /// The exact median first-frame time of each round, µs.
    round_medians: Vec<Vec<f64>>,
    /// chatd lanes: typing -> first update p50 of each round, µs (empty for the others).
    round_main: Vec<Vec<f64>>,
}

impl Measured {
    fn new() -> Self {
        let n = LANES.len();
        Measured {
            totals: vec![Batch::default(); n],
            round_medians: vec![Vec::new(); n],
            round_main: vec![Vec::new(); n],
        }
    }

    fn record(&mut self, lane: usize, batch: &Batch) {
        self.round_medians[lane].push(batch.first_median_us());
        if is_chatd(lane) {
            self.round_main[lane].push(batch.main_first.us(0.5));
        }
        self.totals[lane].merge(batch);
    }
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let s = Setup::new(&p);
    let mut summary = Report::new("ttft-policy", report::params(&p, &s));
    report::header(&mut summary, &p, &s);

    let llm = Server::fake_llm(&two_speed_script(&p))?;
    let floor = Server::floor(&llm)?;
    let chatds = start_chatds(&llm, p.postprocessing)?;
    let targets = lane_targets(&llm, &floor, &chatds);
    let mut pools = open_lanes(&targets, p.workload, s.c).await?;
    // Counters before the measured rounds (warm-up excluded).
    let before = scrape_all(&chatds).await;
    let measured = measure(&mut pools, p.rounds, s.per_conn).await;
    let after = scrape_all(&chatds).await;
    let figures: Vec<PolicyFigures> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| PolicyFigures::read(b.as_ref(), a.as_ref()))
        .collect();

    let read = report::metrics_read(&before, &after);
    report::finish(&mut summary, &p, &s, &measured, &figures, read);
    summary.write(out)?;
    drop(chatds);
    Ok(())
}

/// The fake LLM: main calls wait M, then send every token at once; the preprocessing call
/// waits P, then streams its arguments a fragment every T.
fn two_speed_script(p: &Params) -> Script {
    Script {
        mode: Mode::Instant,
        tokens: p.tokens,
        pace: Duration::ZERO,
        think: p.main_think,
        preprocess: Some(Preprocess {
            think: p.preprocess_think,
            pace: p.arg_pace,
            tokens: p.arg_tokens,
        }),
    }
}

fn chatd_env(policy: &str, postprocessing: bool) -> Vec<(String, String)> {
    [
        ("CHATD__PIPELINE__SPECULATIVE_MAIN_CALL", policy),
        ("CHATD__LLM__METERED", "true"),
        (
            "CHATD__PIPELINE__POSTPROCESSING",
            if postprocessing { "true" } else { "false" },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// One chatd child per policy, in [`POLICIES`] order.
fn start_chatds(llm: &Server, postprocessing: bool) -> anyhow::Result<Vec<Server>> {
    POLICIES
        .iter()
        .map(|policy| Server::chatd_with(llm, &chatd_env(policy, postprocessing)))
        .collect()
}

/// The lanes' targets, in [`LANES`] order.
fn lane_targets(llm: &Server, floor: &Server, chatds: &[Server]) -> Vec<Target> {
    let mut targets = vec![
        Target {
            kind: Kind::Direct,
            addr: llm.addr,
        },
        Target {
            kind: Kind::Floor,
            addr: floor.addr,
        },
    ];
    targets.extend(chatds.iter().map(|s| Target {
        kind: Kind::Chatd,
        addr: s.addr,
    }));
    targets
}

/// Opens every lane's connections (ids from lane × 100 000), each following the workload
/// by its slot, and warms them up: connections, pools, caches, allocator (and each chat's
/// first plan).
async fn open_lanes(
    targets: &[Target],
    workload: Workload,
    c: usize,
) -> anyhow::Result<Vec<Vec<Conn>>> {
    let keys = Arc::new(procs::token_keys());
    let workload = Arc::new(workload);
    let mut pools = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let first_id = (i * 100_000) as u64;
        let (mut conns, errors) = open_pool(target.clone(), keys.clone(), first_id, c, 50).await;
        anyhow::ensure!(errors == 0, "{errors} connections to {} failed", LANES[i]);
        for conn in &mut conns {
            let slot = conn.id() - first_id;
            conn.follow(workload.clone(), slot);
        }
        let (conns, warm) = run_turns(conns, Until::Turns(WARMUP_TURNS), STALL).await;
        anyhow::ensure!(
            warm.errors == 0,
            "warm-up of {} failed: {}",
            LANES[i],
            warm.first_error.unwrap_or_default()
        );
        pools.push(conns);
    }
    Ok(pools)
}

/// The measured rounds: in each, every lane runs `per_conn` turns per connection, one lane
/// after the other, the order rotating by one lane per round.
async fn measure(pools: &mut [Vec<Conn>], rounds: usize, per_conn: usize) -> Measured {
    let n = LANES.len();
    let mut m = Measured::new();
    for r in 0..rounds {
        for step in 0..n {
            let k = (r + step) % n;
            let conns = std::mem::take(&mut pools[k]);
            let (conns, batch) = run_turns(conns, Until::Turns(per_conn), STALL).await;
            pools[k] = conns;
            m.record(k, &batch);
        }
    }
    m
}

/// Each chatd's `/metrics`, in [`POLICIES`] order (`None` where the scrape failed).
async fn scrape_all(chatds: &[Server]) -> Vec<Option<Scrape>> {
    let mut scrapes = Vec::new();
    for s in chatds {
        scrapes.push(prom::scrape(s.addr).await);
    }
    scrapes
}
