//! Apps and skills switched off per user (`set_app_preferences`, seed row 27): every device
//! hears the new preferences; preprocessing and the main model never see a switched-off app's
//! or skill's tools, and a call to one is refused.

use chatd_protocol::{ErrorCode, ServerMessage};
use serde_json::{Value, json};

use crate::skills::{call, calls, offer, setup, text, tool_result};
use crate::support::{collect_answer, error_code, user_message};

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect()
}

#[tokio::test]
async fn switched_off_apps_and_skills_are_never_offered_nor_run() {
    let s = setup().await;
    let mut phone = s.app.connect("alice").await;
    let mut laptop = s.app.connect_showing("alice", "chat-prefs").await;
    phone
        .send_json(json!({"type": "set_app_preferences", "payload": {
            "disabledApps": ["demo", "demo"], "disabled_skills": ["web-read"]}}))
        .await;
    for ws in [&mut phone, &mut laptop] {
        let set = ws
            .recv_until(|m| match m {
                ServerMessage::AppPreferencesSet(p) => Some(p.clone()),
                _ => None,
            })
            .await;
        assert_eq!(set.disabled_apps, vec!["demo".to_string()]);
        assert_eq!(set.disabled_skills, vec!["web-read".to_string()]);
    }

    // Preprocessing picks everything; only what is on reaches the main model.
    offer(&s.fake, &["demo-find", "web-read", "web-search"]);
    s.fake.push(calls(vec![call(
        "f1",
        "demo-find",
        json!([{"query": "x"}]),
    )]));
    s.fake.push(text("Done."));
    laptop
        .send(&user_message("chat-prefs", "m1", "find things"))
        .await;
    collect_answer(&mut laptop).await;
    let pre = serde_json::to_string(&s.fake.stage_requests("preprocess")[0]).unwrap();
    assert!(pre.contains("web-search"), "the rest is offered");
    assert!(
        !pre.contains("demo-find") && !pre.contains("web-read"),
        "preprocessing never hears of what is off"
    );
    let main = &s.fake.requests()[0];
    assert_eq!(tool_names(main), vec!["web-search".to_string()]);
    // The model called a switched-off skill anyway: refused, never run.
    let refused = tool_result(&s.fake.requests()[1], "f1");
    assert!(refused.to_string().contains("not available"), "{refused}");
    assert!(s.skill.seen().is_empty(), "the skill never ran");

    // Bad input is a typed error and changes nothing.
    phone
        .send_json(
            json!({"type": "set_app_preferences", "payload": {"disabled_apps": ["Not An App"]}}),
        )
        .await;
    assert_eq!(
        phone.recv_until(error_code).await,
        ErrorCode::InvalidPayload
    );
    phone
        .send_json(
            json!({"type": "set_app_preferences", "payload": {"disabled_skills": ["nodash"]}}),
        )
        .await;
    assert_eq!(
        phone.recv_until(error_code).await,
        ErrorCode::InvalidPayload
    );
}
