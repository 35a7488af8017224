//! The history paths of a turn, measured in-process on real backends:
//! - hit: a `chat_message_added` frame is parsed, the new message is sealed, the chat's 20
//!   sealed messages (40 KiB) are read while it is appended (one backend operation: one
//!   Redis round trip) and opened, embed references are resolved and the LLM request is built;
//! - fallback: (1) the miss is detected and `request_chat_history` decided, then (2) the
//!   client's re-send (20 messages, 40 KiB of history) is parsed, sealed, cached and turned
//!   into the LLM request. The client round trip between (1) and (2) is not counted.

use std::sync::Arc;
use std::time::Instant;

use chatd::auth::UserId;
use chatd::cache::AiPolicy;
use chatd::cache::ai::{AiCache, CachedMessage};
use chatd::config::{CacheBackendKind, Config, KeyProviderKind};
use chatd::crypto::{Keyring, UserHash};
use chatd::history::{self, Prepared};
use chatd::pipeline::{context, tokens};
use chatd::turn::{Inbound, MessageOptions};
use chatd_protocol::{ChatId, ClientMessage, MessageId, Role, parse_client_message};
use chatd_test_harness::openbao::OpenBao;
use chatd_test_harness::redis::RedisServer;
use serde_json::json;

use crate::stats::summarize;
use crate::{Backend, Keys};

const HISTORY_MESSAGES: usize = 20;
const MESSAGE_BYTES: usize = 2048;

fn filler(i: usize) -> String {
    let base = format!("Message {i}: a paragraph of ordinary chat text about Rust and caching. ");
    base.repeat(MESSAGE_BYTES / base.len() + 1)[..MESSAGE_BYTES].to_string()
}

fn frame(chat: &str, id: &str, history: bool) -> String {
    let mut message = json!({
        "message_id": id,
        "role": "user",
        "content": "What should I read next about async Rust?",
        "created_at": 1_700_000_000,
        "chat_has_title": true,
    });
    if history {
        let h: Vec<_> = (0..HISTORY_MESSAGES)
            .map(|i| {
                json!({
                    "message_id": format!("h{i}"),
                    "role": if i % 2 == 0 { "user" } else { "assistant" },
                    "content": filler(i),
                    "created_at": 1_700_000_000 + i as i64,
                })
            })
            .collect();
        message["message_history"] = json!(h);
    }
    json!({"type": "chat_message_added", "payload": {"chat_id": chat, "message": message}})
        .to_string()
}

fn inbound(text: &str, prior: u64) -> (ChatId, Inbound) {
    let Ok(ClientMessage::ChatMessageAdded(m)) = parse_client_message(text) else {
        panic!("bench frame must parse")
    };
    let m = *m;
    let inbound = Inbound {
        options: MessageOptions::from_message(&m),
        message: m.message,
        embeds: m.embeds,
        conn: 1,
        prior_messages: prior,
        // A re-send carries its history, which is taken before this flag is looked at.
        history_requested: false,
    };
    (m.chat_id, inbound)
}

pub async fn run(backend: Backend, keys: Keys, iterations: usize) -> anyhow::Result<()> {
    let data = tempfile_dir()?;
    let mut config = Config::defaults()?;
    config.server.data_dir = data.clone();
    let _redis;
    let _bao;
    if backend == Backend::Redis {
        let r = RedisServer::start().await?;
        config.cache.backend = CacheBackendKind::Redis;
        config.cache.redis_url = r.url();
        _redis = Some(r);
    }
    if keys == Keys::Vault {
        let b = OpenBao::start().await?;
        config.keys.provider = KeyProviderKind::Vault;
        config.keys.vault_addr = b.addr();
        config.keys.vault_token = Some(b.root_token().to_string().into());
        _bao = Some(b);
    }
    let store = chatd::app::cache_backend(&config)?;
    let provider = chatd::app::key_provider(&config)?;
    let keyring = Arc::new(Keyring::new(
        provider.clone(),
        Arc::new(chatd::cache::WrappedKeys(store.clone())),
        config.keys.data_key_ttl,
    ));
    let policy = AiPolicy {
        ttl: config.cache.ai_ttl,
        // 20 earlier messages plus the new one stay cached while the loop runs.
        max_messages: HISTORY_MESSAGES + 1,
        max_chats: config.cache.ai_max_chats,
    };
    let cache = AiCache::new(store, keyring, policy);
    let user = UserHash::of(&UserId::parse("bench-user")?);
    let chat = ChatId::parse("bench-chat")?;
    let seed: Vec<CachedMessage> = (0..HISTORY_MESSAGES)
        .map(|i| {
            let content = filler(i);
            CachedMessage {
                message_id: MessageId::parse(format!("h{i}")).expect("valid id"),
                role: if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                token_count: Some(tokens::count(&content)),
                content,
                created_at: i as i64,
                category: None,
                model_name: None,
                replaces_through: None,
            }
        })
        .collect();
    cache.replace(&user, &chat, &seed).await?;
    println!(
        "history bench: backend={backend:?} keys={keys:?} history={HISTORY_MESSAGES} messages / {} KiB",
        HISTORY_MESSAGES * MESSAGE_BYTES / 1024
    );

    // Cache hit.
    let warmup = iterations / 10 + 10;
    let mut samples = Vec::with_capacity(iterations);
    let mut calls_after_warmup = 0;
    for i in 0..warmup + iterations {
        if i == warmup {
            calls_after_warmup = provider.calls();
        }
        let text = frame("bench-chat", &format!("q{i}"), false);
        let start = Instant::now();
        let (chat_id, inb) = inbound(&text, HISTORY_MESSAGES as u64);
        let prepared = history::prepare(&cache, &user, &chat_id, &[inb]).await?;
        let Prepared::Ready(h) = prepared else {
            anyhow::bail!("expected a cache hit, got {prepared:?}")
        };
        let request = context::build_request("bench-model", &h);
        let elapsed = start.elapsed();
        assert!(request.messages.len() > HISTORY_MESSAGES);
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    println!("  hit:                {}", summarize(samples));
    println!(
        "  key-service calls during the measured hits: {}",
        provider.calls() - calls_after_warmup
    );

    // Fallback: miss detection, then the re-send.
    let mut miss = Vec::with_capacity(iterations);
    let mut resend = Vec::with_capacity(iterations);
    let mut total = Vec::with_capacity(iterations);
    for i in 0..warmup + iterations {
        let chat_name = format!("fallback-{i}");
        let first = frame(&chat_name, "m-new", false);
        let start = Instant::now();
        let (chat_id, inb) = inbound(&first, HISTORY_MESSAGES as u64);
        let prepared = history::prepare(&cache, &user, &chat_id, &[inb]).await?;
        let leg1 = start.elapsed();
        anyhow::ensure!(
            matches!(prepared, Prepared::NeedHistory(_)),
            "expected a miss"
        );
        let again = frame(&chat_name, "m-new", true);
        let start = Instant::now();
        let (chat_id, inb) = inbound(&again, HISTORY_MESSAGES as u64);
        let prepared = history::prepare(&cache, &user, &chat_id, &[inb]).await?;
        let Prepared::Ready(h) = prepared else {
            anyhow::bail!("expected the re-send to be accepted")
        };
        let _ = context::build_request("bench-model", &h);
        let leg2 = start.elapsed();
        if i >= warmup {
            miss.push(leg1);
            resend.push(leg2);
            total.push(leg1 + leg2);
        }
    }
    println!("  fallback detect:    {}", summarize(miss));
    println!("  fallback re-send:   {}", summarize(resend));
    println!("  fallback (server):  {}", summarize(total));
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("chatd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
