//! The three-stage pipeline against the fake LLM over real HTTP: preprocessing (blocks,
//! merge, title, model choice, rejection, degradation), the tool loop and its cap, context
//! trimming, and postprocessing. Assertions are on the exact requests the fake LLM received.

use std::time::Duration;

use chatd::config::{Capability, ModelEntry};
use chatd_protocol::{
    PostProcessingCompleted, PreprocessingStep, PreprocessingStepKind, RejectionReason, Role,
    ServerMessage,
};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply, ToolCall, function_reply};
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::support::{
    collect_answer, conversation, history_entry, spawn_app, use_llm, user_message,
    user_message_with,
};

fn text(chunks: &[&str]) -> Reply {
    Reply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

fn steps(frames: &[ServerMessage]) -> Vec<PreprocessingStep> {
    frames
        .iter()
        .filter_map(|f| match f {
            ServerMessage::PreprocessingStep(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

fn step(frames: &[ServerMessage], kind: PreprocessingStepKind) -> PreprocessingStep {
    steps(frames)
        .into_iter()
        .find(|s| s.step == kind)
        .unwrap_or_else(|| panic!("no {kind:?} step in {frames:?}"))
}

fn typing(frames: &[ServerMessage]) -> chatd_protocol::AiTypingStarted {
    frames
        .iter()
        .find_map(|f| match f {
            ServerMessage::AiTypingStarted(t) => Some(t.clone()),
            _ => None,
        })
        .expect("ai_typing_started")
}

async fn post_processed(ws: &mut WsClient) -> PostProcessingCompleted {
    ws.recv_until(|m| match m {
        ServerMessage::PostProcessingCompleted(p) => Some(p.clone()),
        _ => None,
    })
    .await
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// ~25,000 tokens of one repeated word (each history message stays under the content cap).
fn big(word: &str) -> String {
    format!("{word} ").repeat(25_000)
}

/// Four big earlier messages (about 100k tokens): two 70k-token blocks.
fn big_history(tag: &str) -> Vec<chatd_protocol::HistoryMessage> {
    vec![
        history_entry(
            "h1",
            Role::User,
            &format!("OLDEST-{tag} {}", big("alpha")),
            1,
        ),
        history_entry("h2", Role::Assistant, &big("beta"), 2),
        history_entry("h3", Role::User, &big("gamma"), 3),
        history_entry("h4", Role::Assistant, &big("delta"), 4),
    ]
}

fn holds(request: &Value, needle: &str) -> bool {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(needle)))
}

#[tokio::test]
async fn a_long_history_is_preprocessed_in_concurrent_blocks_and_merged() {
    let fake = FakeLlm::start().await.unwrap();
    // Each block's reply waits at its own gate: both gates reached at once proves the two
    // requests were in flight together.
    let (first, last) = (Gate::new(), Gate::new());
    let (g1, g2) = (first.clone(), last.clone());
    fake.set_stage_responder(move |name, body| {
        if name != "preprocess" {
            return None;
        }
        let oldest = holds(body, "OLDEST-");
        let rejected_chat = holds(body, "OLDEST-rejected") || holds(body, "REJECT-ME");
        let args = match (oldest, rejected_chat) {
            // The first block of the chat that must be refused: only it scores high.
            (true, true) => json!({"harmful_or_illegal_score": 8, "misuse_risk_score": 1,
                "language": "de", "category": "science", "complexity": "simple",
                "chat_tags": ["first"]}),
            (false, true) => json!({"harmful_or_illegal_score": 1, "misuse_risk_score": 0,
                "language": "fr", "category": "science", "complexity": "simple"}),
            (true, false) => json!({"harmful_or_illegal_score": 2, "misuse_risk_score": 3,
                "language": "de", "category": "health", "complexity": "simple",
                "chat_tags": ["first"]}),
            (false, false) => json!({"harmful_or_illegal_score": 3, "misuse_risk_score": 0,
                "language": "fr", "category": "science", "complexity": "simple",
                "chat_tags": ["second"]}),
        };
        let gate = if oldest { g1.clone() } else { g2.clone() };
        Some(Reply::Stall {
            chunks: Vec::new(),
            gate,
            then: Box::new(function_reply("preprocess", args)),
        })
    });
    fake.push(text(&["Merged answer."]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.server.max_frame_bytes = 4 * 1024 * 1024;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-long").await;
    ws.send(&user_message_with(
        "chat-long",
        "m5",
        "And now in French please",
        |m| m.message.message_history = Some(big_history("accepted")),
    ))
    .await;
    first.reached().await;
    last.reached().await;
    first.release();
    last.release();
    let (frames, answer) = collect_answer(&mut ws).await;
    assert_eq!(answer.full_content_so_far, "Merged answer.");
    let pre = fake.stage_requests("preprocess");
    assert_eq!(pre.len(), 2, "100k tokens make two 70k-token blocks");
    // Blocks split on message boundaries: every message is in exactly one block.
    for needle in ["OLDEST-accepted", "gamma gamma", "And now in French please"] {
        assert_eq!(
            pre.iter().filter(|r| holds(r, needle)).count(),
            1,
            "{needle}"
        );
    }
    // The language of the last block (the last user message) wins; the category too.
    let main = fake.requests();
    assert_eq!(main.len(), 1);
    assert!(crate::support::turn_context(&main[0]).contains("`fr`"));
    assert_eq!(typing(&frames).category.as_deref(), Some("science"));
    assert_eq!(answer.rejection_reason, None);

    // The maximum harm score of all blocks decides: only the first block scores 8.
    let mut ws2 = app.connect_showing("alice", "chat-reject").await;
    // (The responder's gates are released already: these replies pass straight through.)
    ws2.send(&user_message_with(
        "chat-reject",
        "m5",
        "REJECT-ME and continue",
        |m| m.message.message_history = Some(big_history("rejected")),
    ))
    .await;
    let (_, refused) = collect_answer(&mut ws2).await;
    assert_eq!(
        refused.rejection_reason,
        Some(RejectionReason::HarmfulOrIllegalDetected)
    );
    // The refusing block decides at once (early decision): the other block's call may be
    // stopped before it was even sent.
    let pre = fake.stage_requests("preprocess").len();
    assert!(
        (3..=4).contains(&pre),
        "one or two more preprocessing calls: {pre}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "a refused message gets no main call"
    );
}

#[tokio::test]
async fn the_title_is_generated_only_on_a_chats_first_message() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                "category": "software_development", "complexity": "simple",
                "title": "Borrow Checker Basics Explained", "icon_names": ["Code", "book"]}),
        ),
    );
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-t").await;

    ws.send(&user_message(
        "chat-t",
        "m1",
        "How does the borrow checker work?",
    ))
    .await;
    let (frames, _) = collect_answer(&mut ws).await;
    let kinds: Vec<PreprocessingStepKind> = steps(&frames).iter().map(|s| s.step).collect();
    assert_eq!(
        kinds,
        [
            PreprocessingStepKind::TitleGenerated,
            PreprocessingStepKind::MateSelected,
            PreprocessingStepKind::ModelSelected
        ]
    );
    let title = step(&frames, PreprocessingStepKind::TitleGenerated);
    assert!(!title.skipped);
    assert_eq!(title.data["title"], "Borrow Checker Basics Explained");
    assert_eq!(title.data["icon_names"], json!(["code", "book"]));
    let t = typing(&frames);
    assert_eq!(t.title.as_deref(), Some("Borrow Checker Basics Explained"));
    assert_eq!(t.icon_names, ["code", "book"]);
    assert_eq!(t.category.as_deref(), Some("software_development"));
    let mate = step(&frames, PreprocessingStepKind::MateSelected);
    assert_eq!(mate.data["mate"], "Max");
    // The first request's function asks for a title; the main prompt carries the mate.
    let first = &fake.stage_requests("preprocess")[0];
    let params = &first["tools"][0]["function"]["parameters"]["properties"];
    assert!(params.get("title").is_some() && params.get("icon_names").is_some());
    assert!(system_prompt(&fake.requests()[0]).contains("You are Max"));
    // Postprocessing ran for this turn; wait for it so its request is not counted below.
    post_processed(&mut ws).await;

    // The second message: no title asked for, the step is skipped, typing has no title.
    ws.send(&user_message("chat-t", "m2", "And lifetimes?"))
        .await;
    let (frames, _) = collect_answer(&mut ws).await;
    let title = step(&frames, PreprocessingStepKind::TitleGenerated);
    assert!(title.skipped);
    assert_eq!(title.skip_reason.as_deref(), Some("not the first message"));
    assert_eq!(typing(&frames).title, None);
    let second = &fake.stage_requests("preprocess")[1];
    let params = &second["tools"][0]["function"]["parameters"]["properties"];
    assert!(params.get("title").is_none() && params.get("icon_names").is_none());
    post_processed(&mut ws).await;

    // A chat this server has not seen whose client says it has a title (and re-sends its
    // history): skipped too.
    let mut ws2 = app.connect_showing("alice", "chat-u").await;
    ws2.send(&user_message_with("chat-u", "m9", "Hi", |m| {
        m.message.chat_has_title = true;
        m.message.current_chat_title = Some("Old Chat Title Here".into());
        m.message.message_history = Some(vec![history_entry("h1", Role::User, "earlier", 1)]);
    }))
    .await;
    let (frames, _) = collect_answer(&mut ws2).await;
    let title = step(&frames, PreprocessingStepKind::TitleGenerated);
    assert_eq!(
        title.skip_reason.as_deref(),
        Some("chat already has a title")
    );
}

#[tokio::test]
async fn a_harmful_message_is_refused_politely_without_a_main_call() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 9, "misuse_risk_score": 0, "language": "en",
                "category": "general_knowledge", "complexity": "simple"}),
        ),
    );
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-h").await;
    let mut other = app.connect("alice").await;
    ws.send(&user_message("chat-h", "m1", "something harmful"))
        .await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(
        last.rejection_reason,
        Some(RejectionReason::HarmfulOrIllegalDetected)
    );
    assert!(last.full_content_so_far.contains("can't help"), "{last:?}");
    assert_eq!(last.error_code, None);
    let done = other
        .recv_until(|m| match m {
            ServerMessage::AiBackgroundResponseCompleted(d) => Some(d.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        done.rejection_reason,
        Some(RejectionReason::HarmfulOrIllegalDetected)
    );
    assert!(fake.requests().is_empty(), "no main model call");

    // The refusal is the chat's assistant message: the next turn's history holds it.
    fake.push(text(&["Fine."]));
    ws.send(&user_message("chat-h", "m2", "ok, something else"))
        .await;
    collect_answer(&mut ws).await;
    let conv = conversation(&fake.requests()[0]);
    assert_eq!(conv[1].0, "assistant");
    assert_eq!(conv[1].1, last.full_content_so_far);
}

fn catalog(c: &mut chatd::config::Config) {
    c.models.catalog = vec![
        ModelEntry {
            id: "small".into(),
            name: Some("small-v1".into()),
            base_url: None,
            api_key_env: None,
            api_key_vault: None,
            api_key: None,
            context_window: 128_000,
            capabilities: vec![Capability::Tools],
            cost_tier: 1,
        },
        ModelEntry {
            id: "big".into(),
            name: Some("big-v2".into()),
            base_url: None,
            api_key_env: None,
            api_key_vault: None,
            api_key: None,
            context_window: 200_000,
            capabilities: vec![Capability::Tools, Capability::Vision, Capability::Reasoning],
            cost_tier: 3,
        },
    ];
    c.models.main = "small".into();
    c.models.preprocessing = "small".into();
    c.models.postprocessing = "small".into();
}

fn pre_args(extra: Value) -> Reply {
    let mut args = json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0,
        "language": "en", "category": "general_knowledge", "complexity": "simple"});
    if let (Some(a), Some(e)) = (args.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    function_reply("preprocess", args)
}

#[tokio::test]
async fn model_selection_follows_capabilities_complexity_and_a_pin() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        catalog(c);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-m").await;
    let cases: [(&str, Value, Option<&str>, &str, &str); 4] = [
        ("m1", json!({}), None, "small", "default model"),
        (
            "m2",
            json!({"needs_vision": true}),
            None,
            "big",
            "cheapest able model",
        ),
        (
            "m3",
            json!({"complexity": "complex"}),
            None,
            "big",
            "most capable tier",
        ),
        (
            "m4",
            json!({"needs_vision": true}),
            Some("small"),
            "small",
            "pinned by the user",
        ),
    ];
    for (i, (id, extra, pin, model, reason)) in cases.into_iter().enumerate() {
        fake.push_stage("preprocess", pre_args(extra));
        fake.push(text(&["ok"]));
        ws.send(&user_message_with("chat-m", id, "question", |m| {
            m.pinned_model = pin.map(str::to_string)
        }))
        .await;
        let (frames, last) = collect_answer(&mut ws).await;
        let chosen = step(&frames, PreprocessingStepKind::ModelSelected);
        assert_eq!(chosen.data["model_id"], model, "case {id}");
        assert!(
            chosen.data["selection_reason"]
                .as_str()
                .unwrap()
                .contains(reason),
            "case {id}: {:?}",
            chosen.data
        );
        assert_eq!(last.model_name.as_deref(), Some(model));
        assert_eq!(typing(&frames).model_name, model);
        let main = fake.requests();
        assert_eq!(main.len(), i + 1);
        assert_eq!(
            main[i]["model"],
            if model == "big" { "big-v2" } else { "small-v1" }
        );
        // Preprocessing always runs on its own configured model.
        assert_eq!(fake.stage_requests("preprocess")[i]["model"], "small-v1");
        post_processed(&mut ws).await;
    }
}

#[tokio::test]
async fn a_preprocessing_failure_degrades_to_the_default_model_without_tools() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "preprocess",
        Reply::HttpError {
            status: 500,
            body: String::new(),
        },
    );
    fake.push(text(&["Still answered."]));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-d").await;
    ws.send(&user_message("chat-d", "m1", "please search the docs"))
        .await;
    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Still answered.");
    assert_eq!(last.error_code, None);
    let chosen = step(&frames, PreprocessingStepKind::ModelSelected);
    assert_eq!(chosen.data["model_id"], "fake-model");
    assert!(
        chosen.data["selection_reason"]
            .as_str()
            .unwrap()
            .contains("preprocessing failed")
    );
    assert!(tool_names(&fake.requests()[0]).is_empty(), "no tools");
    let metrics = reqwest::get(app.http_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("chatd_stage_failures_total{stage=\"preprocessing\"} 1"),
        "{metrics}"
    );
}

fn search_call(id: &str, requests: Value) -> Reply {
    Reply::ToolCalls {
        calls: vec![ToolCall {
            id: id.into(),
            name: "docs-search".into(),
            arguments: json!({ "requests": requests }).to_string(),
        }],
        text_before: None,
    }
}

fn tool_messages(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_tool_loop_runs_two_rounds_then_answers() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "preprocess",
        pre_args(json!({"relevant_app_skills": ["docs:search", "made-up-skill"]})),
    );
    fake.push(search_call("c1", json!([{"id": 1, "query": "readyz"}])));
    fake.push(Reply::ToolCalls {
        calls: vec![
            ToolCall {
                id: "c2".into(),
                name: "docs-search".into(),
                arguments: json!({"requests": [{"id": "a", "query": "session token"},
                    {"id": "b", "query": "metrics"}]})
                .to_string(),
            },
            ToolCall {
                id: "c3".into(),
                name: "web-search".into(),
                arguments: json!({"requests": [{"query": "x"}]}).to_string(),
            },
        ],
        text_before: None,
    });
    fake.push(text(&["Here is what the docs say."]));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-tools").await;
    ws.send(&user_message("chat-tools", "m1", "search the docs"))
        .await;
    let (_, last) = collect_answer(&mut ws).await;
    // Each executed call's embed reference is streamed where it happened, then the answer.
    assert!(
        last.full_content_so_far
            .ends_with("Here is what the docs say.")
    );
    assert_eq!(
        last.full_content_so_far
            .matches("\"type\":\"app_skill_use\"")
            .count(),
        2,
        "one reference per executed call (the refused one has none)"
    );

    let main = fake.requests();
    assert_eq!(main.len(), 3);
    // Only the validated, preselected skill is offered; the model's own spelling is normalised.
    assert_eq!(tool_names(&main[0]), ["docs-search"]);
    assert_eq!(main[0]["tool_choice"], "auto");
    // Round 2 sees round 1's result, grouped under its request id, in TOON (not JSON).
    let round1 = tool_messages(&main[1]);
    assert_eq!(round1.len(), 1);
    assert_eq!(round1[0]["tool_call_id"], "c1");
    let content = round1[0]["content"].as_str().unwrap();
    assert!(content.contains("readyz"), "{content}");
    assert!(!content.trim_start().starts_with('{'), "TOON, not JSON");
    // Round 3 sees both calls of round 2: two result groups, and the unoffered tool refused.
    let round2 = &tool_messages(&main[2])[1..];
    assert_eq!(round2.len(), 2);
    let by_id = |id: &str| {
        round2.iter().find(|m| m["tool_call_id"] == id).unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let grouped: Value = toon_format::decode_default(&by_id("c2")).unwrap();
    assert_eq!(grouped["results"][0]["id"], "a");
    assert_eq!(grouped["results"][1]["id"], "b");
    assert_eq!(grouped["provider"], "chatd-docs");
    assert!(by_id("c3").contains("not available"), "{}", by_id("c3"));
}

#[tokio::test]
async fn the_tool_loop_stops_after_five_rounds_and_forces_an_answer() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "preprocess",
        pre_args(json!({"relevant_app_skills": ["docs-search"]})),
    );
    fake.set_responder(|body| {
        Some(if body["tool_choice"] == "none" {
            Reply::Text {
                chunks: vec!["Final answer without tools.".into()],
                delay: Duration::ZERO,
                usage: None,
            }
        } else {
            search_call("loop", json!([{"id": 1, "query": "again"}]))
        })
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-cap").await;
    ws.send(&user_message("chat-cap", "m1", "search forever"))
        .await;
    let (_, last) = collect_answer(&mut ws).await;
    assert!(
        last.full_content_so_far
            .ends_with("Final answer without tools.")
    );
    assert_eq!(last.full_content_so_far.matches("app_skill_use").count(), 4);
    let main = fake.requests();
    assert_eq!(main.len(), 5, "pipeline.max_tool_rounds = 5");
    for r in &main[..4] {
        assert_eq!(r["tool_choice"], "auto");
    }
    assert_eq!(main[4]["tool_choice"], "none");
    assert_eq!(tool_messages(&main[4]).len(), 4);
}

#[tokio::test]
async fn the_context_is_trimmed_oldest_first_keeping_system_prompt_and_latest() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(text(&["Trimmed."]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.context_window = 6_000;
        c.pipeline.answer_reserve_tokens = 1_000;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-ctx").await;
    let chunk = |w: &str| format!("{w} ").repeat(2_000);
    let history = vec![
        history_entry("h1", Role::User, &chunk("one"), 1),
        history_entry("h2", Role::Assistant, &chunk("two"), 2),
        history_entry("h3", Role::User, &chunk("three"), 3),
        history_entry("h4", Role::Assistant, &chunk("four"), 4),
    ];
    ws.send(&user_message_with(
        "chat-ctx",
        "m5",
        "the latest question",
        |m| m.message.message_history = Some(history),
    ))
    .await;
    let (_, last) = collect_answer(&mut ws).await;
    let request = &fake.requests()[0];
    let conv = conversation(request);
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    // The per-turn system message (date, language) follows the latest, never trimmed.
    let turn = messages.last().unwrap();
    assert_eq!(turn["role"], "system");
    assert!(
        turn["content"]
            .as_str()
            .unwrap()
            .starts_with("Current date")
    );
    assert_eq!(
        conv.last().unwrap(),
        &("user".to_string(), "the latest question".to_string())
    );
    // 4 × ~2,000 tokens + prompt do not fit 5,000: the two oldest go, newest kept in order.
    assert_eq!(last.trimmed_history_messages, 2);
    assert_eq!(conv.len(), 3);
    assert!(conv[0].1.starts_with("three"));
    assert!(conv[1].1.starts_with("four"));
}

#[tokio::test]
async fn postprocessing_results_reach_every_device() {
    let fake = FakeLlm::start().await.unwrap();
    let follow_ups: Vec<String> = (1..=6)
        .map(|i| format!("Explain part {i} in detail"))
        .collect();
    fake.push(text(&["The answer."]));
    fake.push_stage(
        "postprocess",
        function_reply(
            "postprocess",
            json!({
                "follow_up_request_suggestions": follow_ups,
                "new_chat_request_suggestions": ["Plan a trip to Rome", "Write a short poem today",
                    "Learn about black holes", "Cook a quick pasta dinner", "Compare two laptops now",
                    "Start running three times weekly"],
                "chat_summary": "User asked about the topic; assistant answered.",
                "chat_tags": ["topic", "Extra"],
                "harmful_response": 1,
                "topic_shift": false
            }),
        ),
    );
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-p").await;
    let mut other = app.connect("alice").await;
    ws.send(&user_message_with(
        "chat-p",
        "m1",
        "Tell me about it",
        |m| {
            m.chat_summary = Some("Earlier they discussed Rust.".into());
            m.chat_tags = vec!["rust".into()];
        },
    ))
    .await;
    let (_, last) = collect_answer(&mut ws).await;
    let a = post_processed(&mut ws).await;
    let b = post_processed(&mut other).await;
    assert_eq!(a, b);
    assert_eq!(a.task_id, last.task_id);
    assert_eq!(a.follow_up_request_suggestions, follow_ups);
    assert_eq!(a.new_chat_request_suggestions.len(), 6);
    assert_eq!(
        a.chat_summary,
        "User asked about the topic; assistant answered."
    );
    assert_eq!(a.chat_tags, ["rust", "topic", "extra"]);
    assert_eq!(a.harmful_response, 1);
    assert_eq!(a.updated_chat_title, None);
    // The request saw the previous summary and the last exchange.
    let req = &fake.stage_requests("postprocess")[0];
    assert!(system_prompt(req).contains("Earlier they discussed Rust."));
    assert_eq!(
        conversation(req),
        [
            ("user".to_string(), "Tell me about it".to_string()),
            ("assistant".to_string(), "The answer.".to_string())
        ]
    );
}

#[tokio::test]
async fn follow_up_suggestions_can_be_switched_off() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_stage(
        "postprocess",
        function_reply(
            "postprocess",
            json!({"follow_up_request_suggestions": ["Explain this in more detail"],
                "new_chat_request_suggestions": [], "chat_summary": "s", "harmful_response": 0}),
        ),
    );
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-off").await;
    ws.send(&user_message_with("chat-off", "m1", "hello", |m| {
        m.user_preferences = Some(chatd_protocol::UserPreferences {
            follow_up_suggestions_enabled: false,
        })
    }))
    .await;
    collect_answer(&mut ws).await;
    let p = post_processed(&mut ws).await;
    assert!(p.follow_up_request_suggestions.is_empty());
    assert_eq!(p.chat_summary, "s");
}

#[tokio::test]
async fn a_postprocessing_failure_leaves_the_answer_intact() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(text(&["Kept answer."]));
    fake.push_stage(
        "postprocess",
        Reply::HttpError {
            status: 500,
            body: String::new(),
        },
    );
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-f").await;
    ws.send(&user_message("chat-f", "m1", "first")).await;
    let (_, first) = collect_answer(&mut ws).await;
    assert_eq!(first.full_content_so_far, "Kept answer.");
    assert_eq!(first.error_code, None);
    fake.wait_for_stage_requests("postprocess", 1).await;

    // The next turn: the cached history holds the answer; the only postprocessing result the
    // client ever sees is the second turn's.
    fake.push(text(&["Second."]));
    ws.send(&user_message("chat-f", "m2", "second")).await;
    let (frames, second) = collect_answer(&mut ws).await;
    let conv = conversation(&fake.requests()[1]);
    assert_eq!(
        conv[1],
        ("assistant".to_string(), "Kept answer.".to_string())
    );
    let p = post_processed(&mut ws).await;
    assert_eq!(p.task_id, second.task_id);
    assert!(
        !frames
            .iter()
            .any(|f| matches!(f, ServerMessage::PostProcessingCompleted(_))),
        "no postprocessing result for the failed turn"
    );
}
