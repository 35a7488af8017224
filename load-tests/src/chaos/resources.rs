//! The check that the surviving nodes give back what the run made them hold: once every
//! client has gone, each running node's open descriptors and resident memory are compared
//! with what it held when it (last) started.

use std::fmt::Write;
use std::time::Duration;

use tokio::time::Instant;

use super::held::{Usage, describe};
use super::services::Node;

/// Descriptors other than its pooled connections (PostgreSQL, Redis, the model: bounded by
/// their pools, and idle ones stay open) a node may hold after the run beyond its start:
/// a few the runtime opens lazily.
pub const FD_SLACK: usize = 4;
/// Resident memory a node may keep after the run beyond its start: the allocator keeps
/// freed pages of the peak, and caches (prompt templates, keys) fill once.
pub const RSS_SLACK: u64 = 64 << 20;
/// How long the nodes get to close the connections of clients that just left.
const SETTLE: Duration = Duration::from_secs(15);

/// One node's figures after the run.
pub struct Held {
    pub node: usize,
    pub baseline: Usage,
    pub after: Usage,
    /// What its descriptors are after the run ([`describe`]).
    pub fds: String,
}

impl Held {
    /// No client socket left, no descriptor beyond the pools' grown, memory within bounds.
    pub fn ok(&self) -> bool {
        self.after.clients == 0
            && self.after.fds - self.after.pooled
                <= self.baseline.fds - self.baseline.pooled + FD_SLACK
            && self.after.rss <= self.baseline.rss + RSS_SLACK
    }
}

/// Every running node's figures, once they are within bounds or [`SETTLE`] has passed.
pub async fn measure(nodes: &[Node]) -> Vec<Held> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut held = Vec::new();
        for (node, n) in nodes.iter().enumerate() {
            if let (Some((baseline, after)), Some(pid)) = (n.usage().await, n.pid().await) {
                held.push(Held {
                    node,
                    baseline,
                    after,
                    fds: describe(pid, &n.services()).0,
                });
            }
        }
        if held.iter().all(Held::ok) || Instant::now() >= deadline {
            return held;
        }
        // Polling a process's /proc entry: nothing to await but time (a benchmark tool,
        // not a test).
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The table rows, and a violation line per node over its bounds.
pub fn report(held: &[Held]) -> (Vec<(String, String)>, String) {
    let mut rows = Vec::new();
    let mut violations = String::new();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for h in held {
        rows.push((
            format!("node {} descriptors / RSS, start -> after", h.node),
            format!(
                "{} -> {} / {:.1} -> {:.1} MiB ({})",
                h.baseline.fds,
                h.after.fds,
                mib(h.baseline.rss),
                mib(h.after.rss),
                h.fds
            ),
        ));
        if !h.ok() {
            let _ = writeln!(
                violations,
                "VIOLATION resources_not_returned: node {} holds {} descriptors and {:.1} MiB \
                 after the run (started with {} and {:.1} MiB; allowed +{FD_SLACK} and +{} MiB)",
                h.node,
                h.after.fds,
                mib(h.after.rss),
                h.baseline.fds,
                mib(h.baseline.rss),
                RSS_SLACK >> 20
            );
        }
    }
    (rows, violations)
}
