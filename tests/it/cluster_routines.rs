//! Routines in cluster mode: a run paused on one node goes on on the node that receives the
//! answer (the journal is in the shared Redis), replaying its model and skill calls instead
//! of making them again.

use chatd_protocol::RoutineOutcome;
use chatd_test_harness::fake_skill::FakeSkill;
use chatd_test_harness::redis::RedisServer;

use crate::cluster::{Cluster, Shared};
use crate::routines::{finished, manifests, messages, script_providers, until_pause_or_end};
use crate::skills::{calls, offer, text};
use crate::support::{collect_answer, user_message};

#[tokio::test]
async fn a_run_paused_on_one_node_resumes_on_another_without_repeating_effects() {
    let skill = FakeSkill::start().await.unwrap();
    let apps = manifests(&skill);
    let extra = format!(
        "[skills]\napps_dir = {:?}\nallow_private_targets = true\n",
        apps.path().display().to_string()
    );
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let c = Cluster::start_with(2, redis, &extra).await;
    script_providers(&c.fake, &skill);
    let chat = "chat-routine-cluster";

    // Node 1 starts the run: a model call, a skill call, then a question.
    offer(&c.fake, &["demo-effects"]);
    c.fake
        .push(calls(vec![chatd_test_harness::fake_llm::ToolCall {
            id: "r1".into(),
            name: "demo-effects".into(),
            arguments: "{}".into(),
        }]));
    c.fake.push(text("Hello"));
    c.fake.push(text("It waits for you."));
    let mut here = c.connect_showing(0, "erin", chat).await;
    here.send(&user_message(chat, "m1", "go")).await;
    let (_, asked) = until_pause_or_end(&mut here).await;
    assert_eq!(asked.unwrap().1, "Continue?");
    collect_answer(&mut here).await;
    let (model_calls, skill_calls) = (c.fake.requests().len(), skill.seen().len());
    assert_eq!(skill_calls, 1);
    drop(here);

    // The answer reaches node 2, which holds no memory of the run.
    c.fake.push(text("World"));
    let mut there = c.connect_showing(1, "erin", chat).await;
    there.send(&user_message(chat, "m2", "yes")).await;
    let (frames, asked) = until_pause_or_end(&mut there).await;
    assert!(asked.is_none());
    assert_eq!(messages(&frames), vec!["Hello / World / 2".to_string()]);
    assert_eq!(finished(&frames), Some(RoutineOutcome::Completed));
    // Only the model call after the answer ran; the first one and the skill were replayed.
    assert_eq!(c.fake.requests().len(), model_calls + 1);
    assert_eq!(skill.seen().len(), skill_calls);
    assert!(
        c.fake.requests()[model_calls]
            .to_string()
            .contains("Again, yes"),
        "the answer reached the script on the second node"
    );
}
