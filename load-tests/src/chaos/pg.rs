//! PostgreSQL as a fault target: its processes (the postmaster and every backend), for a
//! freeze (SIGSTOP, then SIGCONT: to chatd, a store that stops answering, then comes back)
//! or a crash (SIGKILL of all, then the harness starts it again on the same data).

use super::services::signal;

/// The postmaster listening on `port` (found by its command line) and its children.
pub fn processes(port: u16) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let port = port.to_string();
    let postmaster = pids.iter().copied().find(|pid| {
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let named = args.first().is_some_and(|a| a.ends_with(b"postgres"));
        named
            && args
                .windows(2)
                .any(|w| w[0] == b"-p" && w[1] == port.as_bytes())
    });
    let Some(postmaster) = postmaster else {
        return Vec::new();
    };
    let mut all = vec![postmaster];
    all.extend(
        pids.into_iter()
            .filter(|pid| parent(*pid) == Some(postmaster)),
    );
    all
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Sends `sig` to every PostgreSQL process (the postmaster first on STOP, last on CONT).
pub async fn signal_all(pids: &[u32], sig: &str) -> anyhow::Result<()> {
    let ordered: Vec<u32> = if sig == "CONT" {
        pids.iter().rev().copied().collect()
    } else {
        pids.to_vec()
    };
    for pid in ordered {
        // A backend may have exited since the list was made.
        let _ = signal(pid, sig).await;
    }
    anyhow::ensure!(!pids.is_empty(), "no PostgreSQL process found");
    Ok(())
}

/// A crash of every PostgreSQL process: the postmaster is stopped first, so it forks no
/// backend between the listing and the kill (one would outlive it and hold the shared
/// memory, and the restart would fail), then every backend and the postmaster are
/// SIGKILLed, and the kill waits (a few seconds at most) until all are gone. Returns how
/// many were killed.
pub async fn kill_all(port: u16) -> anyhow::Result<usize> {
    let Some(&postmaster) = processes(port).first() else {
        anyhow::bail!("no PostgreSQL process found");
    };
    let _ = signal(postmaster, "STOP").await;
    let mut pids = processes(port);
    pids.retain(|p| *p != postmaster);
    pids.push(postmaster);
    for pid in &pids {
        let _ = signal(*pid, "KILL").await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(pids.len())
}

/// Running (a zombie waiting for its parent counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}
