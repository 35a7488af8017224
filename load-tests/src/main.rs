//! chatd's benchmarks and load tests (timing lives here, never in pass/fail tests).
//!
//! `cargo run -p chatd-load --release -- history [--backend memory|redis] [--keys local|vault]`
//! measures the cache-hit path (frame parse → history ready for the LLM request) and the
//! fallback path (a re-sent history sealed and cached), with real Redis and OpenBao
//! started by the test harness when asked for.
//!
//! `cargo run -p chatd-load --release -- sync [--store sqlite|postgres] [--chats 1000]`
//! measures a phased sync of a large user (1,000 chats x 50 messages) over a WebSocket.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod history_bench;
mod stats;
mod sync_bench;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "chatd-load", about = "chatd benchmarks and load tests")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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

#[derive(Subcommand)]
enum Command {
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Command::History {
            backend,
            keys,
            iterations,
        } => runtime.block_on(history_bench::run(backend, keys, iterations)),
        Command::Sync {
            store,
            chats,
            messages_per_chat,
            runs,
        } => runtime.block_on(sync_bench::run(store, chats, messages_per_chat, runs)),
    }
}
