//! Pseudonymisation's cost on a message's path to the model (issue 34's target: at most
//! 50 µs p50 for a 2 KB message), measured in-process: the personal data of the text is
//! found (every kind on: e-mail, phone with a region, IBAN, card, IP, two names) and
//! replaced from the chat's table, the way [`chatd::privacy::PrivateClient`] does for each
//! message of a request. Four texts: a 2 KB message holding one value of each kind, the
//! same length of prose without any, a digit-heavy 2 KB message (an order list: many
//! candidates, few hits), and a whole main request's worth of text (a 3 KB system prompt
//! and 20 history messages of 2 KB). Placeholders are restored from a streamed answer too
//! (per 16-byte chunk).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd::config::{PersonalData, PrivacyConfig};
use chatd::privacy::{ChatPrivacy, Detector, Pseudonyms, Restorer};

use crate::stats::summarize;

const MESSAGE_BYTES: usize = 2048;

fn privacy() -> Arc<ChatPrivacy> {
    use PersonalData::*;
    let config = PrivacyConfig {
        pseudonymize: vec![Email, Phone, Iban, Card, Ip, Name],
        names: vec!["Ada Lovelace".into(), "Charles Babbage".into()],
        phone_region: "DE".into(),
    };
    ChatPrivacy::new(Arc::new(Detector::new(&config)), Pseudonyms::default())
}

/// `seed` repeated to `MESSAGE_BYTES` (cut at a char boundary).
fn fill(seed: &str) -> String {
    let mut text = String::with_capacity(MESSAGE_BYTES + seed.len());
    while text.len() < MESSAGE_BYTES {
        text.push_str(seed);
    }
    let mut end = MESSAGE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

fn texts() -> Vec<(&'static str, String)> {
    let prose = "The meeting went well and we agreed to revisit the plan next week, after the \
                 team has had time to read the proposal and think about the open questions. ";
    let values = "Please write to ada@example.com or call +49 30 901820, pay to IBAN DE89 3704 \
                  0044 0532 0130 00 (card 4111 1111 1111 1111), the server is 192.168.1.20, \
                  and Ada Lovelace will review it. ";
    let mut with_values = String::from(values);
    with_values.push_str(&fill(prose));
    with_values.truncate(MESSAGE_BYTES);
    let orders = "Order 2024-117, 3 x item 5521 at 19.99, shipped 2026-11-03, ref 88412; ";
    vec![
        ("2 KB message with one value of each kind", with_values),
        ("2 KB prose, no personal data", fill(prose)),
        (
            "2 KB digit-heavy message (orders, dates, prices)",
            fill(orders),
        ),
    ]
}

fn time(iterations: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..iterations / 10 {
        f();
    }
    (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect()
}

pub fn run(iterations: usize) -> anyhow::Result<()> {
    println!(
        "pseudonymisation, {iterations} iterations each (every kind on; a new turn each time)"
    );
    for (name, text) in texts() {
        let samples = time(iterations, || {
            let p = privacy();
            std::hint::black_box(p.hide(std::hint::black_box(&text)));
        });
        println!("  hide  {name}: {}", summarize(samples));
    }
    // A main request: the system prompt and 20 different history messages, each hidden; then
    // the turn's next request (the same texts: remembered).
    let (_, message) = &texts()[0];
    let system = fill("You are a helpful assistant. Answer in the user's language. ").repeat(2);
    let history: Vec<String> = (0..20).map(|i| format!("{i}. {message}")).collect();
    let request = |p: &ChatPrivacy| {
        std::hint::black_box(p.hide(&system));
        for m in &history {
            std::hint::black_box(p.hide(m));
        }
    };
    let (mut first, mut again) = (Vec::new(), Vec::new());
    for _ in 0..iterations / 10 {
        let p = privacy();
        let start = Instant::now();
        request(&p);
        first.push(start.elapsed());
        let start = Instant::now();
        request(&p);
        again.push(start.elapsed());
    }
    println!(
        "  hide  a main request (3 KB system prompt + 20 x 2 KB history): {}",
        summarize(first)
    );
    println!(
        "  hide  the same turn's next request (remembered): {}",
        summarize(again)
    );
    // Restoring a 2 KB streamed answer holding the placeholders, 16 bytes at a time.
    let p = privacy();
    let answer = p.hide(message).into_owned();
    let chunks: Vec<String> = answer
        .as_bytes()
        .chunks(16)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let samples = time(iterations, || {
        let mut r = Restorer::default();
        for c in &chunks {
            std::hint::black_box(r.push(&p, c));
        }
        std::hint::black_box(r.finish(&p));
    });
    println!(
        "  reveal a 2 KB answer in {} chunks: {}",
        chunks.len(),
        summarize(samples)
    );
    Ok(())
}
