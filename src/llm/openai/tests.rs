use super::*;
use crate::llm::{LlmEvent, LlmMessage, ToolChoice, Usage};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use std::time::Duration;

#[tokio::test]
async fn parses_text_tools_usage_and_done() {
    let lines = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"web-search","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        "[DONE]",
    ];
    let body: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
    let bytes = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
    let events: Vec<_> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
        .collect()
        .await;
    let events: Vec<LlmEvent> = events.into_iter().map(Result::unwrap).collect();
    assert_eq!(events[0], LlmEvent::TextDelta("Hel".into()));
    assert_eq!(events[1], LlmEvent::TextDelta("lo".into()));
    assert!(events.contains(&LlmEvent::Usage(Usage {
        prompt_tokens: 7,
        completion_tokens: 3
    })));
    match events.last().unwrap() {
        LlmEvent::Done {
            finish_reason,
            tool_calls,
        } => {
            assert_eq!(finish_reason.as_deref(), Some("tool_calls"));
            assert_eq!(tool_calls.len(), 1);
            assert_eq!(tool_calls[0].arguments, "{\"q\":1}");
        }
        other => panic!("expected Done, got {other:?}"),
    }
}

#[tokio::test]
async fn reasoning_deltas_in_either_field_are_reasoning_not_text() {
    let lines = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Hmm. ","content":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"Four.","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"4"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ];
    let body: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
    let bytes = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
    let events: Vec<LlmEvent> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        events[..3],
        [
            LlmEvent::ReasoningDelta("Hmm. ".into()),
            LlmEvent::ReasoningDelta("Four.".into()),
            LlmEvent::TextDelta("4".into()),
        ]
    );
}

#[test]
fn request_body_is_the_openai_wire_format() {
    let mut r = LlmRequest::chat(
        "m",
        vec![
            LlmMessage::System("s".into()),
            LlmMessage::User("u".into()),
            LlmMessage::Assistant {
                content: String::new(),
                tool_calls: vec![crate::llm::ToolCall {
                    id: "c1".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
            },
            LlmMessage::Tool {
                tool_call_id: "c1".into(),
                content: "r".into(),
            },
            LlmMessage::Assistant {
                content: "a".into(),
                tool_calls: Vec::new(),
            },
        ],
    );
    r.tools = vec![crate::llm::ToolDef {
        name: "f".into(),
        description: "d".into(),
        parameters: serde_json::json!({"type": "object"}).into(),
    }];
    r.tool_choice = ToolChoice::Function("f".into());
    r.max_tokens = Some(5);
    let body = serde_json::to_value(request_body(&r, ALL)).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "assistant", "content": "a"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {
                "name": "f", "description": "d", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "max_tokens": 5,
        })
    );
    r.tools.clear();
    let body = serde_json::to_value(request_body(&r, ALL)).unwrap();
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

const ALL: Hints = Hints {
    cache_key: true,
    user: true,
};

#[test]
fn provider_hints_are_sent_only_when_configured() {
    let mut r = LlmRequest::chat("m", vec![LlmMessage::User("u".into())]);
    r.cache_key = Some("k".repeat(32));
    r.user = Some("h".repeat(32));
    let body = serde_json::to_value(request_body(&r, ALL)).unwrap();
    assert_eq!(body["prompt_cache_key"], "k".repeat(32));
    assert_eq!(body["user"], "h".repeat(32));
    let none = Hints {
        cache_key: false,
        user: false,
    };
    let body = serde_json::to_value(request_body(&r, none)).unwrap();
    assert!(body.get("prompt_cache_key").is_none() && body.get("user").is_none());
}

#[tokio::test]
async fn provider_error_in_the_stream_is_an_error() {
    let body = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";
    let bytes = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
    let events: Vec<_> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
        .collect()
        .await;
    assert!(matches!(events.last(), Some(Err(LlmError::Stream(m))) if m == "overloaded"));
}

#[tokio::test]
async fn truncated_stream_is_an_error() {
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    let bytes = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
    let events: Vec<_> = sse_to_events(bytes.eventsource(), Duration::from_secs(5))
        .collect()
        .await;
    assert!(matches!(events.last(), Some(Err(LlmError::Stream(_)))));
}

#[test]
fn local_endpoints_are_not_metered() {
    for url in [
        "http://127.0.0.1:11434/v1",
        "http://localhost:8000/v1",
        "http://10.0.0.5/v1",
        "http://192.168.1.2:8080",
        "http://[::1]:9000/v1",
    ] {
        assert!(is_local(url), "{url}");
    }
    for url in [
        "https://api.openai.com/v1",
        "https://8.8.8.8/v1",
        "not a url",
    ] {
        assert!(!is_local(url), "{url}");
    }
}

/// The idle deadline counts from the last event: a stream whose events come more often
/// than `idle` runs for as long as it lasts, and a gap longer than `idle` ends it as idle.
#[tokio::test(start_paused = true)]
async fn idle_deadline_counts_from_the_last_event() {
    let chunk = |text: &str| {
        let line = format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#);
        Ok::<_, std::io::Error>(bytes::Bytes::from(format!("data: {line}\n\n")))
    };
    // Five events 40 ms apart (200 ms in all) under a 100 ms idle deadline, then done.
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let steady = async move {
        for i in 0..5 {
            tokio::time::sleep(Duration::from_millis(40)).await;
            let _ = tx.send(chunk(&i.to_string())).await;
        }
        let _ = tx
            .send(Ok(bytes::Bytes::from_static(b"data: [DONE]\n\n")))
            .await;
    };
    let body = futures_util::stream::poll_fn(|cx| rx.poll_recv(cx));
    let read = sse_to_events(body.eventsource(), Duration::from_millis(100)).collect::<Vec<_>>();
    let ((), events) = tokio::join!(steady, read);
    assert_eq!(events.len(), 6, "{events:?}");
    assert!(events.iter().all(Result::is_ok), "{events:?}");

    // Two events, then silence past the deadline: the stream ends as idle.
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    tx.send(chunk("a")).await.unwrap();
    tx.send(chunk("b")).await.unwrap();
    let body = futures_util::stream::poll_fn(|cx| rx.poll_recv(cx));
    let events: Vec<_> = sse_to_events(body.eventsource(), Duration::from_millis(100))
        .collect()
        .await;
    drop(tx);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[2], Err(LlmError::Idle(_))), "{events:?}");
}
