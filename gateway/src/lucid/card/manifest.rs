//! The Agent Card: A2A-shaped discovery plus the Lucid `entrypoints` map.
//!
//! Typed structs rather than `json!` because field order is part of the wire contract
//! (upstream clients and the captures compare bytes) and the structs keep it whatever map
//! type serde_json is built with. An entrypoint without a schema (`{}` accepts anything, like
//! upstream's entrypoint without a Zod schema) omits its schema fields, as upstream does.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use store::registry::{EntrypointInfo, Pause, Price};

use super::payments::{self, PaymentMethod};
use crate::core::catalog::published_schema as schema;
use crate::core::config::GatewayConfig;
use crate::http::interfaces::{a2a_jsonrpc_url, a2a_rest_url};

const PROTOCOL_VERSION: &str = "1.0";
const PROTOCOL_BINDING: &str = "HTTP+JSON";
const INPUT_MODES: &[&str] = &["application/json"];
const OUTPUT_MODES: &[&str] = &["application/json", "text/plain"];

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard<'a> {
    protocol_version: &'static str,
    name: &'a str,
    description: &'a str,
    url: String,
    /// The Lucid profile's interface first (upstream clients read it), then the official A2A
    /// v1.0 bindings ([`crate::http::interfaces`]).
    supported_interfaces: [Interface; 3],
    version: &'a str,
    capabilities: Capabilities,
    default_input_modes: &'static [&'static str],
    default_output_modes: &'static [&'static str],
    skills: Vec<Skill<'a>>,
    supports_authenticated_extended_card: bool,
    entrypoints: BTreeMap<&'a str, ManifestEntry<'a>>,
    /// Payment methods ([`payments::methods`]). Empty, hence absent, until an entrypoint is
    /// priced and payments are configured: "the base card has no payments/pricing".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    payments: Vec<PaymentMethod<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Interface {
    url: String,
    protocol_binding: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol_version: Option<&'static str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Capabilities {
    streaming: bool,
    push_notifications: bool,
    /// Tasks are always mounted here, which is what upstream's a2a extension signals.
    state_transition_history: bool,
}

/// Field names are upstream's: camelCase except the `x_` schema extensions.
#[derive(Debug, Serialize)]
struct Skill<'a> {
    id: &'a str,
    name: &'a str,
    description: &'a str,
    #[serde(rename = "inputModes")]
    input_modes: &'static [&'static str],
    #[serde(rename = "outputModes")]
    output_modes: &'static [&'static str],
    streaming: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    x_input_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    x_output_schema: Option<&'a Value>,
}

/// Upstream's field order: its core manifest lays out description, streaming, the schemas,
/// `payment_protocol` and `network`; the payments extension then sets those two in place and
/// appends `pricing`.
#[derive(Debug, Serialize)]
struct ManifestEntry<'a> {
    description: &'a str,
    streaming: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
    /// These three only on priced entrypoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_protocol: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pricing: Option<&'a Price>,
    /// Sign-In-With-X, as upstream's card shows it: `{siwx: {enabled, auth_only}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    authorization: Option<Authorization>,
    /// Paused by an operator (ours, not upstream's): `{mode, by, atMs}`. Queued tasks wait;
    /// in `refuse` mode new ones are refused until it is resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<&'a Pause>,
}

#[derive(Debug, Serialize)]
struct Authorization {
    siwx: SiwxCard,
}

#[derive(Debug, Serialize)]
struct SiwxCard {
    enabled: bool,
    auth_only: bool,
}

impl<'a> AgentCard<'a> {
    /// The card for `entrypoints` (the live registry, by key) as seen from `base_url`
    /// (`scheme://host` plus the base path, no trailing slash).
    pub fn build(
        config: &'a GatewayConfig,
        base_url: &str,
        entrypoints: &'a [EntrypointInfo],
    ) -> Self {
        let url = format!("{base_url}/");
        let network = payments::network(config);
        AgentCard {
            protocol_version: PROTOCOL_VERSION,
            name: &config.agent_name,
            description: &config.agent_description,
            supported_interfaces: [
                Interface {
                    url: url.clone(),
                    protocol_binding: PROTOCOL_BINDING,
                    protocol_version: None,
                },
                Interface {
                    url: a2a_jsonrpc_url(base_url),
                    protocol_binding: a2a::TRANSPORT_PROTOCOL_JSONRPC,
                    protocol_version: Some(a2a::VERSION),
                },
                Interface {
                    url: a2a_rest_url(base_url),
                    protocol_binding: a2a::TRANSPORT_PROTOCOL_HTTP_JSON,
                    protocol_version: Some(a2a::VERSION),
                },
            ],
            url,
            version: &config.agent_version,
            capabilities: Capabilities {
                streaming: entrypoints.iter().any(|entrypoint| entrypoint.streaming),
                push_notifications: false,
                state_transition_history: true,
            },
            default_input_modes: INPUT_MODES,
            default_output_modes: OUTPUT_MODES,
            skills: entrypoints
                .iter()
                .map(|entrypoint| Skill {
                    id: &entrypoint.key,
                    name: &entrypoint.key,
                    description: &entrypoint.description,
                    input_modes: INPUT_MODES,
                    output_modes: OUTPUT_MODES,
                    streaming: entrypoint.streaming,
                    x_input_schema: schema(&entrypoint.input_schema),
                    x_output_schema: schema(&entrypoint.output_schema),
                })
                .collect(),
            supports_authenticated_extended_card: false,
            entrypoints: entrypoints
                .iter()
                .map(|entrypoint| {
                    let pricing = price(entrypoint);
                    (
                        entrypoint.key.as_str(),
                        ManifestEntry {
                            description: &entrypoint.description,
                            streaming: entrypoint.streaming,
                            input_schema: schema(&entrypoint.input_schema),
                            output_schema: schema(&entrypoint.output_schema),
                            payment_protocol: pricing.map(|price| price.protocol.as_str()),
                            network: pricing.map(|_| network),
                            pricing,
                            authorization: entrypoint.siwx.map(|policy| Authorization {
                                siwx: SiwxCard {
                                    enabled: true,
                                    auth_only: policy.auth_only,
                                },
                            }),
                            paused: entrypoint.paused.as_ref(),
                        },
                    )
                })
                .collect(),
            payments: payments::methods(config, entrypoints),
        }
    }
}

/// The entrypoint's price when it has one for invoke or stream.
pub fn price(entrypoint: &EntrypointInfo) -> Option<&Price> {
    entrypoint
        .price
        .as_ref()
        .filter(|price| price.invoke.is_some() || price.stream.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entrypoint(key: &str, description: &str, input: Value, output: Value) -> EntrypointInfo {
        EntrypointInfo {
            key: key.into(),
            description: description.into(),
            input_schema: input,
            output_schema: output,
            streaming: false,
            price: None,
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }
    }

    /// The upstream capture of `GET /.well-known/agent-card.json`, byte for byte, but for the
    /// two A2A v1.0 bindings appended to `supportedInterfaces` after upstream's own interface.
    #[test]
    fn matches_the_upstream_capture() {
        let mut config = GatewayConfig::for_tests();
        config.agent_name = "bench-agent".into();
        config.agent_description = "Baseline echo/sleep agent".into();
        config.agent_version = "1.0.0".into();
        let sleep_in = json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":9007199254740991_u64}},"required":["ms"],"additionalProperties":false});
        let sleep_out = json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"slept":{"type":"number"}},"required":["slept"],"additionalProperties":false});
        let entrypoints = [
            entrypoint("echo", "Returns its input", json!({}), json!({})),
            entrypoint("sleep", "Waits input.ms milliseconds", sleep_in, sleep_out),
        ];
        let card = AgentCard::build(&config, "http://127.0.0.1:8787", &entrypoints);
        let text = serde_json::to_string(&card).unwrap_or_default();
        // The schemas are the worker's values; their inner key order is serde_json's business.
        let (i, o) = (
            serde_json::to_string(&entrypoints[1].input_schema).unwrap_or_default(),
            serde_json::to_string(&entrypoints[1].output_schema).unwrap_or_default(),
        );
        let expected = format!(
            r#"{{"protocolVersion":"1.0","name":"bench-agent","description":"Baseline echo/sleep agent","url":"http://127.0.0.1:8787/","supportedInterfaces":[{{"url":"http://127.0.0.1:8787/","protocolBinding":"HTTP+JSON"}},{{"url":"http://127.0.0.1:8787/a2a/jsonrpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}},{{"url":"http://127.0.0.1:8787/a2a/v1","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"}}],"version":"1.0.0","capabilities":{{"streaming":false,"pushNotifications":false,"stateTransitionHistory":true}},"defaultInputModes":["application/json"],"defaultOutputModes":["application/json","text/plain"],"skills":[{{"id":"echo","name":"echo","description":"Returns its input","inputModes":["application/json"],"outputModes":["application/json","text/plain"],"streaming":false}},{{"id":"sleep","name":"sleep","description":"Waits input.ms milliseconds","inputModes":["application/json"],"outputModes":["application/json","text/plain"],"streaming":false,"x_input_schema":{i},"x_output_schema":{o}}}],"supportsAuthenticatedExtendedCard":false,"entrypoints":{{"echo":{{"description":"Returns its input","streaming":false}},"sleep":{{"description":"Waits input.ms milliseconds","streaming":false,"input_schema":{i},"output_schema":{o}}}}}}}"#
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn priced_entrypoints_carry_pricing() {
        let config = GatewayConfig::for_tests();
        let mut paid = entrypoint("paid", "Costs", json!({}), json!({}));
        paid.price = Some(Price {
            invoke: Some("0.01".into()),
            stream: None,
            protocol: Default::default(),
            settle: Default::default(),
            scheme: Default::default(),
        });
        let mut unpriced = entrypoint("free", "Free", json!({}), json!({}));
        unpriced.price = Some(Price {
            invoke: None,
            stream: None,
            protocol: Default::default(),
            settle: Default::default(),
            scheme: Default::default(),
        });
        let entrypoints = [unpriced, paid];
        let card = serde_json::to_value(AgentCard::build(&config, "http://h", &entrypoints))
            .unwrap_or_default();
        assert_eq!(
            card["entrypoints"]["paid"]["pricing"],
            json!({"invoke": "0.01"})
        );
        assert!(card["entrypoints"]["free"].get("pricing").is_none());
        assert!(
            card["entrypoints"]["free"]
                .get("payment_protocol")
                .is_none()
        );
        assert!(card["entrypoints"]["free"].get("network").is_none());
        // No payee or facilitator configured: no payment methods.
        assert!(card.get("payments").is_none());
    }

    /// Upstream's order within a priced entrypoint, byte for byte.
    #[test]
    fn priced_entrypoints_carry_payment_metadata_in_upstream_order() {
        let config = GatewayConfig::for_tests();
        let mut paid = entrypoint("count", "Counts", json!({"type": "object"}), json!({}));
        paid.streaming = true;
        paid.price = Some(Price {
            invoke: Some("0.002".into()),
            stream: Some("0.002".into()),
            protocol: Default::default(),
            settle: Default::default(),
            scheme: Default::default(),
        });
        let entrypoints = [paid];
        let card = AgentCard::build(&config, "http://h", &entrypoints);
        let text = serde_json::to_string(&card.entrypoints).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"count":{"description":"Counts","streaming":true,"input_schema":{"type":"object"},"payment_protocol":"x402","network":"eip155:84532","pricing":{"invoke":"0.002","stream":"0.002"}}}"#
        );
    }

    /// A paused entrypoint says so last, after everything upstream lays out.
    #[test]
    fn a_paused_entrypoint_shows_its_pause() {
        let config = GatewayConfig::for_tests();
        let mut paused = entrypoint("sleep", "Waits", json!({}), json!({}));
        paused.paused = Some(store::registry::Pause {
            mode: store::registry::PauseMode::Refuse,
            by: "operator token ab".into(),
            at_ms: 1_700_000_000_000,
        });
        let entrypoints = [paused];
        let card = AgentCard::build(&config, "http://h", &entrypoints);
        let text = serde_json::to_string(&card.entrypoints).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"sleep":{"description":"Waits","streaming":false,"paused":{"mode":"refuse","by":"operator token ab","atMs":1700000000000}}}"#
        );
    }
}
