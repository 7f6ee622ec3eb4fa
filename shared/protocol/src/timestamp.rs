//! Millisecond timestamps that serialize as ISO 8601 with milliseconds and `Z`,
//! like JavaScript's `Date.prototype.toISOString` (what upstream emits).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn now() -> Self {
        let ms = Utc::now().timestamp_millis();
        Timestamp(u64::try_from(ms).unwrap_or(0))
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn to_iso(self) -> String {
        let ms = i64::try_from(self.0).unwrap_or(i64::MAX);
        DateTime::<Utc>::from_timestamp_millis(ms)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_iso())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let parsed = DateTime::parse_from_rfc3339(&text).map_err(serde::de::Error::custom)?;
        let ms = u64::try_from(parsed.timestamp_millis())
            .map_err(|_| serde::de::Error::custom("timestamp before 1970"))?;
        Ok(Timestamp(ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_has_millis_and_z() {
        let ts = Timestamp(1_796_205_063_943);
        assert_eq!(ts.to_iso(), "2026-12-02T09:51:03.943Z");
        let back: Timestamp =
            serde_json::from_str("\"2026-12-02T09:51:03.943Z\"").unwrap_or_default();
        assert_eq!(back, ts);
    }
}
