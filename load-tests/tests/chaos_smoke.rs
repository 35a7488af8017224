//! The one-minute seeded chaos run of the suite (issue 37): three chatd nodes on one
//! redis-server and PostgreSQL while users chat, cancel, drop and resume; the nemesis kills
//! and pauses nodes, freezes PostgreSQL and restarts Redis from its snapshot. The checker
//! reads the recorded history (one answer or typed ending per acknowledged message,
//! consecutive sequences per device, the same ending on every device, stored answers read
//! back byte-equal, no other user's frame, no marker in Redis or PostgreSQL) and
//! `chatd-load` exits non-zero on any violation. The fault kinds are those the cluster
//! passes today; load-tests/README.md has the longer runs with every kind.

use std::process::Command;

#[test]
fn one_minute_of_faults_breaks_nothing_the_checker_sees() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_chatd-load"))
        .arg("--out")
        .arg(out.path())
        .args(["chaos", "--seed", "3", "--seconds", "60", "--users", "15"])
        .args(["--every", "10"])
        .args([
            "--faults",
            "kill_node,pause_node,pause_postgres,redis_restart_keep",
        ])
        .output()
        .expect("chatd-load starts");
    let summary = std::fs::read_to_string(out.path().join("chaos/summary.txt"))
        .unwrap_or_else(|e| format!("no summary ({e})"));
    let violations =
        std::fs::read_to_string(out.path().join("chaos/violations.txt")).unwrap_or_default();
    assert!(
        output.status.success(),
        "chatd-load chaos failed ({}):\n{summary}\n{violations}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(summary.contains("| violations | 0 |"), "{summary}");
    // The run did what it says: faults of each kind, and turns checked.
    for kind in [
        "kill_node",
        "pause_node",
        "pause_postgres",
        "redis_restart_keep",
    ] {
        assert!(
            summary.contains(&format!("faults: {kind}")),
            "no {kind}: {summary}"
        );
    }
    let turns = summary
        .lines()
        .find_map(|l| l.strip_prefix("| turns | "))
        .and_then(|rest| rest.trim_end_matches(" |").parse::<u64>().ok());
    assert!(turns.is_some_and(|t| t > 50), "turns checked: {summary}");
}
