//! The closed set of error codes a client can see in an `error` frame.
//! Codes are stable snake_case strings: clients may branch on them. Adding a code is a
//! protocol change (update `protocol/README.md`); renaming one is a breaking change.

/// Stable, machine-readable error code carried by every `error` frame.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The text frame is not valid JSON, or not a `{"type", "payload"}` object.
    MalformedJson,
    /// The envelope's `type` is not a message chatd knows.
    UnknownType,
    /// The payload misses a required field, has a wrong field type or an invalid value.
    InvalidPayload,
    /// The frame is larger than `server.max_frame_bytes`.
    PayloadTooLarge,
    /// Too many messages from this connection or user; slow down and retry.
    RateLimited,
    /// The chat, task or other object belongs to another user.
    Forbidden,
    /// The referenced object (task, chat, embed) does not exist or is no longer active.
    NotFound,
    /// The server is at capacity for this kind of work; retry later.
    Overloaded,
    /// The language-model provider failed or is unreachable.
    LlmUnavailable,
    /// The key service (Vault/OpenBao or the local key provider) cannot seal or open data.
    EncryptionUnavailable,
    /// The cache backend (Redis or memory) cannot be reached in time.
    CacheUnavailable,
    /// The client's answer to `request_chat_history` was empty or malformed.
    InvalidChatHistory,
    /// Something failed inside chatd; the details are in the server log, not here.
    InternalError,
    /// The permanent store cannot be reached in time.
    StoreUnavailable,
    /// `encrypted_chat_key` differs from the chat's stored key and rotation was not allowed.
    ChatKeyMismatch,
    /// A `store_embed` with a lower `version_number` than the stored embed.
    StaleVersion,
    /// A chat's first title was sent without its icon or category.
    IncompleteChatMetadata,
    /// The node that ran the answer stopped; the answer ends with the text it had.
    NodeLost,
    /// A `refresh_token` whose token is invalid, expired or another user's.
    InvalidToken,
    /// The answer reached `llm.max_output_tokens`; it ends with the text so far.
    AnswerTooLong,
    /// The turn ran past `pipeline.turn_deadline`; it ends with the text so far.
    TurnDeadline,
    /// An embed's `content_hash` does not match the content the server made (or the
    /// plaintext the client re-sent): it is not stored or used.
    ContentHashMismatch,
    /// A focus mode id that no app declares (`app_id-focus_id`); nothing was changed.
    UnknownFocusMode,
    /// An app settings/memories key names an app or category no manifest declares.
    UnknownSettingsCategory,
    /// An app settings/memories entry does not match its category's schema; not stored.
    InvalidSettingsMemoryEntry,
    /// A `message_id` the chat already has came with other content: nothing was stored or
    /// answered (a new message needs a new id).
    MessageIdReused,
    /// The chat's oldest messages could not be summarised into a compressed message (the
    /// stage model failed): they are left out of the model's context as before.
    HistoryCompressionFailed,
}

impl ErrorCode {
    /// The wire string of this code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedJson => "malformed_json",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::InvalidPayload => "invalid_payload",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::LlmUnavailable => "llm_unavailable",
            ErrorCode::EncryptionUnavailable => "encryption_unavailable",
            ErrorCode::CacheUnavailable => "cache_unavailable",
            ErrorCode::InvalidChatHistory => "invalid_chat_history",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::ChatKeyMismatch => "chat_key_mismatch",
            ErrorCode::StaleVersion => "stale_version",
            ErrorCode::IncompleteChatMetadata => "incomplete_chat_metadata",
            ErrorCode::NodeLost => "node_lost",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::AnswerTooLong => "answer_too_long",
            ErrorCode::TurnDeadline => "turn_deadline",
            ErrorCode::ContentHashMismatch => "content_hash_mismatch",
            ErrorCode::UnknownFocusMode => "unknown_focus_mode",
            ErrorCode::UnknownSettingsCategory => "unknown_settings_category",
            ErrorCode::InvalidSettingsMemoryEntry => "invalid_settings_memory_entry",
            ErrorCode::MessageIdReused => "message_id_reused",
            ErrorCode::HistoryCompressionFailed => "history_compression_failed",
        }
    }

    /// Every code, for documentation and tests.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::MalformedJson,
        ErrorCode::UnknownType,
        ErrorCode::InvalidPayload,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Overloaded,
        ErrorCode::LlmUnavailable,
        ErrorCode::EncryptionUnavailable,
        ErrorCode::CacheUnavailable,
        ErrorCode::InvalidChatHistory,
        ErrorCode::InternalError,
        ErrorCode::StoreUnavailable,
        ErrorCode::ChatKeyMismatch,
        ErrorCode::StaleVersion,
        ErrorCode::IncompleteChatMetadata,
        ErrorCode::NodeLost,
        ErrorCode::InvalidToken,
        ErrorCode::AnswerTooLong,
        ErrorCode::TurnDeadline,
        ErrorCode::ContentHashMismatch,
        ErrorCode::UnknownFocusMode,
        ErrorCode::UnknownSettingsCategory,
        ErrorCode::InvalidSettingsMemoryEntry,
        ErrorCode::MessageIdReused,
        ErrorCode::HistoryCompressionFailed,
    ];
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_string_matches_serde() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().into()));
        }
    }
}
