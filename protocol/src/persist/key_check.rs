//! `key_check`: the user's key check value, a constant the client sealed with the master key
//! its passphrase derives, stored once per user. A device signing in sends its own; chatd
//! keeps the first one it ever got and answers with the stored one, so a device whose
//! passphrase is wrong finds out (the stored value does not open) before it writes anything.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest `encrypted_check` accepted.
pub const MAX_KEY_CHECK_CHARS: usize = 1024;

/// `key_check` (client): this device's check value; kept only when none is stored yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeyCheck {
    /// Client ciphertext (1-1024 characters); chatd never reads it.
    pub encrypted_check: String,
}

/// `key_check` (server): the user's stored check value (the one just sent when it was the
/// first); the device opens it with its key to know whether its passphrase is the user's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeyCheckStored {
    pub encrypted_check: String,
}
