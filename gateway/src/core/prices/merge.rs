//! One view of each entrypoint out of the live workers' registry entries, and how it fails
//! safe when the workers disagree: what the gateway charges, which Sign-In-With-X policy and
//! which payment protocol it applies.
//!
//! Workers are configured one by one, so during a rolling change (or after a typo on one host)
//! two live workers can advertise different terms for one entrypoint. The gateway cannot know
//! which is meant, so it takes the terms that never sell below any operator's, and never let
//! anyone run a priced entrypoint unpaid:
//!
//! - **Price**: the highest, per kind (invoke, stream), compared in atomic USDC units. A
//!   worker advertising no price for an entrypoint another worker prices does not make it
//!   free.
//! - **Sign-In-With-X**: the strictest policy any host declares, where a host without `--siwx`
//!   counts as a policy too. Which is strictest depends on whether the merged entrypoint is
//!   priced:
//!
//!   | the hosts declare           | priced entrypoint | unpriced entrypoint |
//!   |-----------------------------|-------------------|---------------------|
//!   | all none                    | none              | none                |
//!   | all `siwx`                  | `siwx`            | `siwx`              |
//!   | all `auth-only`             | `siwx`            | `auth-only`         |
//!   | none + `siwx`               | none              | `siwx`              |
//!   | none + `auth-only`          | none              | `auth-only`         |
//!   | `siwx` + `auth-only`        | `siwx`            | `auth-only`         |
//!   | none + `siwx` + `auth-only` | none              | `auth-only`         |
//!
//!   Priced: none (everyone pays) > `siwx` (a payer may sign in again instead of paying) >
//!   `auth-only` (any signed-in wallet runs unpaid), and `auth-only` never applies: it would
//!   run a priced entrypoint for free, so at its laxest a priced entrypoint takes `siwx`.
//!   Unpriced: `auth-only` (a signature is required) > `siwx` (a signature, if sent, must be
//!   valid) > none.
//! - **Payment protocol**: x402 unless every worker pricing the entrypoint asks for MPP. Both
//!   charge the same (merged) price and settle before the run, so neither is cheaper; x402 is
//!   the default every gateway with payments can serve, and the one whose 402 offers sign-in.
//!   A change of protocol, like `retry_safe`, takes effect once the last worker has it.
//!
//! - **Private** (`--private`): private when any worker hosting it says so (never exposed by a
//!   host that was not told).
//!
//! Each distinct disagreement (a SIWX policy that cannot apply as declared included) is logged
//! once, not on every request.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};

use payments::U256;
use payments::amount::to_atomic;
use store::registry::{
    EntrypointInfo, PaymentProtocol, Price, PriceScheme, SettlePolicy, SiwxPolicy, WorkerEntry,
};

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

/// What the live workers disagree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    Price(Kind),
    /// The Sign-In-With-X policy (`--siwx`).
    Siwx,
    /// x402 or MPP (`--price KEY=AMOUNT:mpp`).
    Protocol,
    /// When an invoke settles (`--price KEY=AMOUNT:settle=after`).
    Settle,
    /// Whether the amount is the price or a maximum (`--price KEY=upto:MAX`).
    Scheme,
}

impl Subject {
    /// How a host that declares nothing of this subject is shown.
    fn nothing(self) -> &'static str {
        match self {
            Subject::Price(_) | Subject::Protocol | Subject::Settle | Subject::Scheme => "no price",
            Subject::Siwx => "no SIWX",
        }
    }
}

/// Live workers advertising different terms of one subject for one entrypoint, or (SIWX) a
/// policy that cannot apply as declared.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Disagreement {
    pub entrypoint: String,
    pub subject: Subject,
    /// What applies: the price charged, the SIWX policy (`none`, `siwx`, `auth-only`), the
    /// payment protocol.
    pub applied: String,
    /// Every term advertised, with the workers advertising it, in the registry's order;
    /// `None` for the workers that host the entrypoint without one.
    pub advertised: Vec<(Option<String>, Vec<String>)>,
}

/// The registry's entrypoints merged by key, and the disagreements found doing it.
#[derive(Debug, Default)]
pub struct Merged {
    /// By key. The price, SIWX policy and `retry_safe` merged as the module says; the rest
    /// (description, schemas) is the first worker's.
    pub entrypoints: Vec<EntrypointInfo>,
    pub disagreements: Vec<Disagreement>,
}

/// Merges `workers`' entrypoints by key: the highest price of each kind, the strictest SIWX
/// policy, x402 unless every pricing worker asks for MPP.
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
                protocol: protocol_of(key, &hosts, &mut merged.disagreements),
                settle: unanimous(
                    key,
                    &hosts,
                    Subject::Settle,
                    |price| price.settle,
                    (SettlePolicy::After, SettlePolicy::Before),
                    SettlePolicy::as_str,
                    &mut merged.disagreements,
                ),
                scheme: unanimous(
                    key,
                    &hosts,
                    Subject::Scheme,
                    |price| price.scheme,
                    (PriceScheme::Upto, PriceScheme::Exact),
                    PriceScheme::as_str,
                    &mut merged.disagreements,
                ),
            }),
        };
        entrypoint.siwx = strictest_siwx(
            key,
            &hosts,
            entrypoint.price.is_some(),
            &mut merged.disagreements,
        );
        // Any worker that may run it must tolerate a second run, or nobody gets one.
        entrypoint.retry_safe = hosts.iter().all(|(_, hosted)| hosted.retry_safe);
        // Hidden once any worker hides it: a rolling change to private takes effect with the
        // first worker that has it, and a public host never exposes another's private one.
        entrypoint.private = hosts.iter().any(|(_, hosted)| hosted.private);
        merged.entrypoints.push(entrypoint);
    }
    merged
}

/// `items` (worker, term) grouped by term, in order of first appearance.
fn group<T: PartialEq>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(T, Vec<String>)> {
    let mut groups: Vec<(T, Vec<String>)> = Vec::new();
    for (worker, term) in items {
        match groups.iter_mut().find(|(seen, _)| *seen == term) {
            Some((_, workers)) => workers.push(worker),
            None => groups.push((term, vec![worker])),
        }
    }
    groups
}

/// How the entrypoint is paid: MPP once every worker that prices it asks for MPP, x402
/// otherwise (so a rolling change of protocol takes effect when the last worker has it, as
/// `retry_safe` does), noting a disagreement when they differ.
fn protocol_of(
    key: &str,
    hosts: &[(&str, &EntrypointInfo)],
    disagreements: &mut Vec<Disagreement>,
) -> PaymentProtocol {
    let advertised = group(hosts.iter().filter_map(|(worker, hosted)| {
        let price = hosted
            .price
            .as_ref()
            .filter(|price| price.invoke.is_some() || price.stream.is_some())?;
        Some(((*worker).to_owned(), price.protocol))
    }));
    let applied = match advertised.as_slice() {
        [(PaymentProtocol::Mpp, _)] => PaymentProtocol::Mpp,
        _ => PaymentProtocol::X402,
    };
    if advertised.len() > 1 {
        disagreements.push(Disagreement {
            entrypoint: key.to_owned(),
            subject: Subject::Protocol,
            applied: applied.as_str().to_owned(),
            advertised: advertised
                .into_iter()
                .map(|(protocol, workers)| (Some(protocol.as_str().to_owned()), workers))
                .collect(),
        });
    }
    applied
}

/// A price term that applies only when every pricing host of `key` asks for it (`wanted`),
/// `otherwise` the safe default: a rolling change takes effect with the last worker, as the
/// protocol's does. Hosts asking for different terms are reported as a disagreement.
fn unanimous<T: Copy + PartialEq>(
    key: &str,
    hosts: &[(&str, &EntrypointInfo)],
    subject: Subject,
    term: impl Fn(&Price) -> T,
    (wanted, otherwise): (T, T),
    name: impl Fn(T) -> &'static str,
    disagreements: &mut Vec<Disagreement>,
) -> T {
    let advertised = group(hosts.iter().filter_map(|(worker, hosted)| {
        let price = hosted
            .price
            .as_ref()
            .filter(|price| price.invoke.is_some() || price.stream.is_some())?;
        Some(((*worker).to_owned(), term(price)))
    }));
    let applied = match advertised.as_slice() {
        [(only, _)] if *only == wanted => wanted,
        _ => otherwise,
    };
    if advertised.len() > 1 {
        disagreements.push(Disagreement {
            entrypoint: key.to_owned(),
            subject,
            applied: name(applied).to_owned(),
            advertised: advertised
                .into_iter()
                .map(|(term, workers)| (Some(name(term).to_owned()), workers))
                .collect(),
        });
    }
    applied
}

/// A host's Sign-In-With-X policy for one entrypoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Siwx {
    /// No `--siwx`: a priced entrypoint is paid for by everyone.
    Off,
    /// `--siwx KEY`: a payer entitled to a priced entrypoint may sign in instead of paying.
    Entitlements,
    /// `--siwx KEY:auth-only`: any signed-in wallet runs it, without paying.
    AuthOnly,
}

impl Siwx {
    fn of(policy: Option<SiwxPolicy>) -> Siwx {
        match policy {
            None => Siwx::Off,
            Some(SiwxPolicy { auth_only: false }) => Siwx::Entitlements,
            Some(SiwxPolicy { auth_only: true }) => Siwx::AuthOnly,
        }
    }

    fn policy(self) -> Option<SiwxPolicy> {
        match self {
            Siwx::Off => None,
            Siwx::Entitlements => Some(SiwxPolicy { auth_only: false }),
            Siwx::AuthOnly => Some(SiwxPolicy { auth_only: true }),
        }
    }

    fn name(self) -> Option<&'static str> {
        match self {
            Siwx::Off => None,
            Siwx::Entitlements => Some("siwx"),
            Siwx::AuthOnly => Some("auth-only"),
        }
    }

    /// Higher is stricter (see the module's table).
    fn strictness(self, priced: bool) -> u8 {
        match (priced, self) {
            (true, Siwx::Off) | (false, Siwx::AuthOnly) => 2,
            (_, Siwx::Entitlements) => 1,
            (true, Siwx::AuthOnly) | (false, Siwx::Off) => 0,
        }
    }
}

/// The strictest SIWX policy among `hosts` for entrypoint `key` (`priced` once merged), never
/// auth-only when priced; notes a disagreement when the hosts differ or what they declare
/// cannot apply.
fn strictest_siwx(
    key: &str,
    hosts: &[(&str, &EntrypointInfo)],
    priced: bool,
    disagreements: &mut Vec<Disagreement>,
) -> Option<SiwxPolicy> {
    let advertised = group(
        hosts
            .iter()
            .map(|(worker, hosted)| ((*worker).to_owned(), Siwx::of(hosted.siwx))),
    );
    let strictest = advertised
        .iter()
        .map(|(policy, _)| *policy)
        .max_by_key(|policy| policy.strictness(priced))
        .unwrap_or(Siwx::Off);
    // Auth-only runs without paying: on a priced entrypoint, the next stricter policy.
    let applied = if priced && strictest == Siwx::AuthOnly {
        Siwx::Entitlements
    } else {
        strictest
    };
    if advertised.iter().any(|(policy, _)| *policy != applied) {
        disagreements.push(Disagreement {
            entrypoint: key.to_owned(),
            subject: Subject::Siwx,
            applied: applied.name().unwrap_or("none").to_owned(),
            advertised: advertised
                .into_iter()
                .map(|(policy, workers)| (policy.name().map(str::to_owned), workers))
                .collect(),
        });
    }
    applied.policy()
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
            subject: Subject::Price(kind),
            applied: charged.clone(),
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
/// with the same terms is the same disagreement.
#[derive(Default)]
pub struct Warned {
    seen: Mutex<HashSet<WarnedKey>>,
}

/// Entrypoint, subject, what applies and the terms advertised (sorted).
type WarnedKey = (String, Subject, String, Vec<Option<String>>);

impl Warned {
    /// Whether `disagreement` is new (and so worth a log line); remembers it.
    pub fn first_time(&self, disagreement: &Disagreement) -> bool {
        let mut terms: Vec<Option<String>> = disagreement
            .advertised
            .iter()
            .map(|(term, _)| term.clone())
            .collect();
        terms.sort();
        let key = (
            disagreement.entrypoint.clone(),
            disagreement.subject,
            disagreement.applied.clone(),
            terms,
        );
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
        let nothing = disagreement.subject.nothing();
        let advertised = disagreement
            .advertised
            .iter()
            .map(|(term, workers)| {
                format!(
                    "{} by {}",
                    term.as_deref().unwrap_or(nothing),
                    workers.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let entrypoint = &disagreement.entrypoint;
        let applied = &disagreement.applied;
        match disagreement.subject {
            Subject::Price(kind) => tracing::warn!(
                %entrypoint,
                kind = kind.as_str(),
                charged = %applied,
                %advertised,
                "live workers disagree on this entrypoint's price; charging the highest"
            ),
            Subject::Siwx => tracing::warn!(
                %entrypoint,
                siwx = %applied,
                %advertised,
                "live workers disagree on this entrypoint's Sign-In-With-X policy, or declare \
                 auth-only for a priced one; applying the strictest (never auth-only when priced)"
            ),
            Subject::Protocol => tracing::warn!(
                %entrypoint,
                protocol = %applied,
                %advertised,
                "live workers disagree on this entrypoint's payment protocol; x402 applies \
                 until every worker pricing it asks for MPP"
            ),
            Subject::Settle => tracing::warn!(
                %entrypoint,
                settle = %applied,
                %advertised,
                "live workers disagree on when this entrypoint's invokes settle; before the \
                 run applies until every worker pricing it asks for settle=after"
            ),
            Subject::Scheme => tracing::warn!(
                %entrypoint,
                scheme = %applied,
                %advertised,
                "live workers disagree on whether this entrypoint's price is exact or a \
                 maximum (upto); exact applies until every worker pricing it asks for upto"
            ),
        }
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
                settle: Default::default(),
                scheme: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }
    }

    fn price(invoke: Option<&str>, stream: Option<&str>) -> Option<Price> {
        Some(Price {
            invoke: invoke.map(Into::into),
            stream: stream.map(Into::into),
            protocol: Default::default(),
            settle: Default::default(),
            scheme: Default::default(),
        })
    }

    #[test]
    fn one_private_host_hides_the_entrypoint() {
        let hidden = EntrypointInfo {
            private: true,
            ..entrypoint("echo", None, None)
        };
        let merged = merge(&[
            worker("a", vec![entrypoint("echo", None, None)]),
            worker("b", vec![hidden]),
            worker("c", vec![entrypoint("free", None, None)]),
        ]);
        let private: Vec<bool> = merged.entrypoints.iter().map(|e| e.private).collect();
        assert_eq!(private, [true, false]);
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
        assert_eq!(invoke.subject, Subject::Price(Kind::Invoke));
        assert_eq!(invoke.applied, "0.0100");
        assert_eq!(
            invoke.advertised,
            vec![
                (Some("0.002".into()), vec!["a".into(), "c".into()]),
                (Some("0.0100".into()), vec!["b".into()]),
            ]
        );
        assert_eq!(
            merged.disagreements[1].subject,
            Subject::Price(Kind::Stream)
        );
        assert_eq!(merged.disagreements[1].applied, "0.01");
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
        other.subject = Subject::Price(Kind::Stream);
        assert!(warned.first_time(&other));
    }

    const NONE: Option<SiwxPolicy> = None;
    const SIWX: Option<SiwxPolicy> = Some(SiwxPolicy { auth_only: false });
    const AUTH_ONLY: Option<SiwxPolicy> = Some(SiwxPolicy { auth_only: true });

    /// `echo` as one worker hosts it: priced (0.001) with `protocol` or not, under `siwx`.
    fn echo(protocol: Option<PaymentProtocol>, siwx: Option<SiwxPolicy>) -> EntrypointInfo {
        let mut echo = entrypoint("echo", protocol.map(|_| "0.001"), None);
        if let (Some(price), Some(protocol)) = (echo.price.as_mut(), protocol) {
            price.protocol = protocol;
        }
        echo.siwx = siwx;
        echo
    }

    #[test]
    fn invokes_settle_after_the_run_only_when_every_pricing_host_says_so() {
        use PaymentProtocol::X402;
        let after = |mut echo: EntrypointInfo| {
            if let Some(price) = echo.price.as_mut() {
                price.settle = SettlePolicy::After;
            }
            echo
        };
        let settle = |merged: &EntrypointInfo| merged.price.as_ref().map(|price| price.settle);
        let (merged, disagreements) =
            merged_echo(&[after(echo(Some(X402), NONE)), after(echo(Some(X402), NONE))]);
        assert_eq!(settle(&merged), Some(SettlePolicy::After));
        assert!(of(&disagreements, Subject::Settle).is_empty());
        // One worker still settling before (a rolling change): before applies, and it shows.
        for order in orderings(&[after(echo(Some(X402), NONE)), echo(Some(X402), NONE)]) {
            let (merged, disagreements) = merged_echo(&order);
            assert_eq!(settle(&merged), Some(SettlePolicy::Before));
            assert_eq!(of(&disagreements, Subject::Settle).len(), 1);
        }
    }

    /// `hosts` as workers w0, w1, … (listed in that order), each hosting `echo` as given.
    fn echo_hosts(hosts: &[EntrypointInfo]) -> Vec<WorkerEntry> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, hosted)| worker(&format!("w{i}"), vec![hosted.clone()]))
            .collect()
    }

    fn merged_echo(hosts: &[EntrypointInfo]) -> (EntrypointInfo, Vec<Disagreement>) {
        let merged = merge(&echo_hosts(hosts));
        let echo = merged.entrypoints.into_iter().next();
        (
            echo.unwrap_or_else(|| panic!("no echo")),
            merged.disagreements,
        )
    }

    fn of(disagreements: &[Disagreement], subject: Subject) -> Vec<&Disagreement> {
        disagreements
            .iter()
            .filter(|disagreement| disagreement.subject == subject)
            .collect()
    }

    /// Every ordering of `items`.
    fn orderings<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
        if items.len() <= 1 {
            return vec![items.to_vec()];
        }
        let mut all = Vec::new();
        for i in 0..items.len() {
            let mut rest = items.to_vec();
            let first = rest.remove(i);
            for mut tail in orderings(&rest) {
                tail.insert(0, first.clone());
                all.push(tail);
            }
        }
        all
    }

    /// What the hosts declare; what applies priced; what applies unpriced.
    type Row = (
        &'static [Option<SiwxPolicy>],
        Option<SiwxPolicy>,
        Option<SiwxPolicy>,
    );

    /// The module's table, row by row: the policies the hosts declare, then what applies when
    /// the entrypoint is priced and when it is not. Each row runs in every order of the hosts
    /// and, priced, with the price on each host in turn (the others hosting it unpriced).
    #[test]
    fn the_strictest_siwx_policy_applies_whoever_is_listed_first() {
        let table: [Row; 10] = [
            (&[NONE], NONE, NONE),
            (&[SIWX], SIWX, SIWX),
            (&[AUTH_ONLY], SIWX, AUTH_ONLY),
            (&[NONE, NONE], NONE, NONE),
            (&[SIWX, SIWX], SIWX, SIWX),
            (&[AUTH_ONLY, AUTH_ONLY], SIWX, AUTH_ONLY),
            (&[NONE, SIWX], NONE, SIWX),
            (&[NONE, AUTH_ONLY], NONE, AUTH_ONLY),
            (&[SIWX, AUTH_ONLY], SIWX, AUTH_ONLY),
            (&[NONE, SIWX, AUTH_ONLY], NONE, AUTH_ONLY),
        ];
        for (declared, priced, unpriced) in table {
            for order in orderings(declared) {
                let free: Vec<EntrypointInfo> =
                    order.iter().map(|policy| echo(None, *policy)).collect();
                let (merged, _) = merged_echo(&free);
                assert_eq!(merged.price, None);
                assert_eq!(merged.siwx, unpriced, "unpriced {order:?}");
                for payer in 0..order.len() {
                    let mut hosts = free.clone();
                    hosts[payer] = echo(Some(PaymentProtocol::X402), order[payer]);
                    let (merged, _) = merged_echo(&hosts);
                    assert_eq!(merged.price, price(Some("0.001"), None));
                    assert_eq!(merged.siwx, priced, "priced by #{payer} of {order:?}");
                }
            }
        }
    }

    /// The case that made priced entrypoints free: the first worker listed declares auth-only
    /// (and no price), the next prices it.
    #[test]
    fn auth_only_never_survives_a_price() {
        for (lax, pricer) in [
            (
                echo(None, AUTH_ONLY),
                echo(Some(PaymentProtocol::X402), NONE),
            ),
            (
                echo(None, AUTH_ONLY),
                echo(Some(PaymentProtocol::Mpp), NONE),
            ),
            (
                echo(None, AUTH_ONLY),
                echo(Some(PaymentProtocol::X402), SIWX),
            ),
            (
                echo(Some(PaymentProtocol::X402), AUTH_ONLY),
                echo(Some(PaymentProtocol::X402), AUTH_ONLY),
            ),
        ] {
            for hosts in [[lax.clone(), pricer.clone()], [pricer.clone(), lax.clone()]] {
                let (merged, _) = merged_echo(&hosts);
                assert!(merged.price.is_some(), "{hosts:?}");
                assert_ne!(merged.siwx, AUTH_ONLY, "{hosts:?}");
            }
        }
        // Exhaustively, for one to three hosts of every price and policy.
        let states: Vec<EntrypointInfo> = [
            None,
            Some(PaymentProtocol::X402),
            Some(PaymentProtocol::Mpp),
        ]
        .into_iter()
        .flat_map(|protocol| [NONE, SIWX, AUTH_ONLY].map(|siwx| echo(protocol, siwx)))
        .collect();
        let mut combinations: Vec<Vec<EntrypointInfo>> = vec![Vec::new()];
        for _ in 0..3 {
            let longer: Vec<Vec<EntrypointInfo>> = combinations
                .iter()
                .flat_map(|hosts| {
                    states.iter().map(move |state| {
                        let mut hosts = hosts.clone();
                        hosts.push(state.clone());
                        hosts
                    })
                })
                .collect();
            for hosts in &longer {
                let (merged, disagreements) = merged_echo(hosts);
                let priced = hosts.iter().any(|host| host.price.is_some());
                assert_eq!(merged.price.is_some(), priced, "{hosts:?}");
                if priced {
                    assert_ne!(merged.siwx, AUTH_ONLY, "{hosts:?}");
                    // A host without SIWX means everyone pays.
                    if hosts.iter().any(|host| host.siwx.is_none()) {
                        assert_eq!(merged.siwx, NONE, "{hosts:?}");
                    }
                } else if hosts.iter().any(|host| host.siwx == AUTH_ONLY) {
                    assert_eq!(merged.siwx, AUTH_ONLY, "{hosts:?}");
                }
                // Declarations that differ, or that cannot apply, are one disagreement.
                let declared_differ = hosts.iter().any(|host| host.siwx != hosts[0].siwx);
                let cannot_apply = priced && hosts.iter().any(|host| host.siwx == AUTH_ONLY);
                assert_eq!(
                    of(&disagreements, Subject::Siwx).len(),
                    usize::from(declared_differ || cannot_apply),
                    "{hosts:?}"
                );
                // The order the registry lists them in changes nothing.
                let mut reversed = hosts.clone();
                reversed.reverse();
                let (again, _) = merged_echo(&reversed);
                assert_eq!((again.price, again.siwx), (merged.price, merged.siwx));
            }
            combinations = longer;
        }
    }

    #[test]
    fn a_siwx_disagreement_names_every_policy_and_what_applies() {
        let (_, disagreements) = merged_echo(&[
            echo(None, AUTH_ONLY),
            echo(Some(PaymentProtocol::X402), SIWX),
            echo(None, NONE),
            echo(None, AUTH_ONLY),
        ]);
        let siwx = of(&disagreements, Subject::Siwx);
        assert_eq!(siwx.len(), 1);
        assert_eq!(siwx[0].applied, "none");
        assert_eq!(
            siwx[0].advertised,
            vec![
                (Some("auth-only".into()), vec!["w0".into(), "w3".into()]),
                (Some("siwx".into()), vec!["w1".into()]),
                (None, vec!["w2".into()]),
            ]
        );
        // One worker alone, pricing an entrypoint it also declares auth-only (a worker from
        // before the start-up check): nothing to disagree with, but reported as not applied.
        let (merged, disagreements) = merged_echo(&[echo(Some(PaymentProtocol::X402), AUTH_ONLY)]);
        assert_eq!(merged.siwx, SIWX);
        let siwx = of(&disagreements, Subject::Siwx);
        assert_eq!(siwx.len(), 1);
        assert_eq!(siwx[0].applied, "siwx");
        assert_eq!(
            siwx[0].advertised,
            vec![(Some("auth-only".into()), vec!["w0".into()])]
        );
    }

    #[test]
    fn mpp_applies_only_when_every_pricing_worker_asks_for_it() {
        use PaymentProtocol::{Mpp, X402};
        // (protocols of the hosts, None hosting it unpriced; what applies; disagreement?)
        let table: [(&[Option<PaymentProtocol>], PaymentProtocol, bool); 8] = [
            (&[Some(X402)], X402, false),
            (&[Some(Mpp)], Mpp, false),
            (&[Some(Mpp), Some(Mpp)], Mpp, false),
            (&[Some(X402), Some(X402)], X402, false),
            (&[Some(Mpp), Some(X402)], X402, true),
            (&[Some(X402), Some(Mpp)], X402, true),
            // A host that does not price it has no say in how it is paid.
            (&[None, Some(Mpp)], Mpp, false),
            (&[Some(Mpp), None, Some(X402), Some(Mpp)], X402, true),
        ];
        for (protocols, applied, disagree) in table {
            for order in orderings(protocols) {
                let hosts: Vec<EntrypointInfo> =
                    order.iter().map(|protocol| echo(*protocol, NONE)).collect();
                let (merged, disagreements) = merged_echo(&hosts);
                let protocol = merged.price.map(|price| price.protocol);
                assert_eq!(protocol, Some(applied), "{order:?}");
                let found = of(&disagreements, Subject::Protocol);
                assert_eq!(found.len(), usize::from(disagree), "{order:?}");
                if let Some(found) = found.first() {
                    assert_eq!(found.applied, "x402");
                }
            }
        }
        // The price's protocol never changes what is charged: the highest still applies.
        let mut cheap_mpp = echo(Some(Mpp), NONE);
        cheap_mpp.price = Some(Price {
            invoke: Some("0.0005".into()),
            stream: None,
            protocol: Mpp,
            settle: Default::default(),
            scheme: Default::default(),
        });
        let (merged, disagreements) = merged_echo(&[cheap_mpp, echo(Some(X402), NONE)]);
        assert_eq!(merged.price, price(Some("0.001"), None));
        assert_eq!(of(&disagreements, Subject::Protocol)[0].advertised.len(), 2);
    }

    #[test]
    fn siwx_and_protocol_disagreements_warn_once() {
        let hosts = [
            echo(None, AUTH_ONLY),
            echo(Some(PaymentProtocol::Mpp), SIWX),
        ];
        let mut more = hosts.to_vec();
        more.push(echo(Some(PaymentProtocol::X402), SIWX));
        let (_, disagreements) = merged_echo(&more);
        let warned = Warned::default();
        for subject in [Subject::Siwx, Subject::Protocol] {
            let found = of(&disagreements, subject);
            assert_eq!(found.len(), 1, "{subject:?}");
            assert!(warned.first_time(found[0]));
            assert!(!warned.first_time(found[0]));
        }
        // Restarted workers (new ids, same terms): the same disagreement.
        let restarted: Vec<WorkerEntry> = more
            .iter()
            .enumerate()
            .map(|(i, hosted)| worker(&format!("restarted-{i}"), vec![hosted.clone()]))
            .collect();
        let again = merge(&restarted).disagreements;
        for subject in [Subject::Siwx, Subject::Protocol] {
            assert!(!warned.first_time(of(&again, subject)[0]), "{subject:?}");
        }
        // The same declarations with another outcome (the price gone: auth-only applies) are
        // news; priced again, they are the disagreement already logged.
        let (_, unpriced) = merged_echo(&[echo(None, AUTH_ONLY), echo(None, SIWX)]);
        assert_eq!(of(&unpriced, Subject::Siwx)[0].applied, "auth-only");
        assert!(warned.first_time(of(&unpriced, Subject::Siwx)[0]));
        let (_, priced) = merged_echo(&[
            echo(None, AUTH_ONLY),
            echo(Some(PaymentProtocol::X402), SIWX),
        ]);
        assert_eq!(of(&priced, Subject::Siwx)[0].applied, "siwx");
        assert!(!warned.first_time(of(&priced, Subject::Siwx)[0]));
    }
}
