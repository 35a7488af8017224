//! The demo page and the reference client in a real browser: headless Chromium (Debian's)
//! driven by `playwright-core` (`tests/browser/flows.mjs`, run with `node`) against a real
//! chatd process with redis-server, the fake LLM and a fake skill provider. The script
//! prints `@need <action>` when the servers must act (release a stalled answer, restart
//! chatd with an empty cache, check what the model saw or how often it was asked, scan for
//! plaintext) and waits for `ok`; this test does it and answers. A missing node, Chromium or
//! playwright-core fails.
//!
//! Also: the page's security headers, the development sign-in and its origin rule.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatd_test_harness::chatd_proc::ChatdProcess;
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply, ToolCall, function_reply};
use chatd_test_harness::fake_skill::{FakeSkill, SkillReply};
use chatd_test_harness::process::find_binary;
use chatd_test_harness::redis::RedisServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::skills::{call, calls, manifests};
use crate::support::conversation;

const BIN: &str = env!("CARGO_BIN_EXE_chatd");

/// The answers the fake model gave (raw markdown), in order, and the gates of stalled ones.
#[derive(Default)]
struct Script {
    answers: Mutex<Vec<String>>,
    gates: Mutex<VecDeque<Gate>>,
    n: AtomicUsize,
    /// A page that answers 404 (the link repair replaces links to it).
    broken_link: String,
}

/// The text of the last user message of a model request.
fn last_user(request: &Value) -> String {
    conversation(request)
        .into_iter()
        .rev()
        .find(|(role, _)| role == "user")
        .map(|(_, c)| c)
        .unwrap_or_default()
}

/// The model's reasoning before a "think" answer (never stored or cached in plaintext).
const REASONING: &str = "I weigh the kiwi carefully. It looks ripe enough.";
/// The routine the model starts for "routine", and its question.
const ROUTINE: &str = r#"emit("status", "checking the fruit bowl");
let fruit = ask_user("Which fruit should I buy?");
emit("message", `Buying ${fruit} today.`);
fruit"#;

/// Every answer has two paragraphs (the chunker sends the first on its own); a message
/// saying "stall" holds the answer after the first until the test releases it; "find
/// slowly" calls the slow skill first; "link" answers with a link to a page that is gone;
/// "think" reasons first; "fruit routine" starts the routine `travel-ask`; "my trip" proposes a
/// travel entry.
fn scripted(script: &Arc<Script>, request: &Value) -> Reply {
    let user = last_user(request);
    let has_tool = request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let after_tool = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    if user.contains("find slowly") && !has_tool {
        return calls(vec![call(
            "c1",
            "demo-find",
            json!([{"query": "ripest mango"}]),
        )]);
    }
    if user.contains("fruit routine") && !after_tool {
        return calls(vec![ToolCall {
            id: "r1".into(),
            name: "travel-ask".into(),
            arguments: "{}".into(),
        }]);
    }
    if user.contains("my trip") && !after_tool {
        return calls(vec![ToolCall {
            id: "p1".into(),
            name: "travel-settings_memories_add_trips".into(),
            arguments: json!({"entry": {"destination": "Kyoto"}}).to_string(),
        }]);
    }
    let n = script.n.fetch_add(1, Ordering::SeqCst);
    let (one, two) = if user.contains("link") {
        (
            format!(
                "Answer {n} starts with [a page that is gone]({}).\n\n",
                script.broken_link
            ),
            format!("Answer {n} ends after the link."),
        )
    } else if user.contains("find slowly") {
        (
            format!("Answer {n} starts with a **mango** fact.\n\n"),
            format!("Answer {n} ends here, without the slow search."),
        )
    } else {
        (
            format!("Answer {n} starts with a **kiwi** fact and `code`.\n\n"),
            format!("Answer {n} ends with a list:\n\n- green\n- brown"),
        )
    };
    script.answers.lock().unwrap().push(format!("{one}{two}"));
    if user.to_lowercase().contains("think") {
        return Reply::Reasoning {
            field: "reasoning_content",
            reasoning: vec![
                "I weigh the kiwi carefully. ".into(),
                "It looks ripe enough.".into(),
            ],
            then: Box::new(Reply::Text {
                chunks: vec![one, two],
                delay: Duration::ZERO,
                usage: None,
            }),
        };
    }
    if user.to_lowercase().contains("stall") {
        let gate = Gate::new();
        script.gates.lock().unwrap().push_back(gate.clone());
        return Reply::Stall {
            chunks: vec![one],
            gate,
            then: Box::new(Reply::Text {
                chunks: vec![two],
                delay: Duration::ZERO,
                usage: None,
            }),
        };
    }
    Reply::Text {
        chunks: vec![one, two],
        delay: Duration::ZERO,
        usage: None,
    }
}

const TITLE: &str = "Kiwis and other fruit";
const SUGGESTION: &str = "Ask about kiwi seeds";

fn stages(fake: &FakeLlm) {
    fake.set_stage_responder(|name, request| {
        let text = request.to_string();
        match name {
            "preprocess" => {
                let skills = match () {
                    _ if text.contains("find slowly") => json!(["demo-find"]),
                    _ if text.contains("fruit routine") => json!(["travel-ask"]),
                    _ => json!([]),
                };
                let trip = match text.contains("my trip") {
                    true => json!(["travel:trips"]),
                    false => json!([]),
                };
                Some(function_reply(
                    "preprocess",
                    json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                        "category": "general_knowledge", "complexity": "simple", "title": TITLE,
                        "icon_names": ["apple"], "relevant_app_skills": skills,
                        "relevant_app_settings_and_memories": trip,
                        "relevant_new_app_settings_and_memories": trip}),
                ))
            }
            "choose_settings_memories_categories" => Some(function_reply(
                name,
                json!({"categories": ["travel:trips"]}),
            )),
            "suggest_settings_memory_entry" => Some(function_reply(
                name,
                json!({"suggested_title": "Kyoto in Autumn", "item_value": {"destination": "Kyoto"}}),
            )),
            "postprocess" => Some(function_reply(
                "postprocess",
                json!({"follow_up_request_suggestions": (1..=6).map(|i| format!("{SUGGESTION} {i}")).collect::<Vec<_>>(),
                    "new_chat_request_suggestions": (1..=6).map(|i| format!("New fruit idea {i}")).collect::<Vec<_>>(),
                    "chat_summary": "The user asked about kiwis.", "chat_tags": ["kiwi"],
                    "harmful_response": 0, "topic_shift": false}),
            )),
            _ => None,
        }
    });
}

/// The bytes of every file under `dir` (the SQLite store with its WAL).
fn files_under(dir: &std::path::Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
}

/// The parts of a text worth searching for: each line of at least 12 characters, without
/// markdown markers (the store would hold them as typed).
fn needles(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.len() >= 12)
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_demo_page_in_a_real_browser() {
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let redis = RedisServer::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let skill = FakeSkill::start().await.unwrap();
    skill.respond(|seen| match seen.path.starts_with("/page/") {
        true => SkillReply::Status {
            status: 404,
            retry_after: None,
        },
        false => SkillReply::Hang,
    });
    let apps = manifests(&skill);
    // Beside the demo and web apps: a focus mode (docs), settings and memories and a
    // routine that asks the user (travel).
    let travel = format!(
        "{}routines:\n  - name: ask\n    description: Asks which fruit to buy.\n    arguments: {{type: object, properties: {{}}}}\n",
        include_str!("../../config/apps/travel.yml")
    );
    std::fs::write(
        apps.path().join("docs.yml"),
        include_str!("../../config/apps/docs.yml"),
    )
    .unwrap();
    std::fs::write(apps.path().join("travel.yml"), travel).unwrap();
    std::fs::create_dir(apps.path().join("travel")).unwrap();
    std::fs::write(apps.path().join("travel/ask.rhai"), ROUTINE).unwrap();
    let script = Arc::new(Script {
        broken_link: format!("{}/page/gone", skill.url()),
        ..Script::default()
    });
    let s = script.clone();
    fake.set_responder(move |request| Some(scripted(&s, request)));
    stages(&fake);
    let config = format!(
        r#"
[llm]
provider = "openai_compatible"
base_url = "{llm}"
api_key = "unused"
model = "fake-model"

[cache]
backend = "redis"
redis_url = "{redis}"

[links]
enabled = true
allow_private_targets = true
timeout = "5s"

[pipeline]
speculative_main_call = "off"

[skills]
apps_dir = "{apps}"
allow_private_targets = true
timeout = "60s"

[web]
demo = true
dev_login = true
"#,
        llm = fake.base_url(),
        redis = redis.url(),
        apps = apps.path().display(),
    );
    // A short drain, for the flow that shuts chatd down while an answer stalls.
    let grace = [("CHATD__SERVER__SHUTDOWN_GRACE", "2s".to_string())];
    let mut chatd = ChatdProcess::start(std::path::Path::new(BIN), &config, &grace)
        .await
        .unwrap();

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // A picture of the page with the test's answers, in the target directory (the README's
    // pictures come from load-tests/browser/screenshots.mjs, with the simulated model's).
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo.png");
    let mut child = tokio::process::Command::new(node)
        .arg(root.join("tests/browser/flows.mjs"))
        .env("CHATD_URL", chatd.http_url("/"))
        .env("CHATD_SCREENSHOT", &screenshot)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut typed: Vec<String> = Vec::new();
    let mut output = Vec::new();
    let flows = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("{line}");
            output.push(line.clone());
            if let Some(text) = line.strip_prefix("@typed ") {
                typed.push(serde_json::from_str(text).unwrap());
                continue;
            }
            let Some(need) = line.strip_prefix("@need ") else {
                continue;
            };
            let (action, arg) = need.split_once(' ').unwrap_or((need, "null"));
            let arg: Value = serde_json::from_str(arg).unwrap();
            match action {
                "release" => {
                    let gate = script.gates.lock().unwrap().pop_front().unwrap();
                    gate.reached().await;
                    gate.release();
                }
                "asked" => {
                    // The model was asked for this message and its answer stalls.
                    let text = arg.as_str().unwrap();
                    loop {
                        let requests = fake.requests();
                        if requests.iter().any(|r| last_user(r) == text) {
                            break;
                        }
                        fake.wait_for_requests(requests.len() + 1).await;
                    }
                    let gate = script.gates.lock().unwrap().front().cloned().unwrap();
                    gate.reached().await;
                }
                "asked-once" => {
                    let text = arg.as_str().unwrap();
                    let asked = fake
                        .requests()
                        .iter()
                        .filter(|r| last_user(r) == text)
                        .count();
                    assert_eq!(asked, 1, "main requests for {text:?}");
                }
                "forget-stall" => {
                    script.gates.lock().unwrap().pop_front().unwrap();
                }
                "shut-down-and-restart" => {
                    // SIGTERM while an answer stalls: the page is told, the answer ends
                    // interrupted by the shutdown (after `shutdown_grace`), chatd comes back.
                    let status = chatd.terminate().await.unwrap();
                    assert!(status.success(), "chatd's drain exited with {status}");
                    script.gates.lock().unwrap().pop_front().unwrap();
                    chatd.restart().await.unwrap();
                }
                "restart-empty" => {
                    chatd.kill().await;
                    assert_eq!(redis.cli(&["FLUSHALL"]).await.unwrap().trim(), "OK");
                    chatd.restart().await.unwrap();
                }
                "check-context" => {
                    // The model saw the whole chat although the server's cache was empty:
                    // the page re-sent it from IndexedDB.
                    let answers = script.answers.lock().unwrap().clone();
                    let asked: Vec<String> = serde_json::from_value(arg).unwrap();
                    let last = fake.requests().last().cloned().unwrap();
                    let seen = conversation(&last);
                    let want = vec![
                        ("user".to_string(), asked[0].clone()),
                        ("assistant".to_string(), answers[0].clone()),
                        ("user".to_string(), asked[1].clone()),
                        ("assistant".to_string(), answers[1].clone()),
                        ("user".to_string(), asked[2].clone()),
                    ];
                    assert_eq!(seen, want, "the model's context after the restart");
                }
                "skill-in-flight" => {
                    skill
                        .wait_until("the slow skill reached its provider", |k| {
                            k.in_flight() == 1
                        })
                        .await;
                }
                "skill-hung-up" => {
                    skill
                        .wait_until("the provider saw the skill stopped", |k| k.hangups() == 1)
                        .await;
                }
                "scan" => scan(&chatd, &redis, &typed, &script).await,
                other => panic!("the browser script asked for `{other}`"),
            }
            stdin.write_all(b"ok\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(420), flows)
        .await
        .expect("the browser flows did not finish within 420 s");
    let status = child.wait().await.unwrap();
    assert!(
        status.success(),
        "the browser script failed ({status}); chatd log:\n{}",
        chatd.log_text()
    );
    assert_eq!(
        output.last().map(String::as_str),
        Some("browser flows passed")
    );
}

/// Nothing typed (the passphrase included), answered, titled or suggested is in the store or
/// Redis in plaintext, nor in chatd's log.
async fn scan(chatd: &ChatdProcess, redis: &RedisServer, typed: &[String], script: &Script) {
    let mut secrets: Vec<String> = typed.to_vec();
    for answer in script.answers.lock().unwrap().iter() {
        secrets.extend(needles(answer));
    }
    secrets.push(TITLE.into());
    secrets.push(format!("{SUGGESTION} 1"));
    secrets.push("The user asked about kiwis.".into());
    secrets.push(REASONING.split(". ").next().unwrap().into());
    assert!(secrets.len() > 10, "too little to search for: {secrets:?}");
    let mut places = files_under(&chatd.data_dir());
    for (key, value) in redis.dump().await.unwrap() {
        places.push((PathBuf::from(format!("redis:{key}")), value));
    }
    places.push((PathBuf::from("chatd.log"), chatd.log_text().into_bytes()));
    assert!(
        places
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains("chatd.db"))
    );
    assert!(
        places
            .iter()
            .any(|(p, _)| p.to_string_lossy().starts_with("redis:"))
    );
    for (place, bytes) in &places {
        for secret in &secrets {
            assert!(
                !contains(bytes, secret),
                "plaintext {secret:?} found in {}",
                place.display()
            );
        }
    }
}

/// The page and the client carry a Content-Security-Policy without inline script; the
/// development sign-in mints a token in the body (never a URL) and refuses other origins;
/// with the demo on, the WebSocket takes browsers from the server's own origin only.
#[tokio::test]
async fn the_page_is_served_with_its_security_headers() {
    let app = crate::support::spawn_app(|c| {
        c.web.demo = chatd::config::Toggle::On;
        c.web.dev_login = chatd::config::Toggle::On;
    })
    .await;
    let http = reqwest::Client::new();
    for (path, kind) in [
        ("/", "text/html"),
        ("/chatd-client.js", "text/javascript"),
        ("/chatd-client/sync.js", "text/javascript"),
        ("/demo/demo.js", "text/javascript"),
        ("/demo/messages.js", "text/javascript"),
        ("/demo/markdown.js", "text/javascript"),
        ("/demo/sign-in.js", "text/javascript"),
        ("/demo/demo.css", "text/css"),
    ] {
        let res = http.get(app.http_url(path)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
        let h = res.headers();
        assert!(h["content-type"].to_str().unwrap().starts_with(kind));
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"));
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let page = http
        .get(app.http_url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // No inline script: every script is a file of this origin.
    assert!(
        !page.contains("<script>")
            && page.contains(r#"<script type="module" src="/demo/demo.js">"#)
    );
    assert!(chatd::http::web::demo_asset_bytes() < 150 * 1024);
    // Every module the page's scripts import (the client's parts too) is served.
    let mut modules = vec!["/demo/demo.js".to_string()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = modules.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let res = http.get(app.http_url(&path)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path} is imported but not served");
        let text = res.text().await.unwrap();
        let imports = text.lines().map(str::trim_end);
        for line in imports.filter(|l| l.contains(" from '") && l.ends_with("';")) {
            let spec = line.rsplit(['\'', '"']).nth(1).unwrap();
            let base = url::Url::parse(&app.http_url(&path)).unwrap();
            modules.push(base.join(spec).unwrap().path().to_string());
        }
    }
    assert!(seen.len() >= 15, "modules the page loads: {seen:?}");

    let own = format!("http://{}", app.addr);
    let mint = |origin: &str| {
        http.post(app.http_url("/v1/dev/token"))
            .header("origin", origin)
            .json(&json!({"user": "alice"}))
            .send()
    };
    let res = mint(&own).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let body: Value = res.json().await.unwrap();
    let token = body["token"].as_str().unwrap();
    let (user, _) = app.state.auth.verify(token).await.unwrap();
    assert_eq!(user.as_str(), "alice");
    assert_eq!(mint("https://evil.example").await.unwrap().status(), 403);
    let bad = http
        .post(app.http_url("/v1/dev/token"))
        .json(&json!({"user": "no spaces"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);

    // Off by default outside embedded mode, and the demo off in cluster mode.
    let mut config = chatd::config::Config::defaults().unwrap();
    assert!(config.demo_enabled() && config.dev_login_enabled());
    config.cache.backend = chatd::config::CacheBackendKind::Redis;
    assert!(config.demo_enabled() && !config.dev_login_enabled());
    config.cluster.enabled = true;
    assert!(!config.demo_enabled());
}
