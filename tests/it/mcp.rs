//! MCP servers as apps, end to end: real MCP servers (the official Python SDK's, run from
//! `tests/mcp/fixture_server.py`, and PyPI's `mcp-server-time`) started by chatd over stdio,
//! their tools offered to the fake model as skills, their output through the privilege
//! separation, cancellation, progress and a crash.

use std::path::PathBuf;
use std::time::Duration;

use chatd_protocol::{ServerMessage, SkillStatus};
use chatd_test_harness::fake_llm::FakeLlm;
use chatd_test_harness::process::wait_until;
use chatd_test_harness::ws_client::WsClient;
use serde_json::json;

use crate::skills::{call, calls, cancel_skill, offer, status, text, tool_result};
use crate::support::{TestApp, collect_answer, spawn_app, use_llm, user_message};

/// The virtual environment scripts/test installs the MCP SDK and `mcp-server-time` into.
fn venv() -> PathBuf {
    let dir = std::env::var_os("CHATD_MCP_VENV").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "CHATD_MCP_VENV is not set: run the tests with scripts/test, which installs the MCP \
             SDK and mcp-server-time into a virtual environment"
        )
    });
    for tool in ["python", "mcp-server-time"] {
        assert!(
            dir.join("bin").join(tool).exists(),
            "{tool} is missing from {} (scripts/test installs it)",
            dir.display()
        );
    }
    dir
}

struct Mcp {
    fake: FakeLlm,
    app: TestApp,
    markers: tempfile::TempDir,
    _apps: tempfile::TempDir,
}

async fn start() -> Mcp {
    let venv = venv();
    let python = venv.join("bin/python");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixture_server.py");
    let markers = tempfile::tempdir().unwrap();
    let apps = tempfile::tempdir().unwrap();
    let fixture_yaml = format!(
        r#"
id: fixture
name: Fixture
mcp:
  command: ["{python}", "{fixture}"]
  env: {{CHATD_MCP_MARKERS: "{markers}"}}
  tools:
    weather:
      output:
        mode: template
        agent_data:
          temperature_c: {{type: number}}
        external_text: [city, summary]
        user_content: [text]
focus_modes:
  - id: forecast
    title: Forecast
    instruction: Answer with the weather tool.
    tools: [fixture-weather]
"#,
        python = python.display(),
        fixture = fixture.display(),
        markers = markers.path().display(),
    );
    std::fs::write(apps.path().join("fixture.yml"), fixture_yaml).unwrap();
    let time_yaml = format!(
        r#"
id: time
name: Time
mcp:
  command: ["{bin}", "--local-timezone", "UTC"]
  start: lazy
"#,
        bin = venv.join("bin/mcp-server-time").display()
    );
    std::fs::write(apps.path().join("time.yml"), time_yaml).unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.timeout = Duration::from_secs(20);
        c.skills.retry_delay = Duration::from_millis(10);
    })
    .await;
    // Both servers listed their tools.
    let skills = app.state.skills.clone();
    let mut published = skills.published();
    let listed = published.wait_for(|_| {
        use chatd::pipeline::tools::ToolRunner;
        let ids: Vec<String> = skills.skills().into_iter().map(|s| s.id).collect();
        ["fixture-weather", "fixture-slow", "time-get_current_time"]
            .iter()
            .all(|want| ids.iter().any(|id| id == want))
    });
    // Bounded so a server that cannot start fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(60), listed)
        .await
        .expect("the MCP servers' tools were not listed within 60 s (see chatd's log)")
        .unwrap();
    Mcp {
        fake,
        app,
        markers,
        _apps: apps,
    }
}

async fn turn(
    m: &Mcp,
    chat: &str,
    skills: &[&str],
    call_list: Vec<chatd_test_harness::fake_llm::ToolCall>,
) -> WsClient {
    offer(&m.fake, skills);
    m.fake.push(calls(call_list));
    m.fake.push(text("Done."));
    let mut ws = m.app.connect_showing("alice", chat).await;
    ws.send(&user_message(chat, "m1", "go")).await;
    ws
}

#[tokio::test]
async fn mcp_tools_are_skills_behind_the_privilege_separation() {
    let m = start().await;
    let mut ws = turn(
        &m,
        "chat-mcp",
        &["fixture-weather", "fixture-note", "time-get_current_time"],
        vec![
            call(
                "w1",
                "fixture-weather",
                json!([{"id": 1, "city": "Oslo"}, {"id": 2, "city": "Rome"}]),
            ),
            call("n1", "fixture-note", json!([{"text": "hello"}])),
            call("t1", "time-get_current_time", json!([{"timezone": "UTC"}])),
        ],
    )
    .await;
    let (frames, _) = collect_answer(&mut ws).await;
    let main = &m.fake.requests()[1];
    let sent = serde_json::to_string(main).unwrap();
    assert!(!sent.contains("PWNED"), "the injection reached the model");

    // Declared: the number as agent data, the texts checked, results grouped by id.
    let weather = tool_result(main, "w1");
    let groups = weather["results"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    let oslo = &groups[0]["results"][0];
    assert_eq!(groups[0]["id"], 1);
    assert_eq!(oslo["temperature_c"], 21.5);
    assert_eq!(oslo["city"], "Oslo");
    assert!(oslo["summary"].as_str().unwrap().contains("Sunny in Oslo"));
    assert!(
        oslo.get("text").is_none(),
        "user_content stays with the user"
    );
    // Undeclared: its text only, checked.
    let note = tool_result(main, "n1");
    let noted = note["results"][0]["results"][0]["text"].as_str().unwrap();
    assert!(noted.contains("Noted: hello"), "{noted}");
    // A real third-party server (lazy: started by this call).
    let time = tool_result(main, "t1");
    let now = time["results"][0]["results"][0]["text"].as_str().unwrap();
    assert!(now.contains("UTC") && now.contains("datetime"), "{now}");

    // The user's embeds hold what the tool sent, the injection included, flagged.
    let embeds: Vec<_> = frames
        .iter()
        .filter_map(|f| match f {
            ServerMessage::SendEmbedData(e) => Some(e),
            _ => None,
        })
        .collect();
    assert!(
        embeds
            .iter()
            .any(|e| e.content.as_deref().is_some_and(|c| c.contains("PWNED")))
    );
}

#[tokio::test]
async fn a_cancelled_mcp_call_tells_the_server_and_progress_reaches_the_user() {
    let m = start().await;
    let mut ws = turn(
        &m,
        "chat-slow",
        &["fixture-slow"],
        vec![call("s1", "fixture-slow", json!([{"steps": 2}]))],
    )
    .await;
    // Both progress notifications become the skill's status.
    let progressed = ws
        .recv_until(|f| match f {
            ServerMessage::SkillExecutionStatus(s)
                if s.status == SkillStatus::Processing && s.preview_data["progress"] == 2.0 =>
            {
                Some(s.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(progressed.preview_data["total"], 2.0);
    assert_eq!(progressed.preview_data["progress_message"], "step 2");
    cancel_skill(&mut ws, &progressed.skill_task_id).await;
    status(&mut ws, SkillStatus::Cancelled).await;
    collect_answer(&mut ws).await;
    // The server was told (`notifications/cancelled`): its handler was cancelled.
    let marker = m.markers.path().join("cancelled-0");
    wait_until("the MCP server's cancellation", || {
        let marker = marker.clone();
        async move { marker.exists() }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_crashed_or_failing_mcp_server_gives_a_typed_error_and_comes_back() {
    let m = start().await;
    let mut ws = turn(
        &m,
        "chat-crash",
        &["fixture-crash"],
        vec![call("c1", "fixture-crash", json!([{}]))],
    )
    .await;
    let (_, last) = collect_answer(&mut ws).await;
    assert!(
        last.full_content_so_far.ends_with("Done."),
        "the answer goes on: {}",
        last.full_content_so_far
    );
    let crashed = tool_result(&m.fake.requests()[1], "c1");
    assert!(
        crashed["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("MCP server stopped"),
        "{crashed}"
    );

    // The next call starts the server again; a tool error is typed, its text withheld.
    let mut ws = turn(
        &m,
        "chat-after",
        &["fixture-weather", "fixture-fail"],
        vec![
            call("w2", "fixture-weather", json!([{"city": "Oslo"}])),
            call("f1", "fixture-fail", json!([{}])),
        ],
    )
    .await;
    collect_answer(&mut ws).await;
    let main = &m.fake.requests()[3];
    let again = tool_result(main, "w2");
    assert_eq!(again["results"][0]["results"][0]["temperature_c"], 21.5);
    let failed = tool_result(main, "f1");
    let error = failed["results"][0]["error"].as_str().unwrap();
    assert!(error.contains("reported an error"), "{failed}");
    assert!(
        !serde_json::to_string(main)
            .unwrap()
            .contains("secret detail")
    );
}

/// The fixture over streamable HTTP (a server chatd does not start): its tools are skills
/// all the same, with the manifest's headers on every request.
#[tokio::test]
async fn an_mcp_server_over_streamable_http_is_an_app_too() {
    let venv = venv();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixture_server.py");
    let port = chatd_test_harness::free_port();
    let markers = tempfile::tempdir().unwrap();
    let _server = tokio::process::Command::new(venv.join("bin/python"))
        .arg(&fixture)
        .args(["http", &port.to_string()])
        .env("CHATD_MCP_MARKERS", markers.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("the HTTP MCP fixture", || {
        chatd_test_harness::process::port_open(port)
    })
    .await
    .unwrap();
    let apps = tempfile::tempdir().unwrap();
    std::fs::write(
        apps.path().join("remote.yml"),
        format!(
            "id: remote\nname: Remote\nmcp:\n  url: http://127.0.0.1:{port}/mcp\n  headers: {{X-Test: {{env: PATH}}}}\n"
        ),
    )
    .unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
    })
    .await;
    let skills = app.state.skills.clone();
    let mut published = skills.published();
    let listed = published.wait_for(|_| {
        use chatd::pipeline::tools::ToolRunner;
        skills.skills().iter().any(|s| s.id == "remote-note")
    });
    tokio::time::timeout(Duration::from_secs(60), listed)
        .await
        .expect("the HTTP server's tools were not listed within 60 s")
        .unwrap();
    offer(&fake, &["remote-note"]);
    fake.push(calls(vec![call(
        "n1",
        "remote-note",
        json!([{"text": "over http"}]),
    )]));
    fake.push(text("Done."));
    let mut ws = app.connect_showing("alice", "chat-http").await;
    ws.send(&user_message("chat-http", "m1", "go")).await;
    collect_answer(&mut ws).await;
    let note = tool_result(&fake.requests()[1], "n1");
    let noted = note["results"][0]["results"][0]["text"].as_str().unwrap();
    assert!(noted.contains("Noted: over http"), "{noted}");
    assert!(!noted.contains("PWNED"));
}

/// `chatd lint-skills --start-mcp` starts each MCP app's server, lists its tools and reads
/// them as chatd would offer them; a tool the manifest declares that the server does not
/// list (a typo that would leave the declaration unused) is refused.
#[tokio::test]
async fn lint_skills_starts_mcp_servers_and_checks_their_tools() {
    let bin = venv().join("bin/mcp-server-time");
    let lint = |yaml: String| async move {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("time.yml"), yaml).unwrap();
        tokio::process::Command::new(env!("CARGO_BIN_EXE_chatd"))
            .arg("lint-skills")
            .arg("--start-mcp")
            .arg(dir.path())
            .output()
            .await
            .unwrap()
    };
    let manifest = |tools: &str| {
        format!(
            "id: time\nname: Time\nmcp:\n  command: [\"{}\", \"--local-timezone\", \"UTC\"]\n{tools}",
            bin.display()
        )
    };
    let ok = lint(manifest("")).await;
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        stdout.contains("mcp app `time`: 2 tools offered"),
        "{stdout}"
    );
    let typo = lint(manifest(
        "  tools:\n    get_curent_time: {disabled: true}\n",
    ))
    .await;
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(!typo.status.success(), "a misnamed tool passed");
    assert!(
        stderr.contains("declares tool `get_curent_time`, which the server does not list"),
        "{stderr}"
    );
}

/// A focus mode may offer an MCP app's tools: while it is active the tool is offered to the
/// model without preprocessing choosing it (the lint takes MCP tool names on trust; the
/// server lists them when it runs).
#[tokio::test]
async fn a_focus_mode_offers_an_mcp_tool() {
    let m = start().await;
    let chat = "chat-mcp-focus";
    let mut ws = m.app.connect_showing("alice", chat).await;
    // The tools of the main call that answered `text` (not preprocessing's or
    // postprocessing's: those force their own function).
    let offered = |m: &Mcp, text: &str| -> Vec<String> {
        let requests = m.fake.requests();
        let main = requests
            .iter()
            .rev()
            .find(|r| {
                r.get("tool_choice").is_none_or(|c| c == "auto")
                    && serde_json::to_string(&r["messages"])
                        .unwrap()
                        .contains(text)
            })
            .expect("a main call");
        let tools = main["tools"].as_array().cloned().unwrap_or_default();
        tools
            .into_iter()
            .filter_map(|t| t["function"]["name"].as_str().map(String::from))
            .collect()
    };
    m.fake.push(text("One."));
    ws.send(&user_message(chat, "m1", "weather?")).await;
    collect_answer(&mut ws).await;
    let first = offered(&m, "weather?");
    assert!(!first.contains(&"fixture-weather".to_string()), "{first:?}");

    ws.send_json(json!({"type": "chat_focus_mode_activate",
        "payload": {"chat_id": chat, "focus_id": "fixture-forecast"}}))
        .await;
    let on = ws
        .recv_until(|f| match f {
            ServerMessage::FocusModeActivated(a) => Some(a.focus_id.clone()),
            _ => None,
        })
        .await;
    assert_eq!(on, "fixture-forecast");
    m.fake.push(text("Two."));
    ws.send(&user_message(chat, "m2", "and now?")).await;
    collect_answer(&mut ws).await;
    let second = offered(&m, "and now?");
    assert!(
        second.contains(&"fixture-weather".to_string()),
        "{second:?}"
    );
}
