//! Facilitator settings: each a flag and an environment variable (`facilitator --help` lists
//! them).

use alloy_primitives::{Address, U256, keccak256};
use clap::Parser;

use crate::faults::Fault;

/// Anvil's ten well-known accounts (#0..#9, from the `test test ... junk` mnemonic), 1000 USDC
/// each: what a fresh local setup pays with.
pub const ANVIL_FUNDS: &str = "\
0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266=1000,\
0x70997970C51812dc3A010C7d01b50e0d17dc79C8=1000,\
0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC=1000,\
0x90F79bf6EB2c4f870365E785982E1f101E93b906=1000,\
0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65=1000,\
0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc=1000,\
0x976EA74026E726554dB657fA54763abd0C3a0aa9=1000,\
0x14dC79964da2C08b23698B3D3cc7Ca32193d9955=1000,\
0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f=1000,\
0xa0Ee7A142d267C1f36714E4a8F75612F20a79720=1000";

/// What the default facilitator address is derived from (see [`default_address`]).
pub const DEFAULT_ADDRESS_SEED: &[u8] = b"taskcluster x402 dev facilitator";

/// The facilitator's address when none is configured: the last 20 bytes of
/// keccak256([`DEFAULT_ADDRESS_SEED`]). No key belongs to it, and none is needed: nothing here
/// signs on a chain; the address only has to be stable, as upto permits name it.
pub fn default_address() -> Address {
    Address::from_slice(&keccak256(DEFAULT_ADDRESS_SEED)[12..])
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "facilitator",
    version,
    about = "Offline x402 dev facilitator: real EIP-712 signature checks against a play-money \
             USDC ledger, with fault injection. For development only: it moves play money, \
             never real funds. Not for production."
)]
pub struct FacilitatorConfig {
    /// Address to listen on. Only a loopback address unless --allow-public-listen is given.
    #[arg(long, env = "FACILITATOR_LISTEN", default_value = "127.0.0.1:8402")]
    pub listen: String,

    /// Accept a non-loopback --listen address (e.g. `0.0.0.0:8402`). This facilitator is for
    /// development only and moves play money: anyone who can reach it can settle against it.
    #[arg(long, env = "FACILITATOR_ALLOW_PUBLIC_LISTEN", default_value_t = false)]
    pub allow_public_listen: bool,

    /// Redis holding balances and spent nonces. Unset: state in memory, lost on exit.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<server::secret::Secret>,

    /// Key namespace: every key is `{NAMESPACE}:...` (one hash tag, so the settle script's keys
    /// share a cluster slot).
    #[arg(long, env = "FACILITATOR_NAMESPACE", default_value = "fac")]
    pub namespace: String,

    /// Starting balance `ADDRESS=DECIMAL_USDC`, repeatable (comma-separated in the variable);
    /// `none` for no starting balances. Applied only to addresses that have no balance yet.
    /// Default: Anvil accounts #0..#9 with 1000 USDC each.
    #[arg(
        long = "fund",
        env = "FACILITATOR_FUNDS",
        value_name = "ADDRESS=DECIMAL_USDC",
        value_delimiter = ',',
        value_parser = parse_fund_arg,
        default_value = ANVIL_FUNDS,
        hide_default_value = true
    )]
    pub funds: Vec<FundArg>,

    /// Initial fault injected into `/settle`: none, refuse, http500, slow or drop.
    #[arg(long, env = "FACILITATOR_FAULT", value_enum, default_value_t = Fault::None)]
    pub fault: Fault,

    /// Initial fault injected into `/verify`: none, refuse, http500, slow or drop.
    #[arg(long, env = "FACILITATOR_VERIFY_FAULT", value_enum, default_value_t = Fault::None)]
    pub verify_fault: Fault,

    /// Delay of the `slow` fault, in milliseconds.
    #[arg(long, env = "FACILITATOR_SLOW_MS", default_value_t = 2000)]
    pub slow_ms: u64,

    /// This facilitator's address: what an `upto` payer's witness must name as its facilitator
    /// (`/supported` lists it as the upto kinds' `extra.facilitatorAddress` and in `signers`).
    /// Default: an address derived from a fixed seed, the same on every run.
    #[arg(long = "address", env = "FACILITATOR_ADDRESS", value_name = "ADDRESS")]
    pub address: Option<Address>,

    /// Log format: `text` or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl FacilitatorConfig {
    /// Defaults (memory ledger, Anvil funds, no faults) for tests and embedding.
    pub fn for_tests() -> Self {
        FacilitatorConfig::parse_from(["facilitator"])
    }

    /// Why `--listen` is refused: an address that is not loopback (or not an IP address and
    /// port at all, such as a host name that could resolve anywhere) without
    /// `--allow-public-listen`.
    pub fn listen_refusal(&self) -> Option<String> {
        if self.allow_public_listen {
            return None;
        }
        match self.listen.parse::<std::net::SocketAddr>() {
            Ok(address) if address.ip().is_loopback() => None,
            Err(_)
                if self
                    .listen
                    .rsplit_once(':')
                    .is_some_and(|(host, _)| host == "localhost") =>
            {
                None
            }
            Ok(_) => Some(format!(
                "refusing to listen on {}: this dev facilitator moves play money and listens on \
                 loopback only; pass --allow-public-listen (FACILITATOR_ALLOW_PUBLIC_LISTEN=true) \
                 to expose it",
                self.listen
            )),
            Err(_) => Some(format!(
                "refusing to listen on {:?}: give a loopback IP address and port (e.g. \
                 127.0.0.1:8402), or pass --allow-public-listen (FACILITATOR_ALLOW_PUBLIC_LISTEN=true)",
                self.listen
            )),
        }
    }

    /// The configured address, or [`default_address`].
    pub fn address(&self) -> Address {
        self.address.unwrap_or_else(default_address)
    }

    /// The starting balances to apply.
    pub fn fundings(&self) -> impl Iterator<Item = &Funding> {
        self.funds.iter().filter_map(|arg| match arg {
            FundArg::Fund(funding) => Some(funding),
            FundArg::None => None,
        })
    }
}

/// One `--fund` value: a starting balance, or `none` (so that the default list can be replaced
/// by nothing at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FundArg {
    Fund(Funding),
    None,
}

/// One starting balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Funding {
    pub address: Address,
    /// Atomic units.
    pub amount: U256,
}

/// `none`, or a starting balance.
pub fn parse_fund_arg(text: &str) -> Result<FundArg, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        Ok(FundArg::None)
    } else {
        parse_funding(text).map(FundArg::Fund)
    }
}

/// `ADDRESS=DECIMAL_USDC`, e.g. `0xf39F...2266=1000`.
pub fn parse_funding(text: &str) -> Result<Funding, String> {
    let (address, amount) = text
        .trim()
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not ADDRESS=DECIMAL_USDC"))?;
    let address = address
        .trim()
        .parse::<Address>()
        .map_err(|_| format!("{address:?} is not a 20-byte hex address"))?;
    let amount = payments::amount::to_atomic(amount).map_err(|err| err.to_string())?;
    Ok(Funding { address, amount })
}

#[cfg(test)]
mod tests {
    use super::*;
    use payments::LocalPayer;
    use payments::dev::ANVIL_KEYS;

    #[test]
    fn only_loopback_listens_unless_allowed() {
        for listen in ["127.0.0.1:8402", "[::1]:0", "localhost:8402"] {
            let config = FacilitatorConfig::parse_from(["facilitator", "--listen", listen]);
            assert_eq!(config.listen_refusal(), None, "{listen}");
        }
        for listen in [
            "0.0.0.0:8402",
            "[::]:0",
            "192.168.1.2:80",
            "example.com:80",
            "nope",
        ] {
            let config = FacilitatorConfig::parse_from(["facilitator", "--listen", listen]);
            assert!(config.listen_refusal().is_some(), "{listen}");
            let allowed = FacilitatorConfig::parse_from([
                "facilitator",
                "--listen",
                listen,
                "--allow-public-listen",
            ]);
            assert_eq!(allowed.listen_refusal(), None, "{listen}");
        }
        let config = FacilitatorConfig::parse_from([
            "facilitator",
            "--redis-url",
            "redis://:s3cr3t-canary@127.0.0.1:1/",
        ]);
        assert!(!format!("{config:?}").contains("s3cr3t-canary"));
    }

    /// Anvil's published development keys #0..#9: the default funds must be their addresses.

    #[test]
    fn default_funds_are_the_anvil_accounts() {
        let config = FacilitatorConfig::for_tests();
        let expected: Vec<Funding> = ANVIL_KEYS
            .iter()
            .map(|key| match LocalPayer::from_hex(key) {
                Ok(payer) => Funding {
                    address: payer.address(),
                    amount: U256::from(1_000_000_000u64),
                },
                Err(err) => panic!("{err}"),
            })
            .collect();
        assert_eq!(config.fundings().cloned().collect::<Vec<_>>(), expected);
        assert_eq!(config.listen, "127.0.0.1:8402");
        assert_eq!(config.namespace, "fac");
        assert_eq!(config.fault, Fault::None);
        assert_eq!(config.slow_ms, 2000);
        assert_eq!(config.address(), default_address());
        // docs/payments.md names it.
        assert_eq!(
            default_address().to_checksum(None),
            "0x9f3A74445C342bFE44D07ABdad4e21135Ac58A37"
        );
        let named = FacilitatorConfig::parse_from([
            "facilitator",
            "--address",
            "0x3333333333333333333333333333333333333333",
        ]);
        assert_eq!(named.address(), Address::repeat_byte(0x33));
    }

    #[test]
    fn funding_flags_replace_the_defaults() {
        let config = FacilitatorConfig::parse_from([
            "facilitator",
            "--fund",
            "0x0000000000000000000000000000000000000001=0.5",
            "--fund",
            "0x0000000000000000000000000000000000000002=2",
            "--fault",
            "http500",
        ]);
        assert_eq!(
            config.fundings().cloned().collect::<Vec<_>>(),
            vec![
                Funding {
                    address: Address::with_last_byte(1),
                    amount: U256::from(500_000u64),
                },
                Funding {
                    address: Address::with_last_byte(2),
                    amount: U256::from(2_000_000u64),
                },
            ]
        );
        assert_eq!(config.fault, Fault::Http500);
        for bad in [
            "0x01=1",
            "nope",
            "",
            "0x0000000000000000000000000000000000000001=-1",
        ] {
            assert!(parse_fund_arg(bad).is_err(), "{bad}");
        }
        let none = FacilitatorConfig::parse_from(["facilitator", "--fund", "none"]);
        assert_eq!(none.fundings().count(), 0);
    }
}
