//! The command line: every scenario and its options (`chatd-load --help`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::client::Kind;
use crate::{chaos, procs, sync_bench};

#[derive(Parser)]
#[command(name = "chatd-load", about = "chatd benchmarks and load tests")]
pub(crate) struct Cli {
    /// Where reports and charts are written.
    #[arg(long, global = true, default_value = "load-results")]
    pub(crate) out: PathBuf,
    /// Worker threads of the load client's runtime (0 = one per core).
    #[arg(long, global = true, default_value_t = 0)]
    pub(crate) client_threads: usize,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Backend {
    Memory,
    Redis,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Keys {
    Local,
    Vault,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum Relay {
    /// The fake LLM itself (no relay): the ceiling of the client + LLM side.
    Direct,
    Floor,
    Chatd,
}

pub(crate) fn kinds(r: &[Relay]) -> Vec<Kind> {
    r.iter()
        .map(|r| match r {
            Relay::Direct => Kind::Direct,
            Relay::Floor => Kind::Floor,
            Relay::Chatd => Kind::Chatd,
        })
        .collect()
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Three chatd nodes under faults while users chat; the history is checked after.
    Chaos(chaos::Args),
    /// Pseudonymisation's cost on a message's path to the model (in-process).
    Privacy {
        #[arg(long, default_value_t = 20000)]
        iterations: usize,
    },
    /// Two chatd nodes in cluster mode on a harness Redis and PostgreSQL: frame delivery
    /// to another node vs the same node, cancel latency across nodes, and resume latency
    /// for a 500-frame log.
    Cluster {
        #[arg(long, default_value_t = 80)]
        chats: usize,
        #[arg(long, default_value_t = 8)]
        seconds: u64,
        #[arg(long, default_value_t = 40)]
        cancels: usize,
        /// Resumes of a finished 500-frame log (each on the other node and the same node).
        #[arg(long, default_value_t = 10)]
        resumes: usize,
    },
    /// Cache-hit and fallback history paths (issue: encrypted AI cache).
    History {
        #[arg(long, value_enum, default_value = "memory")]
        backend: Backend,
        #[arg(long, value_enum, default_value = "local")]
        keys: Keys,
        /// Measured iterations per path.
        #[arg(long, default_value_t = 5000)]
        iterations: usize,
    },
    /// Phased sync of a large user (issue: permanent store and multi-device sync).
    Sync {
        #[arg(long, value_enum, default_value = "sqlite")]
        store: sync_bench::StoreKind,
        #[arg(long, default_value_t = 1000)]
        chats: usize,
        #[arg(long, default_value_t = 50)]
        messages_per_chat: usize,
        /// Measured full syncs.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// How often the speculative main call is wasted, over a mixed workload.
    Speculation {
        #[arg(long, default_value_t = 200)]
        chats: usize,
    },
    /// Added time to first token over the fake LLM, floor relay vs chatd.
    Ttft {
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Turns per connection per round.
        #[arg(long, default_value_t = 100)]
        turns: usize,
        /// Concurrent chats (comma-separated levels); at level c each connection runs
        /// `max(turns / c, 5)` turns per round.
        #[arg(long, value_delimiter = ',', default_value = "1,100")]
        concurrency: Vec<usize>,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        /// The fake LLM waits this long before the first byte of every answer (a real
        /// model's time to first token); 0 = instant.
        #[arg(long, default_value_t = 0)]
        think_ms: u64,
    },
    /// Time to first token with a two-speed model (slow preprocessing that streams its
    /// arguments, then the main call): direct, floor, and chatd with speculation off / on /
    /// auto over a mixed workload; decision latency and wasted input tokens from /metrics.
    TtftPolicy {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Turns per connection per lane per round (at least 5).
        #[arg(long, default_value_t = 20)]
        turns: usize,
        /// Connections (chats running at once) per lane.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Tokens of a main call's answer (sent at once after M).
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        /// P: the preprocessing call's wait before its first byte, ms.
        #[arg(long, default_value_t = 200.0)]
        preprocess_ms: f64,
        /// T: between two tokens of the preprocessing arguments, ms.
        #[arg(long, default_value_t = 5.0)]
        token_ms: f64,
        /// About how many tokens (3-5 character fragments) the preprocessing arguments
        /// have; clamped to what the object's length allows.
        #[arg(long, default_value_t = 100)]
        arg_tokens: usize,
        /// M: a main call's wait before its first byte, ms.
        #[arg(long, default_value_t = 200)]
        main_ms: u64,
        /// Share of turns (after a chat's first) that change category from the chat's
        /// previous turn, in a steady chat.
        #[arg(long, default_value_t = 0.05)]
        switch_share: f64,
        /// Share of chats that jump between topics...
        #[arg(long, default_value_t = 0.2)]
        jumpy_chats: f64,
        /// ...and the share of their turns that change category.
        #[arg(long, default_value_t = 0.5)]
        jumpy_switch: f64,
        /// Share of chats that start about code.
        #[arg(long, default_value_t = 0.25)]
        code_chats: f64,
        /// Turns per chat before a connection starts a new chat (0: one chat per
        /// connection).
        #[arg(long, default_value_t = 10)]
        chat_turns: u64,
        /// Seed of the workload.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Keep chatd's postprocessing on.
        #[arg(long)]
        postprocessing: bool,
    },
    /// Chats/s and tokens/s with an instant fake LLM.
    Stream {
        #[arg(long, value_delimiter = ',', default_value = "20,100")]
        concurrency: Vec<usize>,
        #[arg(long, default_value = "5s", value_parser = humantime_dur)]
        duration: Duration,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
    },
    /// RSS per idle (authenticated, pinging) connection.
    Idle {
        #[arg(long, default_value_t = 10_000)]
        connections: usize,
        #[arg(long, default_value_t = 5)]
        steps: usize,
        #[arg(long, default_value = "5s", value_parser = humantime_dur)]
        ping: Duration,
        #[arg(long, default_value = "10s", value_parser = humantime_dur)]
        hold: Duration,
    },
    /// Ramp concurrent streaming chats over a paced fake LLM until stalls or errors.
    Active {
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "100,250,500,750,1000,1500,2000,3000,5000"
        )]
        levels: Vec<usize>,
        #[arg(long, default_value = "10s", value_parser = humantime_dur)]
        duration: Duration,
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        #[arg(long, default_value_t = 1000)]
        stall_ms: u64,
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "direct,floor,chatd"
        )]
        relays: Vec<Relay>,
    },
    /// Connect storm with authentication, then every client sends a message.
    Storm {
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Connects per second (open loop).
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        #[arg(long, value_enum, value_delimiter = ',', default_value = "floor,chatd")]
        relays: Vec<Relay>,
    },
    /// Slow consumers: live answers with extra devices showing them that read, or never
    /// read (stalled); chatd's RSS and the fast clients' times in each case.
    Slow {
        #[arg(long, default_value_t = 20)]
        chats: usize,
        /// Extra devices in all (spread over the chats' users).
        #[arg(long, default_value_t = 100)]
        extra: usize,
        #[arg(long, default_value_t = 3000)]
        tokens: usize,
        #[arg(long, default_value_t = 1)]
        pace_ms: u64,
        #[arg(long, default_value = "20s", value_parser = humantime_dur)]
        duration: Duration,
        /// Rounds of the three cases (none, reading, stalled), the order rotating.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// A long run at half capacity with clients connecting and leaving: chatd's RSS, file
    /// descriptors and p99 time to first frame sampled over time.
    Soak {
        #[arg(long, default_value = "30m", value_parser = humantime_dur)]
        duration: Duration,
        /// Concurrent clients (half of `active`'s highest passing level, 1,500, in run D).
        #[arg(long, default_value_t = 750)]
        concurrency: usize,
        /// Distinct users the clients sign in as (they come back).
        #[arg(long, default_value_t = 3000)]
        users: usize,
        /// Each connection runs 1 to this many turns, then closes.
        #[arg(long, default_value_t = 10)]
        max_turns: u64,
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        #[arg(long, default_value = "10s", value_parser = humantime_dur)]
        sample: Duration,
    },
    /// (internal) Runs one server under test; prints `LISTEN addr`.
    #[command(hide = true)]
    Serve {
        #[command(subcommand)]
        kind: procs::ServeKind,
    },
}

pub(crate) fn humantime_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).ok_or_else(|| format!("not a duration: {s} (use 500ms, 5s, 2m)"))
}

pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}
