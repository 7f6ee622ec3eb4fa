//! One view of each entrypoint out of the live workers' registry entries, with the price the
//! gateway charges when workers disagree: the highest, per kind (invoke, stream), compared in
//! atomic USDC units.
//!
//! Workers are configured one by one, so during a rolling price change (or after a typo on
//! one host) two live workers can advertise different prices for one entrypoint. The gateway
//! cannot know which is meant; charging the highest never sells below any operator's price,
//! and a worker advertising no price for an entrypoint another worker prices does not make it
//! free. Each distinct disagreement is logged once, not on every request.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};

use payments::U256;
use payments::amount::to_atomic;
use shared::registry::{EntrypointInfo, PaymentProtocol, Price, WorkerEntry};

/// Distinct disagreements remembered as already logged; past this the memory starts over (a
/// disagreement then logs once more, which bounds memory without silencing anything for long).
const WARNED_LIMIT: usize = 1024;

/// Which price of an entrypoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Invoke,
    Stream,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Invoke => "invoke",
            Kind::Stream => "stream",
        }
    }
}

/// Live workers advertising different prices of one kind for one entrypoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Disagreement {
    pub entrypoint: String,
    pub kind: Kind,
    /// What is charged.
    pub charged: String,
    /// Every price advertised, with the workers advertising it, in the registry's order;
    /// `None` for the workers that host the entrypoint without this price.
    pub advertised: Vec<(Option<String>, Vec<String>)>,
}

/// The registry's entrypoints merged by key, and the disagreements found doing it.
#[derive(Debug, Default)]
pub struct Merged {
    /// By key. Everything but the price is the first worker's, as before prices existed.
    pub entrypoints: Vec<EntrypointInfo>,
    pub disagreements: Vec<Disagreement>,
}

/// Merges `workers`' entrypoints by key, charging the highest price of each kind.
pub fn merge(workers: &[WorkerEntry]) -> Merged {
    let mut by_key: BTreeMap<&str, Vec<(&str, &EntrypointInfo)>> = BTreeMap::new();
    for worker in workers {
        for entrypoint in &worker.entrypoints {
            by_key
                .entry(entrypoint.key.as_str())
                .or_default()
                .push((worker.worker_id.as_str(), entrypoint));
        }
    }
    let mut merged = Merged::default();
    for hosts in by_key.into_values() {
        let Some((_, first)) = hosts.first() else {
            continue;
        };
        let mut entrypoint = (*first).clone();
        let key = first.key.as_str();
        let invoke = highest(key, &hosts, Kind::Invoke, &mut merged.disagreements);
        let stream = highest(key, &hosts, Kind::Stream, &mut merged.disagreements);
        // A price with neither kind set is no price: every route treats the entrypoint as free.
        entrypoint.price = match (invoke, stream) {
            (None, None) => None,
            (invoke, stream) => Some(Price {
                invoke,
                stream,
                protocol: protocol_of(&hosts),
            }),
        };
        // Any worker that may run it must tolerate a second run, or nobody gets one.
        entrypoint.retry_safe = hosts.iter().all(|(_, hosted)| hosted.retry_safe);
        merged.entrypoints.push(entrypoint);
    }
    merged
}

/// How the entrypoint is paid: MPP once every worker that prices it asks for MPP, x402
/// otherwise (so a rolling change of protocol takes effect when the last worker has it, as
/// `retry_safe` does).
fn protocol_of(hosts: &[(&str, &EntrypointInfo)]) -> PaymentProtocol {
    let mut priced = hosts
        .iter()
        .filter_map(|(_, hosted)| hosted.price.as_ref())
        .peekable();
    if priced.peek().is_some() && priced.all(|price| price.protocol == PaymentProtocol::Mpp) {
        PaymentProtocol::Mpp
    } else {
        PaymentProtocol::X402
    }
}

/// The highest price of `kind` among `hosts` (worker id, its view of entrypoint `key`),
/// noting a disagreement when they differ.
fn highest(
    key: &str,
    hosts: &[(&str, &EntrypointInfo)],
    kind: Kind,
    disagreements: &mut Vec<Disagreement>,
) -> Option<String> {
    let price_of = |entrypoint: &EntrypointInfo| {
        let price = entrypoint.price.as_ref()?;
        match kind {
            Kind::Invoke => price.invoke.clone(),
            Kind::Stream => price.stream.clone(),
        }
    };
    // Grouped by amount (so "0.001" and "0.0010" agree); unparsable amounts by their text.
    let mut advertised: Vec<Advertised> = Vec::new();
    for (worker, entrypoint) in hosts {
        let text = price_of(entrypoint);
        let atomic = text.as_deref().and_then(|text| to_atomic(text).ok());
        match advertised.iter_mut().find(|seen| seen.is(&text, atomic)) {
            Some(seen) => seen.workers.push((*worker).to_owned()),
            None => advertised.push(Advertised {
                text,
                atomic,
                workers: vec![(*worker).to_owned()],
            }),
        }
    }
    // The highest valid amount; failing that, an unparsable one kept as it is, so that the
    // entrypoint stays priced and the payment path refuses it rather than serving it free.
    let charged = advertised
        .iter()
        .filter_map(|seen| Some((seen.text.as_ref()?, seen.atomic?)))
        .max_by_key(|(_, atomic)| *atomic)
        .map(|(text, _)| text.clone())
        .or_else(|| advertised.iter().find_map(|seen| seen.text.clone()))?;
    if advertised.len() > 1 {
        disagreements.push(Disagreement {
            entrypoint: key.to_owned(),
            kind,
            charged: charged.clone(),
            advertised: advertised
                .into_iter()
                .map(|seen| (seen.text, seen.workers))
                .collect(),
        });
    }
    Some(charged)
}

/// One price as some of the workers advertise it.
struct Advertised {
    /// `None`: no price of this kind.
    text: Option<String>,
    /// `None`: no price, or one that does not parse.
    atomic: Option<U256>,
    workers: Vec<String>,
}

impl Advertised {
    /// Whether `text` (amount `atomic`) is this price: the same amount, or else the same text.
    fn is(&self, text: &Option<String>, atomic: Option<U256>) -> bool {
        match (self.atomic, atomic) {
            (Some(mine), Some(theirs)) => mine == theirs,
            _ => self.text == *text,
        }
    }
}

/// Disagreements already logged, keyed without worker ids: a worker restarting under a new id
/// with the same price is the same disagreement.
#[derive(Default)]
pub struct Warned {
    seen: Mutex<HashSet<WarnedKey>>,
}

/// Entrypoint, kind and the prices advertised (sorted).
type WarnedKey = (String, Kind, Vec<Option<String>>);

impl Warned {
    /// Whether `disagreement` is new (and so worth a log line); remembers it.
    pub fn first_time(&self, disagreement: &Disagreement) -> bool {
        let mut prices: Vec<Option<String>> = disagreement
            .advertised
            .iter()
            .map(|(price, _)| price.clone())
            .collect();
        prices.sort();
        let key = (disagreement.entrypoint.clone(), disagreement.kind, prices);
        // The set stays consistent even if a holder panicked: entries are inserted whole.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(&key) {
            return false;
        }
        if seen.len() >= WARNED_LIMIT {
            seen.clear();
        }
        seen.insert(key);
        true
    }
}

/// Logs each of `disagreements` the first time this process sees it.
pub fn warn(disagreements: &[Disagreement]) {
    static WARNED: OnceLock<Warned> = OnceLock::new();
    let warned = WARNED.get_or_init(Warned::default);
    for disagreement in disagreements {
        if !warned.first_time(disagreement) {
            continue;
        }
        let advertised = disagreement
            .advertised
            .iter()
            .map(|(price, workers)| {
                format!(
                    "{} by {}",
                    price.as_deref().unwrap_or("no price"),
                    workers.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(
            entrypoint = %disagreement.entrypoint,
            kind = disagreement.kind.as_str(),
            charged = %disagreement.charged,
            %advertised,
            "live workers disagree on this entrypoint's price; charging the highest"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worker(id: &str, entrypoints: Vec<EntrypointInfo>) -> WorkerEntry {
        WorkerEntry {
            worker_id: id.into(),
            host: "test".into(),
            started_at_ms: 0,
            concurrency: 1,
            entrypoints,
        }
    }

    fn entrypoint(key: &str, invoke: Option<&str>, stream: Option<&str>) -> EntrypointInfo {
        EntrypointInfo {
            key: key.into(),
            description: format!("{key} entrypoint"),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming: stream.is_some(),
            price: (invoke.is_some() || stream.is_some()).then(|| Price {
                invoke: invoke.map(Into::into),
                stream: stream.map(Into::into),
                protocol: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
        }
    }

    fn price(invoke: Option<&str>, stream: Option<&str>) -> Option<Price> {
        Some(Price {
            invoke: invoke.map(Into::into),
            stream: stream.map(Into::into),
            protocol: Default::default(),
        })
    }

    #[test]
    fn agreeing_workers_merge_quietly() {
        let merged = merge(&[
            worker("a", vec![entrypoint("echo", Some("0.001"), None)]),
            worker("b", vec![entrypoint("echo", Some("0.0010"), None)]),
            worker("c", vec![entrypoint("free", None, None)]),
        ]);
        assert!(merged.disagreements.is_empty());
        let keys: Vec<&str> = merged.entrypoints.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["echo", "free"]);
        assert_eq!(merged.entrypoints[0].price, price(Some("0.001"), None));
        assert_eq!(merged.entrypoints[1].price, None);
    }

    #[test]
    fn the_highest_price_of_each_kind_wins() {
        let merged = merge(&[
            worker("a", vec![entrypoint("count", Some("0.002"), Some("0.01"))]),
            worker(
                "b",
                vec![entrypoint("count", Some("0.0100"), Some("0.003"))],
            ),
            worker("c", vec![entrypoint("count", Some("0.002"), Some("0.003"))]),
        ]);
        // Not the longest or the lexically greatest string: the largest amount.
        assert_eq!(
            merged.entrypoints[0].price,
            price(Some("0.0100"), Some("0.01"))
        );
        assert_eq!(merged.disagreements.len(), 2);
        let invoke = &merged.disagreements[0];
        assert_eq!(invoke.kind, Kind::Invoke);
        assert_eq!(invoke.charged, "0.0100");
        assert_eq!(
            invoke.advertised,
            vec![
                (Some("0.002".into()), vec!["a".into(), "c".into()]),
                (Some("0.0100".into()), vec!["b".into()]),
            ]
        );
        assert_eq!(merged.disagreements[1].kind, Kind::Stream);
        assert_eq!(merged.disagreements[1].charged, "0.01");
    }

    #[test]
    fn an_unpriced_worker_does_not_make_an_entrypoint_free() {
        let merged = merge(&[
            worker("a", vec![entrypoint("echo", None, None)]),
            worker("b", vec![entrypoint("echo", Some("0.5"), None)]),
        ]);
        assert_eq!(merged.entrypoints[0].price, price(Some("0.5"), None));
        // The description is still the first worker's.
        assert_eq!(merged.entrypoints[0].description, "echo entrypoint");
        assert_eq!(
            merged.disagreements[0].advertised,
            vec![
                (None, vec!["a".into()]),
                (Some("0.5".into()), vec!["b".into()]),
            ]
        );
    }

    #[test]
    fn an_unparsable_price_never_undercuts_and_never_frees() {
        let mixed = merge(&[
            worker("a", vec![entrypoint("echo", Some("lots"), None)]),
            worker("b", vec![entrypoint("echo", Some("0.2"), None)]),
        ]);
        assert_eq!(mixed.entrypoints[0].price, price(Some("0.2"), None));
        let only_bad = merge(&[worker("a", vec![entrypoint("echo", Some("lots"), None)])]);
        assert_eq!(only_bad.entrypoints[0].price, price(Some("lots"), None));
    }

    #[test]
    fn each_disagreement_warns_once() {
        let disagreement = |workers: &[&str]| {
            let merged = merge(
                &workers
                    .iter()
                    .zip(["0.1", "0.2"])
                    .map(|(id, amount)| worker(id, vec![entrypoint("echo", Some(amount), None)]))
                    .collect::<Vec<_>>(),
            );
            merged.disagreements.into_iter().next()
        };
        let warned = Warned::default();
        let Some(first) = disagreement(&["a", "b"]) else {
            panic!("no disagreement");
        };
        assert!(warned.first_time(&first));
        assert!(!warned.first_time(&first));
        // The same prices from restarted workers (new ids) are the same disagreement.
        let Some(restarted) = disagreement(&["a2", "b2"]) else {
            panic!("no disagreement");
        };
        assert!(!warned.first_time(&restarted));
        let mut other = first.clone();
        other.kind = Kind::Stream;
        assert!(warned.first_time(&other));
    }
}
