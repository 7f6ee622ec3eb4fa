//! The EIP-4361 message an EVM wallet signs, byte for byte what `SiweMessage.toMessage()`
//! (`@signinwithethereum/siwe`, which x402's SIWX uses) writes:
//!
//! ```text
//! {domain} wants you to sign in with your Ethereum account:
//! {address, EIP-55}
//!
//! {statement}
//!
//! URI: {uri}
//! Version: {version}
//! Chain ID: {chain id, decimal}
//! Nonce: {nonce}
//! Issued At: {issuedAt}
//! Expiration Time: {expirationTime}     (when set and non-empty)
//! Not Before: {notBefore}               (when set and non-empty)
//! Request ID: {requestId}               (when set, even empty)
//! Resources:                            (when set, even with none)
//! - {resource}
//! ```
//!
//! Without a statement, its line and the blank line after it are replaced by one blank line
//! (so the address is followed by three line feeds). No line ends with a line feed at the end.

use alloy_primitives::Address;

use super::payload::SiwxInfo;

/// The text signed for `info` on EVM chain `chain_id` by `address`.
pub fn eip4361(info: &SiwxInfo, chain_id: u64, address: Address) -> String {
    let mut prefix = format!(
        "{} wants you to sign in with your Ethereum account:\n{}",
        info.domain,
        address.to_checksum(None)
    );
    match &info.statement {
        Some(statement) => {
            prefix.push_str("\n\n");
            prefix.push_str(statement);
            prefix.push('\n');
        }
        None => prefix.push_str("\n\n"),
    }
    let mut lines = vec![
        format!("URI: {}", info.uri),
        format!("Version: {}", info.version),
        format!("Chain ID: {chain_id}"),
        format!("Nonce: {}", info.nonce),
    ];
    // JavaScript truthiness, as `toMessage()` tests each field.
    if !info.issued_at.is_empty() {
        lines.push(format!("Issued At: {}", info.issued_at));
    }
    if let Some(at) = info.expiration_time.as_deref().filter(|at| !at.is_empty()) {
        lines.push(format!("Expiration Time: {at}"));
    }
    if let Some(at) = info.not_before.as_deref().filter(|at| !at.is_empty()) {
        lines.push(format!("Not Before: {at}"));
    }
    if let Some(id) = &info.request_id {
        lines.push(format!("Request ID: {id}"));
    }
    if let Some(resources) = &info.resources {
        let mut block = String::from("Resources:");
        for resource in resources {
            block.push_str("\n- ");
            block.push_str(resource);
        }
        lines.push(block);
    }
    format!("{prefix}\n{}", lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn info() -> SiwxInfo {
        SiwxInfo {
            domain: "api.example.com".into(),
            uri: "https://api.example.com/premium-data".into(),
            statement: Some("Sign in to access premium data".into()),
            version: "1".into(),
            nonce: "a1b2c3d4e5f67890a1b2c3d4e5f67890".into(),
            issued_at: "2024-01-15T10:30:00.000Z".into(),
            expiration_time: Some("2024-01-15T10:35:00.000Z".into()),
            not_before: None,
            request_id: None,
            resources: Some(vec!["https://api.example.com/premium-data".into()]),
        }
    }

    /// The extension spec's "Message Format" example, to the byte.
    #[test]
    fn writes_the_spec_example() -> TestResult {
        let address: Address = "0x857b06519e91e3a54538791bdbb0e22373e36b66".parse()?;
        assert_eq!(
            eip4361(&info(), 8453, address),
            "api.example.com wants you to sign in with your Ethereum account:\n\
             0x857b06519E91e3A54538791bDbb0E22373e36b66\n\
             \n\
             Sign in to access premium data\n\
             \n\
             URI: https://api.example.com/premium-data\n\
             Version: 1\n\
             Chain ID: 8453\n\
             Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\n\
             Issued At: 2024-01-15T10:30:00.000Z\n\
             Expiration Time: 2024-01-15T10:35:00.000Z\n\
             Resources:\n\
             - https://api.example.com/premium-data"
        );
        Ok(())
    }

    /// The optional parts, as `toMessage()` writes them.
    #[test]
    fn writes_optional_lines_like_siwe() -> TestResult {
        let address: Address = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".parse()?;
        let bare = SiwxInfo {
            statement: None,
            expiration_time: None,
            resources: None,
            ..info()
        };
        assert_eq!(
            eip4361(&bare, 1, address),
            "api.example.com wants you to sign in with your Ethereum account:\n\
             0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\n\n\n\
             URI: https://api.example.com/premium-data\n\
             Version: 1\n\
             Chain ID: 1\n\
             Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\n\
             Issued At: 2024-01-15T10:30:00.000Z"
        );
        let full = SiwxInfo {
            not_before: Some("2024-01-15T10:29:00.000Z".into()),
            request_id: Some(String::new()),
            resources: Some(vec!["ipfs://a".into(), "https://b/".into()]),
            expiration_time: Some(String::new()),
            ..info()
        };
        assert!(eip4361(&full, 84532, address).ends_with(
            "Issued At: 2024-01-15T10:30:00.000Z\n\
             Not Before: 2024-01-15T10:29:00.000Z\n\
             Request ID: \n\
             Resources:\n\
             - ipfs://a\n\
             - https://b/"
        ));
        let empty = SiwxInfo {
            resources: Some(vec![]),
            ..bare
        };
        assert!(
            eip4361(&empty, 1, address)
                .ends_with("Issued At: 2024-01-15T10:30:00.000Z\nResources:")
        );
        Ok(())
    }
}
