//! `MOUNT/PATH#FIELD`: where a secret lives in a Vault/OpenBao KV v2 engine.

/// A parsed `MOUNT/PATH#FIELD` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvRef {
    pub mount: String,
    pub path: String,
    pub field: String,
}

impl KvRef {
    pub fn parse(reference: &str) -> Result<KvRef, String> {
        let bad =
            || format!("`{reference}` is not MOUNT/PATH#FIELD (e.g. secret/llm/openai#api_key)");
        let (location, field) = reference.split_once('#').ok_or_else(bad)?;
        let (mount, path) = location.trim_matches('/').split_once('/').ok_or_else(bad)?;
        if mount.is_empty() || path.is_empty() || field.is_empty() {
            return Err(bad());
        }
        Ok(KvRef {
            mount: mount.into(),
            path: path.into(),
            field: field.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_strictly() {
        assert_eq!(
            KvRef::parse("secret/llm/openai#api_key").unwrap(),
            KvRef {
                mount: "secret".into(),
                path: "llm/openai".into(),
                field: "api_key".into()
            }
        );
        for bad in ["secret/llm", "secret#key", "/x#k", "secret/llm#"] {
            assert!(KvRef::parse(bad).is_err(), "{bad}");
        }
    }
}
