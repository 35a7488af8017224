//! Phased sync of a large user over a real WebSocket: 1,000 chats of 50 messages (50,000
//! client-encrypted messages) in SQLite or a harness PostgreSQL, then a fresh device asks
//! for `phased_sync_request {phase: all}` (phases 1 and 2; the rest is paged by the client). Measured per run: time to
//! `phase_1_last_chat_ready`, to `phase_1b_chat_content_ready` and to
//! `phased_sync_complete`, and the process's peak RSS during the sync (VmHWM after
//! resetting it through /proc/self/clear_refs; the process holds chatd and the client).
//! The first run starts with a cold sync cache; phase 3 clears the cache after each run, so
//! a second pass with `phase1` only shows the warm-cache path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd::app::App;
use chatd::auth::{TokenKeys, UserId};
use chatd::config::Config;
use chatd::store::{ChatPatch, Store};
use chatd_protocol::{
    ChatId, ClientMessage, EncryptedMessage, MessageId, PhasedSyncRequest, Role, ServerMessage,
    SyncPhase,
};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::ws_client::WsClient;

use crate::stats::summarize;

#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

const SECRET: &[u8] = b"sync-bench-secret";
const CONTENT_BYTES: usize = 400;

fn cipher(i: usize) -> String {
    let base = format!("c2lwaGVydGV4dC0{i:08}-");
    base.repeat(CONTENT_BYTES / base.len() + 1)[..CONTENT_BYTES].to_string()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn fill(
    store: Arc<dyn Store>,
    user: &UserId,
    chats: usize,
    per_chat: usize,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    let workers = 8;
    for w in 0..workers {
        let store = store.clone();
        let user = user.clone();
        tasks.spawn(async move {
            for c in (w..chats).step_by(workers) {
                let chat = ChatId::parse(format!("chat-{c:05}"))?;
                let patch = ChatPatch {
                    encrypted_title: Some(cipher(c)),
                    encrypted_icon: Some("aWNvbg==".into()),
                    encrypted_category: Some("Y2F0".into()),
                    encrypted_chat_key: Some(cipher(c)[..64].to_string()),
                    last_edited: Some(1_700_000_000 + c as i64),
                    ..ChatPatch::default()
                };
                store.update_chat(&user, &chat, &patch).await?;
                for m in 0..per_chat {
                    let message = EncryptedMessage {
                        message_id: MessageId::parse(format!("m-{c:05}-{m:03}"))?,
                        role: if m % 2 == 0 {
                            Role::User
                        } else {
                            Role::Assistant
                        },
                        encrypted_content: cipher(c * per_chat + m),
                        created_at: 1_600_000_000 + m as i64,
                        encrypted_sender_name: None,
                        encrypted_category: Some("Y2F0".into()),
                        encrypted_model_name: None,
                        encrypted_thinking_content: None,
                        encrypted_thinking_signature: None,
                        encrypted_pii_mappings: None,
                        has_thinking: None,
                        thinking_token_count: None,
                        user_message_id: None,
                        status: None,
                        replaces_through: None,
                    };
                    store.add_message(&user, &chat, &message).await?;
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

struct Run {
    last_chat_ready: Duration,
    content_ready: Duration,
    complete: Duration,
    chats: usize,
    messages: usize,
    bytes: usize,
    peak_kib: u64,
}

async fn sync_once(ws: &mut WsClient, phase: SyncPhase) -> Run {
    let request = ClientMessage::PhasedSyncRequest(Box::new(PhasedSyncRequest {
        phase,
        client_chat_versions: Default::default(),
        client_chat_ids: Vec::new(),
        client_embed_ids: Vec::new(),
    }));
    reset_peak_rss();
    let start = Instant::now();
    ws.send(&request).await;
    let mut run = Run {
        last_chat_ready: Duration::ZERO,
        content_ready: Duration::ZERO,
        complete: Duration::ZERO,
        chats: 0,
        messages: 0,
        bytes: 0,
        peak_kib: 0,
    };
    loop {
        let msg = ws.recv().await;
        run.bytes += msg.to_json().len();
        match msg {
            ServerMessage::Phase1LastChatReady(_) => run.last_chat_ready = start.elapsed(),
            ServerMessage::Phase1bChatContentReady(p) => {
                run.content_ready = start.elapsed();
                run.chats += p.chats.len();
                run.messages += p.chats.iter().map(|c| c.messages.len()).sum::<usize>();
            }
            ServerMessage::BackgroundMessageSync(p) => {
                run.chats += p.chats.len();
                run.messages += p.chats.iter().map(|c| c.messages.len()).sum::<usize>();
            }
            ServerMessage::PhasedSyncComplete(_) => {
                run.complete = start.elapsed();
                run.peak_kib = peak_rss_kib();
                return run;
            }
            ServerMessage::Error(e) => panic!("sync failed: {e:?}"),
            _ => {}
        }
    }
}

pub async fn run(
    kind: StoreKind,
    chats: usize,
    per_chat: usize,
    runs: usize,
) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("chatd-sync-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut config = Config::defaults()?;
    config.server.listen = "127.0.0.1:0".parse()?;
    config.server.data_dir = dir.clone();
    config.server.outbox_capacity = 4096;
    let _pg;
    match kind {
        StoreKind::Sqlite => {}
        StoreKind::Postgres => {
            let pg = Postgres::start().await?;
            pg.create_database("bench").await?;
            config.store.url = pg.url("bench");
            _pg = pg;
        }
    }
    let keys = TokenKeys::from_secret(SECRET);
    let llm = chatd::llm::from_config(&config.llm)?;
    let app = App::build_with_llm(config, TokenKeys::from_secret(SECRET), llm).await?;
    let addr = app.local_addr()?;
    let state = app.state().clone();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut server = tokio::task::JoinSet::new();
    server.spawn(app.run_until_stopped(shutdown.clone()));

    let user = UserId::parse("bench-user")?;
    let t = Instant::now();
    fill(state.store.clone(), &user, chats, per_chat).await?;
    println!(
        "store={kind:?} filled {chats} chats x {per_chat} messages in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let token = keys.mint(&user, Duration::from_secs(3600))?;
    let mut ws = WsClient::connect(&format!("ws://{addr}/v1/ws?token={token}")).await?;

    let mut first = Vec::new();
    let mut content = Vec::new();
    let mut complete = Vec::new();
    let mut peak = 0;
    for i in 0..runs {
        let r = sync_once(&mut ws, SyncPhase::All).await;
        // `all` is phases 1 and 2: the content of 10 chats, the metadata of 100 (the client
        // pages the rest); before chatd followed the reference here it also sent phase 3.
        assert_eq!(r.chats, chats.min(10), "phase 1b's chats synced once");
        assert_eq!(r.messages, chats.min(10) * per_chat);
        if i == 0 {
            println!(
                "  cold run: phase_1_last_chat_ready {:.1} ms, phase_1b {:.1} ms, phased_sync_complete {:.1} ms, {:.1} MiB sent, peak RSS {} MiB",
                r.last_chat_ready.as_secs_f64() * 1e3,
                r.content_ready.as_secs_f64() * 1e3,
                r.complete.as_secs_f64() * 1e3,
                r.bytes as f64 / (1024.0 * 1024.0),
                r.peak_kib / 1024
            );
        }
        first.push(r.last_chat_ready);
        content.push(r.content_ready);
        complete.push(r.complete);
        peak = peak.max(r.peak_kib);
    }
    println!("  phase_1_last_chat_ready: {}", summarize(first));
    println!("  phase_1b_chat_content_ready: {}", summarize(content));
    println!("  phased_sync_complete: {}", summarize(complete));
    println!(
        "  peak RSS during sync (process: chatd + client): {} MiB",
        peak / 1024
    );

    // Before this change `all` also sent phase 3 (every other chat's content) in the same
    // sync; the same server code, asked phase by phase, shows what a login cost then.
    let started = Instant::now();
    let p1 = sync_once(&mut ws, SyncPhase::Phase1).await;
    let p2 = sync_once(&mut ws, SyncPhase::Phase2).await;
    let p3 = sync_once(&mut ws, SyncPhase::Phase3).await;
    let total = started.elapsed();
    let new = sync_once(&mut ws, SyncPhase::All).await;
    println!(
        "  login sync, before (all = phases 1+2+3): first chat shown {:.1} ms, complete {:.1} ms, {:.2} MiB, {} chats' content",
        p1.last_chat_ready.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        (p1.bytes + p2.bytes + p3.bytes) as f64 / (1024.0 * 1024.0),
        p1.chats + p3.chats
    );
    println!(
        "  login sync, after (all = phases 1+2, the rest paged): first chat shown {:.1} ms, complete {:.1} ms, {:.3} MiB, {} chats' content",
        new.last_chat_ready.as_secs_f64() * 1e3,
        new.complete.as_secs_f64() * 1e3,
        new.bytes as f64 / (1024.0 * 1024.0),
        new.chats
    );

    // Phase 1 alone, twice: the second is served from the sync cache the first warmed.
    let cold = sync_once(&mut ws, SyncPhase::Phase1).await;
    let warm = sync_once(&mut ws, SyncPhase::Phase1).await;
    println!(
        "  phase1 only: cold cache {:.2} ms, warm cache {:.2} ms to phase_1b_chat_content_ready",
        cold.content_ready.as_secs_f64() * 1e3,
        warm.content_ready.as_secs_f64() * 1e3
    );

    shutdown.cancel();
    let _ = server.join_all().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
