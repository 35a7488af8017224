//! chatd with a real OpenBao (`bao server -dev`, transit): per-user keys created on first
//! use, cached data keys keep Vault off the per-message path, rotation past
//! `min_decryption_version` → `decryption_failed` → re-send → recovered, and a sealed,
//! black-holed or misconfigured Vault → `encryption_unavailable` within the deadline, with
//! `/readyz` saying so and recovery once Vault is back.

use std::time::Duration;

use chatd::config::KeyProviderKind;
use chatd_protocol::{ErrorCode, HistoryReason, Role, ServerMessage};
use chatd_test_harness::blackhole::Blackhole;
use chatd_test_harness::fake_llm::FakeLlm;
use chatd_test_harness::openbao::OpenBao;
use serde_json::json;

use crate::support::{
    history_entry, outcome, ping, spawn_app, use_llm, user_message, user_message_with,
};

fn use_vault(c: &mut chatd::config::Config, addr: String, token: &str) {
    c.keys.provider = KeyProviderKind::Vault;
    c.keys.vault_addr = addr;
    c.keys.vault_token = Some(token.to_string().into());
    c.keys.vault_timeout = Duration::from_secs(2);
}

fn key_name(user: &str) -> String {
    chatd::crypto::UserHash::of(&chatd::auth::UserId::parse(user).unwrap()).key_name()
}

async fn readyz(app: &crate::support::TestApp) -> (u16, serde_json::Value) {
    let resp = reqwest::get(app.http_url("/readyz")).await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn first_use_creates_the_users_key_and_cached_data_keys_skip_vault() {
    let bao = OpenBao::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_vault(c, bao.addr(), bao.root_token());
    })
    .await;
    assert_eq!(readyz(&app).await.0, 200);
    let name = key_name("alice");
    assert!(
        !name.contains("alice"),
        "key names never carry the raw user id"
    );
    assert!(
        bao.http("GET", &format!("/v1/transit/keys/{name}"), None)
            .await
            .is_err(),
        "no key before first use"
    );

    let mut ws = app.connect_showing("alice", "chat-v").await;
    ws.send(&user_message("chat-v", "m1", "hello vault")).await;
    outcome(&mut ws).await.answer();
    let key = bao
        .http("GET", &format!("/v1/transit/keys/{name}"), None)
        .await
        .unwrap();
    assert_eq!(key["data"]["type"], "aes256-gcm96");
    assert_eq!(key["data"]["derived"], true);

    let provider = app.state.ai_cache.keyring().provider().clone();
    let calls = provider.calls();
    for i in 2..5 {
        ws.send(&user_message("chat-v", &format!("m{i}"), "more"))
            .await;
        outcome(&mut ws).await.answer();
    }
    assert_eq!(
        provider.calls(),
        calls,
        "cached data key: no Vault call per message"
    );
    let metrics = reqwest::get(app.http_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("chatd_key_service_calls"), "{metrics}");
}

#[tokio::test]
async fn rotation_past_min_decryption_version_falls_back_then_recovers() {
    let bao = OpenBao::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_vault(c, bao.addr(), bao.root_token());
        // Every seal and open asks Vault, so a rotation shows at once.
        c.keys.data_key_ttl = Duration::ZERO;
    })
    .await;
    let mut ws = app.connect_showing("bob", "chat-rot").await;
    ws.send(&user_message("chat-rot", "m1", "before rotation"))
        .await;
    outcome(&mut ws).await.answer();

    let name = key_name("bob");
    bao.http("POST", &format!("/v1/transit/keys/{name}/rotate"), None)
        .await
        .unwrap();
    bao.http(
        "POST",
        &format!("/v1/transit/keys/{name}/config"),
        Some(json!({"min_decryption_version": 2})),
    )
    .await
    .unwrap();

    ws.send(&user_message("chat-rot", "m2", "after rotation"))
        .await;
    assert_eq!(
        outcome(&mut ws).await.need_history().reason,
        HistoryReason::DecryptionFailed
    );
    assert_eq!(fake.requests().len(), 1);
    ws.send(&user_message_with(
        "chat-rot",
        "m2",
        "after rotation",
        |m| {
            m.message.message_history = Some(vec![
                history_entry("m1", Role::User, "before rotation", 1),
                history_entry("a1", Role::Assistant, "old answer", 2),
            ]);
        },
    ))
    .await;
    outcome(&mut ws).await.answer();
    ws.send(&user_message("chat-rot", "m3", "next")).await;
    outcome(&mut ws).await.answer();
    assert_eq!(
        fake.requests().len(),
        3,
        "re-cached under the new key version: a cache hit"
    );
}

#[tokio::test]
async fn a_sealed_vault_is_a_typed_error_and_turns_resume_after_unseal() {
    let bao = OpenBao::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_vault(c, bao.addr(), bao.root_token());
        c.keys.data_key_ttl = Duration::ZERO;
    })
    .await;
    let mut ws = app.connect_showing("carol", "chat-s").await;
    // A turn in another chat first: the key service's connection is open before counting.
    ws.send(&user_message("chat-w", "w1", "warm up")).await;
    outcome(&mut ws).await.answer();
    let ports = [
        app.addr.port(),
        crate::faults::port(&fake.base_url()),
        bao.port(),
    ];
    let before = crate::faults::counts(&ports);
    bao.seal().await.unwrap();
    ws.send(&user_message("chat-s", "m1", "sealed?")).await;
    let error = outcome(&mut ws).await.error();
    assert_eq!(error.code, ErrorCode::EncryptionUnavailable);
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503);
    assert_eq!(body["down"], json!(["keys"]));
    ws.send(&ping()).await;
    assert!(matches!(ws.recv().await, ServerMessage::Pong(_)));

    bao.unseal().await.unwrap();
    // m1 is part of the chat but never reached the cache: the server asks for it.
    ws.send(&user_message("chat-s", "m2", "unsealed")).await;
    assert_eq!(
        outcome(&mut ws).await.need_history().reason,
        HistoryReason::CacheMiss
    );
    ws.send(&user_message_with("chat-s", "m2", "unsealed", |m| {
        m.message.message_history = Some(vec![history_entry("m1", Role::User, "sealed?", 1)]);
    }))
    .await;
    outcome(&mut ws).await.answer();
    assert_eq!(readyz(&app).await.0, 200);
    // Recovering left no task or descriptor behind (the key service's connection included).
    let after = crate::faults::settled(&ports, before).await;
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "fds, tasks: {before:?} → {after:?}"
    );
}

#[tokio::test]
async fn a_black_holed_vault_times_out_within_the_deadline() {
    let hole = Blackhole::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_vault(c, hole.addr(), "unused-token");
        c.keys.vault_timeout = Duration::from_millis(300);
    })
    .await;
    let mut ws = app.connect_showing("dave", "chat-b").await;
    ws.send(&user_message("chat-b", "m1", "anyone there?"))
        .await;
    let error = outcome(&mut ws).await.error();
    assert_eq!(error.code, ErrorCode::EncryptionUnavailable);
    assert!(hole.accepted() >= 1, "chatd did connect and wait");
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503);
    assert!(
        body["checks"]["keys"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{body}"
    );
    ws.send(&ping()).await;
    assert!(matches!(ws.recv().await, ServerMessage::Pong(_)));
    // Each timed-out call leaves nothing behind: a second one ends the same, and the
    // counts come back to where they were after the first.
    let ports = [
        app.addr.port(),
        crate::faults::port(&fake.base_url()),
        hole.port(),
    ];
    let before = crate::faults::counts(&ports);
    ws.send(&user_message("chat-b", "m2", "still there?")).await;
    assert_eq!(
        outcome(&mut ws).await.error().code,
        ErrorCode::EncryptionUnavailable
    );
    let after = crate::faults::settled(&ports, before).await;
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "fds, tasks: {before:?} → {after:?}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_missing_transit_mount_is_named_in_readyz_and_the_first_turn() {
    let bao = OpenBao::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_vault(c, bao.addr(), bao.root_token());
        c.keys.transit_mount = "missing-transit".into();
    })
    .await;
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503);
    assert!(
        body["checks"]["keys"]
            .as_str()
            .unwrap()
            .contains("transit mount `missing-transit` is missing"),
        "{body}"
    );
    let mut ws = app.connect_showing("erin", "chat-m").await;
    ws.send(&user_message("chat-m", "m1", "hi")).await;
    let error = outcome(&mut ws).await.error();
    assert_eq!(error.code, ErrorCode::EncryptionUnavailable);
    assert!(
        error.message.contains("missing-transit"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn provider_api_keys_are_read_from_vault_kv() {
    let bao = OpenBao::start().await.unwrap();
    // `bao server -dev` mounts KV v2 at `secret/`.
    bao.http(
        "POST",
        "/v1/secret/data/llm/fake",
        Some(json!({"data": {"api_key": "sk-from-vault"}})),
    )
    .await
    .unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.keys.vault_addr = bao.addr();
        c.keys.vault_token = Some(bao.root_token().to_string().into());
        c.models.catalog = vec![chatd::config::ModelEntry {
            id: "vaulted".into(),
            name: None,
            base_url: Some(fake.base_url()),
            api_key_env: None,
            api_key_vault: Some("secret/llm/fake#api_key".into()),
            api_key: None,
            context_window: 32_000,
            capabilities: vec![chatd::config::Capability::Tools],
            cost_tier: 1,
        }];
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-kv").await;
    ws.send(&user_message("chat-kv", "m1", "hi")).await;
    outcome(&mut ws).await.answer();
    let auth = fake.authorizations();
    assert!(!auth.is_empty());
    assert!(
        auth.iter()
            .all(|a| a.as_deref() == Some("Bearer sk-from-vault")),
        "{auth:?}"
    );

    // A reference to a field that does not exist stops start-up with a precise message.
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::test_config(dir.path());
    use_llm(&mut config, fake.base_url());
    config.keys.vault_addr = bao.addr();
    config.keys.vault_token = Some(bao.root_token().to_string().into());
    config.llm.api_key_vault = Some("secret/llm/fake#missing".into());
    let err = match chatd::app::App::build(config).await {
        Ok(_) => panic!("start-up must fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("secret/llm/fake#missing") && err.contains("no field"),
        "{err}"
    );
}
