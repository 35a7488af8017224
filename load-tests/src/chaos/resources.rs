//! The check that the surviving nodes give back what the run made them hold: once every
//! client has gone, each running node's open descriptors and resident memory are compared
//! with what it held when it (last) started.

use std::fmt::Write;
use std::time::Duration;

use tokio::time::Instant;

use super::services::{Node, Usage};

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

/// What a process's descriptors are: TCP sockets counted by the service they lead to
/// (`services`: port and name) or as clients, and the rest by kind (`pipe`, `file`...).
/// Also the counts of sockets to the services (pooled) and of the others (clients).
pub fn describe(pid: u32, services: &[(u16, &'static str)]) -> (String, usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (String::new(), 0, 0);
    };
    let peers = tcp_peers(pid);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let (mut pooled, mut clients) = (0, 0);
    for e in dir.flatten() {
        let target = std::fs::read_link(e.path())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let kind = match target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            Some(inode) => match peers.get(inode) {
                Some(0) => "listening".to_string(),
                Some(port) => match services.iter().find(|(p, _)| p == port) {
                    Some((_, name)) => {
                        pooled += 1;
                        format!("to {name}")
                    }
                    None => {
                        clients += 1;
                        "client".to_string()
                    }
                },
                None => "socket".to_string(),
            },
            None if target.starts_with('/') => "file".to_string(),
            None => target.split(':').next().unwrap_or("").to_string(),
        };
        *kinds.entry(kind).or_default() += 1;
    }
    let text = kinds
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    (text, pooled, clients)
}

/// Socket inode → remote port (0 when listening), from `/proc/PID/net/tcp{,6}`.
fn tcp_peers(pid: u32) -> std::collections::HashMap<String, u16> {
    let mut peers = std::collections::HashMap::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(inode)) = (cols.get(2), cols.get(9)) else {
                continue;
            };
            let port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                .unwrap_or(0);
            peers.insert((*inode).to_string(), port);
        }
    }
    peers
}
