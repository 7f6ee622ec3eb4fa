//! A gRPC request's message as the other bindings would have it. `google.protobuf.Value`
//! carries every number as a double, so a data part sent as `{"n": 3}` arrives as `3.0`; a
//! skill reading an integer from it (a `u64` field) would refuse what the JSON bindings
//! accept. Integral doubles within the exact range of a double (±2^53) are read back as the
//! integers they were; anything else stays a double.

use a2a::{Message, PartContent, SendMessageRequest};
use a2a_pb::pbconv;
use serde_json::{Number, Value};

/// The largest integer a double holds exactly.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `request` as the `a2a` type, its data parts' and metadata's integers restored.
pub fn send_message_request(request: &a2a_pb::SendMessageRequest) -> SendMessageRequest {
    let mut request = pbconv::from_proto_send_message_request(request);
    message(&mut request.message);
    for value in request.metadata.iter_mut().flat_map(|map| map.values_mut()) {
        integers(value);
    }
    request
}

fn message(message: &mut Message) {
    for part in &mut message.parts {
        if let PartContent::Data(value) = &mut part.content {
            integers(value);
        }
        for value in part.metadata.iter_mut().flat_map(|map| map.values_mut()) {
            integers(value);
        }
    }
    for value in message.metadata.iter_mut().flat_map(|map| map.values_mut()) {
        integers(value);
    }
}

/// Integral doubles in `value` as integers, recursively.
fn integers(value: &mut Value) {
    match value {
        Value::Number(number) => {
            if let Some(float) = number.as_f64()
                && number.is_f64()
                && float.fract() == 0.0
                && float.abs() <= EXACT
            {
                // In range and integral: the cast is exact.
                let integer = float as i64;
                *number = Number::from(integer);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integers),
        Value::Object(members) => members.values_mut().for_each(integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn integral_doubles_become_integers_and_fractions_stay() {
        let mut value = json!({"n": 3.0, "list": [1.0, 2.5, -4.0], "big": 1e300, "s": "7"});
        integers(&mut value);
        assert_eq!(
            value,
            json!({"n": 3, "list": [1, 2.5, -4], "big": 1e300, "s": "7"})
        );
        assert!(value["n"].is_i64());
    }

    #[test]
    fn a_data_part_keeps_its_integers_through_protobuf() -> Result<(), serde_json::Error> {
        let sent: SendMessageRequest = serde_json::from_value(json!({
            "message": {
                "messageId": "m1",
                "role": "ROLE_USER",
                "parts": [{"data": {"n": 3, "x": 0.5}}],
                "metadata": {"skillId": "count"},
            },
        }))?;
        let proto = pbconv::to_proto_send_message_request(&sent);
        let back = send_message_request(&proto);
        assert_eq!(back.message.parts, sent.message.parts);
        Ok(())
    }
}
