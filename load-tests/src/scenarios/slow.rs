//! `slow`: slow consumers (issue 18, item 1). `chats` users each stream long answers back
//! to back in one chat (a paced fake LLM); every user also has `extra / chats` more
//! devices showing that chat. Three runs, each on a fresh chatd: no extra devices, extra
//! devices that read everything, and extra devices that never read (stalled). Reported:
//! chatd's RSS (VmRSS, sampled every 100 ms; peak and end) and the fast clients' times
//! (first answer frame, whole answer, longest gap between frames) in each run. The cost
//! of the stalled devices = peak RSS with them − peak RSS with reading devices.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chatd::auth::TokenKeys;
use chatd_protocol::{ChatId, ChatMessageAdded, ClientMessage, MessageId, ServerMessage};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::client::ws_connect;
use crate::fake_llm::{Mode, Script};
use crate::procs::{self, Server};
use crate::report::Report;
use crate::stats::{Hist, median};

pub struct Params {
    pub chats: usize,
    pub extra: usize,
    pub tokens: usize,
    pub pace: Duration,
    pub duration: Duration,
    pub rounds: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Extra {
    None,
    Reading,
    Stalled,
}

impl Extra {
    fn name(self) -> &'static str {
        match self {
            Extra::None => "none",
            Extra::Reading => "reading",
            Extra::Stalled => "stalled",
        }
    }
}

type Ws = WebSocketStream<TcpStream>;

fn chat(user: usize) -> String {
    format!("slow-{user}")
}

async fn device(chatd: &Server, keys: &TokenKeys, user: usize) -> anyhow::Result<Ws> {
    let token = procs::mint(keys, &format!("slow-user-{user}"))?;
    let mut ws = ws_connect(chatd.addr, &format!("/v1/ws?token={token}")).await?;
    let show = json!({"type": "set_active_chat", "payload": {"chat_id": chat(user)}});
    ws.send(Message::text(show.to_string())).await?;
    loop {
        let msg = ws.next().await.context("closed before the ack")??;
        if let Message::Text(t) = msg
            && t.contains("active_chat_set_ack")
        {
            return Ok(ws);
        }
    }
}

#[derive(Default)]
struct Times {
    turns: u64,
    errors: u64,
    first: Hist,
    done: Hist,
    max_gap: Hist,
    first_error: Option<String>,
}

/// Runs turns in the user's chat until `end`.
async fn fast_client(mut ws: Ws, user: usize, end: tokio::time::Instant) -> Times {
    let mut t = Times::default();
    let mut n = 0;
    while tokio::time::Instant::now() < end {
        n += 1;
        match turn(&mut ws, user, n).await {
            Ok((first, done, gap)) => {
                t.turns += 1;
                t.first.record(first);
                t.done.record(done);
                t.max_gap.record(gap);
            }
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert_with(|| format!("{e:#}"));
                break;
            }
        }
    }
    t
}

async fn turn(
    ws: &mut Ws,
    user: usize,
    n: usize,
) -> anyhow::Result<(Duration, Duration, Duration)> {
    let msg = ClientMessage::ChatMessageAdded(Box::new(ChatMessageAdded::user(
        ChatId::parse(chat(user))?,
        MessageId::parse(format!("m-{user}-{n}"))?,
        "Tell me a long story.".to_string(),
        1_700_000_000,
    )));
    let start = Instant::now();
    ws.send(Message::text(serde_json::to_string(&msg)?)).await?;
    let (mut first, mut last, mut gap) = (None, start, Duration::ZERO);
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .context("no frame for 60 s")?
            .context("closed")??;
        let now = Instant::now();
        let Message::Text(text) = frame else { continue };
        match serde_json::from_str::<ServerMessage>(&text)? {
            ServerMessage::AiMessageUpdate(u) => {
                first.get_or_insert(now - start);
                gap = gap.max(now - last);
                last = now;
                if u.is_final_chunk {
                    if let Some(code) = u.error_code {
                        bail!("turn ended with {code:?}");
                    }
                    return Ok((first.unwrap_or_default(), now - start, gap));
                }
            }
            ServerMessage::Error(e) => bail!("chatd error {:?}: {}", e.code, e.message),
            _ => {}
        }
    }
}

/// Reads a stalled device's socket until its close (the code) or 5 s of silence (None).
async fn read_to_close(mut ws: Ws) -> Option<u16> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => return frame.map(|f| u16::from(f.code)),
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// What one case measured.
struct Case {
    times: Times,
    rss_before: u64,
    peak: u64,
    rss_end: u64,
    slow_closed: usize,
    open: usize,
}

/// One case on a fresh fake LLM and chatd.
async fn run_case(p: &Params, extra: Extra, keys: &TokenKeys) -> anyhow::Result<Case> {
    let llm = Server::fake_llm(&Script {
        mode: Mode::Paced,
        tokens: p.tokens,
        pace: p.pace,
        think: Duration::ZERO,
        preprocess: None,
    })?;
    let chatd = Server::chatd(&llm)?;
    let mut fast = Vec::new();
    for user in 0..p.chats {
        fast.push(device(&chatd, keys, user).await?);
    }
    let mut stalled = Vec::new();
    let mut readers = JoinSet::new();
    for k in 0..if extra == Extra::None { 0 } else { p.extra } {
        let ws = device(&chatd, keys, k % p.chats).await?;
        match extra {
            Extra::Stalled => stalled.push(ws),
            _ => {
                readers.spawn(async move {
                    let mut ws = ws;
                    while let Some(Ok(_)) = ws.next().await {}
                });
            }
        }
    }
    let rss_before = chatd.rss_bytes()?;
    let end = tokio::time::Instant::now() + p.duration;
    let mut clients = JoinSet::new();
    for (user, ws) in fast.into_iter().enumerate() {
        clients.spawn(fast_client(ws, user, end));
    }
    let mut peak = rss_before;
    let mut times = Times::default();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !clients.is_empty() {
        tokio::select! {
            _ = tick.tick() => peak = peak.max(chatd.rss_bytes()?),
            Some(done) = clients.join_next() => {
                let t = done?;
                times.turns += t.turns;
                times.errors += t.errors;
                times.first.add(&t.first);
                times.done.add(&t.done);
                times.max_gap.add(&t.max_gap);
                if times.first_error.is_none() {
                    times.first_error = t.first_error;
                }
            }
        }
    }
    let rss_end = chatd.rss_bytes()?;
    // The stalled devices read at last: what the server sent them, then its close.
    let mut closes = JoinSet::new();
    for ws in stalled {
        closes.spawn(read_to_close(ws));
    }
    let (mut slow_closed, mut open) = (0, 0);
    while let Some(code) = closes.join_next().await {
        match code? {
            Some(4001) => slow_closed += 1,
            None => open += 1,
            Some(_) => {}
        }
    }
    readers.abort_all();
    Ok(Case {
        times,
        rss_before,
        peak,
        rss_end,
        slow_closed,
        open,
    })
}

fn mib(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let mut report = Report::new(
        "slow",
        json!({"chats": p.chats, "extra_devices": p.extra, "tokens": p.tokens,
            "pace_ms": p.pace.as_millis() as u64, "duration_s": p.duration.as_secs_f64(),
            "rounds": p.rounds}),
    );
    report.line(format!(
        "slow: {} chats streaming {}-token answers ({} ms/token) back to back for {:?}; {} extra devices showing them; {} rounds, the order of the cases rotating",
        p.chats,
        p.tokens,
        p.pace.as_millis(),
        p.duration,
        p.extra,
        p.rounds
    ));
    let keys = procs::token_keys();
    let cases = [Extra::None, Extra::Reading, Extra::Stalled];
    let mut rounds = Vec::new();
    // Per case: peak RSS (MiB), first-frame p50/p99, longest-gap p50/p99 (ms), per round.
    let mut figures: Vec<[Vec<f64>; 5]> = (0..3).map(|_| Default::default()).collect();
    let mut cost = Vec::new();
    for round in 0..p.rounds {
        let mut peaks = [0.0; 3];
        let mut row = serde_json::Map::new();
        for k in 0..3 {
            let i = (k + round) % 3;
            let extra = cases[i];
            let c = run_case(&p, extra, &keys).await?;
            let t = &c.times;
            peaks[i] = c.peak as f64;
            let f = &mut figures[i];
            f[0].push(mib(c.peak as f64));
            f[1].push(t.first.us(0.5) / 1000.0);
            f[2].push(t.first.us(0.99) / 1000.0);
            f[3].push(t.max_gap.us(0.5) / 1000.0);
            f[4].push(t.max_gap.us(0.99) / 1000.0);
            report.line(format!(
                "  round {round} {:<8} turns {:>4} errors {}  RSS before {:>6.1} MiB peak {:>6.1} MiB end {:>6.1} MiB  first frame p50 {:>6.1} ms p99 {:>6.1} ms  answer p50 {:>7.1} ms p99 {:>7.1} ms  longest gap p50 {:>5.1} ms p99 {:>6.1} ms{}",
                extra.name(),
                t.turns,
                t.errors,
                mib(c.rss_before as f64),
                mib(c.peak as f64),
                mib(c.rss_end as f64),
                t.first.us(0.5) / 1000.0,
                t.first.us(0.99) / 1000.0,
                t.done.us(0.5) / 1000.0,
                t.done.us(0.99) / 1000.0,
                t.max_gap.us(0.5) / 1000.0,
                t.max_gap.us(0.99) / 1000.0,
                if extra == Extra::Stalled {
                    format!("  stalled closed 4001: {}, still open: {}", c.slow_closed, c.open)
                } else {
                    String::new()
                },
            ));
            row.insert(
                extra.name().into(),
                json!({
                    "turns": t.turns, "errors": t.errors, "first_error": t.first_error,
                    "rss_before_bytes": c.rss_before, "rss_peak_bytes": c.peak,
                    "rss_end_bytes": c.rss_end, "first_frame": t.first.json(),
                    "answer": t.done.json(), "longest_gap": t.max_gap.json(),
                    "stalled_closed_4001": c.slow_closed, "stalled_still_open": c.open,
                }),
            );
        }
        cost.push(mib(peaks[2] - peaks[1]));
        rounds.push(serde_json::Value::Object(row));
    }
    for (i, extra) in cases.iter().enumerate() {
        let m = |j: usize| median(figures[i][j].clone());
        report.line(format!(
            "  median {:<8} peak RSS {:>6.1} MiB  first frame p50 {:>6.1} ms p99 {:>6.1} ms  longest gap p50 {:>6.1} ms p99 {:>6.1} ms",
            extra.name(),
            m(0),
            m(1),
            m(2),
            m(3),
            m(4)
        ));
    }
    report.line(format!(
        "  {} stalled devices cost {:.1} MiB of peak RSS over {} reading ones (median of rounds; each round: {:?})",
        p.extra,
        median(cost.clone()),
        p.extra,
        cost.iter().map(|c| (c * 10.0).round() / 10.0).collect::<Vec<_>>()
    ));
    report.results = json!({"rounds": rounds, "stalled_cost_over_reading_mib": cost});
    report.write(out)?;
    Ok(())
}
