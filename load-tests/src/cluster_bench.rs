//! Cluster mode over real processes (issue: many chatd nodes on one Redis): two chatd
//! children in cluster mode on a harness redis-server and PostgreSQL, a paced fake LLM.
//!
//! - **delivery**: every chat has its sender (A) and a second device (C) on node 1 and a
//!   device (B) on node 2, all showing the chat; answers run back to back. For each
//!   `ai_message_update`, the arrival at B minus the arrival at A is what the other node
//!   adds (bus publish after the log append, seal/open, the other node's socket); C minus
//!   A is the spread between two devices of one node. Frames/s counts A's frames.
//! - **cancel**: a device on node 2 cancels a turn running on node 1 once its first chunk
//!   arrived; time from the `cancel_ai_task` send to the interrupted final frame there.
//! - **resume**: a third node answers with about 500 frames (a 495-paragraph answer from
//!   its own paced fake LLM); once it ended, a device sends `resume_ai_task` from 0, on the other node
//!   and on the same node; time from the send to the last replayed frame (the final one),
//!   every frame checked for order.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd::auth::{TokenKeys, UserId};
use chatd_protocol::{
    CancelAiTask, ChatId, ChatMessageAdded, ClientMessage, MessageId, ResumeAiTask, ServerMessage,
    SetActiveChat, TaskId,
};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;
use tokio::sync::Mutex;

use crate::fake_llm::{Mode, Script};
use crate::procs::{SECRET, Server};
use crate::stats::summarize;

const MASTER_KEY: &str = "5e8b2d4f6a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d2f4a6c8e0b1d3f5a7c9e2b";

fn token(user: &str) -> anyhow::Result<String> {
    Ok(TokenKeys::from_secret(SECRET.as_bytes())
        .mint(&UserId::parse(user)?, Duration::from_secs(3600))?)
}

async fn device(node: &Server, user: &str, chat: &str) -> anyhow::Result<WsClient> {
    let url = format!("ws://{}/v1/ws?token={}", node.addr, token(user)?);
    let mut ws = WsClient::connect(&url).await?;
    ws.send(&ClientMessage::SetActiveChat(SetActiveChat {
        chat_id: Some(ChatId::parse(chat)?),
    }))
    .await;
    ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
        .await;
    Ok(ws)
}

fn message(chat: &str, id: String) -> anyhow::Result<ClientMessage> {
    Ok(ClientMessage::ChatMessageAdded(Box::new(
        ChatMessageAdded::user(
            ChatId::parse(chat)?,
            MessageId::parse(id)?,
            "benchmark question".into(),
            1,
        ),
    )))
}

/// Arrival instants of each (task, sequence) at one device, until the final frame.
async fn arrivals(
    ws: &mut WsClient,
    task: Option<&TaskId>,
) -> (TaskId, HashMap<u64, Instant>, bool) {
    let mut seen = HashMap::new();
    loop {
        if let ServerMessage::AiMessageUpdate(u) = ws.recv().await
            && task.is_none_or(|t| t == &u.task_id)
        {
            seen.insert(u.sequence, Instant::now());
            if u.is_final_chunk {
                return (u.task_id, seen, u.interrupted_by_revocation);
            }
        }
    }
}

pub async fn run(chats: usize, seconds: u64, cancels: usize, resumes: usize) -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let pg = Postgres::start().await?;
    pg.create_database("cluster_bench").await?;
    let llm = Server::fake_llm(&Script {
        mode: Mode::Paced,
        tokens: 48,
        pace: Duration::from_millis(10),
        think: Duration::ZERO,
        preprocess: None,
    })?;
    let env = |node: &str| {
        vec![
            ("CHATD__CLUSTER__ENABLED".to_string(), "true".to_string()),
            ("CHATD__CLUSTER__NODE_ID".into(), node.to_string()),
            ("CHATD__CACHE__BACKEND".into(), "redis".into()),
            ("CHATD__CACHE__REDIS_URL".into(), redis.url()),
            ("CHATD__STORE__URL".into(), pg.url("cluster_bench")),
            ("CHATD__LINKS__ENABLED".into(), "false".into()),
            ("CHATD_MASTER_KEY".into(), MASTER_KEY.into()),
            ("CHATD__AUTH__SECRET".into(), SECRET.into()),
        ]
    };
    let n1 = Server::chatd_with(&llm, &env("bench-1"))?;
    let n2 = Server::chatd_with(&llm, &env("bench-2"))?;

    // Delivery.
    let remote = Arc::new(Mutex::new(Vec::new()));
    let local = Arc::new(Mutex::new(Vec::new()));
    let frames = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..chats {
        let chat = format!("bench-chat-{i}");
        let user = format!("bench-user-{i}");
        let mut a = device(&n1, &user, &chat).await?;
        let mut c = device(&n1, &user, &chat).await?;
        let mut b = device(&n2, &user, &chat).await?;
        let (remote, local, frames) = (remote.clone(), local.clone(), frames.clone());
        runs.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let Ok(msg) = message(&chat, format!("m{n}")) else {
                    return;
                };
                a.send(&msg).await;
                // The three devices are read at once, so each arrival is timed as it comes.
                let ((_, at_a, _), (_, at_c, _), (_, at_b, _)) = tokio::join!(
                    arrivals(&mut a, None),
                    arrivals(&mut c, None),
                    arrivals(&mut b, None)
                );
                frames.fetch_add(at_a.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let missing: Vec<&u64> = at_a.keys().filter(|k| !at_b.contains_key(k)).collect();
                if !missing.is_empty() {
                    eprintln!(
                        "the other node missed sequences {missing:?} of {}",
                        at_a.len()
                    );
                }
                let mut r = remote.lock().await;
                let mut l = local.lock().await;
                for (seq, ta) in &at_a {
                    if let Some(tb) = at_b.get(seq) {
                        r.push(tb.saturating_duration_since(*ta));
                    }
                    if let Some(tc) = at_c.get(seq) {
                        l.push(tc.saturating_duration_since(*ta));
                    }
                }
            }
        });
    }
    let started = Instant::now();
    while runs.join_next().await.is_some() {}
    let elapsed = started.elapsed().as_secs_f64();
    let frames = frames.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "cluster delivery: 2 nodes, {chats} chats (3 devices each), {:.0} frames/s at the senders",
        frames as f64 / elapsed
    );
    println!(
        "  other node minus sender's node: {}",
        summarize(std::mem::take(&mut *remote.lock().await))
    );
    println!(
        "  same node, second device minus sender: {}",
        summarize(std::mem::take(&mut *local.lock().await))
    );

    // Cancel across nodes.
    let mut latencies = Vec::new();
    let mut late = 0;
    for i in 0..cancels {
        let chat = format!("cancel-chat-{i}");
        let user = format!("cancel-user-{i}");
        let mut a = device(&n1, &user, &chat).await?;
        let mut b = device(&n2, &user, &chat).await?;
        a.send(&message(&chat, "m1".into())?).await;
        let task = b
            .recv_until(|m| match m {
                ServerMessage::AiMessageUpdate(u) => Some(u.task_id.clone()),
                _ => None,
            })
            .await;
        let sent = Instant::now();
        b.send(&ClientMessage::CancelAiTask(CancelAiTask {
            task_id: task.clone(),
            chat_id: None,
        }))
        .await;
        let ack = b
            .recv_until(|m| match m {
                ServerMessage::AiTaskCancelRequested(_) => Some(String::from("requested")),
                ServerMessage::Error(e) => Some(format!("{:?}", e.code)),
                _ => None,
            })
            .await;
        if ack != "requested" {
            eprintln!("cancel refused: {ack}");
        }
        let (_, _, interrupted) = arrivals(&mut b, Some(&task)).await;
        if interrupted {
            latencies.push(sent.elapsed());
        } else {
            late += 1;
        }
        drop(a);
    }
    let s = summarize(latencies);
    println!(
        "cluster cancel (sent to node 2, turn on node 1): {s} ({late} answers finished first)"
    );

    // Resume a 500-frame log.
    // Paced (a paragraph every 8 ms) so that each paragraph is a frame of its own (an
    // instant answer reaches chatd's chunker several paragraphs at a time).
    let long = Server::fake_llm(&Script {
        mode: Mode::Paced,
        tokens: 8 * 495,
        pace: Duration::from_millis(1),
        think: Duration::ZERO,
        preprocess: None,
    })?;
    let n3 = Server::chatd_with(&long, &env("bench-3"))?;
    let (mut other, mut same) = (Vec::new(), Vec::new());
    let mut frames_per_log = 0;
    for i in 0..resumes {
        let chat = format!("resume-chat-{i}");
        let user = format!("resume-user-{i}");
        let mut a = device(&n3, &user, &chat).await?;
        a.send(&message(&chat, "m1".into())?).await;
        let task = a
            .recv_until(|m| match m {
                ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
                _ => None,
            })
            .await;
        arrivals(&mut a, Some(&task)).await;
        for (node, out) in [(&n2, &mut other), (&n3, &mut same)] {
            let mut d = device(node, &user, &chat).await?;
            let (took, frames) = resume(&mut d, &chat, &task).await?;
            frames_per_log = frames;
            out.push(took);
        }
    }
    println!(
        "cluster resume of a finished {frames_per_log}-frame log from 0: other node {}; same node {}",
        summarize(other),
        summarize(same)
    );
    drop((n1, n2, n3, llm, long));
    drop((redis, pg));
    Ok(())
}

/// Resumes `task` from 0 and reads the replay to its final frame: (time, frames replayed).
async fn resume(ws: &mut WsClient, chat: &str, task: &TaskId) -> anyhow::Result<(Duration, usize)> {
    let sent = Instant::now();
    ws.send(&ClientMessage::ResumeAiTask(ResumeAiTask {
        chat_id: ChatId::parse(chat)?,
        task_id: task.clone(),
        last_sequence: 0,
    }))
    .await;
    // What came before the answer (a catch-up of the chat on connecting) is not the replay.
    let recovered = ws
        .recv_until(|m| match m {
            ServerMessage::AiTaskResumed(r) => Some(r.recovered),
            _ => None,
        })
        .await;
    anyhow::ensure!(recovered, "the log of {task} was not recovered");
    let mut frames = 0;
    let mut sequence = 0;
    loop {
        match ws.recv().await {
            ServerMessage::AiMessageUpdate(u) if &u.task_id == task => {
                frames += 1;
                anyhow::ensure!(
                    u.sequence == sequence + 1,
                    "replay out of order: sequence {} after {sequence} (frame {frames})",
                    u.sequence
                );
                sequence = u.sequence;
                if u.is_final_chunk {
                    return Ok((sent.elapsed(), frames));
                }
            }
            ServerMessage::AiBackgroundResponseCompleted(_) => {
                anyhow::bail!("the resuming device was not shown the chat")
            }
            _ => frames += 1,
        }
    }
}
