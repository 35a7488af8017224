//! A throwaway Redis Cluster: `masters` `redis-server`s with `--cluster-enabled yes` on free
//! ports (no persistence, no replicas), joined by `redis-cli --cluster create`; ready once
//! every node reports `cluster_state:ok` with all 16384 slots assigned. Killed on drop.

use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use crate::process::{find_binary, wait_until};
use crate::redis;

/// Slots of a Redis Cluster.
pub const SLOTS: u32 = 16384;

pub struct RedisCluster {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

struct Node {
    port: u16,
    _child: Child,
}

impl RedisCluster {
    /// Starts `masters` nodes (at least 3, as `redis-cli --cluster create` demands) and
    /// assigns the slots evenly among them.
    pub async fn start(masters: usize) -> anyhow::Result<RedisCluster> {
        if masters < 3 {
            bail!("a Redis Cluster needs at least 3 masters (asked for {masters})");
        }
        let bin = find_binary("redis-server", &[], "apt-get install redis-server")?;
        let dir = tempfile::tempdir()?;
        let mut nodes = Vec::with_capacity(masters);
        let mut taken = std::collections::HashSet::new();
        for _ in 0..masters {
            // A port that was free a moment ago can come back twice: each node needs its own.
            let mut port = crate::free_port();
            while !taken.insert(port) {
                port = crate::free_port();
            }
            let node_dir = dir.path().join(port.to_string());
            std::fs::create_dir(&node_dir)?;
            let child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "5000"])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting redis-server (cluster node)")?;
            nodes.push(Node {
                port,
                _child: child,
            });
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        for &port in &cluster.ports() {
            wait_until("redis cluster node", || async move {
                redis::cli(port, &["PING"])
                    .await
                    .is_ok_and(|r| r.trim() == "PONG")
            })
            .await?;
        }
        cluster.create().await?;
        let cluster_ref = &cluster;
        wait_until(
            "redis cluster (cluster_state:ok on every node)",
            || async move { cluster_ref.settled().await },
        )
        .await?;
        Ok(cluster)
    }

    /// `redis-cli --cluster create` over every node, no replicas.
    async fn create(&self) -> anyhow::Result<()> {
        let bin = find_binary("redis-cli", &[], "apt-get install redis-tools")?;
        let addrs: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new(bin)
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .context("running redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// True once every node sees the whole cluster, all slots assigned and state ok.
    async fn settled(&self) -> bool {
        for port in self.ports() {
            let Ok(info) = redis::cli(port, &["CLUSTER", "INFO"]).await else {
                return false;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                    .map(str::to_string)
            };
            let ok = field("cluster_state").as_deref() == Some("ok")
                && field("cluster_slots_assigned").as_deref() == Some(&SLOTS.to_string())
                && field("cluster_known_nodes").as_deref() == Some(&self.nodes.len().to_string());
            if !ok {
                return false;
            }
        }
        true
    }

    /// `redis://127.0.0.1:P` of the first node: the seed a cluster client starts from.
    pub fn seed_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[0].port)
    }

    /// `redis://127.0.0.1:P` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Runs `redis-cli -p PORT args...` against node `node` (no redirects followed) and
    /// returns its stdout.
    pub async fn cli(&self, node: usize, args: &[&str]) -> anyhow::Result<String> {
        redis::cli(self.port_of(node)?, args).await
    }

    /// Runs `redis-cli -c` against the seed node: a keyed command goes to the key's owner.
    pub async fn cli_routed(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec!["-c"];
        all.extend_from_slice(args);
        redis::cli(self.port_of(0)?, &all).await
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`; the hash tag decides).
    pub async fn keyslot(&self, key: &str) -> anyhow::Result<u16> {
        let slot = self.cli(0, &["CLUSTER", "KEYSLOT", key]).await?;
        slot.trim()
            .parse()
            .with_context(|| format!("CLUSTER KEYSLOT answered {slot:?}"))
    }

    /// The keys node `node` holds.
    pub async fn node_keys(&self, node: usize) -> anyhow::Result<Vec<String>> {
        redis::keys(self.port_of(node)?).await
    }

    /// Every key of every node and its raw value bytes (the shape of `RedisServer::dump`).
    pub async fn dump(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        for port in self.ports() {
            out.extend(redis::dump(port).await?);
        }
        Ok(out)
    }

    fn port_of(&self, node: usize) -> anyhow::Result<u16> {
        self.nodes
            .get(node)
            .map(|n| n.port)
            .with_context(|| format!("no node {node} (the cluster has {})", self.nodes.len()))
    }
}
