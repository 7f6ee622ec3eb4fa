//! Entrypoints: a key, a description, input and output JSON Schemas, whether it streams, an
//! optional price, and the handler. [`Entrypoint::typed`] derives both schemas from Rust types
//! (schemars) and decodes the input, so most handlers are plain async functions over structs.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use store::registry::{EntrypointInfo, Price, SiwxPolicy};

use crate::handler::{Handler, HandlerError, HandlerOutput, TaskContext};

#[derive(Clone)]
pub struct Entrypoint {
    pub key: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub streaming: bool,
    pub price: Option<Price>,
    /// May run again after its worker died mid-run (see [`EntrypointInfo::retry_safe`]).
    pub retry_safe: bool,
    /// Sign-In-With-X policy (see [`EntrypointInfo::siwx`]).
    pub siwx: Option<SiwxPolicy>,
    /// Hidden from the public cards and run for members only (see [`EntrypointInfo::private`]).
    pub private: bool,
    pub handler: Arc<dyn Handler>,
}

impl Entrypoint {
    /// An entrypoint over raw JSON; both schemas accept anything until set.
    pub fn new(
        key: impl Into<String>,
        description: impl Into<String>,
        handler: impl Handler,
    ) -> Self {
        Entrypoint {
            key: key.into(),
            description: description.into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming: false,
            price: None,
            retry_safe: false,
            siwx: None,
            private: false,
            handler: Arc::new(handler),
        }
    }

    /// An entrypoint over typed input and output: the schemas come from the types, input that
    /// does not decode fails with `invalid_input`.
    pub fn typed<I, O, F, Fut>(key: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + JsonSchema + Send + 'static,
        F: Fn(I, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler = move |input: Value, ctx: TaskContext| {
            let f = f.clone();
            async move {
                let input: I = serde_json::from_value(integral_numbers(input))
                    .map_err(|err| HandlerError::invalid_input(err.to_string()))?;
                let output = f(input, ctx).await?;
                let output = serde_json::to_value(output)
                    .map_err(|err| HandlerError::new("invalid_output", err.to_string()))?;
                Ok(HandlerOutput::new(output))
            }
        };
        let mut entrypoint = Entrypoint::new(key, description, handler);
        entrypoint.input_schema = schema_of::<I>();
        entrypoint.output_schema = schema_of::<O>();
        entrypoint
    }

    /// Marks the entrypoint as streaming (it emits `text`/`delta`/`asset`/`control` events).
    pub fn streaming(mut self) -> Self {
        self.streaming = true;
        self
    }

    pub fn price(mut self, price: Price) -> Self {
        self.price = Some(price);
        self
    }

    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = schema;
        self
    }

    /// Declares whether a direct run may be attempted again after its worker was lost.
    pub fn retry_safe(mut self, retry_safe: bool) -> Self {
        self.retry_safe = retry_safe;
        self
    }

    /// Takes Sign-In-With-X under `policy` (`--siwx`).
    pub fn siwx(mut self, policy: Option<SiwxPolicy>) -> Self {
        self.siwx = policy;
        self
    }

    /// How the registry (and so the Agent Card) describes it.
    pub fn info(&self) -> EntrypointInfo {
        EntrypointInfo {
            key: self.key.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
            output_schema: self.output_schema.clone(),
            streaming: self.streaming,
            price: self.price.clone(),
            retry_safe: self.retry_safe,
            siwx: self.siwx,
            private: self.private,
            paused: None,
        }
    }
}

fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({}))
}

/// The entrypoints a worker hosts, by key.
#[derive(Clone, Default)]
pub struct Entrypoints {
    by_key: BTreeMap<String, Entrypoint>,
}

impl Entrypoints {
    pub fn new() -> Self {
        Entrypoints::default()
    }

    /// Adds (or replaces) an entrypoint.
    pub fn with(mut self, entrypoint: Entrypoint) -> Self {
        self.by_key.insert(entrypoint.key.clone(), entrypoint);
        self
    }

    pub fn get(&self, key: &str) -> Option<&Entrypoint> {
        self.by_key.get(key)
    }

    pub fn keys(&self) -> Vec<String> {
        self.by_key.keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The names in `keys` this set does not host.
    fn unknown(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter(|key| !self.by_key.contains_key(*key))
            .cloned()
            .collect()
    }

    /// The same entrypoints with the named ones declared retry-safe; unknown names are
    /// returned as the error (a typo must not leave an entrypoint silently run once).
    pub fn retry_safe(mut self, keys: &[String]) -> Result<Entrypoints, Vec<String>> {
        let unknown = self.unknown(keys);
        if !unknown.is_empty() {
            return Err(unknown);
        }
        for key in keys {
            if let Some(entrypoint) = self.by_key.get_mut(key) {
                entrypoint.retry_safe = true;
            }
        }
        Ok(self)
    }

    /// The same entrypoints with Sign-In-With-X as `specs` (`KEY` or `KEY:auth-only`) say;
    /// unknown names or options are returned as the error.
    pub fn siwx(mut self, specs: &[String]) -> Result<Entrypoints, Vec<String>> {
        let mut bad = Vec::new();
        for spec in specs {
            let spec = spec.trim();
            let (key, auth_only) = match spec.split_once(':') {
                None => (spec, false),
                Some((key, "auth-only")) => (key, true),
                Some(_) => {
                    bad.push(spec.to_owned());
                    continue;
                }
            };
            match self.by_key.get_mut(key) {
                Some(entrypoint) => entrypoint.siwx = Some(SiwxPolicy { auth_only }),
                None => bad.push(spec.to_owned()),
            }
        }
        if bad.is_empty() { Ok(self) } else { Err(bad) }
    }

    /// The same entrypoints with the named ones private (`--private`): the gateway lists them
    /// on no public surface and runs them for its members only. Unknown names are returned as
    /// the error (a typo must not leave an entrypoint silently public).
    pub fn private(mut self, keys: &[String]) -> Result<Entrypoints, Vec<String>> {
        let unknown = self.unknown(keys);
        if !unknown.is_empty() {
            return Err(unknown);
        }
        for key in keys {
            if let Some(entrypoint) = self.by_key.get_mut(key) {
                entrypoint.private = true;
            }
        }
        Ok(self)
    }

    /// Only the named entrypoints; unknown names are returned as the error.
    pub fn only(&self, keys: &[String]) -> Result<Entrypoints, Vec<String>> {
        let unknown = self.unknown(keys);
        if !unknown.is_empty() {
            return Err(unknown);
        }
        Ok(Entrypoints {
            by_key: self
                .by_key
                .iter()
                .filter(|(key, _)| keys.contains(key))
                .map(|(key, ep)| (key.clone(), ep.clone()))
                .collect(),
        })
    }

    pub fn infos(&self) -> Vec<EntrypointInfo> {
        self.by_key.values().map(Entrypoint::info).collect()
    }
}

/// JSON Schema counts `7.0` as an integer, so input the gateway let through as valid must not
/// fail to decode into an integer field: whole floats become integers before decoding.
fn integral_numbers(value: Value) -> Value {
    match value {
        Value::Number(number) if !number.is_i64() && !number.is_u64() => match number.as_f64() {
            Some(float) if float.fract() == 0.0 && float >= 0.0 && float < u64::MAX as f64 => {
                Value::from(float as u64)
            }
            Some(float) if float.fract() == 0.0 && float < 0.0 && float >= i64::MIN as f64 => {
                Value::from(float as i64)
            }
            _ => Value::Number(number),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (key, integral_numbers(value)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn whole_floats_decode_as_integers() {
        assert_eq!(
            integral_numbers(json!({"n": 591.0, "list": [7.0, -3.0, 1.5], "s": "2.0"})),
            json!({"n": 591, "list": [7, -3, 1.5], "s": "2.0"})
        );
    }

    use super::*;

    #[test]
    fn siwx_specs_name_hosted_entrypoints_and_one_option() -> Result<(), Vec<String>> {
        let hosted = crate::builtins::all().siwx(&["echo".into(), "summarize:auth-only".into()])?;
        let policy = |key: &str| hosted.get(key).and_then(|entrypoint| entrypoint.siwx);
        assert_eq!(policy("echo"), Some(SiwxPolicy { auth_only: false }));
        assert_eq!(policy("summarize"), Some(SiwxPolicy { auth_only: true }));
        assert_eq!(policy("sleep"), None);
        let refused = crate::builtins::all().siwx(&["nope".into(), "echo:admin".into()]);
        assert_eq!(
            refused.err(),
            Some(vec!["nope".to_owned(), "echo:admin".to_owned()])
        );
        Ok(())
    }
}
