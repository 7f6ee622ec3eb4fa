//! The EVM networks a price can be paid on: name (x402 v1), CAIP-2 id (x402 v2), chain id, and
//! the USDC contract with its EIP-712 domain name and version (what `extra` carries).

use alloy_primitives::{Address, address};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// x402 v1 name, e.g. `base-sepolia`.
    pub name: &'static str,
    /// CAIP-2 id, e.g. `eip155:84532` (x402 v2).
    pub caip2: &'static str,
    pub chain_id: u64,
    /// The network's USDC contract: the `asset` of every requirement and the EIP-712 verifying
    /// contract.
    pub usdc: Address,
    /// EIP-712 domain name and version of that contract.
    pub usdc_name: &'static str,
    pub usdc_version: &'static str,
}

/// USDC has six decimals on every network listed here.
pub const USDC_DECIMALS: u32 = 6;

pub const NETWORKS: [Network; 4] = [
    Network {
        name: "base-sepolia",
        caip2: "eip155:84532",
        chain_id: 84532,
        usdc: address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        usdc_name: "USDC",
        usdc_version: "2",
    },
    Network {
        name: "base",
        caip2: "eip155:8453",
        chain_id: 8453,
        usdc: address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    Network {
        name: "sepolia",
        caip2: "eip155:11155111",
        chain_id: 11155111,
        usdc: address!("0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238"),
        usdc_name: "USDC",
        usdc_version: "2",
    },
    Network {
        name: "ethereum",
        caip2: "eip155:1",
        chain_id: 1,
        usdc: address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
];

impl Network {
    /// By v1 name or CAIP-2 id.
    pub fn find(name_or_caip2: &str) -> Option<&'static Network> {
        NETWORKS
            .iter()
            .find(|network| network.name == name_or_caip2 || network.caip2 == name_or_caip2)
    }

    /// The names accepted by [`Network::find`], for error messages.
    pub fn known() -> String {
        NETWORKS
            .iter()
            .map(|network| format!("{} ({})", network.name, network.caip2))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_name_and_caip2() {
        let by_name = Network::find("base-sepolia");
        assert_eq!(by_name.map(|n| n.chain_id), Some(84532));
        assert_eq!(Network::find("eip155:84532"), by_name);
        assert!(Network::find("eip155:84533").is_none());
        assert!(Network::find("").is_none());
    }
}
