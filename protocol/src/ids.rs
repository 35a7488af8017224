//! Identifier newtypes. Ids come from clients, so each is validated once when parsed:
//! non-empty, at most 128 bytes, and only `[A-Za-z0-9_.:-]` (UUIDs, hashes, slugs).

use std::fmt;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("id is empty")]
    Empty,
    #[error("id is longer than 128 bytes")]
    TooLong,
    #[error("id contains a character outside [A-Za-z0-9_.:-]")]
    BadCharacter,
}

fn check(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > 128 {
        return Err(IdError::TooLong);
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
    {
        return Err(IdError::BadCharacter);
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(try_from = "String", into = "String")]
        // `try_from = "String"` alone would describe any string; state what `check` enforces.
        #[schemars(extend("minLength" = 1, "maxLength" = 128, "pattern" = "^[A-Za-z0-9_.:-]+$"))]
        pub struct $name(String);

        impl $name {
            /// Parses and validates an id.
            pub fn parse(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check(&s)?;
                Ok(Self(s))
            }
            /// A fresh random id (UUID v4 text).
            pub fn random() -> Self {
                Self(uuid_v4())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }
        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

id_type!(
    /// A chat. Chosen by the client (a UUID in practice); owned by the user who first wrote to it.
    ChatId
);
id_type!(
    /// A message (user or assistant). For assistant messages it equals the [`TaskId`].
    MessageId
);
id_type!(
    /// An AI task (one turn's answer). Equal to the assistant message id.
    TaskId
);
id_type!(
    /// An embed.
    EmbedId
);
id_type!(
    /// One skill invocation inside a turn.
    SkillTaskId
);
id_type!(
    /// One run of a routine (it may span several messages).
    RunId
);

impl From<TaskId> for MessageId {
    fn from(t: TaskId) -> Self {
        MessageId(t.0)
    }
}

fn uuid_v4() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_validate() {
        assert!(ChatId::parse("c-1").is_ok());
        assert_eq!(ChatId::parse(""), Err(IdError::Empty));
        assert_eq!(ChatId::parse("a b"), Err(IdError::BadCharacter));
        assert_eq!(ChatId::parse("x".repeat(129)), Err(IdError::TooLong));
        let r = TaskId::random();
        assert!(TaskId::parse(r.as_str()).is_ok());
        assert_ne!(TaskId::random(), TaskId::random());
    }

    #[test]
    fn ids_reject_bad_json() {
        assert!(serde_json::from_str::<ChatId>("\"ok-id\"").is_ok());
        assert!(serde_json::from_str::<ChatId>("\"bad id\"").is_err());
        assert!(serde_json::from_str::<ChatId>("42").is_err());
    }
}
