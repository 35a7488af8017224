//! The `chatd` binary: `token`, `check-config`, and a real `serve` on embedded defaults
//! that accepts a token minted by `chatd token` against the same data directory.

use std::process::{Command, Stdio};

use chatd_protocol::ServerMessage;
use chatd_test_harness::ws_client::WsClient;

const BIN: &str = env!("CARGO_BIN_EXE_chatd");

fn chatd(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("XDG_DATA_HOME", dir)
        .env_remove("CHATD__SERVER__LISTEN")
        .output()
        .unwrap()
}

#[test]
fn check_config_reports_the_first_problem() {
    let dir = tempfile::tempdir().unwrap();
    let ok = chatd(dir.path(), &["check-config"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    std::fs::write(
        dir.path().join("bad.toml"),
        "[server]\nlisten = \"not an address\"\n",
    )
    .unwrap();
    let bad = chatd(dir.path(), &["check-config", "--config", "bad.toml"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("listen"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    std::fs::write(dir.path().join("typo.toml"), "[llm]\nprovder = \"x\"\n").unwrap();
    let typo = chatd(dir.path(), &["check-config", "--config", "typo.toml"]);
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("provder"));

    // The pipeline's instructions and the model catalog are checked too.
    std::fs::write(dir.path().join("prompts.yml"), "prompts: {}\n").unwrap();
    std::fs::write(
        dir.path().join("pipeline.toml"),
        "[pipeline]\ninstructions_file = \"prompts.yml\"\n",
    )
    .unwrap();
    let prompts = chatd(dir.path(), &["check-config", "--config", "pipeline.toml"]);
    assert!(!prompts.status.success());
    assert!(
        String::from_utf8_lossy(&prompts.stderr).contains("base_ethics"),
        "{}",
        String::from_utf8_lossy(&prompts.stderr)
    );
    std::fs::write(
        dir.path().join("models.toml"),
        "[models]\nmain = \"nope\"\n[[models.catalog]]\nid = \"small\"\ncontext_window = 8000\n",
    )
    .unwrap();
    let models = chatd(dir.path(), &["check-config", "--config", "models.toml"]);
    assert!(!models.status.success());
    assert!(
        String::from_utf8_lossy(&models.stderr).contains("models.main"),
        "{}",
        String::from_utf8_lossy(&models.stderr)
    );
    std::fs::write(
        dir.path().join("kv.toml"),
        "[llm]\napi_key_vault = \"secret-without-path\"\n",
    )
    .unwrap();
    let kv = chatd(dir.path(), &["check-config", "--config", "kv.toml"]);
    assert!(!kv.status.success());
    assert!(String::from_utf8_lossy(&kv.stderr).contains("MOUNT/PATH#FIELD"));

    let env = Command::new(BIN)
        .arg("check-config")
        .current_dir(dir.path())
        .env("CHATD__SERVER__LISTEN", "0.0.0.0:9100")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&env.stdout).contains("0.0.0.0:9100"));
    let env_bad = Command::new(BIN)
        .arg("check-config")
        .current_dir(dir.path())
        .env("CHATD__SERVER__MAX_FRAME_BYTES", "12")
        .output()
        .unwrap();
    assert!(!env_bad.status.success());
    assert!(String::from_utf8_lossy(&env_bad.stderr).contains("server.max_frame_bytes"));
    let links_bad = Command::new(BIN)
        .arg("check-config")
        .current_dir(dir.path())
        .env(
            "CHATD__LINKS__SEARCH_URL_TEMPLATE",
            "https://search.example/?q=",
        )
        .output()
        .unwrap();
    assert!(!links_bad.status.success());
    assert!(String::from_utf8_lossy(&links_bad.stderr).contains("links.search_url_template"));
    let cluster_unix = Command::new(BIN)
        .arg("check-config")
        .current_dir(dir.path())
        .env("CHATD__CACHE__BACKEND", "redis")
        .env("CHATD__CACHE__REDIS_CLUSTER", "true")
        .env("CHATD__CACHE__REDIS_URL", "unix:///run/redis.sock")
        .output()
        .unwrap();
    assert!(!cluster_unix.status.success());
    assert!(String::from_utf8_lossy(&cluster_unix.stderr).contains("cache.redis_cluster"));
}

#[tokio::test]
async fn serve_on_embedded_defaults_accepts_a_cli_token() {
    let dir = tempfile::tempdir().unwrap();
    let port = chatd_test_harness::free_port();
    let listen = format!("127.0.0.1:{port}");
    let token = chatd(dir.path(), &["token", "--user", "alice", "--ttl", "10m"]);
    assert!(token.status.success());
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    // The data directory is the user's (XDG_DATA_HOME here), whatever the working directory.
    let secret = dir.path().join("chatd").join("token_secret");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    let elsewhere = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .current_dir(elsewhere.path())
        .env("XDG_DATA_HOME", dir.path())
        .env("CHATD__SERVER__LISTEN", &listen)
        .env("CHATD__LLM__SIMULATED_PACE", "1ms")
        // The simulated answer holds a public link; tests make no outside requests.
        .env("CHATD__LINKS__ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait for the loud embedded-mode line: the server is up once it logged its address.
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let mut embedded_line = false;
    loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
            .expect("server did not start")
            .unwrap()
            .expect("server exited");
        embedded_line |= line.contains("EMBEDDED MODE");
        if line.contains("chatd listening") {
            break;
        }
    }
    assert!(embedded_line, "embedded mode must be announced");
    let mut ws = WsClient::connect(&format!("ws://{listen}/v1/ws?token={token}"))
        .await
        .unwrap();
    ws.send(&crate::support::user_message("c1", "m1", "hi"))
        .await;
    let (frames, last) = crate::support::collect_answer(&mut ws).await;
    assert!(last.full_content_so_far.contains("simulated"));
    // The simulated model plays every pipeline stage: a title on the first message...
    let title = frames.iter().find_map(|f| match f {
        ServerMessage::PreprocessingStep(s)
            if s.step == chatd_protocol::PreprocessingStepKind::TitleGenerated =>
        {
            Some(s.clone())
        }
        _ => None,
    });
    let title = title.expect("a title_generated step");
    assert!(!title.skipped, "{title:?}");
    // ...then typing ends and postprocessing follows the final frame.
    assert!(matches!(ws.recv().await, ServerMessage::AiTypingEnded(_)));
    match ws.recv().await {
        ServerMessage::PostProcessingCompleted(p) => {
            assert_eq!(p.follow_up_request_suggestions.len(), 6);
            assert_eq!(p.new_chat_request_suggestions.len(), 6);
        }
        other => panic!("expected post_processing_completed, got {other:?}"),
    }
    ws.send_json(serde_json::json!({"type": "ping"})).await;
    assert!(matches!(ws.recv().await, ServerMessage::Pong(_)));

    // SIGTERM: the server tells the device, closes the socket with 1012 and exits cleanly.
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(ws.expect_close().await.0, 1012);
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}
