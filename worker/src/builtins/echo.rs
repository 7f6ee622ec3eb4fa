//! `echo`: returns its input unchanged. Any JSON is accepted, so both schemas are `{}`.

use serde_json::Value;

use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, HandlerOutput, TaskContext};

pub const KEY: &str = "echo";

pub fn entrypoint() -> Entrypoint {
    Entrypoint::new(
        KEY,
        "Returns its input",
        |input: Value, _ctx: TaskContext| async move {
            Ok::<_, HandlerError>(HandlerOutput::new(input))
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builtins::test_support::{Harness, TestResult, output};

    #[tokio::test]
    async fn returns_an_object_unchanged() -> TestResult {
        let input = json!({"x": 1, "nested": {"list": [1, "two", null, true]}, "s": "é"});
        let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
        assert_eq!(output(outcome)?, input);
        Ok(())
    }

    #[tokio::test]
    async fn returns_any_json_unchanged() -> TestResult {
        for input in [json!(null), json!("hello"), json!(42), json!([1, 2, 3])] {
            let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
            assert_eq!(output(outcome)?, input);
        }
        Ok(())
    }

    #[test]
    fn accepts_anything() {
        let ep = entrypoint();
        assert_eq!(ep.input_schema, json!({}));
        assert_eq!(ep.output_schema, json!({}));
        assert!(!ep.streaming);
    }
}
