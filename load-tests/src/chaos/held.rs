//! What a process holds, read from `/proc`: its resident memory and open descriptors, the
//! TCP ones told apart by the service they lead to (pooled) or not (clients). The chaos
//! nodes record it at start (`services`) and the run compares after (`resources`).

use crate::procs::Server;

/// Resident memory and open descriptors of a process: all of them, those connected to
/// the services it uses (pooled) and the other TCP connections (clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub rss: u64,
    pub fds: usize,
    pub pooled: usize,
    pub clients: usize,
}

impl Usage {
    pub fn of(server: &Server, services: &[(u16, &'static str)]) -> anyhow::Result<Usage> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))?.count();
        let (_, pooled, clients) = describe(server.pid(), services);
        Ok(Usage {
            rss: server.rss_bytes()?,
            fds,
            pooled,
            clients,
        })
    }
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
