//! The client's side: sign a 402's `sign-in-with-x` extension with a local key, as x402's
//! `createSIWxClientHook` does: the first supported chain of type `eip191`, the server's
//! `info` echoed, the EIP-4361 text signed with EIP-191 (`personal_sign`). Only the chains of
//! known networks ([`crate::network::NETWORKS`]) are signed for.

use alloy_signer::SignerSync;

use super::message::eip4361;
use super::payload::{SignatureType, SiwxExtension, SiwxPayload};
use super::verify::evm_chain_id;
use crate::eip3009::signature_hex;
use crate::network::NETWORKS;
use crate::payer::LocalPayer;
use crate::target::{Refusal, RequestTarget};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiwxSignError {
    #[error("the server supports no EVM (eip191) chain to sign in with")]
    NoSupportedChain,
    #[error("signing failed")]
    Signing,
    /// An offer for another domain or origin, or only for unknown chains: nothing was signed.
    #[error("refused to sign in: {0}")]
    Refused(#[from] Refusal),
}

impl LocalPayer {
    /// The `SIGN-IN-WITH-X` header value answering `extension` (on the first `eip191` chain
    /// of a known network). It does not check whose domain the offer names: a client answering
    /// a server's offer uses [`LocalPayer::sign_in_with_x_for`].
    pub fn sign_in_with_x(&self, extension: &SiwxExtension) -> Result<String, SiwxSignError> {
        let evm_chains = || {
            extension
                .supported_chains
                .iter()
                .filter(|chain| chain.kind == SignatureType::Eip191)
                .filter_map(|chain| evm_chain_id(&chain.chain_id).map(|id| (chain, id)))
        };
        let (chain, chain_id) = evm_chains()
            .find(|(_, id)| NETWORKS.iter().any(|network| network.chain_id == *id))
            .ok_or_else(|| match evm_chains().next() {
                Some((unknown, _)) => {
                    SiwxSignError::Refused(Refusal::unknown_network(&unknown.chain_id))
                }
                None => SiwxSignError::NoSupportedChain,
            })?;
        let signer = self.signer();
        let address = signer.address();
        let info = &extension.info;
        let message = eip4361(info, chain_id, address);
        let signature = signer
            .sign_message_sync(message.as_bytes())
            .map_err(|_| SiwxSignError::Signing)?;
        let payload = SiwxPayload {
            domain: info.domain.clone(),
            address: address.to_checksum(None),
            statement: info.statement.clone(),
            uri: info.uri.clone(),
            version: info.version.clone(),
            chain_id: chain.chain_id.clone(),
            kind: chain.kind,
            nonce: info.nonce.clone(),
            issued_at: info.issued_at.clone(),
            expiration_time: info.expiration_time.clone(),
            not_before: info.not_before.clone(),
            request_id: info.request_id.clone(),
            resources: info.resources.clone(),
            signature_scheme: chain.signature_scheme,
            signature: signature_hex(&signature),
        };
        Ok(payload.encode())
    }

    /// [`LocalPayer::sign_in_with_x`] for an offer a server made in answer to a request for
    /// `target`: refused unless its `domain` is the target's host (with or without the port)
    /// and its `uri` of the target's origin.
    pub fn sign_in_with_x_for(
        &self,
        extension: &SiwxExtension,
        target: &RequestTarget,
    ) -> Result<String, SiwxSignError> {
        target.check_siwx(&extension.info)?;
        self.sign_in_with_x(extension)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::ANVIL_KEYS;
    use crate::siwx::payload::SupportedChain;
    use crate::siwx::verify::{Expectations, SiwxError, verify, verify_header};
    use crate::wire::HeaderError;
    use alloy_primitives::Address;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const NOW: u64 = 1_800_000_000;
    const DOMAIN: &str = "api.example.com";
    const URI: &str = "https://api.example.com/entrypoints/echo/invoke";

    fn extension(chains: &[&str]) -> Result<SiwxExtension, Box<dyn std::error::Error>> {
        Ok(SiwxExtension::declare_with_nonce(
            DOMAIN,
            URI,
            Some("Sign in to use echo"),
            chains,
            NOW,
            Some(300),
            "0123456789abcdef0123456789abcdef",
        )
        .ok_or("in range")?)
    }

    fn expect() -> Expectations {
        Expectations::new(DOMAIN, URI, &["eip155:84532"], NOW + 10)
    }

    fn payer(index: usize) -> Result<LocalPayer, Box<dyn std::error::Error>> {
        Ok(LocalPayer::from_hex(ANVIL_KEYS[index])?)
    }

    /// Re-signs `payload` (as edited) with `key`, over the message it now describes.
    fn resigned(
        mut payload: SiwxPayload,
        key: usize,
    ) -> Result<SiwxPayload, Box<dyn std::error::Error>> {
        let signer = payer(key)?;
        let chain_id = evm_chain_id(&payload.chain_id).ok_or("evm chain")?;
        let address: Address = payload.address.parse()?;
        let message = eip4361(&payload.info(), chain_id, address);
        let signature = signer.signer().sign_message_sync(message.as_bytes())?;
        payload.signature = signature_hex(&signature);
        Ok(payload)
    }

    #[test]
    fn signs_and_verifies_with_anvil_key() -> TestResult {
        let header = payer(0)?.sign_in_with_x(&extension(&["solana:5eykt4", "eip155:84532"])?)?;
        let payload = SiwxPayload::decode(&header)?;
        assert_eq!(payload.chain_id, "eip155:84532");
        assert_eq!(
            payload.address,
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
        let verified = verify_header(&header, &expect())?;
        assert_eq!(verified.address, payer(0)?.address());
        assert_eq!(verified.chain_id, 84532);
        assert_eq!(verified.nonce, "0123456789abcdef0123456789abcdef");
        assert_eq!(verified.issued_at, NOW);
        assert_eq!(verified.valid_until, NOW + 300);
        // An all-lowercase address is the same signer (siwe normalizes it in the message).
        let lower = SiwxPayload {
            address: payload.address.to_ascii_lowercase(),
            ..payload.clone()
        };
        assert_eq!(verify(&lower, &expect())?.address, verified.address);
        Ok(())
    }

    #[test]
    fn refuses_tampering_other_keys_and_wrong_contexts() -> TestResult {
        let header = payer(0)?.sign_in_with_x(&extension(&["eip155:84532"])?)?;
        let good = SiwxPayload::decode(&header)?;
        let check = |payload: &SiwxPayload| verify(payload, &expect());
        assert!(check(&good).is_ok());

        // Tampered after signing: the message changes, so does the signer.
        for tampered in [
            SiwxPayload {
                statement: Some("Sign in to pay 1000 USDC".into()),
                ..good.clone()
            },
            SiwxPayload {
                nonce: "0123456789abcdef0123456789abcdee".into(),
                ..good.clone()
            },
            SiwxPayload {
                resources: None,
                ..good.clone()
            },
            SiwxPayload {
                uri: "https://api.example.com/other".into(),
                ..good.clone()
            },
            SiwxPayload {
                expiration_time: Some("2027-01-15T08:06:00.000Z".into()),
                ..good.clone()
            },
        ] {
            assert_eq!(check(&tampered), Err(SiwxError::AddressMismatch));
        }
        // Another key's signature over the same message, claiming account #0.
        assert_eq!(
            check(&resigned(good.clone(), 1)?),
            Err(SiwxError::AddressMismatch)
        );
        // Account #1 signing for itself is fine.
        let own = resigned(
            SiwxPayload {
                address: payer(1)?.address().to_checksum(None),
                ..good.clone()
            },
            1,
        )?;
        assert_eq!(check(&own)?.address, payer(1)?.address());

        // Properly signed, but not for here, or not now.
        let cases = [
            (
                resigned(
                    SiwxPayload {
                        domain: "evil.example".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::DomainMismatch,
            ),
            (
                resigned(
                    SiwxPayload {
                        uri: "https://api.example.com.evil.example/x".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::UriMismatch,
            ),
            (
                resigned(
                    SiwxPayload {
                        uri: "http://api.example.com/x".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::UriMismatch,
            ),
            (
                resigned(
                    SiwxPayload {
                        uri: "api.example.com".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::UriMismatch,
            ),
            (
                resigned(
                    SiwxPayload {
                        chain_id: "eip155:1".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::WrongChain,
            ),
            (
                resigned(
                    SiwxPayload {
                        version: "2".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Version,
            ),
            (
                SiwxPayload {
                    kind: crate::siwx::SignatureType::Ed25519,
                    ..good.clone()
                },
                SiwxError::UnsupportedType,
            ),
            (
                resigned(
                    SiwxPayload {
                        issued_at: "2027-01-15T08:01:00.000Z".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::IssuedInFuture,
            ),
            (
                resigned(
                    SiwxPayload {
                        not_before: Some("2027-01-15T08:01:00.000Z".into()),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::NotYetValid,
            ),
            (
                resigned(
                    SiwxPayload {
                        statement: Some("two\nlines".into()),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Malformed("statement"),
            ),
            (
                resigned(
                    SiwxPayload {
                        nonce: "short".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Malformed("nonce"),
            ),
            (
                resigned(
                    SiwxPayload {
                        nonce: "has-dash-1234".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Malformed("nonce"),
            ),
            (
                resigned(
                    SiwxPayload {
                        issued_at: "yesterday".into(),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Malformed("issuedAt"),
            ),
            (
                resigned(
                    SiwxPayload {
                        expiration_time: Some("soon".into()),
                        ..good.clone()
                    },
                    0,
                )?,
                SiwxError::Malformed("expirationTime"),
            ),
            (
                SiwxPayload {
                    signature: "0x1234".into(),
                    ..good.clone()
                },
                SiwxError::BadSignature,
            ),
            (
                SiwxPayload {
                    signature: format!("0x{}", "00".repeat(65)),
                    ..good.clone()
                },
                SiwxError::BadSignature,
            ),
            (
                SiwxPayload {
                    address: "0xF39FD6E51AAD88F6F4CE6AB8827279CFFFB9226".into(),
                    ..good.clone()
                },
                SiwxError::InvalidAddress,
            ),
            (
                SiwxPayload {
                    address: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92267".into(),
                    ..good.clone()
                },
                SiwxError::InvalidAddress,
            ),
            (
                SiwxPayload {
                    address: "0xF39fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
                    ..good.clone()
                },
                SiwxError::InvalidAddress,
            ),
        ];
        for (payload, expected) in cases {
            assert_eq!(check(&payload), Err(expected));
        }

        // Time: expired, too old, and the edges.
        let at = |now: u64| Expectations { now, ..expect() };
        assert_eq!(verify(&good, &at(NOW + 300)), Err(SiwxError::Expired));
        assert!(verify(&good, &at(NOW + 299)).is_ok());
        assert!(verify(&good, &at(NOW)).is_ok());
        assert_eq!(verify(&good, &at(NOW - 1)), Err(SiwxError::IssuedInFuture));
        let skewed = Expectations {
            now: NOW - 2,
            clock_skew_seconds: 5,
            ..expect()
        };
        assert!(verify(&good, &skewed).is_ok());
        let open_ended = resigned(
            SiwxPayload {
                expiration_time: None,
                ..good.clone()
            },
            0,
        )?;
        assert_eq!(verify(&open_ended, &at(NOW + 301)), Err(SiwxError::TooOld));
        assert_eq!(verify(&open_ended, &at(NOW + 300))?.valid_until, NOW + 300);
        let strict = Expectations {
            max_age_seconds: 60,
            ..at(NOW + 61)
        };
        assert_eq!(verify(&good, &strict), Err(SiwxError::TooOld));

        // Headers that are not payloads.
        assert_eq!(
            verify_header("%%%", &expect()),
            Err(SiwxError::Header(HeaderError::NotBase64))
        );
        assert!(matches!(
            verify_header("e30", &expect()),
            Err(SiwxError::Header(HeaderError::NotJson(_)))
        ));
        Ok(())
    }

    #[test]
    fn needs_an_evm_chain() -> TestResult {
        let mut solana_only = extension(&[])?;
        solana_only.supported_chains = vec![
            SupportedChain {
                chain_id: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".into(),
                kind: SignatureType::Ed25519,
                signature_scheme: None,
            },
            SupportedChain {
                chain_id: "eip155:notanumber".into(),
                kind: SignatureType::Eip191,
                signature_scheme: None,
            },
        ];
        assert_eq!(
            payer(0)?.sign_in_with_x(&solana_only),
            Err(SiwxSignError::NoSupportedChain)
        );
        Ok(())
    }

    #[test]
    fn signs_only_for_known_chains() -> TestResult {
        // An unknown chain first: the known one after it is the one signed for.
        let header = payer(0)?.sign_in_with_x(&extension(&["eip155:999", "eip155:84532"])?)?;
        assert_eq!(SiwxPayload::decode(&header)?.chain_id, "eip155:84532");
        for chains in [&["eip155:999"][..], &["eip155:31337", "eip155:0"]] {
            let refused = payer(0)?.sign_in_with_x(&extension(chains)?);
            assert!(
                matches!(&refused, Err(SiwxSignError::Refused(Refusal::UnknownNetwork { network }))
                    if network == &format!("{:?}", chains[0])),
                "{chains:?}: {refused:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn a_client_signs_in_only_where_it_asked() -> TestResult {
        let target = RequestTarget::parse(&format!("{URI}?x=1"))?;
        let offer = extension(&["eip155:84532"])?;
        let header = payer(0)?.sign_in_with_x_for(&offer, &target)?;
        assert!(verify_header(&header, &expect()).is_ok());

        let mut other_domain = offer.clone();
        other_domain.info.domain = "evil.example".into();
        let mut other_uri = offer.clone();
        other_uri.info.uri = "https://evil.example/entrypoints/echo/invoke".into();
        let mut other_scheme = offer.clone();
        other_scheme.info.uri = "http://api.example.com/entrypoints/echo/invoke".into();
        let cases = [
            (other_domain, "domain"),
            (other_uri, "uri"),
            (other_scheme, "uri"),
        ];
        for (offer, what) in cases {
            let refused = payer(0)?.sign_in_with_x_for(&offer, &target);
            let expected = match what {
                "domain" => matches!(
                    refused,
                    Err(SiwxSignError::Refused(Refusal::SiwxDomain { .. }))
                ),
                _ => matches!(
                    refused,
                    Err(SiwxSignError::Refused(Refusal::SiwxUri { .. }))
                ),
            };
            assert!(expected, "{what}: {refused:?}");
        }
        // The same offer, requested at another host, is not signed either.
        let elsewhere = RequestTarget::parse("https://api.example.org/entrypoints/echo/invoke")?;
        assert!(matches!(
            payer(0)?.sign_in_with_x_for(&offer, &elsewhere),
            Err(SiwxSignError::Refused(Refusal::SiwxDomain { .. }))
        ));
        Ok(())
    }
}
