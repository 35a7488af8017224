//! Apps switched off per user in cluster mode: preferences set on one node (kept sealed in
//! the shared Redis) hold for a message on another node, where no model call of the turn
//! (preprocessing, the main calls, postprocessing) is offered the switched-off app's tools,
//! and a call to one is refused.

use chatd_protocol::ServerMessage;
use chatd_test_harness::redis::RedisServer;
use serde_json::json;

use crate::cluster::{Cluster, Shared};
use crate::skills::{call, calls, offer, text, tool_result};
use crate::support::{collect_answer, user_message};

#[tokio::test]
async fn an_app_switched_off_on_one_node_is_offered_to_no_model_call_on_another() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let c = Cluster::start_with(2, redis, "").await;
    let chat = "chat-prefs-cluster";
    let mut here = c.connect_showing(0, "frank", chat).await;
    let mut there = c.connect_showing(1, "frank", chat).await;

    // Node 1 keeps the preferences; the device on node 2 hears them too.
    here.send_json(json!({"type": "set_app_preferences", "payload": {
        "disabled_apps": ["docs"], "disabled_skills": ["web-read"]}}))
        .await;
    for ws in [&mut here, &mut there] {
        let set = ws
            .recv_until(|m| match m {
                ServerMessage::AppPreferencesSet(p) => Some(p.clone()),
                _ => None,
            })
            .await;
        assert_eq!(set.disabled_apps, vec!["docs".to_string()]);
    }

    // On node 2, preprocessing picks everything and the model calls the switched-off skill
    // anyway.
    offer(&c.fake, &["docs-search", "web-read", "web-search"]);
    c.fake.push(calls(vec![call(
        "d1",
        "docs-search",
        json!([{"query": "readyz"}]),
    )]));
    c.fake.push(text("Done."));
    there
        .send(&user_message(chat, "m1", "search the documentation"))
        .await;
    collect_answer(&mut there).await;

    let mut every_call = c.fake.requests();
    for stage in ["preprocess", "postprocess", "report_prompt_injection"] {
        every_call.extend(c.fake.stage_requests(stage));
    }
    assert!(
        !c.fake.stage_requests("preprocess").is_empty(),
        "preprocessing ran"
    );
    for request in &every_call {
        let offered: Vec<&str> = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        assert!(
            !offered
                .iter()
                .any(|t| t.starts_with("docs-") || *t == "web-read"),
            "a switched-off tool was offered: {offered:?}"
        );
    }
    let pre = serde_json::to_string(&c.fake.stage_requests("preprocess")).unwrap();
    assert!(pre.contains("web-search"), "the rest is offered");
    assert!(
        !pre.contains("docs-search") && !pre.contains("web-read"),
        "preprocessing never hears of what is off"
    );
    let main = &c.fake.requests()[0];
    let names: Vec<&str> = main["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(names, vec!["web-search"]);
    let refused = tool_result(&c.fake.requests()[1], "d1");
    assert!(refused.to_string().contains("not available"), "{refused}");
}
