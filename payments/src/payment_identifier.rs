//! x402's `payment-identifier` extension: a caller-chosen id in a v2 payment payload
//! (`extensions["payment-identifier"].info.id`) that makes a paid request idempotent, so that
//! a client retrying with a fresh credential gets the first answer instead of paying twice.
//!
//! The server declares it in its `402` (`extensions["payment-identifier"]`, [`declaration`]);
//! a client echoes the declaration with `info.id` set. The id is 16 to 128 characters of
//! `[A-Za-z0-9_-]`. What the server does with it (replay, conflict) is the server's; this
//! module only reads and declares it. The EIP-3009 signature does not cover extensions, so an
//! id binds nothing by itself: a server must scope it to the payer the signature proves.

use serde_json::{Value, json};

/// The extension's key in `extensions`.
pub const NAME: &str = "payment-identifier";
/// Shortest id accepted.
pub const MIN_LEN: usize = 16;
/// Longest id accepted.
pub const MAX_LEN: usize = 128;

/// The declaration a `402` carries: the id is optional (`required: false`), with the schema
/// of `info` the specification gives.
pub fn declaration() -> Value {
    json!({
        "info": {"required": false},
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": {"type": "boolean"},
                "id": {"type": "string", "minLength": MIN_LEN, "maxLength": MAX_LEN, "pattern": "^[a-zA-Z0-9_-]+$"}
            },
            "required": ["required"]
        }
    })
}

/// The id a v2 payment payload `document` carries: `Ok(None)` without the extension or
/// without an id in it; `Err` with the reason when it carries one that is not a valid id (a
/// wrong type, length or character), which a server refuses rather than ignores: the client
/// meant its retries to be idempotent.
pub fn read(document: &Value) -> Result<Option<String>, String> {
    let Some(extension) = document
        .get("extensions")
        .and_then(|extensions| extensions.get(NAME))
    else {
        return Ok(None);
    };
    let Some(id) = extension.get("info").and_then(|info| info.get("id")) else {
        return Ok(None);
    };
    let id = id
        .as_str()
        .ok_or("payment-identifier id must be a string")?;
    let valid = (MIN_LEN..=MAX_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(format!(
            "payment-identifier id must be {MIN_LEN} to {MAX_LEN} characters of letters, digits, '-' and '_'"
        ));
    }
    Ok(Some(id.to_owned()))
}

/// `document` (a v2 payment payload) carrying `id` as its payment identifier, as a client
/// adds it: the declaration echoed with `info.id` set.
pub fn attach(document: &mut Value, id: &str) {
    let mut extension = declaration();
    extension["info"]["id"] = Value::from(id);
    if let Some(object) = document.as_object_mut() {
        let extensions = object
            .entry("extensions")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(extensions) = extensions.as_object_mut() {
            extensions.insert(NAME.to_owned(), extension);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attached_id_reads_back() {
        let mut document = json!({"x402Version": 2});
        attach(&mut document, "pay_7d5d747be160e280504c099d984bcfe0");
        assert_eq!(
            read(&document),
            Ok(Some("pay_7d5d747be160e280504c099d984bcfe0".to_owned()))
        );
        assert_eq!(document["extensions"][NAME]["info"]["required"], false);
    }

    #[test]
    fn no_extension_or_no_id_is_none() {
        assert_eq!(read(&json!({})), Ok(None));
        assert_eq!(read(&json!({"extensions": {}})), Ok(None));
        assert_eq!(
            read(&json!({"extensions": {NAME: {"info": {"required": false}}}})),
            Ok(None)
        );
    }

    #[test]
    fn ids_of_the_wrong_shape_are_refused() {
        for bad in [
            json!("short-id-15char"),
            json!("x".repeat(129)),
            json!("pay_7d5d747be160e280 504c099d"),
            json!("pay_7d5d747be160e280/504c099d"),
            json!("pay_7d5d747be160e2é0504c099d"),
            json!(12345678901234567_u64),
            json!(null),
        ] {
            let document = json!({"extensions": {NAME: {"info": {"id": bad}}}});
            assert!(read(&document).is_err(), "{bad}");
        }
        let longest = json!({"extensions": {NAME: {"info": {"id": "a".repeat(128)}}}});
        assert!(read(&longest).is_ok());
        let shortest = json!({"extensions": {NAME: {"info": {"id": "a".repeat(16)}}}});
        assert!(read(&shortest).is_ok());
    }
}
