//! Reprocessing (issue 17 item 9, seed 002): an answer postprocessing scores at or above
//! `pipeline.harmful_response_threshold` is generated once more with a caution; the new text
//! replaces the first on every device (an `ai_message_update` with `correction` after the
//! final frame), in the AI cache (the next turn's history) and, once a device stores it with
//! `replace: true`, in the store; its follow-up suggestions are withheld.

use chatd::auth::UserId;
use chatd_protocol::{ChatId, ClientMessage, Correction, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, function_reply};
use serde_json::json;

use crate::skills::text;
use crate::store::{assistant, expect};
use crate::support::{collect_answer, conversation, spawn_app, use_llm, user_message};

fn scored(harmful: u8) -> chatd_test_harness::fake_llm::Reply {
    function_reply(
        "postprocess",
        json!({
            "follow_up_request_suggestions": ["Explain the risky part again please",
                "Give me more details on that"],
            "new_chat_request_suggestions": [], "chat_summary": "s", "chat_tags": [],
            "harmful_response": harmful, "topic_shift": false
        }),
    )
}

#[tokio::test]
async fn a_harmful_answer_is_generated_again_and_replaced_everywhere() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(text("Here is the risky way."));
    fake.push(text("Here is a careful answer."));
    fake.push_stage("postprocess", scored(9));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut a = app.connect_showing("ida", "chat-x").await;
    let mut b = app.connect("ida").await;
    a.send(&user_message("chat-x", "m1", "how do I do it?"))
        .await;
    let (_, first) = collect_answer(&mut a).await;
    assert_eq!(first.full_content_so_far, "Here is the risky way.");
    // The device stores the answer it got, as clients do at the final frame.
    let store = |content: &str, replace: bool| {
        ClientMessage::AiResponseCompleted(Box::new(chatd_protocol::AiResponseCompleted {
            chat_id: ChatId::parse("chat-x").unwrap(),
            message: assistant(first.message_id.as_str(), content),
            versions: Default::default(),
            replace,
        }))
    };
    a.send(&store("enc-first", false)).await;

    // Both devices get the correction after the final frame, then follow-ups withheld (the
    // sender's storage confirmation comes before, between or after them).
    let mut confirmed = false;
    for ws in [&mut a, &mut b] {
        let corrected = ws
            .recv_until(|m| match m {
                ServerMessage::AiResponseStorageConfirmed(_) => {
                    confirmed = true;
                    None
                }
                ServerMessage::AiMessageUpdate(u) if u.correction.is_some() => Some(u.clone()),
                _ => None,
            })
            .await;
        assert_eq!(corrected.correction, Some(Correction::HarmfulResponse));
        assert_eq!(corrected.full_content_so_far, "Here is a careful answer.");
        assert_eq!(corrected.task_id, first.task_id);
        assert!(corrected.sequence > first.sequence);
        let post = ws
            .recv_until(|m| match m {
                ServerMessage::AiResponseStorageConfirmed(_) => {
                    confirmed = true;
                    None
                }
                ServerMessage::PostProcessingCompleted(p) => Some(p.clone()),
                _ => None,
            })
            .await;
        assert!(post.follow_up_request_suggestions.is_empty());
        assert_eq!(post.harmful_response, 9);
    }
    if !confirmed {
        expect(&mut a, "ai_response_storage_confirmed").await;
    }
    // The second call saw the same conversation and the caution.
    let again = &fake.requests()[1];
    let last = again["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "system");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("potentially harmful")
    );
    assert_eq!(
        conversation(again)
            .last()
            .map(|(r, c)| (r.as_str(), c.as_str())),
        Some(("user", "how do I do it?"))
    );

    // The device stores the corrected answer in place of the first.
    a.send(&store("enc-corrected", true)).await;
    match expect(&mut a, "ai_response_storage_confirmed").await {
        ServerMessage::AiResponseStorageConfirmed(c) => assert!(c.stored),
        other => panic!("{other:?}"),
    }
    expect(&mut b, "new_encrypted_message").await;
    let user = UserId::parse("ida").unwrap();
    let stored = app
        .state
        .store
        .messages(&user, &[ChatId::parse("chat-x").unwrap()])
        .await
        .unwrap();
    let bodies: Vec<&str> = stored
        .iter()
        .map(|(_, m)| m.encrypted_content.as_str())
        .collect();
    assert_eq!(bodies, ["enc-corrected"], "one copy, the corrected one");

    // The next turn's history holds the corrected answer, not the first.
    fake.push(text("ok"));
    fake.push_stage("postprocess", scored(0));
    a.send(&user_message("chat-x", "m2", "thanks")).await;
    collect_answer(&mut a).await;
    let history = conversation(fake.requests().last().unwrap());
    assert!(
        history
            .iter()
            .any(|(_, c)| c == "Here is a careful answer.")
    );
    assert!(history.iter().all(|(_, c)| c != "Here is the risky way."));
}

#[tokio::test]
async fn below_the_threshold_nothing_is_reprocessed() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(text("A fine answer."));
    fake.push_stage("postprocess", scored(6));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut a = app.connect_showing("jo", "chat-y").await;
    a.send(&user_message("chat-y", "m1", "hi")).await;
    collect_answer(&mut a).await;
    let post = a
        .recv_until(|m| match m {
            ServerMessage::PostProcessingCompleted(p) => Some(p.clone()),
            _ => None,
        })
        .await;
    assert_eq!(post.follow_up_request_suggestions.len(), 2);
    assert_eq!(fake.requests().len(), 1, "no second answer");
}

/// A turn that came while the first answer was being judged: its messages are never lost
/// from the model's context. The corrected answer is no longer the chat's newest, so the
/// chat leaves the cache and the next turn asks the client for the history (typed).
#[tokio::test]
async fn a_correction_after_a_newer_turn_never_drops_that_turn_from_the_context() {
    use chatd_protocol::HistoryReason;
    use chatd_test_harness::fake_llm::{Gate, Reply};

    let fake = FakeLlm::start().await.unwrap();
    let judged = Gate::new();
    fake.push(text("Here is the risky way."));
    fake.push_stage(
        "postprocess",
        Reply::Stall {
            chunks: Vec::new(),
            gate: judged.clone(),
            then: Box::new(scored(9)),
        },
    );
    fake.push(text("Second answer."));
    fake.push_stage("postprocess", scored(0));
    fake.push(text("Here is a careful answer."));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut a = app.connect_showing("kim", "chat-z").await;
    a.send(&user_message("chat-z", "m1", "how?")).await;
    collect_answer(&mut a).await;
    judged.reached().await;
    a.send(&user_message("chat-z", "m2", "and then?")).await;
    let (_, second) = collect_answer(&mut a).await;
    assert_eq!(second.full_content_so_far, "Second answer.");
    judged.release();
    a.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if u.correction.is_some() => Some(()),
        _ => None,
    })
    .await;
    let m3 = crate::support::user_message_with("chat-z", "m3", "third", |m| {
        m.message.chat_has_title = true;
    });
    a.send(&m3).await;
    assert_eq!(
        crate::support::outcome(&mut a).await.need_history().reason,
        HistoryReason::CacheMiss
    );
}
