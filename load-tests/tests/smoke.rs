//! CI smoke: two scenarios for a second or two each with tiny counts, so they keep
//! compiling and working. Asserts only that they complete and write a report; timing
//! never decides pass or fail.

use std::path::Path;
use std::process::Command;

fn run(out: &Path, args: &[&str]) -> serde_json::Value {
    let status = Command::new(env!("CARGO_BIN_EXE_chatd-load"))
        .arg("--out")
        .arg(out)
        .args(args)
        .status()
        .expect("chatd-load starts");
    assert!(status.success(), "chatd-load {args:?} failed: {status}");
    let scenario = args[0];
    let text = std::fs::read_to_string(out.join(scenario).join("report.json"))
        .expect("report.json written");
    let report: serde_json::Value = serde_json::from_str(&text).expect("report is JSON");
    assert_eq!(report["scenario"], scenario);
    assert!(report["machine"]["cores"].as_u64().is_some());
    assert!(
        !report["summary"]
            .as_array()
            .expect("summary lines")
            .is_empty(),
        "a text summary"
    );
    report
}

#[test]
fn stream_smoke() {
    let out = tempfile::tempdir().unwrap();
    let report = run(
        out.path(),
        &[
            "stream",
            "--concurrency",
            "2",
            "--duration",
            "1s",
            "--tokens",
            "8",
        ],
    );
    let run0 = &report["results"]["runs"][0];
    for kind in ["direct", "floor", "chatd"] {
        assert!(
            run0[kind]["chats"].as_u64().unwrap() > 0,
            "{kind} completed chats: {run0}"
        );
        assert_eq!(run0[kind]["errors"], 0, "{kind}: {run0}");
    }
    assert!(
        out.path()
            .join("stream/throughput_vs_concurrency.png")
            .exists()
    );
}

#[test]
fn idle_smoke() {
    let out = tempfile::tempdir().unwrap();
    let report = run(
        out.path(),
        &[
            "idle",
            "--connections",
            "20",
            "--steps",
            "2",
            "--ping",
            "500ms",
            "--hold",
            "1s",
        ],
    );
    for kind in ["floor", "chatd"] {
        assert_eq!(report["results"][kind]["held"], 20, "{kind}: {report}");
    }
}
