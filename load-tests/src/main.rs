//! chatd's benchmarks and load tests (timing lives here, never in pass/fail tests).
//! See load-tests/README.md for one command per scenario and what each number means.
//!
//! The servers under test (the fake LLM, the floor relay and chatd) run as child
//! processes of this binary (`chatd-load serve ...`), loopback only; the scenarios drive
//! them and write `<out>/<scenario>/{report.json,summary.txt,*.png}`.
//! `history` (cache-hit vs fallback path) and `sync` (phased sync of 1,000 chats on SQLite or
//! PostgreSQL) run chatd's parts in-process with real Redis, OpenBao and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chaos;
mod charts;
mod cli;
mod client;
mod cluster_bench;
mod fake_llm;
mod floor;
mod history_bench;
mod privacy_bench;
mod procs;
mod prom;
mod report;
mod scenarios;
mod serving;
mod speculation_bench;
mod stats;
mod sync_bench;
mod workload;

/// The allocator chatd's own binary uses (see `src/main.rs`), for the floors as well.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::Duration;

use clap::Parser;

pub use crate::cli::{Backend, Keys};
use crate::cli::{Cli, Command, kinds};
use crate::scenarios::{active, idle, slow, soak, storm, stream, ttft, ttft_policy};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Serve { kind } = cli.command {
        return procs::serve_child(kind);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cli.client_threads > 0 {
        builder.worker_threads(cli.client_threads);
    }
    let runtime = builder.enable_all().build()?;
    let out = cli.out;
    runtime.block_on(async move {
        match cli.command {
            Command::Chaos(args) => chaos::run(args, &out).await,
            Command::Cluster {
                chats,
                seconds,
                cancels,
                resumes,
            } => cluster_bench::run(chats, seconds, cancels, resumes).await,
            Command::History {
                backend,
                keys,
                iterations,
            } => history_bench::run(backend, keys, iterations).await,
            Command::Sync {
                store,
                chats,
                messages_per_chat,
                runs,
            } => sync_bench::run(store, chats, messages_per_chat, runs).await,
            Command::Speculation { chats } => speculation_bench::run(chats).await,
            Command::Privacy { iterations } => privacy_bench::run(iterations),
            Command::Ttft {
                rounds,
                turns,
                concurrency,
                tokens,
                think_ms,
            } => {
                ttft::run(
                    ttft::Params {
                        rounds,
                        turns,
                        concurrency,
                        tokens,
                        think: Duration::from_millis(think_ms),
                    },
                    &out,
                )
                .await
            }
            Command::TtftPolicy {
                rounds,
                turns,
                concurrency,
                tokens,
                preprocess_ms,
                token_ms,
                arg_tokens,
                main_ms,
                switch_share,
                jumpy_chats,
                jumpy_switch,
                code_chats,
                chat_turns,
                seed,
                postprocessing,
            } => {
                let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1000.0);
                ttft_policy::run(
                    ttft_policy::Params {
                        rounds,
                        turns,
                        concurrency,
                        tokens,
                        preprocess_think: ms(preprocess_ms),
                        arg_pace: ms(token_ms),
                        arg_tokens,
                        main_think: Duration::from_millis(main_ms),
                        workload: workload::Workload {
                            seed,
                            switch_share: switch_share.clamp(0.0, 1.0),
                            jumpy_chats: jumpy_chats.clamp(0.0, 1.0),
                            jumpy_switch: jumpy_switch.clamp(0.0, 1.0),
                            code_chats: code_chats.clamp(0.0, 1.0),
                            chat_turns,
                        },
                        postprocessing,
                    },
                    &out,
                )
                .await
            }
            Command::Stream {
                concurrency,
                duration,
                tokens,
            } => {
                stream::run(
                    stream::Params {
                        concurrency,
                        duration,
                        tokens,
                    },
                    &out,
                )
                .await
            }
            Command::Idle {
                connections,
                steps,
                ping,
                hold,
            } => {
                idle::run(
                    idle::Params {
                        connections,
                        steps,
                        ping,
                        hold,
                    },
                    &out,
                )
                .await
            }
            Command::Active {
                levels,
                duration,
                pace_ms,
                tokens,
                stall_ms,
                relays,
            } => {
                active::run(
                    active::Params {
                        levels,
                        duration,
                        pace: Duration::from_millis(pace_ms),
                        tokens,
                        stall: Duration::from_millis(stall_ms),
                        kinds: kinds(&relays),
                    },
                    &out,
                )
                .await
            }
            Command::Storm {
                connections,
                rate,
                tokens,
                relays,
            } => {
                storm::run(
                    storm::Params {
                        connections,
                        rate,
                        tokens,
                        kinds: kinds(&relays),
                    },
                    &out,
                )
                .await
            }
            Command::Slow {
                chats,
                extra,
                tokens,
                pace_ms,
                duration,
                rounds,
            } => {
                slow::run(
                    slow::Params {
                        chats,
                        extra,
                        tokens,
                        pace: Duration::from_millis(pace_ms),
                        duration,
                        rounds,
                    },
                    &out,
                )
                .await
            }
            Command::Soak {
                duration,
                concurrency,
                users,
                max_turns,
                pace_ms,
                tokens,
                sample,
            } => {
                soak::run(
                    soak::Params {
                        duration,
                        concurrency,
                        users,
                        max_turns,
                        pace: Duration::from_millis(pace_ms),
                        tokens,
                        sample,
                    },
                    &out,
                )
                .await
            }
            Command::Serve { .. } => Ok(()),
        }
    })
}
