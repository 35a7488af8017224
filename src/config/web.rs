//! `[web]`: the demo page at `/` with the reference browser client, and the development
//! sign-in that mints a token for any user name. Each is `true`, `false` or `"auto"`:
//! the demo is on unless `cluster.enabled`; the development sign-in is on only in embedded
//! mode (the simulated model, the memory cache and local keys: nobody else's data).

use serde::Deserialize;

use super::Config;

/// `true`, `false`, or `"auto"` (the mode decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toggle {
    On,
    Off,
    Auto,
}

impl<'de> Deserialize<'de> for Toggle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Toggle::On),
            Raw::Bool(false) => Ok(Toggle::Off),
            Raw::Text(t) if t == "auto" => Ok(Toggle::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "expected true, false or \"auto\", found \"{t}\""
            ))),
        }
    }
}

impl Toggle {
    fn resolve(self, auto: bool) -> bool {
        match self {
            Toggle::On => true,
            Toggle::Off => false,
            Toggle::Auto => auto,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// The demo page at `/` and the client at `/chatd-client.js`.
    pub demo: Toggle,
    /// `POST /v1/dev/token`: a session token for any user name.
    pub dev_login: Toggle,
}

impl Config {
    /// Whether `/` serves the demo page (`web.demo`; auto: off in cluster mode).
    pub fn demo_enabled(&self) -> bool {
        self.web.demo.resolve(!self.cluster.enabled)
    }

    /// Whether `POST /v1/dev/token` mints tokens (`web.dev_login`; auto: embedded mode).
    pub fn dev_login_enabled(&self) -> bool {
        self.web.dev_login.resolve(self.is_embedded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toggles_read_true_false_and_auto() {
        #[derive(Deserialize)]
        struct T {
            t: Toggle,
        }
        let read = |v: &str| from_toml(v).map(|t: T| t.t).ok();
        assert_eq!(read("t = true").unwrap(), Toggle::On);
        assert_eq!(read("t = false").unwrap(), Toggle::Off);
        assert_eq!(read("t = \"auto\"").unwrap(), Toggle::Auto);
        assert!(read("t = \"maybe\"").is_none());
    }

    fn from_toml<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, Box<figment::Error>> {
        use figment::providers::Format;
        figment::Figment::from(figment::providers::Toml::string(s))
            .extract()
            .map_err(Box::new)
    }
}
