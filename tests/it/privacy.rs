//! Pseudonymisation before the model (issue 34): a message with an e-mail address, an IBAN
//! and a phone number produces model requests (preprocessing, the answer, postprocessing)
//! with none of them, and an answer written with the placeholders, even split over chunks,
//! reaches the client with the real values; across two nodes the chat keeps its
//! placeholders (the table lives sealed in the shared AI cache, never in plaintext).

use std::time::Duration;

use chatd_protocol::{PreprocessingStepKind, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Reply, function_reply};
use chatd_test_harness::redis::RedisServer;
use serde_json::{Value, json};

use crate::cluster::{Cluster, Shared};
use crate::support::{collect_answer, spawn_app, use_llm, user_message};

const EMAIL: &str = "ada@example.com";
const IBAN: &str = "DE89 3704 0044 0532 0130 00";
const PHONE: &str = "+1 650-253-0000";
/// Every form a value could leave in.
const LEAKS: [&str; 7] = [
    EMAIL,
    "Grace Hopper",
    "DE89 3704",
    "DE89370400440532013000",
    "650-253-0000",
    "6502530000",
    "bob@example.org",
];

fn text(chunks: &[&str]) -> Reply {
    Reply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

/// Every request the model received, as JSON text.
fn every_request(fake: &FakeLlm) -> Vec<String> {
    let mut all: Vec<Value> = fake.requests();
    for stage in ["preprocess", "postprocess"] {
        all.extend(fake.stage_requests(stage));
    }
    all.iter().map(Value::to_string).collect()
}

fn assert_hidden(requests: &[String]) {
    for request in requests {
        for leak in LEAKS {
            assert!(
                !request.contains(leak),
                "`{leak}` reached the model: {request}"
            );
        }
    }
}

#[tokio::test]
async fn personal_data_never_reaches_the_model_and_the_answer_has_it_back() {
    let fake = FakeLlm::start().await.unwrap();
    // Preprocessing titles the chat with a placeholder: the user sees the address.
    fake.push_stage(
        "preprocess",
        function_reply("preprocess", json!({"title": "Mail to [EMAIL_1]"})),
    );
    fake.push(text(&[
        "Sent to [EMA",
        "IL_1] from [IBAN_",
        "1]; I will call [PHONE_1",
        "]. [Not a placeholder] [NAME_1]",
    ]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.privacy.pseudonymize = {
            use chatd::config::PersonalData::*;
            vec![Email, Iban, Phone]
        };
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-p").await;
    let message =
        format!("Mail {EMAIL} my IBAN {IBAN} and call me on {PHONE}. Grace Hopper agrees.");
    // The user marked a name private with the message.
    let mut frame = user_message("chat-p", "m1", &message);
    if let chatd_protocol::ClientMessage::ChatMessageAdded(m) = &mut frame {
        m.private_names = vec!["Grace Hopper".into()];
    }
    ws.send(&frame).await;
    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(
        last.full_content_so_far,
        format!(
            "Sent to {EMAIL} from {IBAN}; I will call {PHONE}. [Not a placeholder] Grace Hopper"
        )
    );
    let title = frames.iter().find_map(|f| match f {
        ServerMessage::PreprocessingStep(s) if s.step == PreprocessingStepKind::TitleGenerated => {
            Some(s.data["title"].clone())
        }
        _ => None,
    });
    assert_eq!(title, Some(json!(format!("Mail to {EMAIL}"))));
    // Postprocessing reads the answer: with the placeholders again, never the values.
    fake.wait_for_stage_requests("postprocess", 1).await;
    let requests = every_request(&fake);
    assert_hidden(&requests);
    let main = &fake.requests()[0].to_string();
    assert!(
        main.contains("Mail [EMAIL_1] my IBAN [IBAN_1] and call me on [PHONE_1]. [NAME_1] agrees."),
        "{main}"
    );
}

#[tokio::test]
async fn a_chat_keeps_its_placeholders_across_nodes_and_redis_never_holds_the_values() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let extra = "[privacy]\npseudonymize = [\"email\", \"iban\", \"phone\"]\n";
    let c = Cluster::start_with(2, redis, extra).await;
    let fake = &c.fake;
    let chat = "chat-two-nodes";

    fake.push(text(&["Noted [EMAIL_1]."]));
    let mut here = c.connect_showing(0, "alice", chat).await;
    let first = format!("My address is {EMAIL}.");
    here.send(&user_message(chat, "m1", &first)).await;
    let (_, last) = collect_answer(&mut here).await;
    assert_eq!(last.full_content_so_far, format!("Noted {EMAIL}."));

    // The next turn runs on the other node: the first address keeps its placeholder there
    // (from the table in Redis), the new one gets the next number.
    fake.push(text(&["Both: [EMAIL_1] and [EMAIL_2]."]));
    let mut there = c.connect_showing(1, "alice", chat).await;
    there
        .send(&user_message(chat, "m2", "And bob@example.org?"))
        .await;
    let (_, last) = collect_answer(&mut there).await;
    assert_eq!(
        last.full_content_so_far,
        format!("Both: {EMAIL} and bob@example.org.")
    );
    let requests = every_request(fake);
    assert_hidden(&requests);
    let second = fake.requests().last().unwrap().to_string();
    assert!(second.contains("My address is [EMAIL_1]."), "{second}");
    assert!(second.contains("Noted [EMAIL_1]."), "{second}");
    assert!(second.contains("And [EMAIL_2]?"), "{second}");

    // Redis holds the table sealed: no value in plaintext anywhere in Redis.
    let dump = c.redis().dump().await;
    assert!(
        dump.iter().any(|(k, _)| k.ends_with(":pseudonyms")),
        "the chat's table"
    );
    for (key, value) in &dump {
        let plain = String::from_utf8_lossy(value);
        assert!(
            !plain.contains("example.") && !key.contains("example."),
            "{key}: {plain}"
        );
    }
}

/// `demo-find` gets the placeholders; `demo-lookup` declares `personal_data` and gets the
/// values. What either returns reaches the model with the placeholders again.
fn skill_manifests(skill: &chatd_test_harness::fake_skill::FakeSkill) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let skill_yml = |id: &str, personal: bool| {
        format!(
            r#"
  - id: {id}
    description: Looks things up.
    personal_data: {personal}
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{http: {{url: "{base}/skill/{id}", timeout: 5s}}}}
    output:
      mode: template
      child_type: thing
      agent_data:
        rank: {{type: integer}}
      external_text: [title]
      template: "{{count}} things""#,
            base = skill.url()
        )
    };
    let demo = format!(
        "id: demo\nname: Demo\nskills:{}{}\n",
        skill_yml("find", false),
        skill_yml("lookup", true)
    );
    std::fs::write(dir.path().join("demo.yml"), demo).unwrap();
    dir
}

#[tokio::test]
async fn only_a_skill_that_declares_personal_data_gets_the_values() {
    use crate::skills::{call, calls, offer, tool_result};
    use chatd_test_harness::fake_skill::{FakeSkill, SkillReply};
    let fake = FakeLlm::start().await.unwrap();
    let skill = FakeSkill::start().await.unwrap();
    skill.respond(|seen| {
        let q = seen.body["query"].as_str().unwrap_or_default().to_string();
        SkillReply::Json(json!({"results": [{"rank": 1, "title": format!("About {q}")}]}))
    });
    let apps = skill_manifests(&skill);
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.allow_private_targets = true;
        c.privacy.pseudonymize = vec![chatd::config::PersonalData::Email];
        c.pipeline.postprocessing = false;
    })
    .await;
    offer(&fake, &["demo-find", "demo-lookup"]);
    fake.push(calls(vec![
        call("a", "demo-find", json!([{"query": "[EMAIL_1]"}])),
        call("b", "demo-lookup", json!([{"query": "[EMAIL_1]"}])),
    ]));
    fake.push(text(&["Found [EMAIL_1]."]));
    let mut ws = app.connect_showing("alice", "chat-s").await;
    let message = format!("Look up {EMAIL}");
    ws.send(&user_message("chat-s", "m1", &message)).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert!(
        last.full_content_so_far
            .ends_with(&format!("Found {EMAIL}."))
    );

    let mut queries: Vec<(String, String)> = skill
        .seen()
        .iter()
        .map(|s| {
            (
                s.path.clone(),
                s.body["query"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    queries.sort();
    assert_eq!(
        queries,
        vec![
            ("/skill/find".to_string(), "[EMAIL_1]".to_string()),
            ("/skill/lookup".to_string(), EMAIL.to_string()),
        ]
    );
    // The lookup's result named the address: the model reads the placeholder.
    let second = &fake.requests()[1];
    let looked_up = tool_result(second, "b").to_string();
    assert!(looked_up.contains("About [EMAIL_1]"), "{looked_up}");
    assert_hidden(&every_request(&fake));
}
