//! Routines end to end: scripts from a manifest directory, the model on the fake LLM, the
//! web and a remote skill on the fake provider. A run asks and resumes across messages,
//! calls a sub-routine with a frame of its own, survives a restart without repeating a
//! model or skill call, is cancelled while waiting and while running, ends with a typed
//! error past its budget, and its frames reach every device in order. The two shipped
//! routines (research, trip planner) run on the fake providers.

use std::time::Duration;

use chatd_protocol::{ChatId, RoutineErrorCode, RoutineOutcome, RunId, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, ToolCall, function_reply};
use chatd_test_harness::fake_skill::{FakeSkill, SkillReply};
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::skills::{calls, offer, text, tool_result};
use crate::support::{
    TestApp, collect_answer, spawn_app, use_llm, user_message, user_message_with,
};

const SCRIPTS: &[(&str, &str)] = &[
    (
        "ask_twice",
        r#"let a = ask_user("First?");
emit("status", `got ${a}`);
let b = ask_user("Second?");
emit("message", `${a} and ${b}`);
#{ a: a, b: b }"#,
    ),
    (
        "outer",
        r#"state.name = "outer";
let inner = run("demo.inner", #{ x: 1 });
emit("message", `outer=${state.name} inner_fresh=${inner.fresh} inner=${inner.mine} answer=${inner.answer}`);
inner"#,
    ),
    (
        "inner",
        r#"let fresh = type_of(state.name) == "()";
state.name = "inner";
let answer = ask_user(`Inner question for ${args.x}?`);
#{ fresh: fresh, mine: state.name, answer: answer }"#,
    ),
    (
        "effects",
        r#"let first = model("Say hello");
let found = skill("demo-find", #{ query: "things" });
let answer = ask_user("Continue?");
let second = model(`Again, ${answer}`);
emit("message", `${first} / ${second} / ${found.results[0].results.len()}`);
#{ first: first, second: second }"#,
    ),
    (
        "spin",
        r#"emit("status", "spinning"); let n = 0; loop { n += 1; }"#,
    ),
    (
        "uses_private",
        r#"let found = skill("demo-private", #{ query: "mine" });
found.results[0].results.len()"#,
    ),
    (
        "chatty",
        r#"emit("status", "one");
emit("information", "two");
emit("message", "three");
emit("error", "four");
"done""#,
    ),
    (
        "slow",
        r#"emit("status", "calling");
let found = skill("demo-find", #{ query: "slow" });
"never""#,
    ),
];

/// A manifest directory: `demo` (a remote skill `find` and the test routines, scripts in
/// `demo/`) and the built-in web app (its routines from the built-in scripts).
pub(crate) fn manifests(skill: &FakeSkill) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut routines = String::new();
    for (name, _) in SCRIPTS {
        routines += &format!(
            "  - name: {name}\n    description: Test routine {name}.\n    arguments: {{type: object, properties: {{}}}}\n"
        );
    }
    let demo = format!(
        r#"
id: demo
name: Demo
skills:
  - id: find
    description: Finds things.
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{http: {{url: "{base}/skill/find", timeout: 5s}}}}
    output:
      mode: template
      child_type: thing
      agent_data:
        rank: {{type: integer}}
      template: "{{count}} things"
  - id: private
    description: Finds the user's own things.
    requires_account: true
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{http: {{url: "{base}/skill/private", timeout: 5s}}}}
    output:
      mode: template
      child_type: thing
      agent_data:
        rank: {{type: integer}}
      template: "{{count}} things"
routines:
{routines}"#,
        base = skill.url()
    );
    std::fs::write(dir.path().join("demo.yml"), demo).unwrap();
    std::fs::create_dir(dir.path().join("demo")).unwrap();
    for (name, script) in SCRIPTS {
        std::fs::write(dir.path().join("demo").join(format!("{name}.rhai")), script).unwrap();
    }
    std::fs::write(
        dir.path().join("web.yml"),
        include_str!("../../config/apps/web.yml"),
    )
    .unwrap();
    dir
}

struct Setup {
    fake: FakeLlm,
    skill: FakeSkill,
    app: TestApp,
    apps: tempfile::TempDir,
}

/// The fake providers' answers: web searches, pages, the remote skill, and every external
/// text called clean by the prompt-injection check.
pub(crate) fn script_providers(fake: &FakeLlm, skill: &FakeSkill) {
    skill.respond(|seen| {
        if seen.path.contains("/web/search") {
            return SkillReply::Json(json!({"web": {"results": [
                {"title": "Guide", "url": format!("https://one.example/{}", seen.query["q"].len()), "description": "A guide."},
                {"title": "More", "url": "https://two.example/", "description": "More."}
            ]}}));
        }
        if seen.path.contains("/page/") {
            return SkillReply::Html(format!(
                "<html><head><title>Page</title></head><body><p>Facts from {}.</p></body></html>",
                seen.path
            ));
        }
        SkillReply::Json(json!({"results": [{"rank": 1}, {"rank": 2}]}))
    });
    // The prompt-injection check calls every external text clean.
    fake.set_stage_responder(|name, _| {
        (name == "report_prompt_injection").then(|| {
            function_reply(
                "report_prompt_injection",
                json!({"score": 0, "injection_strings": []}),
            )
        })
    });
}

async fn setup_with(edit: impl FnOnce(&mut chatd::config::Config)) -> Setup {
    let fake = FakeLlm::start().await.unwrap();
    let skill = FakeSkill::start().await.unwrap();
    script_providers(&fake, &skill);
    let apps = manifests(&skill);
    let (dir, base) = (apps.path().to_path_buf(), skill.url());
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.allow_private_targets = true;
        c.skills.retry_delay = Duration::from_millis(10);
        c.skills.timeout = Duration::from_secs(5);
        c.skills.web_search.base_url = base;
        c.skills.web_search.api_key = Some("brave-key".to_string().into());
        edit(c);
    })
    .await;
    Setup {
        fake,
        skill,
        app,
        apps,
    }
}

impl Setup {
    /// The model calls routine `tool` (then says `after`) for alice's message "go" in
    /// `chat`; the device that sent it, showing the chat.
    async fn start(&self, tool: &str, chat: &str, after: &str) -> WsClient {
        call_routine(&self.fake, tool, json!({}), after);
        let mut ws = self.app.connect_showing("alice", chat).await;
        ws.send(&user_message(chat, "m1", "go")).await;
        ws
    }
}

async fn setup() -> Setup {
    setup_with(|_| {}).await
}

/// The main model calls routine `tool` with `args`, then says `after`.
fn call_routine(fake: &FakeLlm, tool: &str, args: Value, after: &str) {
    offer(fake, &[tool]);
    fake.push(calls(vec![ToolCall {
        id: "r1".into(),
        name: tool.into(),
        arguments: args.to_string(),
    }]));
    fake.push(text(after));
}

fn is_routine(m: &ServerMessage) -> bool {
    matches!(
        m,
        ServerMessage::RoutineStarted(_)
            | ServerMessage::RoutineStatus(_)
            | ServerMessage::RoutineMessage(_)
            | ServerMessage::RoutineInformation(_)
            | ServerMessage::RoutineError(_)
            | ServerMessage::AwaitingUserInput(_)
            | ServerMessage::RoutineFinished(_)
    )
}

/// Routine frames up to the next question or the end: (frames, question or None).
pub(crate) async fn until_pause_or_end(
    ws: &mut WsClient,
) -> (Vec<ServerMessage>, Option<(RunId, String)>) {
    let mut seen = Vec::new();
    loop {
        let m = ws.recv().await;
        if !is_routine(&m) {
            continue;
        }
        seen.push(m.clone());
        match m {
            ServerMessage::AwaitingUserInput(a) => return (seen, Some((a.run_id, a.question))),
            ServerMessage::RoutineFinished(_) => return (seen, None),
            _ => {}
        }
    }
}

/// The run's error frame among `frames`.
fn routine_error(frames: &[ServerMessage]) -> chatd_protocol::RoutineError {
    frames
        .iter()
        .find_map(|f| match f {
            ServerMessage::RoutineError(e) => Some(e.clone()),
            _ => None,
        })
        .expect("a routine_error frame")
}

pub(crate) fn finished(frames: &[ServerMessage]) -> Option<RoutineOutcome> {
    frames.iter().find_map(|f| match f {
        ServerMessage::RoutineFinished(r) => Some(r.outcome),
        _ => None,
    })
}

pub(crate) fn messages(frames: &[ServerMessage]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| match f {
            ServerMessage::RoutineMessage(m) => Some(m.text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_routine_asks_and_resumes_across_two_messages() {
    let s = setup().await;
    call_routine(
        &s.fake,
        "demo-ask_twice",
        json!({}),
        "It asks you two things.",
    );
    let mut ws = s.app.connect_showing("alice", "chat-ask").await;
    ws.send(&user_message("chat-ask", "m1", "start it")).await;
    let (frames, asked) = until_pause_or_end(&mut ws).await;
    assert!(
        matches!(&frames[0], ServerMessage::RoutineStarted(r) if r.routine == "demo.ask_twice")
    );
    let (run, question) = asked.unwrap();
    assert_eq!(question, "First?");
    collect_answer(&mut ws).await;
    let result = tool_result(&s.fake.requests()[1], "r1");
    assert_eq!(result["status"], "awaiting_user_input");
    assert_eq!(result["run_id"], run.as_str());

    let main_calls = s.fake.requests().len();
    ws.send(&user_message("chat-ask", "m2", "red")).await;
    let (frames, asked) = until_pause_or_end(&mut ws).await;
    assert!(
        frames
            .iter()
            .any(|f| matches!(f, ServerMessage::RoutineStatus(t) if t.text == "got red"))
    );
    assert_eq!(asked.unwrap(), (run.clone(), "Second?".to_string()));

    ws.send(&user_message("chat-ask", "m3", "blue")).await;
    let (frames, asked) = until_pause_or_end(&mut ws).await;
    assert!(asked.is_none());
    assert_eq!(messages(&frames), vec!["red and blue".to_string()]);
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
    // The message is the chat's: named by the run and its place in the journal.
    let id = frames
        .iter()
        .find_map(|f| match f {
            ServerMessage::RoutineMessage(m) => Some(m.message_id.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        id.as_str().starts_with(&format!("{}-", run.as_str())),
        "{id:?}"
    );
    // The answers went to the routine, not to the main model.
    assert_eq!(s.fake.requests().len(), main_calls);
    // The run is gone: the next message is the model's again, and the model sees the
    // routine's message in the chat's history.
    offer(&s.fake, &[]);
    s.fake.push(text("Back to normal."));
    ws.send(&user_message("chat-ask", "m4", "hello")).await;
    let (_, fin) = collect_answer(&mut ws).await;
    assert_eq!(fin.full_content_so_far, "Back to normal.");
    let last = s.fake.requests().last().unwrap().clone();
    assert!(
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "assistant" && m["content"] == "red and blue"),
        "{last}"
    );
}

#[tokio::test]
async fn a_sub_routine_runs_in_a_state_frame_of_its_own() {
    let s = setup().await;
    let mut ws = s.start("demo-outer", "chat-sub", "Started.").await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert_eq!(asked.unwrap().1, "Inner question for 1?");
    collect_answer(&mut ws).await;
    ws.send(&user_message("chat-sub", "m2", "42")).await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(
        messages(&frames),
        vec!["outer=outer inner_fresh=true inner=inner answer=42".to_string()]
    );
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
}

#[tokio::test]
async fn a_restart_while_paused_resumes_without_repeating_a_model_or_skill_call() {
    let redis = RedisServer::start().await.unwrap();
    restart_while_paused(|c| crate::redis_cache::use_redis(c, &redis)).await;
}

/// Embedded mode (in-memory cache, SQLite): the run waits in the store and survives too.
#[tokio::test]
async fn an_embedded_restart_while_paused_resumes_from_the_store() {
    restart_while_paused(|_| {}).await;
}

/// A run pauses, chatd stops, a new process on the same data directory (and `edit`'s
/// shared services) takes the answer and finishes the run, repeating no model or skill call.
async fn restart_while_paused(edit: impl Fn(&mut chatd::config::Config)) {
    let data = tempfile::tempdir().unwrap();
    let shared = |c: &mut chatd::config::Config| {
        edit(c);
        c.server.data_dir = data.path().to_path_buf();
    };
    let s = setup_with(shared).await;
    offer(&s.fake, &["demo-effects"]);
    s.fake.push(calls(vec![ToolCall {
        id: "r1".into(),
        name: "demo-effects".into(),
        arguments: "{}".into(),
    }]));
    s.fake.push(text("Hello"));
    s.fake.push(text("It waits for you."));
    let mut ws = s.app.connect_showing("alice", "chat-restart").await;
    ws.send(&user_message("chat-restart", "m1", "go")).await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert_eq!(asked.unwrap().1, "Continue?");
    collect_answer(&mut ws).await;
    let (model_calls, skill_calls) = (s.fake.requests().len(), s.skill.seen().len());
    assert_eq!((model_calls, skill_calls), (3, 1));
    drop(ws);
    let Setup {
        fake,
        skill,
        app,
        apps,
    } = s;
    app.shutdown().await.unwrap();

    // A new process on the same data directory (store, master key) and shared services.
    let dir = apps.path().to_path_buf();
    let base = skill.url();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.allow_private_targets = true;
        c.skills.web_search.base_url = base;
        shared(c);
    })
    .await;
    fake.push(text("World"));
    let mut ws = app.connect_showing("alice", "chat-restart").await;
    ws.send(&user_message("chat-restart", "m2", "yes")).await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(messages(&frames), vec!["Hello / World / 2".to_string()]);
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
    // Only the new model call ran; the first model call and the skill were replayed.
    assert_eq!(fake.requests().len(), model_calls + 1);
    assert_eq!(skill.seen().len(), skill_calls);
    assert!(
        fake.requests()[model_calls]
            .to_string()
            .contains("Again, yes"),
        "the answer reached the script"
    );
}

#[tokio::test]
async fn cancelling_a_waiting_run_ends_it_and_frees_the_chat() {
    let s = setup().await;
    let mut ws = s.start("demo-ask_twice", "chat-cancel", "Asked.").await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    let (run, _) = asked.unwrap();
    collect_answer(&mut ws).await;

    // Another user cannot touch it.
    let mut eve = s.app.connect("eve").await;
    eve.send_json(json!({"type": "cancel_routine", "payload": {"run_id": run.as_str()}}))
        .await;
    let code = eve.recv_until(crate::support::error_code).await;
    assert_eq!(code, chatd_protocol::ErrorCode::NotFound);

    ws.send_json(json!({"type": "cancel_routine", "payload": {"run_id": run.as_str()}}))
        .await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(finished(&frames), Some(RoutineOutcome::Cancelled));
    offer(&s.fake, &[]);
    s.fake.push(text("The model answers."));
    ws.send(&user_message("chat-cancel", "m2", "red")).await;
    let (_, fin) = collect_answer(&mut ws).await;
    assert_eq!(fin.full_content_so_far, "The model answers.");
}

#[tokio::test]
async fn cancelling_a_running_run_stops_it() {
    let s = setup_with(|c| {
        c.routines.max_operations = u64::MAX / 2;
        c.routines.slice_time = Duration::from_secs(60);
    })
    .await;
    let mut ws = s.start("demo-spin", "chat-spin", "Stopped.").await;
    let run = ws
        .recv_until(|m| match m {
            ServerMessage::RoutineStatus(t) if t.text == "spinning" => Some(t.run_id.clone()),
            _ => None,
        })
        .await;
    ws.send_json(json!({"type": "cancel_routine", "payload": {"run_id": run.as_str()}}))
        .await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(finished(&frames), Some(RoutineOutcome::Cancelled));
    collect_answer(&mut ws).await;
    let result = tool_result(&s.fake.requests()[1], "r1");
    assert_eq!(result["status"], "cancelled");
}

#[tokio::test]
async fn cancelling_a_run_waiting_on_a_skill_stops_it() {
    let s = setup().await;
    let gate = chatd_test_harness::fake_llm::Gate::new();
    let held = gate.clone();
    s.skill.respond(move |_| SkillReply::Hold {
        gate: held.clone(),
        then: Box::new(SkillReply::Json(json!({"results": []}))),
    });
    let mut ws = s.start("demo-slow", "chat-slow", "Stopped.").await;
    let run = ws
        .recv_until(|m| match m {
            ServerMessage::RoutineStatus(t) if t.text == "calling" => Some(t.run_id.clone()),
            _ => None,
        })
        .await;
    gate.reached().await;
    ws.send_json(json!({"type": "cancel_routine", "payload": {"run_id": run.as_str()}}))
        .await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(finished(&frames), Some(RoutineOutcome::Cancelled));
    collect_answer(&mut ws).await;
    gate.release();
}

/// A run left `running` by a node that stopped mid-slice runs nowhere: cancelling it ends
/// it at once. A run whose slice may still run elsewhere is only asked to stop.
#[tokio::test]
async fn cancelling_a_run_orphaned_by_a_stopped_node_ends_it() {
    use chatd::routines::journal::{RunRecord, RunStatus};
    let s = setup().await;
    let runs = s.app.state.routines.store();
    let owner = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse("alice").unwrap());
    let running = |started: i64| RunRecord {
        run_id: RunId::random(),
        chat_id: ChatId::parse("chat-orphan").unwrap(),
        routine: "demo.slow".into(),
        args: json!({}),
        status: RunStatus::Running,
        journal: Vec::new(),
        question: None,
        frames: Vec::new(),
        created_at: started,
        slice_started_at: started,
    };
    let live = running(chatd::clock::unix_millis());
    let orphan = running(1);
    let ttl = Duration::from_secs(3600);
    runs.put(&owner, &live, ttl).await.unwrap();
    runs.put(&owner, &orphan, ttl).await.unwrap();
    let mut ws = s.app.connect("alice").await;
    for run in [&live, &orphan] {
        ws.send_json(json!({"type": "cancel_routine", "payload": {"run_id": run.run_id.as_str()}}))
            .await;
    }
    let finished = ws
        .recv_until(|m| match m {
            ServerMessage::RoutineFinished(f) => Some(f.clone()),
            _ => None,
        })
        .await;
    assert_eq!(finished.run_id, orphan.run_id, "only the orphan ends here");
    assert_eq!(finished.outcome, RoutineOutcome::Cancelled);
    assert_eq!(finished.chat_id.as_str(), "chat-orphan");
    assert_eq!(runs.get(&owner, &orphan.run_id).await.unwrap(), None);
    // The live one (its slice may run on another node) keeps its record and is asked to stop.
    assert!(runs.get(&owner, &live.run_id).await.unwrap().is_some());
    assert!(runs.cancel_requested(&owner, &live.run_id).await.unwrap());
}

#[tokio::test]
async fn a_script_past_its_operation_budget_ends_with_a_typed_error() {
    past_a_budget(
        |c| c.routines.max_operations = 20_000,
        RoutineErrorCode::OperationBudgetExceeded,
    )
    .await;
}

#[tokio::test]
async fn a_script_past_its_time_budget_ends_with_a_typed_error() {
    // No operation budget to speak of: only the slice's time stops the loop.
    past_a_budget(
        |c| {
            c.routines.max_operations = u64::MAX;
            c.routines.slice_time = Duration::from_millis(300);
        },
        RoutineErrorCode::TimeBudgetExceeded,
    )
    .await;
}

/// A script that never ends, under `edit`'s budgets: the run ends with `code`, and the model
/// hears of the error.
async fn past_a_budget(edit: impl FnOnce(&mut chatd::config::Config), code: RoutineErrorCode) {
    let s = setup_with(edit).await;
    let mut ws = s.start("demo-spin", "chat-budget", "It failed.").await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(routine_error(&frames).code, Some(code));
    assert_eq!(finished(&frames), Some(RoutineOutcome::Error));
    collect_answer(&mut ws).await;
    let result = tool_result(&s.fake.requests()[1], "r1");
    assert_eq!(result["status"], "error");
}

/// `skill()` keeps the skills' privilege rule: a skill needing the user's connected account
/// runs only when the message says the account is connected.
#[tokio::test]
async fn a_skill_needing_an_account_runs_only_with_the_account_connected() {
    let s = setup().await;
    call_routine(&s.fake, "demo-uses_private", json!({}), "No account.");
    let mut ws = s.app.connect_showing("alice", "chat-private").await;
    ws.send(&user_message("chat-private", "m1", "mine")).await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    let error = routine_error(&frames);
    assert_eq!(error.code, Some(RoutineErrorCode::AccountRequired));
    assert_eq!(finished(&frames), Some(RoutineOutcome::Error));
    collect_answer(&mut ws).await;
    assert!(s.skill.seen().is_empty(), "the skill was never called");

    call_routine(&s.fake, "demo-uses_private", json!({}), "Found them.");
    ws.send(&user_message_with("chat-private", "m2", "mine", |m| {
        m.connected_accounts = vec!["demo".into()];
    }))
    .await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
    collect_answer(&mut ws).await;
    assert_eq!(s.skill.seen().len(), 1);
    assert!(s.skill.seen()[0].path.contains("/skill/private"));
}

#[tokio::test]
async fn emitted_frames_reach_two_devices_in_order() {
    let s = setup().await;
    call_routine(&s.fake, "demo-chatty", json!({}), "Done.");
    let mut phone = s.app.connect_showing("alice", "chat-emit").await;
    let mut laptop = s.app.connect("alice").await;
    phone.send(&user_message("chat-emit", "m1", "go")).await;
    let (a, _) = until_pause_or_end(&mut phone).await;
    let (b, _) = until_pause_or_end(&mut laptop).await;
    assert_eq!(a, b, "both devices get the same frames in the same order");
    let kinds: Vec<&str> = a.iter().map(ServerMessage::type_name).collect();
    assert_eq!(
        kinds,
        [
            "routine_started",
            "routine_status",
            "routine_information",
            "routine_message",
            "routine_error",
            "routine_finished"
        ]
    );
    let chat = ChatId::parse("chat-emit").unwrap();
    assert!(
        a.iter()
            .all(|f| serde_json::to_value(f).unwrap()["payload"]["chat_id"] == chat.as_str())
    );
    assert!(
        matches!(&a[4], ServerMessage::RoutineError(e) if e.code.is_none() && e.message == "four")
    );
}

#[tokio::test]
async fn the_research_routine_reads_pages_in_parallel_and_cites_them() {
    let s = setup().await;
    let gate = chatd_test_harness::fake_llm::Gate::new();
    let (held, base) = (gate.clone(), s.skill.url());
    s.skill.respond(move |seen| {
        if seen.path.contains("/web/search") {
            return SkillReply::Json(json!({"web": {"results": [
                {"title": "Moon", "url": format!("{base}/page/moon"), "description": "Moon."},
                {"title": "Sea", "url": format!("{base}/page/sea"), "description": "Sea."},
                {"title": "Else", "url": format!("{base}/page/else"), "description": "Else."}
            ]}}));
        }
        let name = seen.path.rsplit('/').next().unwrap_or_default().to_string();
        SkillReply::Hold {
            gate: held.clone(),
            then: Box::new(SkillReply::Html(format!(
                "<html><head><title>{name}</title></head><body><p>Facts about the {name}.</p></body></html>"
            ))),
        }
    });
    offer(&s.fake, &["web-research"]);
    s.fake.push(calls(vec![ToolCall {
        id: "r1".into(),
        name: "web-research".into(),
        arguments: json!({"topic": "tides", "pages": 2}).to_string(),
    }]));
    // The routine's own model call (the summary) comes before the model's last answer.
    s.fake
        .push(text("Tides follow the moon [1] and shape the sea [2]."));
    s.fake.push(text("Summarised."));
    let mut ws = s.app.connect_showing("alice", "chat-research").await;
    ws.send(&user_message("chat-research", "m1", "research tides"))
        .await;
    s.skill
        .wait_until("two pages read at once", |k| k.in_flight() >= 2)
        .await;
    gate.release();
    let (frames, asked) = until_pause_or_end(&mut ws).await;
    assert!(asked.is_none());
    assert_eq!(
        finished(&frames),
        Some(RoutineOutcome::Completed),
        "{frames:?}"
    );
    assert_eq!(
        messages(&frames),
        vec!["Tides follow the moon [1] and shape the sea [2].".to_string()]
    );
    assert!(
        frames
            .iter()
            .any(|f| matches!(f, ServerMessage::RoutineInformation(t) if t.text == "2 pages read"))
    );
    let pages = s
        .skill
        .seen()
        .iter()
        .filter(|r| r.path.contains("/page/"))
        .count();
    assert_eq!(pages, 2);
    // The summary prompt holds both pages' text, numbered for citation.
    let prompt = s.fake.requests()[1].to_string();
    assert!(prompt.contains("[1]") && prompt.contains("[2]"), "{prompt}");
    assert!(prompt.contains("Facts about the moon") && prompt.contains("Facts about the sea"));
    collect_answer(&mut ws).await;
    let result = tool_result(&s.fake.requests()[2], "r1");
    assert_eq!(result["status"], "finished");
    assert_eq!(result["result"]["sources"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_trip_planner_asks_three_questions_then_plans() {
    let s = setup().await;
    call_routine(&s.fake, "web-plan_trip", json!({}), "Let's plan.");
    let mut ws = s.app.connect_showing("alice", "chat-trip").await;
    ws.send(&user_message("chat-trip", "m1", "plan a trip"))
        .await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert_eq!(asked.unwrap().1, "Where would you like to go?");
    collect_answer(&mut ws).await;
    ws.send(&user_message("chat-trip", "m2", "Lisbon")).await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert!(asked.unwrap().1.contains("Lisbon"));
    ws.send(&user_message("chat-trip", "m3", "May, 4 days"))
        .await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert!(asked.unwrap().1.contains("enjoy"));
    s.fake.push(text("Day 1: Alfama [1]."));
    ws.send(&user_message("chat-trip", "m4", "food")).await;
    let (frames, asked) = until_pause_or_end(&mut ws).await;
    assert!(asked.is_none());
    assert_eq!(messages(&frames), vec!["Day 1: Alfama [1].".to_string()]);
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
    let searches = s
        .skill
        .seen()
        .iter()
        .filter(|r| r.path.contains("/web/search"))
        .count();
    assert_eq!(searches, 2, "two searches in one call");
    let prompt = s.fake.requests().last().unwrap().to_string();
    assert!(prompt.contains("Lisbon") && prompt.contains("May, 4 days") && prompt.contains("food"));
}

#[tokio::test]
async fn a_script_changed_under_a_waiting_run_ends_it_with_journal_mismatch() {
    let redis = RedisServer::start().await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let s = setup_with(|c| {
        crate::redis_cache::use_redis(c, &redis);
        c.server.data_dir = data.path().to_path_buf();
    })
    .await;
    let mut ws = s.start("demo-ask_twice", "chat-changed", "Asked.").await;
    let (_, asked) = until_pause_or_end(&mut ws).await;
    assert_eq!(asked.unwrap().1, "First?");
    collect_answer(&mut ws).await;
    drop(ws);
    let Setup {
        fake, app, apps, ..
    } = s;
    app.shutdown().await.unwrap();
    // The operator changes the script: it now asks the model first.
    std::fs::write(
        apps.path().join("demo").join("ask_twice.rhai"),
        r#"let x = model("changed"); ask_user("First?")"#,
    )
    .unwrap();
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        crate::redis_cache::use_redis(c, &redis);
        c.server.data_dir = data.path().to_path_buf();
    })
    .await;
    let calls = fake.requests().len();
    let mut ws = app.connect_showing("alice", "chat-changed").await;
    ws.send(&user_message("chat-changed", "m2", "red")).await;
    let (frames, _) = until_pause_or_end(&mut ws).await;
    assert!(frames.iter().any(|f| matches!(f,
        ServerMessage::RoutineError(e) if e.code == Some(RoutineErrorCode::JournalMismatch))));
    assert_eq!(finished(&frames), Some(RoutineOutcome::Error));
    assert_eq!(
        fake.requests().len(),
        calls,
        "the changed script's model call never ran"
    );
}

#[test]
fn lint_skills_compiles_routine_scripts_and_checks_their_calls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("web.yml"),
        include_str!("../../config/apps/web.yml"),
    )
    .unwrap();
    let lint = |dir: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_chatd"))
            .args(["lint-skills", dir.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let ok = lint(dir.path());
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("2 routines ok"));
    std::fs::create_dir(dir.path().join("web")).unwrap();
    std::fs::write(
        dir.path().join("web").join("research.rhai"),
        r#"skill("web-teleport", #{ to: "mars" })"#,
    )
    .unwrap();
    let bad = lint(dir.path());
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("web.research") && err.contains("web-teleport"),
        "{err}"
    );
}
