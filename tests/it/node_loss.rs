//! A turn whose node stops renewing its lease: another node takes it over within the lease
//! and two seconds, ends it for the user's devices with the text its log holds and
//! `error_code: node_lost`, and answers the message queued behind it. The lost node here
//! is a second `Turns` over the app's own turn store that never renews (as a SIGKILLed
//! process would); the multi-process version is in the cluster tests.

use std::time::Duration;

use chatd::auth::UserId;
use chatd::crypto::UserHash;
use chatd::ids::NodeId;
use chatd::inbound::{Inbound, MessageOptions};
use chatd::turn::log::LogEntry;
use chatd::turn::store::LogSlot;
use chatd::turn::{Admission, TurnTicket, Turns};
use chatd_protocol::TaskId;
use chatd_protocol::{
    AiMessageUpdate, AiTypingStarted, ChatMessageAdded, ErrorCode, MessageId, ServerMessage,
};
use chatd_test_harness::fake_llm::FakeLlm;
use chatd_test_harness::ws_client::WsClient;
use tokio_util::sync::CancellationToken;

use crate::support::{TestApp, chat_id, collect_answer, spawn_app, use_llm, user_message};

#[tokio::test]
async fn a_lost_nodes_turn_ends_with_node_lost_and_its_queue_is_answered() {
    let (_fake, app) = app_with_short_leases().await;
    let (ghost, ticket) = ghost_turn(&app, Wrote::Paragraph).await;
    let deps = &app.state.turn;
    let (task, chat) = (ticket.task_id.clone(), chat_id("chat-lost"));
    let owner = UserHash::of(&UserId::parse("alice").unwrap());

    // Alice's next message waits behind the ghost's turn.
    let mut ws = app.connect_showing("alice", "chat-lost").await;
    ws.send(&user_message("chat-lost", "m2", "second")).await;
    let queued = ws
        .recv_until(|m| match m {
            ServerMessage::MessageQueued(q) => Some(q.clone()),
            _ => None,
        })
        .await;
    assert_eq!(queued.active_task_id, task);

    // The app's node takes the turn over: an error, then the final frame with the text
    // the log held, numbered after it.
    let lost = ws
        .recv_until(|m| match m {
            ServerMessage::Error(e) if e.code == ErrorCode::NodeLost => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(lost.chat_id, Some(chat.clone()));
    let last: AiMessageUpdate = ws
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == task => Some(u.clone()),
            _ => None,
        })
        .await;
    assert!(last.is_final_chunk);
    assert_eq!(last.error_code, Some(ErrorCode::NodeLost));
    assert_eq!(last.full_content_so_far, "Partial answer.\n\n");
    assert_eq!(last.sequence, 2);
    assert_eq!(last.model_name.as_deref(), Some("ghost-model"));

    // Then the queued message is answered, once.
    let (_, answer) = collect_answer(&mut ws).await;
    assert_eq!(answer.user_message_id.as_str(), "m2");
    assert_ne!(answer.task_id, task);
    assert_eq!(app.state.metrics.lost_turns.get(), 1);

    // The ghost, were it to wake up, is fenced: its lease and its log belong to another
    // generation now.
    assert!(!ghost.renew(&ticket).await);
    let pong = ServerMessage::Pong(chatd_protocol::Empty {});
    let late = LogEntry::encode(&chatd::delivery::Audience::All, &pong, &pong.to_json(), "");
    assert!(
        deps.outlet
            .log
            .append(
                &owner,
                &chat,
                &task,
                LogSlot::new(ticket.lease.generation, 9),
                &late
            )
            .await
            .is_err()
    );
}

/// Redis came back from a snapshot taken before the turn let its lease go: the lease comes
/// back and expires, but the log holds the final answer. The taker sends no `node_lost`
/// (the devices had the answer) and answers the queued message. The rest of the ending the
/// log lacked goes out: a device not showing the chat hears that the answer is complete
/// (chaos run AH: a cancelled turn's node lost its lease right after the final update).
#[tokio::test]
async fn a_lost_turn_whose_log_holds_the_answer_is_not_ended_again() {
    let (_fake, app) = app_with_short_leases().await;
    let (_ghost, ticket) = ghost_turn(&app, Wrote::Answer).await;
    let mut away = app.connect("alice").await;
    let mut ws = app.connect_showing("alice", "chat-lost").await;
    ws.send(&user_message("chat-lost", "m2", "second")).await;
    let mut frames = Vec::new();
    let answer = loop {
        let (seen, answer) = collect_answer(&mut ws).await;
        frames.extend(seen);
        if answer.task_id != ticket.task_id {
            break answer;
        }
    };
    assert_eq!(answer.user_message_id.as_str(), "m2");
    assert_eq!(answer.error_code, None);
    let lost = frames.iter().any(|f| match f {
        ServerMessage::Error(e) => e.code == ErrorCode::NodeLost,
        ServerMessage::AiMessageUpdate(u) => u.error_code == Some(ErrorCode::NodeLost),
        _ => false,
    });
    assert!(
        !lost,
        "no node_lost for a turn that had answered: {frames:#?}"
    );
    assert_eq!(
        app.state.metrics.lost_turns.get(),
        1,
        "taken over all the same"
    );
    let background = away
        .recv_until(|m| match m {
            ServerMessage::AiBackgroundResponseCompleted(b) if b.task_id == ticket.task_id => {
                Some(b.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(background.full_content, "Partial answer.\n\n");
    assert_eq!(background.error_code, None);
    let ended = frames
        .iter()
        .any(|f| matches!(f, ServerMessage::AiTypingEnded(t) if t.task_id == ticket.task_id));
    assert!(
        ended,
        "the showing device hears that typing ended: {frames:#?}"
    );
}

/// The lost node was killed right after it took the message (nothing logged), and the
/// device sends it again on a node that lives: it learns the running task, and the taker
/// ends that task with `node_lost` for it (chaos seed 5 saw neither).
#[tokio::test]
async fn a_resent_message_whose_node_died_before_writing_gets_node_lost() {
    let (_fake, app) = app_with_short_leases().await;
    let (_ghost, ticket) = ghost_turn(&app, Wrote::Nothing).await;
    let mut ws = app.connect_showing("alice", "chat-lost").await;
    ws.send(&user_message("chat-lost", "m1", "first")).await;
    let initiated = ws
        .recv_until(|m| match m {
            ServerMessage::AiTaskInitiated(t) => Some(t.clone()),
            _ => None,
        })
        .await;
    assert_eq!(initiated.ai_task_id, ticket.task_id);
    let last = ws
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(last.task_id, ticket.task_id);
    assert_eq!(last.error_code, Some(ErrorCode::NodeLost));
}

/// An app (the node that lives) with a one-second lease, over a fake LLM.
async fn app_with_short_leases() -> (FakeLlm, TestApp) {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.cluster.lease = Duration::from_secs(1);
    })
    .await;
    (fake, app)
}

/// A copy of a message whose turn another node ended with `node_lost` is a duplicate: the
/// taker settled the message before it wrote the ending, so the copy is acknowledged and
/// starts no second turn (the suite's one-minute chaos run answered such a message twice).
#[tokio::test]
async fn a_copy_sent_after_a_lost_turns_node_lost_is_not_answered_again() {
    let (_fake, app) = app_with_short_leases().await;
    let (_ghost, ticket) = ghost_turn(&app, Wrote::Paragraph).await;
    let mut ws = app.connect_showing("alice", "chat-lost").await;
    lost_turn_ended(&mut ws, &ticket.task_id).await;
    let owner = UserHash::of(&UserId::parse("alice").unwrap());
    let (chat, m1) = (chat_id("chat-lost"), MessageId::parse("m1").unwrap());
    let seen = app.state.ai_cache.claim_message(&owner, &chat, &m1).await;
    assert!(matches!(
        seen,
        Ok(chatd::cache::ai::MessageSeen::Answered(_))
    ));

    ws.send(&user_message("chat-lost", "m1", "first")).await;
    let confirmed = ws
        .recv_until(|m| match m {
            ServerMessage::ChatMessageConfirmed(c) => Some(c.message_id.clone()),
            _ => None,
        })
        .await;
    assert_eq!(confirmed, m1);
    // A second turn for the copy would run before the next message's turn.
    ws.send(&user_message("chat-lost", "m2", "second")).await;
    let (frames, answer) = collect_answer(&mut ws).await;
    assert_eq!(answer.user_message_id.as_str(), "m2");
    let again = frames.iter().any(|f| match f {
        ServerMessage::AiTaskInitiated(t) => t.user_message_id == m1,
        ServerMessage::AiMessageUpdate(u) => u.user_message_id == m1,
        _ => false,
    });
    assert!(!again, "m1 answered again: {frames:#?}");
}

/// A device that never had a lost turn's `node_lost` (it connected after) sends a copy of
/// the message, as a client does for a confirmed message whose turn it never heard of: the
/// copy is not answered again, and the device gets that ending as a resume from 0 gives it
/// (chaos runs AE and AF: such a device's node was out when the ending went out).
#[tokio::test]
async fn a_copy_from_a_device_that_missed_the_node_lost_gets_that_ending() {
    let (_fake, app) = app_with_short_leases().await;
    let (_ghost, ticket) = ghost_turn(&app, Wrote::Paragraph).await;
    let mut ws = app.connect_showing("alice", "chat-lost").await;
    lost_turn_ended(&mut ws, &ticket.task_id).await;

    let mut late = app.connect("alice").await;
    late.send(&user_message("chat-lost", "m1", "first")).await;
    let (frames, last) = collect_answer(&mut late).await;
    assert_eq!(last.task_id, ticket.task_id, "{frames:#?}");
    assert_eq!(last.error_code, Some(ErrorCode::NodeLost));
    assert_eq!(last.full_content_so_far, "Partial answer.\n\n");
    let confirmed = frames
        .iter()
        .any(|f| matches!(f, ServerMessage::ChatMessageConfirmed(_)));
    let resumed = frames
        .iter()
        .any(|f| matches!(f, ServerMessage::AiTaskResumed(r) if r.recovered));
    let started = frames
        .iter()
        .any(|f| matches!(f, ServerMessage::AiTaskInitiated(_)));
    assert!(confirmed && resumed && !started, "{frames:#?}");
}

/// Waits for the final update of the lost turn `task` (the taker ended it).
async fn lost_turn_ended(ws: &mut WsClient, task: &TaskId) {
    ws.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if &u.task_id == task => u.is_final_chunk.then_some(()),
        _ => None,
    })
    .await;
}

/// What the lost node logged of its turn before it went silent.
#[derive(PartialEq)]
enum Wrote {
    Nothing,
    Paragraph,
    /// The first paragraph, then the answer's final frame.
    Answer,
}

/// The lost node started a turn in alice's `chat-lost` answering `m1` and logged `wrote`,
/// then went silent.
async fn ghost_turn(app: &TestApp, wrote: Wrote) -> (Turns, Box<TurnTicket>) {
    let deps = &app.state.turn;
    let alice = UserId::parse("alice").unwrap();
    let owner = UserHash::of(&alice);
    let chat = chat_id("chat-lost");

    // The lost node started a turn and logged its first paragraph, then went silent.
    let ghost = Turns::new(
        deps.turns.store().clone(),
        None,
        NodeId::parse("ghost").unwrap(),
        Duration::from_secs(1),
        10,
    );
    let added = ChatMessageAdded::user(
        chat.clone(),
        MessageId::parse("m1").unwrap(),
        "first".into(),
        1,
    );
    let inbound = Inbound {
        message: added.message,
        embeds: Vec::new(),
        conn: 1,
        prior_messages: 0,
        history_requested: false,
        options: MessageOptions::default(),
    };
    let Ok(Admission::Start(ticket)) = ghost
        .admit(&alice, &chat, inbound, &CancellationToken::new())
        .await
    else {
        panic!("the ghost starts the turn")
    };
    let task = ticket.task_id.clone();
    let typing = ServerMessage::AiTypingStarted(AiTypingStarted {
        chat_id: chat.clone(),
        message_id: MessageId::from(task.clone()),
        user_message_id: MessageId::parse("m1").unwrap(),
        model_name: "ghost-model".into(),
        category: None,
        title: None,
        icon_names: Vec::new(),
        is_continuation: false,
        encrypted_chat_key: None,
    });
    let mut chunk = AiMessageUpdate::new(
        task.clone(),
        chat.clone(),
        MessageId::parse("m1").unwrap(),
        "Partial answer.\n\n".into(),
        1,
        false,
    );
    chunk.model_name = Some("ghost-model".into());
    let showing = chatd::delivery::Audience::Showing(chat.clone());
    let mut frames = vec![
        (chatd::delivery::Audience::All, typing),
        (showing, ServerMessage::AiMessageUpdate(chunk.clone())),
    ];
    if wrote == Wrote::Nothing {
        frames.clear();
    }
    if wrote == Wrote::Answer {
        let mut last = chunk;
        (last.sequence, last.is_final_chunk) = (2, true);
        frames.push((
            chatd::delivery::Audience::All,
            ServerMessage::AiMessageUpdate(last),
        ));
    }
    for (index, (audience, frame)) in frames.into_iter().enumerate() {
        let previous = "";
        let entry = LogEntry::encode(&audience, &frame, &frame.to_json(), previous);
        let slot = LogSlot::new(ticket.lease.generation, index as u64 + 1);
        deps.outlet
            .log
            .append(&owner, &chat, &task, slot, &entry)
            .await
            .unwrap();
    }

    (ghost, ticket)
}

/// A node took the message's id and stopped before it admitted the message (paused or
/// killed between the two): the id is claimed, no turn runs or waits. The device's copy on
/// another node is then answered, once (chaos seed 3 with every fault at once: it was
/// acknowledged as a copy and dropped, and never answered).
#[tokio::test]
async fn a_message_whose_node_stopped_before_admitting_it_is_answered_when_sent_again() {
    let (fake, app) = app_with_short_leases().await;
    let owner = UserHash::of(&UserId::parse("alice").unwrap());
    let (chat, id) = (chat_id("chat-taken"), MessageId::parse("m1").unwrap());
    let seen = app.state.ai_cache.claim_message(&owner, &chat, &id).await;
    assert!(matches!(seen, Ok(chatd::cache::ai::MessageSeen::New)));

    fake.push(chatd_test_harness::fake_llm::Reply::Text {
        chunks: vec!["Answered after all.".into()],
        delay: Duration::ZERO,
        usage: None,
    });
    let mut ws = app.connect_showing("alice", "chat-taken").await;
    ws.send(&user_message("chat-taken", "m1", "first")).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.user_message_id.as_str(), "m1");
    assert_eq!(last.error_code, None);
    assert_eq!(last.full_content_so_far, "Answered after all.");
}
