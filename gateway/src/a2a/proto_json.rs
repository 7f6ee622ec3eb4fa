//! ProtoJSON field names: parsers must accept a field by its lowerCamelCase JSON name and by
//! its proto name (`historyLength` and `history_length`), and some clients send the latter.
//! The `a2a` crate's types read the JSON names, so requests are brought to them first. Only
//! the protocol's own members are renamed: the contents of `metadata` maps and of `data`
//! parts are the caller's and pass through untouched.

use serde_json::{Map, Value};

/// Members whose values are the caller's own JSON, never renamed.
const OPAQUE: [&str; 2] = ["metadata", "data"];

/// `value` with every protocol member under its JSON name.
pub fn json_names(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let value = if OPAQUE.contains(&key.as_str()) {
                        value
                    } else {
                        json_names(value)
                    };
                    (camel(&key), value)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(json_names).collect()),
        other => other,
    }
}

/// `history_length` as `historyLength`; a name without `_` as it is.
pub fn camel(name: &str) -> String {
    if !name.contains('_') {
        return name.to_owned();
    }
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn proto_names_become_json_names_outside_caller_data() {
        let renamed = json_names(json!({
            "id": "t",
            "history_length": 1,
            "message": {
                "message_id": "m",
                "parts": [{"data": {"keep_me": 1}, "media_type": "text/plain"}],
                "metadata": {"skill_id": "x"}
            },
            "configuration": {"return_immediately": true}
        }));
        assert_eq!(
            renamed,
            json!({
                "id": "t",
                "historyLength": 1,
                "message": {
                    "messageId": "m",
                    "parts": [{"data": {"keep_me": 1}, "mediaType": "text/plain"}],
                    "metadata": {"skill_id": "x"}
                },
                "configuration": {"returnImmediately": true}
            })
        );
    }
}
