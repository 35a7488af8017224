//! Parsing of inbound text frames into [`ClientMessage`] with a typed failure reason,
//! so the server can answer each kind of bad input with its own error code.

use crate::{ClientMessage, ErrorCode};

/// Why a text frame could not be turned into a [`ClientMessage`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("frame is not a JSON object with a string `type`: {0}")]
    Malformed(String),
    #[error("unknown message type `{0}`")]
    UnknownType(String),
    #[error("invalid `{kind}` payload: {reason}")]
    InvalidPayload { kind: String, reason: String },
}

impl ParseError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ParseError::Malformed(_) => ErrorCode::MalformedJson,
            ParseError::UnknownType(_) => ErrorCode::UnknownType,
            ParseError::InvalidPayload { .. } => ErrorCode::InvalidPayload,
        }
    }
}

#[derive(serde::Deserialize)]
struct RawEnvelope {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    payload: Option<serde_json::Value>,
}

/// Parses one text frame. A missing or null `payload` counts as `{}`. The frame and its
/// payload must be JSON objects: serde would otherwise read an array positionally into a
/// struct (`["ping"]`, `"payload": ["task-id"]`).
pub fn parse_client_message(text: &str) -> Result<ClientMessage, ParseError> {
    if !text.trim_start().starts_with('{') {
        return Err(ParseError::Malformed(
            "a frame must be a JSON object".into(),
        ));
    }
    let raw: RawEnvelope =
        serde_json::from_str(text).map_err(|e| ParseError::Malformed(e.to_string()))?;
    if !ClientMessage::TYPES.contains(&raw.kind.as_str()) {
        let mut kind = raw.kind;
        kind.truncate(64);
        return Err(ParseError::UnknownType(kind));
    }
    let payload = match raw.payload {
        None | Some(serde_json::Value::Null) => serde_json::Value::Object(Default::default()),
        Some(p @ serde_json::Value::Object(_)) => p,
        Some(_) => {
            return Err(ParseError::InvalidPayload {
                kind: raw.kind,
                reason: "payload must be a JSON object".into(),
            });
        }
    };
    let envelope = serde_json::json!({ "type": raw.kind, "payload": payload });
    serde_json::from_value(envelope).map_err(|e| ParseError::InvalidPayload {
        kind: raw.kind,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_not_read_positionally() {
        assert_eq!(
            parse_client_message(r#"["ping"]"#).unwrap_err().code(),
            ErrorCode::MalformedJson
        );
        let err = parse_client_message(
            r#"{"type":"cancel_ai_task","payload":["e2a94c17-6b3d-4f8e-a1c5-7d9b0e2f4a68"]}"#,
        )
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidPayload);
        assert!(err.to_string().contains("must be a JSON object"), "{err}");
        assert_eq!(
            parse_client_message(r#"{"type":"ping","payload":"x"}"#)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidPayload
        );
    }

    #[test]
    fn parses_ping_without_payload() {
        assert!(matches!(
            parse_client_message(r#"{"type":"ping"}"#),
            Ok(ClientMessage::Ping(_))
        ));
    }

    #[test]
    fn classifies_errors() {
        assert_eq!(
            parse_client_message("nope").unwrap_err().code(),
            ErrorCode::MalformedJson
        );
        assert_eq!(
            parse_client_message("[1]").unwrap_err().code(),
            ErrorCode::MalformedJson
        );
        assert_eq!(
            parse_client_message(r#"{"type":"fly"}"#)
                .unwrap_err()
                .code(),
            ErrorCode::UnknownType
        );
        assert_eq!(
            parse_client_message(r#"{"type":"cancel_ai_task","payload":{}}"#)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidPayload
        );
        assert_eq!(
            parse_client_message(r#"{"type":"cancel_ai_task","payload":{"task_id":5}}"#)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidPayload
        );
    }

    #[test]
    fn tolerates_unknown_fields_and_camel_case() {
        let m = parse_client_message(
            r#"{"type":"set_active_chat","payload":{"chatId":"c1","future_field":[1,2]}}"#,
        )
        .unwrap();
        assert!(
            matches!(m, ClientMessage::SetActiveChat(s) if s.chat_id.as_ref().map(|c| c.as_str()) == Some("c1"))
        );
    }
}
