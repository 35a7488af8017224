//! A real third-party MCP server from npm, `@modelcontextprotocol/server-everything`
//! (scripts/test installs it into the test cache beside playwright-core), as an app over
//! stdio and over streamable HTTP: its tools listed as skills, a call with two requests
//! answered and grouped by id, its text reaching the model as checked external text.

use std::path::PathBuf;
use std::time::Duration;

use chatd_test_harness::fake_llm::FakeLlm;
use chatd_test_harness::process::{find_binary, port_open, wait_until};
use serde_json::json;

use crate::skills::{call, calls, offer, text, tool_result};
use crate::support::{TestApp, collect_answer, spawn_app, use_llm, user_message};

/// The package's entry point in the test cache; missing is a failure, never a skip.
fn everything() -> PathBuf {
    let dir = std::env::var_os("CHATD_PLAYWRIGHT_DIR").map(PathBuf::from).unwrap_or_else(|| {
        panic!("CHATD_PLAYWRIGHT_DIR is not set: run the tests with scripts/test, which installs @modelcontextprotocol/server-everything")
    });
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "{} is missing (scripts/test installs it)",
        entry.display()
    );
    entry
}

/// chatd with the app `everything` declared by `mcp` (YAML), its tools listed.
async fn start(
    mcp: &str,
    edit: impl FnOnce(&mut chatd::config::Config),
) -> (FakeLlm, TestApp, tempfile::TempDir) {
    let apps = tempfile::tempdir().unwrap();
    let manifest = format!("id: everything\nname: Everything\nmcp:\n{mcp}");
    std::fs::write(apps.path().join("everything.yml"), manifest).unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.timeout = Duration::from_secs(20);
        edit(c);
    })
    .await;
    let skills = app.state.skills.clone();
    let mut published = skills.published();
    let listed = published.wait_for(|_| {
        use chatd::pipeline::tools::ToolRunner;
        let ids: Vec<String> = skills.skills().into_iter().map(|s| s.id).collect();
        ["everything-echo", "everything-get_sum"]
            .iter()
            .all(|want| ids.iter().any(|id| id == want))
    });
    tokio::time::timeout(Duration::from_secs(60), listed)
        .await
        .expect("server-everything's tools were not listed within 60 s (see chatd's log)")
        .unwrap();
    (fake, app, apps)
}

/// One turn calls `echo` with two requests and `get-sum` once; checks what the model saw.
async fn a_turn_with(mcp: &str) {
    let (fake, app, _apps) = start(mcp, |_| {}).await;
    offer(&fake, &["everything-echo", "everything-get_sum"]);
    fake.push(calls(vec![
        call(
            "e1",
            "everything-echo",
            json!([{"id": 1, "message": "first kiwi"}, {"id": 2, "message": "second kiwi"}]),
        ),
        call(
            "s1",
            "everything-get_sum",
            json!([{"id": 1, "a": 2, "b": 40}]),
        ),
    ]));
    fake.push(text("Done."));
    let mut ws = app.connect_showing("alice", "chat-everything").await;
    ws.send(&user_message("chat-everything", "m1", "go")).await;
    collect_answer(&mut ws).await;

    let main = &fake.requests()[1];
    let echo = tool_result(main, "e1");
    let groups = echo["results"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{echo}");
    for (group, word) in groups.iter().zip(["first kiwi", "second kiwi"]) {
        let said = group["results"][0]["text"].as_str().unwrap();
        assert!(said.contains(&format!("Echo: {word}")), "{said}");
    }
    assert_eq!(groups[0]["id"], 1);
    assert_eq!(groups[1]["id"], 2);
    let sum = tool_result(main, "s1");
    let said = sum["results"][0]["results"][0]["text"].as_str().unwrap();
    assert!(said.contains("42"), "{said}");
}

#[tokio::test]
async fn server_everything_over_stdio_is_an_app() {
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let mcp = format!(
        "  command: [\"{}\", \"{}\", \"stdio\"]\n",
        node.display(),
        everything().display()
    );
    a_turn_with(&mcp).await;
}

#[tokio::test]
async fn server_everything_over_streamable_http_is_an_app() {
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let port = chatd_test_harness::free_port();
    let _server = tokio::process::Command::new(node)
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("server-everything over HTTP", || port_open(port))
        .await
        .unwrap();
    a_turn_with(&format!("  url: \"http://127.0.0.1:{port}/mcp\"\n")).await;
}

/// A stdio server's environment may come from Vault/OpenBao KV v2 (`{vault: MOUNT/PATH#FIELD}`,
/// read with the key service's address and token when the server starts).
#[tokio::test]
async fn an_mcp_servers_environment_comes_from_vault() {
    let bao = chatd_test_harness::openbao::OpenBao::start().await.unwrap();
    bao.http(
        "POST",
        "/v1/secret/data/mcp/everything",
        Some(json!({"data": {"token": "tok-from-vault-7f3a"}})),
    )
    .await
    .unwrap();
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let mcp = format!(
        "  command: [\"{}\", \"{}\", \"stdio\"]\n  env: {{EVERYTHING_TOKEN: {{vault: \"secret/mcp/everything#token\"}}}}\n",
        node.display(),
        everything().display()
    );
    let (fake, app, _apps) = start(&mcp, |c| {
        c.keys.vault_addr = bao.addr();
        c.keys.vault_token = Some(bao.root_token().to_string().into());
    })
    .await;
    offer(&fake, &["everything-get_env"]);
    fake.push(calls(vec![call(
        "g1",
        "everything-get_env",
        json!([{"id": 1}]),
    )]));
    fake.push(text("Done."));
    let mut ws = app.connect_showing("alice", "chat-vault-env").await;
    ws.send(&user_message("chat-vault-env", "m1", "go")).await;
    collect_answer(&mut ws).await;
    let env = tool_result(&fake.requests()[1], "g1");
    let said = env["results"][0]["results"][0]["text"].as_str().unwrap();
    assert!(said.contains("tok-from-vault-7f3a"), "{said}");
}
