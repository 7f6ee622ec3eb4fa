//! The card's payment metadata, shaped as upstream's `createAgentCardWithPayments`
//! (daydreamsai/lucid-agents, packages/payments/src/manifest.ts and x402-offers.ts):
//!
//! - a priced entrypoint gets `payment_protocol` (`"x402"`, or `"mpp"` for one priced with
//!   `--price KEY=AMOUNT:mpp`) and `network` (the CAIP-2 id: upstream normalizes
//!   `base-sepolia` to `eip155:84532` for manifests);
//! - `payments[]` gets one x402 method per distinct x402 offer (an entrypoint's invoke price, and
//!   its stream price when it streams), deduplicated, in entrypoint order: payee, network,
//!   facilitator endpoint, `priceModel.default` and the public offer under `extensions.x402`.
//!
//! Upstream also lists a bare method when payments are configured and nothing is priced; here
//! the base card stays without `payments` (the profile's "base card has no payments/pricing"),
//! so methods appear only once some entrypoint is priced and both the payee and the
//! facilitator are configured (priced routes answer 503 without them anyway).

use std::borrow::Cow;

use serde::Serialize;
use store::registry::EntrypointInfo;

use super::manifest::price;
use crate::core::config::GatewayConfig;

pub const PROTOCOL: &str = "x402";

/// Upstream's legacy prices compile to `exact` offers.
const SCHEME: &str = "exact";

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentMethod<'a> {
    method: &'static str,
    payee: &'a str,
    network: &'a str,
    endpoint: Cow<'a, str>,
    price_model: PriceModel<'a>,
    extensions: Extensions<'a>,
}

#[derive(Debug, PartialEq, Serialize)]
struct PriceModel<'a> {
    default: &'a str,
}

#[derive(Debug, PartialEq, Serialize)]
struct Extensions<'a> {
    x402: Offer<'a>,
}

/// Upstream's public offer: the entrypoint's offer (`scheme`, `network`, `price`) spread
/// first, then the resolved `facilitatorUrl` and `payTo`.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Offer<'a> {
    scheme: &'static str,
    network: &'a str,
    price: &'a str,
    facilitator_url: Cow<'a, str>,
    pay_to: &'a str,
}

/// The network as cards name it: the CAIP-2 id of the configured network, or the setting as
/// written when it is not a known network (the payment routes refuse it; the card just says
/// what is configured).
pub fn network(config: &GatewayConfig) -> &str {
    payments::Network::find(config.payment_network.trim())
        .map_or(config.payment_network.as_str(), |network| network.caip2)
}

/// The facilitator URL as upstream publishes it: without a trailing slash, and without the
/// userinfo (`user:password@`) an operator may have put in `FACILITATOR_URL` for the gateway's
/// own calls: a card is public.
fn facilitator(url: &str) -> &str {
    let url = url.trim();
    url.strip_suffix('/').unwrap_or(url)
}

/// `url` without its userinfo, if it has one.
fn without_userinfo(url: &str) -> Cow<'_, str> {
    let Some(start) = url.find("://").map(|at| at + 3) else {
        return Cow::Borrowed(url);
    };
    let authority_len = url[start..]
        .find(['/', '?', '#'])
        .unwrap_or(url.len() - start);
    match url[start..start + authority_len].rfind('@') {
        Some(at) => Cow::Owned(format!("{}{}", &url[..start], &url[start + at + 1..])),
        None => Cow::Borrowed(url),
    }
}

/// The payment methods of `entrypoints`; empty when nothing is priced or the payee or the
/// facilitator is not configured.
pub fn methods<'a>(
    config: &'a GatewayConfig,
    entrypoints: &'a [EntrypointInfo],
) -> Vec<PaymentMethod<'a>> {
    let (Some(payee), Some(endpoint)) = (&config.pay_to, &config.facilitator_url) else {
        return Vec::new();
    };
    let endpoint = without_userinfo(facilitator(endpoint.expose()));
    let (payee, network) = (payee.trim(), network(config));
    let mut methods: Vec<PaymentMethod<'a>> = Vec::new();
    for entrypoint in entrypoints {
        // x402 offers only: an MPP-priced entrypoint's terms come in its 402 challenge.
        let Some(price) = price(entrypoint).filter(|price| price.protocol.is_x402()) else {
            continue;
        };
        let stream = price.stream.as_deref().filter(|_| entrypoint.streaming);
        for amount in price.invoke.as_deref().into_iter().chain(stream) {
            let method = PaymentMethod {
                method: PROTOCOL,
                payee,
                network,
                endpoint: endpoint.clone(),
                price_model: PriceModel { default: amount },
                extensions: Extensions {
                    x402: Offer {
                        scheme: SCHEME,
                        network,
                        price: amount,
                        facilitator_url: endpoint.clone(),
                        pay_to: payee,
                    },
                },
            };
            if !methods.contains(&method) {
                methods.push(method);
            }
        }
    }
    methods
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use store::registry::Price;

    fn priced(key: &str, streaming: bool, invoke: &str, stream: Option<&str>) -> EntrypointInfo {
        EntrypointInfo {
            key: key.into(),
            description: key.into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming,
            price: Some(Price {
                invoke: Some(invoke.into()),
                stream: stream.map(Into::into),
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }
    }

    fn configured() -> GatewayConfig {
        let mut config = GatewayConfig::for_tests();
        config.pay_to = Some("0xb308ed39d67D0d4BAe5BC2FAEF60c66BBb6AE429".into());
        config.facilitator_url = Some("https://facilitator.example/".into());
        config
    }

    #[test]
    fn one_method_per_distinct_offer_in_upstream_shape() {
        let config = configured();
        let entrypoints = [
            priced("a", false, "0.001", None),
            priced("b", true, "0.002", Some("0.001")),
            priced("c", false, "0.002", None),
        ];
        let methods = serde_json::to_string(&methods(&config, &entrypoints)).unwrap_or_default();
        let method = |amount: &str| {
            format!(
                r#"{{"method":"x402","payee":"0xb308ed39d67D0d4BAe5BC2FAEF60c66BBb6AE429","network":"eip155:84532","endpoint":"https://facilitator.example","priceModel":{{"default":"{amount}"}},"extensions":{{"x402":{{"scheme":"exact","network":"eip155:84532","price":"{amount}","facilitatorUrl":"https://facilitator.example","payTo":"0xb308ed39d67D0d4BAe5BC2FAEF60c66BBb6AE429"}}}}}}"#
            )
        };
        assert_eq!(
            methods,
            format!("[{},{}]", method("0.001"), method("0.002"))
        );
    }

    #[test]
    fn the_facilitator_userinfo_is_never_published() {
        let mut config = configured();
        config.facilitator_url = Some("https://user:hunter2@facilitator.example/x402/".into());
        let methods =
            serde_json::to_string(&methods(&config, &[priced("a", false, "0.001", None)]))
                .unwrap_or_default();
        assert!(!methods.contains("hunter2"), "{methods}");
        assert!(
            methods.contains(r#""endpoint":"https://facilitator.example/x402""#),
            "{methods}"
        );
        assert_eq!(
            without_userinfo("http://a@b@host:1?q=@"),
            "http://host:1?q=@"
        );
        assert_eq!(without_userinfo("https://host/p@x"), "https://host/p@x");
    }

    #[test]
    fn nothing_without_payee_facilitator_or_price() {
        let entrypoints = [priced("a", false, "0.001", None)];
        let mut config = configured();
        config.pay_to = None;
        assert!(methods(&config, &entrypoints).is_empty());
        let mut config = configured();
        config.facilitator_url = None;
        assert!(methods(&config, &entrypoints).is_empty());
        let mut free = priced("a", false, "0.001", None);
        free.price = None;
        assert!(methods(&configured(), &[free]).is_empty());
    }

    #[test]
    fn a_stream_price_of_a_non_streaming_entrypoint_is_no_offer() {
        let (config, entrypoints) = (configured(), [priced("a", false, "0.001", Some("0.5"))]);
        assert_eq!(methods(&config, &entrypoints).len(), 1);
    }

    #[test]
    fn network_is_the_caip2_id() {
        let mut config = GatewayConfig::for_tests();
        assert_eq!(network(&config), "eip155:84532");
        config.payment_network = "eip155:84532".into();
        assert_eq!(network(&config), "eip155:84532");
        config.payment_network = "base".into();
        assert_eq!(network(&config), "eip155:8453");
        config.payment_network = "nowhere".into();
        assert_eq!(network(&config), "nowhere");
    }
}
