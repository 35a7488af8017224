//! Identifiers of the server itself (the protocol's ids live in `chatd_protocol`).

use std::fmt;

/// One chatd process in a cluster: `cluster.node_id`, or host name and pid.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct NodeId(String);

impl NodeId {
    /// A node id from configuration; only `[A-Za-z0-9_.:-]` (it is part of Redis key
    /// and channel names), at most 128 bytes.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.len() > 128
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
        {
            return Err(format!(
                "node id {s:?} must be 1 to 128 characters of [A-Za-z0-9_.:-]"
            ));
        }
        Ok(Self(s.to_string()))
    }

    /// The default: host name and process id.
    pub fn from_host() -> Self {
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| {
                h.trim()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    .collect::<String>()
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "node".into());
        Self(format!("{host}-{}", std::process::id()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
