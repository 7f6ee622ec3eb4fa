//! Prices a worker is told at start (`--price KEY=AMOUNT[:x402|:mpp]`, or `WORKER_PRICES`), and
//! their application to the entrypoints it hosts.
//!
//! An amount is decimal USDC (`0.001`), validated with the payment crate's own parser so that
//! a price the gateway could not charge never reaches the registry. It prices invoke, task
//! creation and, for a streaming entrypoint, stream: one amount per entrypoint, as upstream's
//! flat `price: "0.001"`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use payments::amount::{AmountError, to_atomic, to_decimal};
use store::registry::Price;
pub use store::registry::{PaymentProtocol, PriceScheme, SettlePolicy};

use crate::entrypoint::Entrypoints;

/// One `KEY=AMOUNT[:PROTOCOL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceSpec {
    pub key: String,
    /// Canonical decimal USDC (`".50"` reads as `"0.5"`), so that workers told the same
    /// price in different spellings advertise the same string.
    pub amount: String,
    pub protocol: PaymentProtocol,
    /// When a priced invoke settles (`:settle=after`: only once the run succeeded).
    pub settle: SettlePolicy,
    /// `upto:MAX`: the amount is the most an invoke may cost (settled after the run for what
    /// the handler reports, so always settle=after).
    pub scheme: PriceScheme,
}

/// Why a price was refused. Each message is one line naming the offending price, since it
/// is what an operator sees when the worker refuses to start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("price {0:?} is not KEY=AMOUNT[:x402|:mpp][:settle=before|after] (e.g. echo=0.001)")]
    Malformed(String),
    /// Not named `source`: the amount error's text is already in this message, and a
    /// `source` would print it twice on exit.
    #[error("price of {key:?}: {reason}")]
    Amount { key: String, reason: AmountError },
    #[error(
        "price of {key:?}: {protocol:?} is neither a payment protocol (x402 or mpp) nor \
         settle=before|after"
    )]
    Protocol { key: String, protocol: String },
    #[error("price of {key:?}: this worker hosts no such entrypoint (it hosts: {hosted})")]
    UnknownEntrypoint { key: String, hosted: String },
    /// `upto` settles for the usage after the run, over x402's Permit2 scheme: MPP's charge
    /// intent and a settlement before the run cannot express it.
    #[error("price of {key:?}: upto:MAX {conflict}")]
    Upto { key: String, conflict: &'static str },
    #[error("entrypoint {0:?} is priced more than once")]
    Duplicate(String),
    /// Auth-only runs an entrypoint for any signed-in wallet without paying: with a price,
    /// one of the two is a mistake, and guessing which could give a paid entrypoint away.
    #[error(
        "entrypoint {0:?} is priced and --siwx {0}:auth-only (free for any signed-in wallet): \
         drop one, or use --siwx {0} to let payers sign in again instead of paying"
    )]
    PricedAuthOnly(String),
}

impl FromStr for PriceSpec {
    type Err = PriceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let malformed = || PriceError::Malformed(text.to_owned());
        let (key, rest) = text.split_once('=').ok_or_else(malformed)?;
        let key = key.trim();
        if key.is_empty() {
            return Err(malformed());
        }
        let mut parts = rest.split(':').peekable();
        let scheme = if parts.peek().map(|part| part.trim()) == Some("upto") {
            parts.next();
            PriceScheme::Upto
        } else {
            PriceScheme::Exact
        };
        let amount = parts.next().unwrap_or_default();
        // Options after the amount, in any order, each at most once.
        let (mut protocol, mut settle) = (None, None);
        for option in parts {
            let refused = || PriceError::Protocol {
                key: key.to_owned(),
                protocol: option.trim().to_owned(),
            };
            let slot_taken = match option.trim() {
                "x402" => protocol.replace(PaymentProtocol::X402).is_some(),
                "mpp" => protocol.replace(PaymentProtocol::Mpp).is_some(),
                "settle=before" => settle.replace(SettlePolicy::Before).is_some(),
                "settle=after" => settle.replace(SettlePolicy::After).is_some(),
                _ => return Err(refused()),
            };
            if slot_taken {
                return Err(malformed());
            }
        }
        let upto = |conflict| PriceError::Upto {
            key: key.to_owned(),
            conflict,
        };
        let settle = match (scheme, settle) {
            (PriceScheme::Upto, Some(SettlePolicy::Before)) => {
                return Err(upto(
                    "settles after the run (for what it used): drop settle=before",
                ));
            }
            (PriceScheme::Upto, _) => SettlePolicy::After,
            (PriceScheme::Exact, settle) => settle.unwrap_or_default(),
        };
        if scheme == PriceScheme::Upto && protocol == Some(PaymentProtocol::Mpp) {
            return Err(upto("is x402's metered scheme: it cannot be paid with MPP"));
        }
        let protocol = protocol.unwrap_or_default();
        let atomic = to_atomic(amount).map_err(|reason| PriceError::Amount {
            key: key.to_owned(),
            reason,
        })?;
        Ok(PriceSpec {
            key: key.to_owned(),
            amount: to_decimal(atomic),
            protocol,
            settle,
            scheme,
        })
    }
}

impl fmt::Display for PriceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            PriceScheme::Exact => write!(f, "{}={}", self.key, self.amount)?,
            PriceScheme::Upto => write!(f, "{}=upto:{}", self.key, self.amount)?,
        }
        write!(f, ":{}", self.protocol.as_str())?;
        match self.settle {
            SettlePolicy::Before => Ok(()),
            SettlePolicy::After => write!(f, ":settle=after"),
        }
    }
}

/// `entrypoints` with `prices` applied: each named entrypoint costs its amount to invoke, to
/// create a task of and (only when it streams) to stream. A price naming an entrypoint this
/// worker does not host, one entrypoint twice, or one declared auth-only (Sign-In-With-X
/// applied first), is refused rather than guessed at: a typo must not leave a paid entrypoint
/// free.
pub fn apply(entrypoints: Entrypoints, prices: &[PriceSpec]) -> Result<Entrypoints, PriceError> {
    let mut seen = BTreeSet::new();
    let mut priced = entrypoints;
    for spec in prices {
        if !seen.insert(spec.key.as_str()) {
            return Err(PriceError::Duplicate(spec.key.clone()));
        }
        let Some(entrypoint) = priced.get(&spec.key).cloned() else {
            return Err(PriceError::UnknownEntrypoint {
                key: spec.key.clone(),
                hosted: priced.keys().join(", "),
            });
        };
        if entrypoint.siwx.is_some_and(|policy| policy.auth_only) {
            return Err(PriceError::PricedAuthOnly(spec.key.clone()));
        }
        let price = Price {
            invoke: Some(spec.amount.clone()),
            stream: entrypoint.streaming.then(|| spec.amount.clone()),
            protocol: spec.protocol,
            settle: spec.settle,
            scheme: spec.scheme,
        };
        priced = priced.with(entrypoint.price(price));
    }
    Ok(priced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins;

    fn spec(text: &str) -> Result<PriceSpec, PriceError> {
        text.parse()
    }

    #[test]
    fn parses_key_amount_and_optional_protocol() {
        let expected = PriceSpec {
            key: "echo".into(),
            amount: "0.001".into(),
            protocol: PaymentProtocol::X402,
            settle: SettlePolicy::Before,
            scheme: PriceScheme::Exact,
        };
        assert_eq!(spec("echo=0.001"), Ok(expected.clone()));
        assert_eq!(spec("echo=0.001:x402"), Ok(expected.clone()));
        assert_eq!(spec(" echo = 0.001 "), Ok(expected.clone()));
        assert_eq!(spec("echo=.0010"), Ok(expected.clone()));
        assert_eq!(expected.to_string(), "echo=0.001:x402");
        assert_eq!(spec("sleep=2").map(|s| s.amount), Ok("2".to_owned()));
    }

    #[test]
    fn parses_the_settlement_policy_in_any_order() -> Result<(), PriceError> {
        let after = spec("echo=0.001:settle=after")?;
        assert_eq!(
            (after.protocol, after.settle),
            (PaymentProtocol::X402, SettlePolicy::After)
        );
        assert_eq!(after.to_string(), "echo=0.001:x402:settle=after");
        let mpp = spec("echo=0.001:settle=after:mpp")?;
        assert_eq!(
            (mpp.protocol, mpp.settle),
            (PaymentProtocol::Mpp, SettlePolicy::After)
        );
        assert_eq!(
            spec("echo=0.001:settle=before")?.settle,
            SettlePolicy::Before
        );
        // Twice the same option, or one we do not know: refused, never guessed at.
        assert!(matches!(
            spec("echo=0.001:mpp:x402"),
            Err(PriceError::Malformed(_))
        ));
        assert!(matches!(
            spec("echo=0.001:settle=later"),
            Err(PriceError::Protocol { .. })
        ));
        Ok(())
    }

    #[test]
    fn parses_metered_prices_as_a_maximum_settled_after_the_run() -> Result<(), PriceError> {
        let upto = spec("summarize=upto:0.01")?;
        assert_eq!(
            (upto.scheme, upto.settle, upto.amount.as_str()),
            (PriceScheme::Upto, SettlePolicy::After, "0.01")
        );
        assert_eq!(upto.to_string(), "summarize=upto:0.01:x402:settle=after");
        assert_eq!(upto.to_string().parse::<PriceSpec>()?, upto);
        assert!(matches!(
            spec("summarize=upto:0.01:mpp"),
            Err(PriceError::Upto { .. })
        ));
        assert!(matches!(
            spec("summarize=upto:0.01:settle=before"),
            Err(PriceError::Upto { .. })
        ));
        assert!(matches!(
            spec("summarize=upto:"),
            Err(PriceError::Amount { .. })
        ));
        Ok(())
    }

    #[test]
    fn refuses_malformed_prices() {
        for text in ["echo", "=0.001", "", "echo:0.001"] {
            assert!(
                matches!(spec(text), Err(PriceError::Malformed(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_bad_amounts() {
        for text in [
            "echo=",
            "echo=abc",
            "echo=-1",
            "echo=0",
            "echo=0.0000001",
            "echo=1e3",
        ] {
            assert!(
                matches!(spec(text), Err(PriceError::Amount { .. })),
                "{text}"
            );
        }
        let message = spec("echo=abc").err().map(|e| e.to_string());
        assert_eq!(
            message.as_deref(),
            Some(r#"price of "echo": amount "abc" is not a decimal number like 0.001"#)
        );
    }

    #[test]
    fn refuses_other_protocols() -> Result<(), PriceError> {
        assert_eq!(
            spec("echo=0.001:lightning"),
            Err(PriceError::Protocol {
                key: "echo".into(),
                protocol: "lightning".into()
            })
        );
        assert!(matches!(
            spec("echo=0.001:"),
            Err(PriceError::Protocol { .. })
        ));
        let message = spec("echo=0.001:lightning").err().map(|e| e.to_string());
        assert_eq!(
            message.as_deref(),
            Some(
                r#"price of "echo": "lightning" is neither a payment protocol (x402 or mpp) nor settle=before|after"#
            )
        );
        let mpp = spec("echo=0.001:mpp")?;
        assert_eq!(mpp.protocol, PaymentProtocol::Mpp);
        assert_eq!(mpp.to_string(), "echo=0.001:mpp");
        Ok(())
    }

    #[test]
    fn prices_invoke_and_stream_only_when_streaming() -> Result<(), PriceError> {
        let prices = [spec("echo=0.001")?, spec("count=0.002")?];
        let priced = apply(builtins::all(), &prices)?;
        let price = |key: &str| priced.get(key).and_then(|e| e.price.clone());
        assert_eq!(
            price("echo"),
            Some(Price {
                invoke: Some("0.001".into()),
                stream: None,
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            })
        );
        assert_eq!(
            price("count"),
            Some(Price {
                invoke: Some("0.002".into()),
                stream: Some("0.002".into()),
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            })
        );
        assert_eq!(price("sleep"), None);
        // The registry entry carries it.
        let infos = priced.infos();
        let echo = infos.iter().find(|info| info.key == "echo");
        assert_eq!(
            echo.and_then(|info| info.price.as_ref())
                .and_then(|p| p.invoke.as_deref()),
            Some("0.001")
        );
        Ok(())
    }

    #[test]
    fn refuses_unknown_and_duplicate_keys() -> Result<(), PriceError> {
        let hosted = builtins::all()
            .only(&["echo".to_owned()])
            .unwrap_or_default();
        let unknown = apply(hosted, &[spec("sleep=0.001")?]).err();
        assert_eq!(
            unknown.map(|e| e.to_string()).as_deref(),
            Some(r#"price of "sleep": this worker hosts no such entrypoint (it hosts: echo)"#)
        );
        let twice = apply(builtins::all(), &[spec("echo=0.001")?, spec("echo=0.002")?]).err();
        assert_eq!(twice, Some(PriceError::Duplicate("echo".into())));
        Ok(())
    }

    #[test]
    fn refuses_a_price_on_an_auth_only_entrypoint() -> Result<(), PriceError> {
        let declared = builtins::all()
            .siwx(&["echo:auth-only".into(), "summarize".into()])
            .unwrap_or_default();
        let refused = apply(declared.clone(), &[spec("echo=0.001")?]).err();
        assert_eq!(refused, Some(PriceError::PricedAuthOnly("echo".into())));
        assert_eq!(
            refused.map(|e| e.to_string()).as_deref(),
            Some(
                r#"entrypoint "echo" is priced and --siwx echo:auth-only (free for any signed-in wallet): drop one, or use --siwx echo to let payers sign in again instead of paying"#
            )
        );
        // Entitlements (`--siwx KEY`) go with a price; auth-only without one is fine.
        let priced = apply(declared, &[spec("summarize=0.001")?])?;
        assert!(priced.get("summarize").is_some_and(|e| e.price.is_some()));
        assert!(priced.get("echo").is_some_and(|e| e.price.is_none()));
        Ok(())
    }
}
