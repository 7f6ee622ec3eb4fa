//! `POST /tasks` request body: `{skillId, message{role, content{text}|{parts}}, contextId?, metadata?}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
    System,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagePart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Other part fields (data, file, ...) are kept as they came.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// Either `{text}` or `{parts}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text { text: String },
    Parts { parts: Vec<MessagePart> },
}

impl MessageContent {
    /// The handler input the content stands for: a `text` that parses as JSON becomes that
    /// JSON and any other text stays a string; `parts` give the first part's text unparsed
    /// (upstream behaviour, see the wire captures).
    pub fn to_input(&self) -> Value {
        match self {
            MessageContent::Text { text } => {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
            }
            MessageContent::Parts { parts } => parts
                .iter()
                .find_map(|part| part.text.clone())
                .map(Value::String)
                .unwrap_or(Value::Null),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMessage {
    pub role: MessageRole,
    pub content: MessageContent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    pub skill_id: String,
    pub message: TaskMessage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_content_is_json_parsed_with_raw_fallback() {
        let req: Result<SendMessageRequest, _> = serde_json::from_value(json!({
            "skillId": "echo",
            "message": {"role": "user", "content": {"text": "{\"x\":1}"}}
        }));
        let req = req.ok();
        assert_eq!(
            req.map(|r| r.message.content.to_input()),
            Some(json!({"x": 1}))
        );
        let raw = MessageContent::Text {
            text: "hello".into(),
        };
        assert_eq!(raw.to_input(), json!("hello"));
    }

    #[test]
    fn parts_text_is_not_parsed() {
        let content: Result<MessageContent, _> =
            serde_json::from_value(json!({"parts": [{"text": "{\"y\":2}"}]}));
        assert_eq!(content.ok().map(|c| c.to_input()), Some(json!("{\"y\":2}")));
    }

    #[test]
    fn missing_message_is_rejected() {
        let req: Result<SendMessageRequest, _> = serde_json::from_value(json!({"skillId": "echo"}));
        assert!(req.is_err());
        let bad_role: Result<SendMessageRequest, _> = serde_json::from_value(json!({
            "skillId": "echo", "message": {"role": "robot", "content": {"text": "x"}}
        }));
        assert!(bad_role.is_err());
    }
}
