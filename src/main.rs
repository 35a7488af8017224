//! The `chatd` binary: a thin CLI over the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chatd::app::App;
use chatd::auth::{TokenKeys, UserId};
use chatd::config::Config;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// mimalloc: per-thread free lists where glibc's arenas contend (measured in
/// load-tests/README.md, run O: 12-20% more chats/s in the `stream` benchmark).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "chatd",
    version,
    about = "WebSocket realtime chat-processing server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the server (embedded defaults when no configuration is given).
    Serve {
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print a session token for a user, signed with the server's secret.
    Token {
        #[arg(long, value_name = "USER_ID")]
        user: String,
        /// Lifetime, e.g. "30m", "24h" (default: auth.token_ttl).
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Validate the configuration; exits non-zero with the first problem.
    CheckConfig {
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Validate skill manifests (`*.yml` app files); without DIR, the built-in ones.
    LintSkills {
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Also start each MCP app's server, list its tools and check them.
        #[arg(long)]
        start_mcp: bool,
        /// How long a server may take to start and list its tools.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "20s")]
        mcp_timeout: Duration,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chatd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `lint-skills --start-mcp`: each MCP app's server started, its tools listed and checked.
fn list_mcp(dir: &std::path::Path, deadline: Duration) -> anyhow::Result<()> {
    let apps = chatd::skills::manifest::load(dir)?;
    // `{vault: ...}` references are read with the key service's settings, and opt-in apps and
    // their commands come from `skills.mcp_*` (the environment's CHATD__*, or the defaults).
    let config = chatd::config::Config::load(None)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let listings = runtime
        .block_on(chatd::skills::mcp::listing::list_all(
            &apps,
            &config.skills,
            deadline,
            &config.keys,
        ))
        .map_err(|e| anyhow::anyhow!(e))?;
    for l in listings {
        if l.off {
            println!(
                "mcp app `{}`: off (enabled: false; not in skills.mcp_apps)",
                l.app_id
            );
            continue;
        }
        println!("mcp app `{}`: {} tools offered", l.app_id, l.offered);
        for (tool, why) in l.left_out {
            println!("  tool `{tool}` left out: {why}");
        }
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { config } => {
            let config = Config::load(config.as_deref())?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(serve(config))
        }
        Command::Token { user, ttl, config } => {
            let config = Config::load(config.as_deref())?;
            let user = UserId::parse(user)?;
            let keys = TokenKeys::load(&config)?;
            println!(
                "{}",
                keys.mint(&user, ttl.unwrap_or(config.auth.token_ttl))?
            );
            Ok(())
        }
        Command::LintSkills {
            dir,
            start_mcp,
            mcp_timeout,
        } => {
            let dir = dir.unwrap_or_default();
            let count = chatd::skills::lint_dir(&dir)?;
            if start_mcp {
                list_mcp(&dir, mcp_timeout)?;
            }
            // Every routine script compiles and its literal calls name what exists.
            let routines = chatd::routines::Catalog::load(&dir)?.all().len();
            let shown = if dir.as_os_str().is_empty() {
                "built-in manifests".to_string()
            } else {
                dir.display().to_string()
            };
            println!("{shown}: {count} skills ok, {routines} routines ok");
            Ok(())
        }
        Command::CheckConfig { config } => {
            let config = Config::load(config.as_deref())?;
            let instructions = chatd::pipeline::instructions::Instructions::load(&config.pipeline)?;
            let skills = chatd::skills::lint_dir(&config.skills.apps_dir)?;
            let focus_modes: usize = chatd::skills::manifest::load(&config.skills.apps_dir)?
                .iter()
                .map(|a| a.focus_modes.len())
                .sum();
            println!(
                "configuration ok (listen {}, llm {:?}, store {}, {} models, {} mates, {} focus modes, {} skills)",
                config.server.listen,
                config.llm.provider,
                config.store_url().split(':').next().unwrap_or("sqlite"),
                config.models.catalog.len().max(1),
                instructions.mates.len(),
                focus_modes,
                skills
            );
            Ok(())
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(chatd::logging::filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let embedded = config.is_embedded();
    let data_dir = config.server.data_dir.display().to_string();
    let memory_cache = config.cache.backend == chatd::config::CacheBackendKind::Memory;
    let (demo, dev_login) = (config.demo_enabled(), config.dev_login_enabled());
    let app = App::build(config).await?;
    let addr = app.local_addr()?;
    tracing::info!(%data_dir, "data directory (token secret, local master key, SQLite store)");
    if embedded {
        tracing::warn!(
            "EMBEDDED MODE: simulated LLM, in-process history, local keys — no external services. \
             Not for production; set llm.provider and friends to run for real."
        );
    }
    if memory_cache {
        tracing::info!(
            "the AI cache and running answers live in this process: after a restart, chats the \
             clients stored are still there, but the server asks them for a chat's history \
             (request_chat_history) before its next answer"
        );
    }
    tracing::info!(%addr, "chatd listening; WebSocket at ws://{addr}/v1/ws");
    if demo {
        tracing::info!(dev_login, "demo page at http://{addr}/ (web.demo)");
    }
    if dev_login && !embedded {
        tracing::warn!(
            "web.dev_login is on: POST /v1/dev/token mints a token for any user name; \
             never on a server others can reach"
        );
    }
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    let waiter = async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; draining");
        signal.cancel();
    };
    let (served, ()) = tokio::join!(app.run_until_stopped(shutdown.clone()), async {
        tokio::select! {
            () = waiter => {}
            () = shutdown.cancelled() => {}
        }
    });
    served?;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
