//! The servers under test run as child processes of `chatd-load` (so their CPU and RSS
//! are their own): `chatd-load serve fake-llm|floor|chatd ...`. A child prints
//! `LISTEN <addr>` once bound and exits when its stdin closes (the parent went away).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use chatd::auth::{TokenKeys, UserId};
use tokio_util::sync::CancellationToken;

use crate::fake_llm::{self, Mode, Script};

/// The shared HS256 secret the chatd child uses, so the client can mint tokens.
pub const SECRET: &str = "chatd-load-benchmark-secret";

pub use crate::serving::Serving;

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    fn spawn(args: &[String]) -> anyhow::Result<Server> {
        Self::spawn_with(args, &[])
    }

    fn spawn_with(args: &[String], env: &[(String, String)]) -> anyhow::Result<Server> {
        let exe = std::env::current_exe()?;
        // `CHATD_LOAD_WRAP_CHATD` (e.g. `valgrind --tool=massif`) runs the chatd child
        // under a profiler; its figures are then the profiler's, its report the point.
        let wrap = match args.first().map(String::as_str) {
            Some("chatd") => std::env::var("CHATD_LOAD_WRAP_CHATD").unwrap_or_default(),
            _ => String::new(),
        };
        let mut words = wrap.split_whitespace();
        let mut command = match words.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(words).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let mut child = command
            .arg("serve")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning a server child")?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("LISTEN ")
            .with_context(|| format!("child said {line:?}"))?
            .parse()?;
        Ok(Server { child, addr })
    }

    pub fn fake_llm(script: &Script) -> anyhow::Result<Server> {
        let mut args: Vec<String> = vec![
            "fake-llm".into(),
            "--mode".into(),
            match script.mode {
                Mode::Instant => "instant".into(),
                Mode::Paced => "paced".into(),
            },
            "--tokens".into(),
            script.tokens.to_string(),
            "--pace-ms".into(),
            script.pace.as_millis().to_string(),
            "--think-ms".into(),
            script.think.as_millis().to_string(),
        ];
        if let Some(p) = script.preprocess {
            args.extend([
                "--preprocess-think-us".into(),
                p.think.as_micros().to_string(),
                "--preprocess-pace-us".into(),
                p.pace.as_micros().to_string(),
                "--preprocess-tokens".into(),
                p.tokens.to_string(),
            ]);
        }
        Self::spawn(&args)
    }

    pub fn floor(llm: &Server) -> anyhow::Result<Server> {
        Self::floor_calls(llm, 1)
    }

    /// The floor relay making `calls` model calls per chat (1 or 3).
    pub fn floor_calls(llm: &Server, calls: u8) -> anyhow::Result<Server> {
        Self::spawn(&[
            "floor".into(),
            "--llm".into(),
            llm.llm_base(),
            "--calls".into(),
            calls.to_string(),
        ])
    }

    pub fn chatd(llm: &Server) -> anyhow::Result<Server> {
        Self::spawn(&["chatd".into(), "--llm".into(), llm.llm_base()])
    }

    /// A chatd child with extra `CHATD__*` settings (cluster mode, speculation policies).
    pub fn chatd_with(llm: &Server, env: &[(String, String)]) -> anyhow::Result<Server> {
        Self::spawn_with(&["chatd".into(), "--llm".into(), llm.llm_base()], env)
    }

    pub fn llm_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the child, from `/proc/PID/status` (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .context("no VmRSS")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("VmRSS value")?
            .parse()?;
        Ok(kib * 1024)
    }

    /// CPU time (user + system) the child used so far, from `/proc/PID/stat`.
    pub fn cpu_time(&self) -> Duration {
        cpu_time_of(&self.pid().to_string())
    }
}

/// CPU time (user + system) this process (the load clients) used so far.
pub fn own_cpu_time() -> Duration {
    cpu_time_of("self")
}

/// CPU time (user + system) of `/proc/{pid}` so far (zero when unreadable).
fn cpu_time_of(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

impl Drop for Server {
    // Runs when a scenario is over (no load left to disturb): a short blocking wait is fine.
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        // Closing stdin asks the child to exit (it removes its temp dir); kill it if it
        // has not within two seconds.
        drop(self.child.stdin.take());
        for _ in 0..40 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Mints chatd tokens for the benchmark users.
pub fn token_keys() -> TokenKeys {
    TokenKeys::from_secret(SECRET.as_bytes())
}

pub fn mint(keys: &TokenKeys, user: &str) -> anyhow::Result<String> {
    Ok(keys.mint(&UserId::parse(user)?, Duration::from_secs(3600))?)
}

#[derive(clap::Subcommand, Debug)]
pub enum ServeKind {
    /// The fake OpenAI-compatible LLM.
    FakeLlm {
        #[arg(long, value_enum, default_value = "instant")]
        mode: Mode,
        #[arg(long, default_value_t = 48)]
        tokens: usize,
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        #[arg(long, default_value_t = 0)]
        think_ms: u64,
        /// Two-speed: a forced `preprocess` call waits this long, then streams realistic
        /// arguments (main calls wait `--think-ms`); unset: one speed, `{}` at once.
        #[arg(long)]
        preprocess_think_us: Option<u64>,
        /// Two-speed: between two fragments of the `preprocess` arguments.
        #[arg(long, default_value_t = 0)]
        preprocess_pace_us: u64,
        /// Two-speed: fragments (about tokens) of the `preprocess` arguments.
        #[arg(long, default_value_t = 100)]
        preprocess_tokens: usize,
    },
    /// The floor relay.
    Floor {
        #[arg(long)]
        llm: String,
        /// Model calls per chat: 1, or 3 like chatd (a stage call before and after).
        #[arg(long, default_value_t = 1)]
        calls: u8,
    },
    /// chatd itself (its library, configured like the binary: defaults + `CHATD__*` env),
    /// pointed at the fake LLM with rate limits lifted.
    Chatd {
        #[arg(long)]
        llm: String,
    },
}

/// `CHATD_LOAD_LOG=PATH`: the chatd child appends its log (chatd's own filter) to PATH,
/// so a run that found something keeps what each node did (`chatd-load chaos` sets it).
fn log_to_file() -> anyhow::Result<()> {
    let Ok(path) = std::env::var("CHATD_LOAD_LOG") else {
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening the log {path}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(chatd::logging::filter())
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .init();
    Ok(())
}

/// The child side: bind, print `LISTEN addr`, serve until stdin closes.
pub fn serve_child(kind: ServeKind) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let any: SocketAddr = "127.0.0.1:0".parse()?;
        let stop = CancellationToken::new();
        let _dir;
        let (addr, server) = match kind {
            ServeKind::FakeLlm {
                mode,
                tokens,
                pace_ms,
                think_ms,
                preprocess_think_us,
                preprocess_pace_us,
                preprocess_tokens,
            } => {
                let script = Script {
                    mode,
                    tokens,
                    pace: Duration::from_millis(pace_ms),
                    think: Duration::from_millis(think_ms),
                    preprocess: preprocess_think_us.map(|us| fake_llm::Preprocess {
                        think: Duration::from_micros(us),
                        pace: Duration::from_micros(preprocess_pace_us),
                        tokens: preprocess_tokens,
                    }),
                };
                fake_llm::serve(script, any).await?
            }
            ServeKind::Floor { llm, calls } => crate::floor::serve(&llm, calls, any).await?,
            ServeKind::Chatd { llm } => {
                log_to_file()?;
                let dir = tempfile::tempdir()?;
                let mut config = chatd::config::Config::load(None)?;
                config.server.listen = any;
                config.server.data_dir = dir.path().to_path_buf();
                config.auth.secret = Some(SECRET.to_string().into());
                config.llm.provider = chatd::config::LlmProvider::OpenaiCompatible;
                config.llm.base_url = llm;
                config.llm.model = "fake-model".into();
                config.limits.connection_rate = 1_000_000;
                config.limits.connection_burst = 1_000_000;
                config.limits.user_rate = 1_000_000;
                config.limits.user_burst = 1_000_000;
                _dir = dir;
                let app = chatd::app::App::build(config).await?;
                let addr = app.local_addr()?;
                let token = stop.clone();
                let serving: Serving = Box::pin(async move {
                    let _ = app.run_until_stopped(token).await;
                });
                (addr, serving)
            }
        };
        println!("LISTEN {addr}");
        // Serve until the parent closes our stdin (or dies).
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {
                sink.clear();
            }
        });
        tokio::select! {
            () = server => {}
            _ = stdin_closed => {}
        }
        stop.cancel();
        Ok(())
    })
}
