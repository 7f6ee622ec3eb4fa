//! I-JSON (RFC 7493 §2.3): no object may name a member twice. serde_json keeps the last of
//! duplicate members silently, so a card `{"url": A, ..., "url": B}` could be verified as one
//! document and used as another by a consumer that keeps the first. serde_json has no switch
//! for this, hence this hand-written pass: a `Visitor` that walks the bytes once, keeps nothing
//! but the member names of the object being read, and fails on a repeated one.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// `Ok` when `bytes` are JSON with no duplicate member name in any object; else why not.
/// Malformed JSON is an error too (the parse that follows would say the same).
pub fn no_duplicate_members(bytes: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<Unique>(bytes)
        .map(|_| ())
        .map_err(|err| err.to_string())
}

/// A JSON value known to hold no duplicate member names.
struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = HashSet::new();
        // Names are compared unescaped: `"a"` and `"\u0061"` are one name.
        while let Some(name) = map.next_key::<String>()? {
            if seen.contains(&name) {
                let shown: String = name.chars().take(64).collect();
                return Err(de::Error::custom(format!(
                    "duplicate member name {shown:?} (I-JSON, RFC 7493)"
                )));
            }
            map.next_value::<Unique>()?;
            seen.insert(name);
        }
        Ok(Unique)
    }
}

#[cfg(test)]
mod tests {
    use super::no_duplicate_members;

    #[test]
    fn duplicates_are_found_at_any_depth_and_through_escapes() {
        for good in [
            r#"{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}"#,
            "[]",
            "1",
            r#""x""#,
        ] {
            assert_eq!(no_duplicate_members(good.as_bytes()), Ok(()), "{good}");
        }
        for bad in [
            r#"{"a":1,"a":1}"#,
            r#"{"x":[{"b":{"c":1,"c":2}}]}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"a":1"#,
        ] {
            assert!(no_duplicate_members(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
