//! No log level shows message text, answers or tokens: the binary runs a turn with
//! `CHATD_LOG=trace` (and once with `RUST_LOG=trace`), and its whole log is searched for
//! the user's words, the answer and the session token.

use std::process::Stdio;
use std::time::Duration;

use chatd_test_harness::ws_client::WsClient;

const BIN: &str = env!("CARGO_BIN_EXE_chatd");
/// Words that appear in the message and (the simulated model quotes it) in the answer.
const MARKER: &str = "zebra-quartz-7731";

async fn trace_log_of_one_turn(level_var: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let port = chatd_test_harness::free_port();
    let listen = format!("127.0.0.1:{port}");
    let log_path = dir.path().join("chatd.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .current_dir(dir.path())
        .env_remove("CHATD_LOG")
        .env_remove("RUST_LOG")
        .env(level_var, "trace")
        .env("CHATD__SERVER__LISTEN", &listen)
        // Its own data directory: the user's default one is shared with every other chatd
        // run on the machine (and with this file's other test, running in parallel).
        .env("CHATD__SERVER__DATA_DIR", dir.path())
        .env("CHATD__AUTH__SECRET", "private-logs-secret")
        .env("CHATD__LLM__SIMULATED_PACE", "1ms")
        .env("CHATD__LINKS__ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let health = format!("http://{listen}/healthz");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !reqwest::get(&health)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "chatd did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys = chatd::auth::TokenKeys::from_secret(b"private-logs-secret");
    let user = chatd::auth::UserId::parse("alice").unwrap();
    let token = keys.mint(&user, Duration::from_secs(600)).unwrap();
    let mut ws = WsClient::connect(&format!("ws://{listen}/v1/ws?token={token}"))
        .await
        .unwrap();
    ws.send(&crate::support::user_message(
        "c1",
        "m1",
        &format!("please repeat {MARKER}"),
    ))
    .await;
    let (_, last) = crate::support::collect_answer(&mut ws).await;
    assert!(
        last.full_content_so_far.contains(MARKER),
        "the answer quotes the message, so the check below means something"
    );
    drop(ws);
    child.kill().await.unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("TRACE"), "the log is at trace level");
    assert!(!text.contains(MARKER), "message or answer text in the log");
    assert!(!text.contains(&token), "the session token in the log");
    text
}

#[tokio::test]
async fn chatd_log_trace_holds_no_message_text_or_token() {
    trace_log_of_one_turn("CHATD_LOG").await;
}

#[tokio::test]
async fn rust_log_is_honoured_too() {
    trace_log_of_one_turn("RUST_LOG").await;
}
