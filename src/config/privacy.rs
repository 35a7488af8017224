//! `[privacy]`: which kinds of personal data are replaced by placeholders before a model
//! request leaves chatd (see [`crate::privacy`]).

use serde::Deserialize;

use super::ConfigError;

/// A kind of personal data chatd can find in text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonalData {
    /// E-mail addresses (validated by the address grammar).
    Email,
    /// Phone numbers (validated against the numbering plans; national numbers only with
    /// `phone_region`).
    Phone,
    /// IBANs (the mod-97 check digits and the country's length checked).
    Iban,
    /// Payment card numbers (13-19 digits, the Luhn check digit checked).
    Card,
    /// IPv4 and IPv6 addresses.
    Ip,
    /// The names in `privacy.names` (whole words, as written).
    Name,
}

impl PersonalData {
    /// The placeholder's label: `[EMAIL_1]`.
    pub fn label(self) -> &'static str {
        match self {
            PersonalData::Email => "EMAIL",
            PersonalData::Phone => "PHONE",
            PersonalData::Iban => "IBAN",
            PersonalData::Card => "CARD",
            PersonalData::Ip => "IP",
            PersonalData::Name => "NAME",
        }
    }

    /// The kind a placeholder label names.
    pub fn from_label(label: &str) -> Option<Self> {
        Some(match label {
            "EMAIL" => PersonalData::Email,
            "PHONE" => PersonalData::Phone,
            "IBAN" => PersonalData::Iban,
            "CARD" => PersonalData::Card,
            "IP" => PersonalData::Ip,
            "NAME" => PersonalData::Name,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrivacyConfig {
    /// The kinds replaced by placeholders in every model request; empty: none.
    pub pseudonymize: Vec<PersonalData>,
    /// Names (people, companies) replaced as `name`, matched as whole words.
    pub names: Vec<String>,
    /// ISO 3166 country whose national phone numbers (no `+`) are found; empty: only
    /// international numbers.
    pub phone_region: String,
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        Self {
            // The checksum-backed kinds: a match is personal data, almost never a false hit.
            pseudonymize: vec![PersonalData::Iban, PersonalData::Card],
            names: Vec::new(),
            phone_region: String::new(),
        }
    }
}

impl PrivacyConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.phone_region.is_empty()
            && self
                .phone_region
                .parse::<phonenumber::country::Id>()
                .is_err()
        {
            return Err(ConfigError::Invalid {
                key: "privacy.phone_region",
                reason: format!("`{}` is not an ISO 3166 country code", self.phone_region),
            });
        }
        if self
            .names
            .iter()
            .any(|n| n.trim().is_empty() || n.len() > 200)
        {
            return Err(ConfigError::Invalid {
                key: "privacy.names",
                reason: "a name is empty or longer than 200 bytes".into(),
            });
        }
        Ok(())
    }

    pub fn enabled(&self, kind: PersonalData) -> bool {
        self.pseudonymize.contains(&kind)
    }
}
