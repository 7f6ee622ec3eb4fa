//! The A2A v1.0 Agent Card at `{base}/a2a/.well-known/agent-card.json`: the official shape
//! and nothing else (the spec's schema allows no extra members), so strict A2A clients and
//! the TCK read it as it is. The Lucid profile's card at `/.well-known/agent-card.json` keeps
//! its upstream shape and lists the JSON-RPC and HTTP+JSON interfaces; this one adds GRPC when
//! gRPC is served.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, ApiKeySecurityScheme,
    HttpAuthSecurityScheme, SecurityScheme,
};
use store::registry::EntrypointInfo;

use super::{caller, service};
use crate::core::config::GatewayConfig;
use crate::http::interfaces::{a2a_jsonrpc_url as jsonrpc_url, a2a_rest_url as rest_url};

/// The card for `entrypoints` as seen from `base_url` (`scheme://host` and the base path).
/// `extended_card`: members are configured, so the extended card is served
/// ([`super::extended`]). `payments`: this gateway takes payments, so the card declares the
/// A2A x402 extension ([`super::x402`]).
pub fn build(
    config: &GatewayConfig,
    base_url: &str,
    entrypoints: &[EntrypointInfo],
    push_notifications: bool,
    extended_card: bool,
    payments: bool,
) -> AgentCard {
    let modes = |modes: &[&str]| {
        modes
            .iter()
            .map(|mode| (*mode).to_owned())
            .collect::<Vec<_>>()
    };
    AgentCard {
        name: config.agent_name.clone(),
        description: config.agent_description.clone(),
        version: config.agent_version.clone(),
        supported_interfaces: interfaces(config, base_url),
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(push_notifications),
            extensions: payments.then(super::x402::declarations),
            extended_agent_card: Some(extended_card),
        },
        default_input_modes: modes(service::INPUT_MODES),
        default_output_modes: modes(service::OUTPUT_MODES),
        skills: entrypoints.iter().map(skill).collect(),
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: Some(HashMap::from([
            (
                caller::SCHEME.to_owned(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "Bearer".into(),
                    description: Some(
                        "Any secret of 20 to 256 characters: the caller's tasks are the tasks \
                         created with it"
                            .into(),
                    ),
                    bearer_format: None,
                }),
            ),
            (
                caller::API_KEY_SCHEME.to_owned(),
                SecurityScheme::ApiKey(ApiKeySecurityScheme {
                    location: "header".into(),
                    name: "Task-Access-Token".into(),
                    description: Some(
                        "The same token, for a caller whose Authorization header pays (MPP)".into(),
                    ),
                }),
            ),
        ])),
        // Either scheme identifies the caller.
        security_requirements: Some(vec![
            HashMap::from([(caller::SCHEME.to_owned(), Vec::new())]),
            HashMap::from([(caller::API_KEY_SCHEME.to_owned(), Vec::new())]),
        ]),
        signatures: None,
    }
}

/// JSON-RPC and HTTP+JSON always; GRPC only when it is served (`--grpc-listen`).
fn interfaces(config: &GatewayConfig, base_url: &str) -> Vec<AgentInterface> {
    let mut interfaces = vec![
        AgentInterface::new(jsonrpc_url(base_url), a2a::TRANSPORT_PROTOCOL_JSONRPC),
        AgentInterface::new(rest_url(base_url), a2a::TRANSPORT_PROTOCOL_HTTP_JSON),
    ];
    if let Some(url) = super::grpc::card_url(config, base_url) {
        interfaces.push(AgentInterface::new(url, a2a::TRANSPORT_PROTOCOL_GRPC));
    }
    interfaces
}

fn skill(entrypoint: &EntrypointInfo) -> AgentSkill {
    let mut tags = vec!["taskcluster".to_owned()];
    if entrypoint.streaming {
        tags.push("streaming".into());
    }
    if entrypoint.price.is_some() {
        tags.push("paid".into());
    }
    // Paused by an operator: the card says so where A2A clients look (tags are free-form).
    if entrypoint.paused.is_some() {
        tags.push("paused".into());
    }
    AgentSkill {
        id: entrypoint.key.clone(),
        name: entrypoint.key.clone(),
        description: entrypoint.description.clone(),
        tags,
        examples: None,
        input_modes: Some(
            service::input_modes(entrypoint)
                .iter()
                .map(|mode| (*mode).to_owned())
                .collect(),
        ),
        output_modes: None,
        security_requirements: None,
    }
}

/// The card as JSON under the field presence rules of A2A v1.0 §8.4.1, which a signature's
/// payload follows: a repeated field that is not REQUIRED and is empty is omitted. In our card
/// that is only a security requirement's scope list (`{"list": []}`: no scopes), served as
/// `{}` (the same `StringList` in the proto JSON mapping), so that the bytes served are the
/// bytes signed and a verifier that removes default values canonicalizes the same card.
pub fn signable(card: &AgentCard) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(card)?;
    drop_empty_scopes(&mut value);
    if let Some(skills) = value
        .get_mut("skills")
        .and_then(serde_json::Value::as_array_mut)
    {
        skills.iter_mut().for_each(drop_empty_scopes);
    }
    Ok(value)
}

/// `securityRequirements[*].schemes.*.list` removed where it is empty.
fn drop_empty_scopes(holder: &mut serde_json::Value) {
    let Some(requirements) = holder
        .get_mut("securityRequirements")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return;
    };
    for requirement in requirements {
        let Some(schemes) = requirement
            .get_mut("schemes")
            .and_then(serde_json::Value::as_object_mut)
        else {
            continue;
        };
        for scopes in schemes
            .values_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            if scopes
                .get("list")
                .and_then(serde_json::Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                scopes.remove("list");
            }
        }
    }
}
