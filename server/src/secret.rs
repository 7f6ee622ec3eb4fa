//! A secret setting (a Redis URL that may carry a password, a key): kept out of every `Debug`
//! print of the configuration holding it, so that no log or panic message can carry it.

use std::convert::Infallible;
use std::str::FromStr;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value itself: for the one place that uses it (a connection), never for a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Secret(text.to_owned()))
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Self {
        Secret(text)
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Self {
        Secret(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let secret = Secret::from("redis://:hunter2@127.0.0.1:6379/".to_owned());
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{:?}", Some(vec![secret.clone()])).contains("hunter2"));
        assert_eq!(secret.expose(), "redis://:hunter2@127.0.0.1:6379/");
    }
}
