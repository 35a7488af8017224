//! `[routines]`: how long a paused run lives and the budget of one slice (the part of a run
//! between two user messages).

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutinesConfig {
    /// A run waiting for the user is forgotten after this long.
    #[serde(with = "humantime_serde")]
    pub run_ttl: Duration,
    /// Script operations one slice may run (its replay included).
    pub max_operations: u64,
    /// Wall time one slice may take (its effects included).
    #[serde(with = "humantime_serde")]
    pub slice_time: Duration,
    /// Effects one run may journal.
    pub max_journal_entries: usize,
    /// Nested `run` calls.
    pub max_depth: usize,
    /// A drive value (`drive_set`) lives this long after its last write.
    #[serde(with = "humantime_serde")]
    pub drive_ttl: Duration,
}

impl Default for RoutinesConfig {
    fn default() -> Self {
        Self {
            run_ttl: Duration::from_secs(7 * 24 * 3600),
            max_operations: 1_000_000,
            slice_time: Duration::from_secs(300),
            max_journal_entries: 512,
            max_depth: 8,
            drive_ttl: Duration::from_secs(90 * 24 * 3600),
        }
    }
}

impl RoutinesConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if self.run_ttl.is_zero() {
            return invalid("routines.run_ttl", "must be positive");
        }
        if self.max_operations == 0 || self.max_journal_entries == 0 || self.max_depth == 0 {
            return invalid(
                "routines",
                "max_operations, max_journal_entries and max_depth must be positive",
            );
        }
        if self.slice_time.is_zero() {
            return invalid("routines.slice_time", "must be positive");
        }
        Ok(())
    }
}
