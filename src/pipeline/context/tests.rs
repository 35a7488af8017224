use serde_json::{Value, json};

use super::*;
use crate::llm::openai::wire_body;
use crate::pipeline::HistoryRole;
use crate::pipeline::summary;

fn entry(role: HistoryRole, text: &str) -> HistoryEntry {
    HistoryEntry {
        role,
        content: text.into(),
        created_at: 0,
        tokens: tokens::Tokens::Counted(tokens::count(text)),
    }
}

fn prompt_of(stable: &str, turn: &[&str]) -> Prompt {
    Prompt {
        stable: stable.into(),
        turn: turn.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn trimming_keeps_both_system_messages_and_the_latest_message() {
    let long = "lorem ipsum ".repeat(400);
    let history = vec![
        entry(HistoryRole::User, &long),
        entry(HistoryRole::Assistant, &long),
        entry(HistoryRole::User, "latest question"),
    ];
    let counts = tokens::bounds(&history);
    let build = |prompt: Prompt, window| {
        build_main_request("m", prompt, &history, &counts, Vec::new(), window, 200)
    };
    let (req, dropped) = build(prompt_of("system", &["date", "caution"]), 1000);
    assert_eq!(dropped, 2);
    assert_eq!(
        req.messages,
        [
            LlmMessage::System("system".into()),
            LlmMessage::User("latest question".into()),
            LlmMessage::System("date\n\ncaution".into()),
        ]
    );
    let (req, dropped) = build(prompt_of("system", &["date"]), 100_000);
    assert_eq!((dropped, req.messages.len()), (0, 5));
    assert_eq!(req.messages[4], LlmMessage::System("date".into()));
    // The trailing message counts against the window: a large per-turn block leaves the
    // oldest message out where the same request without it kept everything.
    let fits = fixed_cost(&prompt_of("system", &["date"]), &[]) + total_cost(&counts) + 200;
    let window = u32::try_from(fits).unwrap();
    let (_, dropped) = build(prompt_of("system", &["date"]), window);
    assert_eq!(dropped, 0);
    let block = "lorem ipsum ".repeat(50);
    let (req, dropped) = build(prompt_of("system", &["date", &block]), window);
    assert_eq!(dropped, 1);
    assert_eq!(
        req.messages.last(),
        Some(&LlmMessage::System(format!("date\n\n{block}")))
    );
}

#[test]
fn turn_context_joins_the_trailing_message_or_opens_it() {
    let mut request = LlmRequest::chat("m", vec![LlmMessage::System("stable".into())]);
    add_turn_context(&mut request, "date");
    add_turn_context(&mut request, "data");
    assert_eq!(
        request.messages,
        [
            LlmMessage::System("stable".into()),
            LlmMessage::System("date\n\ndata".into()),
        ]
    );
    let mut request = LlmRequest::chat(
        "m",
        vec![
            LlmMessage::System("stable".into()),
            LlmMessage::User("hi".into()),
        ],
    );
    add_turn_context(&mut request, "date");
    assert_eq!(request.messages[2], LlmMessage::System("date".into()));
}

/// Offers its tools in the order given (a tool set assembled from parts, or a map).
struct Tools(Vec<&'static str>);
impl ToolRunner for Tools {
    fn skills(&self) -> Vec<super::super::tools::SkillInfo> {
        Vec::new()
    }
    fn always_include(&self) -> Vec<String> {
        Vec::new()
    }
    fn definitions(&self, _: &[String]) -> Vec<ToolDef> {
        let def = |name: &str| ToolDef {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}).into(),
        };
        self.0.iter().map(|name| def(name)).collect()
    }
    fn prepare(
        &self,
        _: crate::llm::ToolCall,
        _: &super::super::TurnContext,
        _: &std::sync::Arc<dyn super::super::TurnSink>,
        _: tokio_util::sync::CancellationToken,
    ) -> super::super::tools::PreparedCall {
        unreachable!("no tool is called here")
    }
}

fn plan(window: u32) -> MainPlan {
    let client: std::sync::Arc<dyn crate::llm::LlmClient> =
        std::sync::Arc::new(crate::llm::SimulatedClient::new(std::time::Duration::ZERO));
    MainPlan {
        model: Model {
            spec: std::sync::Arc::new(super::super::models::ModelSpec {
                id: "m".into(),
                name: "m".into(),
                context_window: window,
                capabilities: Vec::new(),
                cost_tier: 1,
            }),
            client,
        },
        category: "general_knowledge".into(),
        language: "en".into(),
        skills: Vec::new(),
        focus_mode: None,
        injection_caution: false,
    }
}

/// A settings/memories data block as `memories::recall` writes it (that module depends on
/// this one, not the reverse).
fn memories(entry: Value) -> Option<String> {
    let items = json!({"app_settings_memories": [
        {"app_id": "travel", "category": "trips", "entries": [entry]},
    ]});
    let toon = super::super::tools::toon(&items);
    Some(format!(
        "The user's app settings and memories follow in TOON.\n```toon\n{toon}\n```"
    ))
}

#[tokio::test]
async fn a_chats_turns_share_every_byte_before_the_trailing_message() {
    let i = Instructions::parse(instructions::DEFAULT_YAML).unwrap();
    let first = vec![entry(HistoryRole::User, "Plan my trip")];
    let memory = memories(json!({"city": "Lisbon"})).unwrap();
    let (one, _) = main_request(
        &i,
        &Tools(vec!["web-search", "docs-search"]),
        &plan(100_000),
        &first,
        "2026-03-01T23:59:00Z",
        &[&memory],
        0,
    )
    .await;
    // The next turn: a day later, a summary written, other memories chosen, the message
    // flagged, the tools offered in another order.
    let mut second = first.clone();
    second.push(entry(HistoryRole::Assistant, "Where to?"));
    second.push(entry(HistoryRole::User, "Porto instead"));
    let summary = summary::chat_block("The user plans a trip");
    let memory = memories(json!({"city": "Porto", "budget": 900})).unwrap();
    let mut flagged = plan(100_000);
    flagged.injection_caution = true;
    let (two, _) = main_request(
        &i,
        &Tools(vec!["docs-search", "web-search"]),
        &flagged,
        &second,
        "2026-03-02T00:01:00Z",
        &[&summary, &memory],
        0,
    )
    .await;
    let (one, two) = (wire_body(&one).unwrap(), wire_body(&two).unwrap());
    assert_eq!(one["tools"], two["tools"], "the same tools, the same bytes");
    let (one, two) = (
        one["messages"].as_array().unwrap(),
        two["messages"].as_array().unwrap(),
    );
    let prefix = one.len() - 1;
    assert_eq!(one[..prefix], two[..prefix]);
    assert_eq!(two[prefix]["content"], "Where to?");
    assert_eq!(two[prefix + 1]["content"], "Porto instead");
    let turn = |m: &[Value]| m.last().unwrap()["content"].as_str().unwrap().to_string();
    let (turn_one, turn_two) = (turn(one), turn(two));
    assert!(turn_one.starts_with("Current date: 2026-03-01") && turn_one.contains("Lisbon"));
    assert!(turn_two.starts_with("Current date: 2026-03-02"));
    for part in ["CAUTION", "The user plans a trip", "Porto"] {
        assert!(turn_two.contains(part), "{part} missing: {turn_two}");
    }
    assert!(!turn_two.contains("Lisbon"));
    let stable = one[0]["content"].as_str().unwrap();
    for per_turn in ["2026", "CAUTION", "```toon", summary::CHAT_HEADER] {
        assert!(
            !stable.contains(per_turn),
            "{per_turn} in the stable prefix"
        );
    }
}

#[tokio::test]
async fn uncounted_history_is_counted_only_when_its_bound_overflows_the_window() {
    let i = Instructions::parse(instructions::DEFAULT_YAML).unwrap();
    // 2,400 bytes each but far fewer tokens: the byte bounds overflow the window chosen
    // below, the exact counts do not.
    let long = "lorem ipsum ".repeat(200);
    let uncounted = |role, text: &str| HistoryEntry {
        role,
        content: text.into(),
        created_at: 0,
        tokens: tokens::Tokens::of(text, None),
    };
    let history = vec![
        uncounted(HistoryRole::User, &long),
        uncounted(HistoryRole::Assistant, &long),
        uncounted(HistoryRole::User, "latest"),
    ];
    let p = plan(0);
    let prompt = prompt(
        &i,
        &PromptInput {
            focus_mode: None,
            category: &p.category,
            with_tools: false,
            language: &p.language,
            datetime: "now",
            injection_caution: false,
        },
    );
    let fixed = fixed_cost(&prompt, &[]);
    let exact = u64::from(tokens::count(&long));
    let window = fixed + 2 * cost(tokens::count(&long)) + cost(1) + 20;
    assert!(fixed + 2 * cost(tokens::Tokens::of(&long, None).bound()) > window);
    let window = u32::try_from(window).unwrap();
    let none = Tools(Vec::new());
    let (fits, tight) = (plan(window), plan(window - 100));
    let request = |plan| main_request(&i, &none, plan, &history, "now", &[], 0);
    let (_, dropped) = request(&fits).await;
    assert_eq!(
        dropped, 0,
        "exact counts ({exact} each) fit: nothing is left out"
    );
    // A window the exact counts overflow too: the oldest goes.
    let (req, dropped) = request(&tight).await;
    assert_eq!(dropped, 1);
    let n = req.messages.len();
    assert_eq!(req.messages[n - 2], LlmMessage::User("latest".into()));
    assert!(matches!(&req.messages[n - 1], LlmMessage::System(t) if t.starts_with("Current date")));
}

#[test]
fn prompt_parts_come_in_order_in_their_places() {
    let mut i = Instructions::parse(instructions::DEFAULT_YAML).unwrap();
    i.focus_modes.push(instructions::FocusMode {
        id: "docs-deep_dive".into(),
        instruction: "Focus mode \"deep dive\": answer thoroughly.".into(),
    });
    let p = PromptInput {
        focus_mode: Some("docs-deep_dive"),
        category: "software_development",
        with_tools: true,
        language: "de",
        datetime: "2026-01-01T00:00:00Z",
        injection_caution: true,
    };
    let Prompt { stable: s, turn } = prompt(&i, &p);
    let pos = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("{needle} missing"));
    assert!(pos("deep dive") < pos("helpful, honest"));
    assert!(pos("helpful, honest") < pos("You are Max"));
    assert!(pos("You are Max") < pos("call the tools"));
    assert!(pos("call the tools") < pos("next step"));
    assert_eq!(turn.len(), 2);
    assert!(turn[0].contains("2026-01-01") && turn[0].contains("`de`"));
    assert!(turn[1].starts_with("CAUTION"));
    assert!(!s.contains("2026") && !s.contains("CAUTION"));
}
