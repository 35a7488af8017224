//! The demo page signs in for real outside development mode, in headless Chromium
//! (`tests/browser/sign-in.mjs`): with a real OpenID Connect provider (npm `oidc-provider`,
//! `tests/browser/oidc-idp.mjs`, started here on a free port) by the authorization code flow
//! with PKCE, its ID token then verified by chatd against the provider's JWK set; and with a
//! token pasted from `chatd token` (this test runs the CLI when the script asks). Also the
//! public `GET /v1/auth/config` the page reads, and the page's CSP allowing the provider.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chatd_test_harness::chatd_proc::ChatdProcess;
use chatd_test_harness::fake_llm::{FakeLlm, Reply};
use chatd_test_harness::free_port;
use chatd_test_harness::process::find_binary;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_chatd");
const CLIENT_ID: &str = "chatd-page";

/// The provider on `port`, its redirect URI the page at `chatd` (an origin); ready once it
/// says so.
async fn start_idp(node: &std::path::Path, port: u16, chatd: &str) -> Child {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut idp = Command::new(node)
        .arg(root.join("tests/browser/oidc-idp.mjs"))
        .env("IDP_PORT", port.to_string())
        .env("CHATD_ORIGIN", chatd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the OpenID provider");
    let mut lines = BufReader::new(idp.stdout.take().expect("piped")).lines();
    let ready = async {
        while let Some(line) = lines.next_line().await.expect("the provider's output") {
            if line == "idp ready" {
                return;
            }
        }
        panic!(
            "the OpenID provider ended before it was ready (is oidc-provider installed? scripts/test installs it)"
        );
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("the OpenID provider did not start within 30 s");
    // Its later output is shown with the test's (a closed pipe would end the provider).
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            println!("idp: {line}");
        }
    });
    idp
}

#[tokio::test]
async fn the_page_signs_in_with_an_openid_provider_and_with_a_pasted_token() {
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_default(Reply::Text {
        chunks: vec!["A signed-in answer.".into()],
        delay: Duration::ZERO,
        usage: None,
    });
    let idp_port = free_port();
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let config = format!(
        r#"
[llm]
provider = "openai_compatible"
base_url = "{llm}"
api_key = "unused"
model = "fake-model"

[auth]
jwks_url = "{issuer}/jwks"
issuer = "{issuer}"
audience = "{CLIENT_ID}"
page_client_id = "{CLIENT_ID}"

[web]
demo = true
dev_login = false
"#,
        llm = fake.base_url(),
    );
    // The provider first (chatd fetches its keys at start), told where the page will be.
    let chatd_port = free_port();
    let _idp = start_idp(&node, idp_port, &format!("http://127.0.0.1:{chatd_port}")).await;
    let chatd = ChatdProcess::start_at(std::path::Path::new(BIN), chatd_port, &config, &[])
        .await
        .unwrap();

    // What the page reads first: no development sign-in, the provider and the page's client.
    let http = reqwest::Client::new();
    let ways: Value = http
        .get(chatd.http_url("/v1/auth/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ways,
        json!({"dev_login": false, "oidc": {"issuer": issuer, "client_id": CLIENT_ID,
            "scopes": "openid", "user_claim": "sub"}})
    );
    let page = http.get(chatd.http_url("/")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains(&format!("connect-src 'self' {issuer};")),
        "{csp}"
    );
    let dev = http
        .post(chatd.http_url("/v1/dev/token"))
        .json(&json!({"user": "mallory"}))
        .send()
        .await
        .unwrap();
    assert_eq!(dev.status(), 404, "no development sign-in");

    run_flows(&node, &chatd).await;
}

/// Runs the Chromium script, minting a token with the CLI when it asks.
async fn run_flows(node: &std::path::Path, chatd: &ChatdProcess) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let token_file = chatd.data_dir().with_file_name("pasted-token");
    let mut child = Command::new(node)
        .arg(root.join("tests/browser/sign-in.mjs"))
        .env("CHATD_URL", chatd.http_url("/"))
        .env("CHATD_TOKEN_FILE", &token_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut output = Vec::new();
    let flows = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("{line}");
            output.push(line.clone());
            match line.strip_prefix("@need ") {
                Some("token") => {
                    let config = chatd.data_dir().with_file_name("chatd.toml");
                    let out = Command::new(BIN)
                        .args(["token", "--user", "bob", "--config"])
                        .arg(&config)
                        .output()
                        .await
                        .unwrap();
                    assert!(out.status.success(), "chatd token: {out:?}");
                    std::fs::write(&token_file, &out.stdout).unwrap();
                }
                Some(other) => panic!("the sign-in script asked for `{other}`"),
                None => continue,
            }
            stdin.write_all(b"ok\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(180), flows)
        .await
        .expect("the sign-in flows did not finish within 180 s");
    let status = child.wait().await.unwrap();
    assert!(
        status.success(),
        "the sign-in script failed ({status}); chatd log:\n{}",
        chatd.log_text()
    );
    assert_eq!(
        output.last().map(String::as_str),
        Some("sign-in flows passed")
    );
}
