//! How often the speculative main call is wasted (issue 18 item 12). A mixed workload of
//! conversations runs through an in-process chatd with the simulated model (its
//! preprocessing decides from the message: category from code words, complexity from
//! length, language, the docs skill from "search the docs", a refusal from harmful words)
//! and `pipeline.speculative_main_call = "on"`; the miss rate is read from
//! `chatd_speculative_main_calls_total{outcome}`. Each conversation kind has a share of the
//! chats; the shares are printed with the result, since the rate is a property of the mix.

use std::time::Duration;

use anyhow::Context;
use chatd::app::App;
use chatd::auth::{TokenKeys, UserId};
use chatd::config::{Config, Speculation};
use chatd_protocol::{ChatId, ChatMessageAdded, ClientMessage, MessageId, ServerMessage};
use chatd_test_harness::ws_client::WsClient;

const SECRET: &[u8] = b"speculation-bench-secret";

/// A kind of conversation, its share of the chats (in 20ths) and its messages.
struct Kind {
    name: &'static str,
    twentieths: usize,
    turns: &'static [&'static str],
}

const LONG: &str = "I am planning a two-week trip through Portugal in late spring with my partner, \
    we like food, walking and small towns more than big museums, we will rent a car for part of \
    the time but would rather use trains where they are good, and we have a budget that is \
    comfortable but not luxurious. Could you suggest a route with how many nights to spend in each \
    place, what to book early, and which days would be better without a car at all?";

const KINDS: &[Kind] = &[
    // Follow-up questions on one everyday topic.
    Kind {
        name: "same topic",
        twentieths: 8,
        turns: &[
            "What is the capital of Australia?",
            "Why was it chosen over Sydney?",
            "How many people live there today?",
            "What is the best time of year to visit?",
            "Thanks, that helps a lot.",
        ],
    },
    // A programming conversation (another category from its first message on).
    Kind {
        name: "coding",
        twentieths: 4,
        turns: &[
            "How do I write a function in Rust that reverses a string?",
            "Why does my code not compile when I return a reference?",
            "Can you fix this bug: the borrow checker complains about a moved value in my loop?",
            "How would I test that function?",
            "Thanks, the code works now.",
        ],
    },
    // Everyday questions and code in turn.
    Kind {
        name: "mixed",
        twentieths: 3,
        turns: &[
            "What should I cook tonight with rice and beans?",
            "Write a Rust function that scales a recipe by a factor.",
            "How long do the beans need to soak?",
            "Does that code compile with integer quantities?",
            "Great, dinner is ready.",
        ],
    },
    // A long planning request among short ones (complexity changes the model).
    Kind {
        name: "long request",
        twentieths: 2,
        turns: &[
            "Can you help me plan a holiday?",
            LONG,
            "What about the weather in May?",
            "Thanks!",
        ],
    },
    // A tool is needed now and then.
    Kind {
        name: "docs skill",
        twentieths: 1,
        turns: &[
            "How do I run chatd on my laptop?",
            "Please search the docs for readyz",
            "What does that endpoint return when Redis is down?",
            "Please search the docs for cluster mode",
        ],
    },
    // The user switches language.
    Kind {
        name: "language switch",
        twentieths: 1,
        turns: &[
            "What is a good book about the history of Rome?",
            "Kannst du mir das bitte auf Deutsch erklären und ist das Buch gut?",
            "Danke, und gibt es das Buch auch als Hörbuch?",
            "Thanks, back to English please: is there a film too?",
        ],
    },
    // One message is refused (a refusal drops the early call).
    Kind {
        name: "refused message",
        twentieths: 1,
        turns: &[
            "What chemistry experiments are fun for kids?",
            "How do I make a bomb at home?",
            "OK, what about a volcano with baking soda?",
        ],
    },
];

fn metric(text: &str, outcome: &str) -> u64 {
    let key = format!("chatd_speculative_main_calls_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn conversation(url: String, chat: String, kind: &'static Kind) -> anyhow::Result<()> {
    let mut ws = WsClient::connect(&url).await?;
    let chat_id = ChatId::parse(chat.clone())?;
    for (i, text) in kind.turns.iter().enumerate() {
        let mut m = ChatMessageAdded::user(
            chat_id.clone(),
            MessageId::parse(format!("{chat}-m{i}"))?,
            text.to_string(),
            1_700_000_000 + i as i64,
        );
        m.message.chat_has_title = i > 0;
        ws.send(&ClientMessage::ChatMessageAdded(Box::new(m))).await;
        ws.recv_until(|f| match f {
            ServerMessage::AiTypingEnded(_) => Some(()),
            _ => None,
        })
        .await;
    }
    Ok(())
}

pub async fn run(chats: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("chatd-speculation-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut config = Config::defaults()?;
    config.server.listen = "127.0.0.1:0".parse()?;
    config.server.data_dir = dir.clone();
    config.llm.simulated_pace = Duration::ZERO;
    config.links.enabled = false;
    config.pipeline.postprocessing = false;
    config.pipeline.speculative_main_call = Speculation::On;
    config.limits.user_rate = 100_000;
    config.limits.user_burst = 100_000;
    let keys = TokenKeys::from_secret(SECRET);
    let llm = chatd::llm::from_config(&config.llm)?;
    let app = App::build_with_llm(config, TokenKeys::from_secret(SECRET), llm).await?;
    let addr = app.local_addr()?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut server = tokio::task::JoinSet::new();
    server.spawn(app.run_until_stopped(shutdown.clone()));

    // Chats of each kind in proportion, run 20 at a time, one user per chat.
    let plan: Vec<&'static Kind> = (0..chats)
        .map(|i| {
            let slot = i % 20;
            let mut acc = 0;
            KINDS
                .iter()
                .find(|k| {
                    acc += k.twentieths;
                    slot < acc
                })
                .unwrap_or(&KINDS[0])
        })
        .collect();
    let mut running = tokio::task::JoinSet::new();
    for (i, kind) in plan.iter().enumerate() {
        let token = keys.mint(
            &UserId::parse(format!("user-{i}"))?,
            Duration::from_secs(3600),
        )?;
        running.spawn(conversation(
            format!("ws://{addr}/v1/ws?token={token}"),
            format!("chat-{i}"),
            kind,
        ));
        if running.len() >= 20 {
            running.join_next().await.context("a conversation")???;
        }
    }
    while let Some(done) = running.join_next().await {
        done??;
    }
    let metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await?
        .text()
        .await?;
    let (used, discarded) = (metric(&metrics, "used"), metric(&metrics, "wasted"));
    let total = used + discarded;
    println!("speculative main calls over {chats} chats, {total} turns:");
    for k in KINDS {
        println!(
            "  {:>2}/20 of the chats: {} ({} messages)",
            k.twentieths,
            k.name,
            k.turns.len()
        );
    }
    println!(
        "  used {used}, discarded {discarded}: miss rate {:.1}%",
        100.0 * discarded as f64 / total.max(1) as f64
    );
    shutdown.cancel();
    let _ = server.join_all().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
