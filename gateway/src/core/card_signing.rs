//! Signed Agent Cards (A2A v1.0 §8.4): with `--card-signing-key-file`, every card the gateway
//! serves carries one JWS (RFC 7515) per live key, `{"protected", "signature"}`, whose detached
//! payload is the RFC 8785 (JCS) canonical form of the card as served, its `signatures` member
//! removed. The public keys are served as a JWK Set at `/.well-known/jwks.json`.
//!
//! The key file is a JWK Set (RFC 7517) of private keys, a `kid` each: EC P-256 (ES256) and
//! OKP Ed25519 (EdDSA, RFC 8037), mixed as needed ([`keys`]). A key may carry `exp` (NumericDate
//! seconds): from then on it neither signs nor is published (§8.4.3: an expired key must not
//! verify). Which keys are live is decided when a card or the JWKS is served, and the signed
//! cards are cached under the live set ([`CardSigner::cache_key`]), so an expiry or a reload
//! (SIGHUP, [`reload_on_hangup`]) changes both at once.
//!
//! A card is signed only over URLs from `--public-url`: a card whose URLs came from the
//! request's `Host` header would be a validly signed card pointing wherever the caller said.

mod keys;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::core::config::GatewayConfig;
use crate::http::document::Built;
use keys::Key;

/// Why the key file cannot be used. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the card signing key file {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the card signing key file is not a JWK Set ({{\"keys\":[...]}}): {0}")]
    NotJwks(String),
    #[error("the card signing key file holds no keys")]
    Empty,
    #[error("every card signing key has expired (exp)")]
    AllExpired,
    #[error("card signing key {0}: {1}")]
    Key(usize, &'static str),
    #[error("two card signing keys share the kid {0:?}")]
    DuplicateKid(String),
}

/// One reading of the key file.
struct KeySet {
    /// Counts the readings: a reload re-signs even when the kids stay the same.
    generation: u64,
    keys: Vec<Key>,
    /// The JWK Set of the live keys last asked for, with which keys those were.
    jwks: Mutex<Option<(Vec<usize>, Arc<Built>)>>,
    /// Set once the last live key has expired has been logged.
    none_live_logged: AtomicBool,
}

impl KeySet {
    fn live(&self, now: f64) -> Vec<usize> {
        (0..self.keys.len())
            .filter(|&index| self.keys[index].live_at(now))
            .collect()
    }
}

/// The keys of the key file (reloaded on SIGHUP), and the JWK Set of their public halves.
pub struct CardSigner {
    path: Option<PathBuf>,
    current: RwLock<Arc<KeySet>>,
    generations: AtomicU64,
}

impl std::fmt::Debug for CardSigner {
    // The private keys stay out of every log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner")
            .field("keys", &self.current().keys.len())
            .finish_non_exhaustive()
    }
}

/// The path of the public JWK Set, under the base path.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// Seconds since the epoch, as JWT NumericDates count them.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

impl CardSigner {
    /// The signer `config` asks for: none without `--card-signing-key-file`; an error when the
    /// file is unusable or `--public-url` is unset (a signed card must not name URLs taken
    /// from request headers).
    pub fn from_config(config: &GatewayConfig) -> anyhow::Result<Option<Arc<CardSigner>>> {
        let Some(path) = &config.card_signing_key_file else {
            return Ok(None);
        };
        let Some(public) = &config.public_url else {
            anyhow::bail!(
                "CARD_SIGNING_KEY_FILE needs PUBLIC_URL: a signed card names the public URL, never one taken from request headers"
            );
        };
        let signer = CardSigner::load(path)?;
        tracing::info!(
            keys = signer.current().keys.len(),
            public_url = public.origin(),
            "agent cards are signed"
        );
        Ok(Some(Arc::new(signer)))
    }

    /// The keys of the file at `path`, which [`Self::reload`] reads again.
    pub fn load(path: &Path) -> Result<CardSigner, KeyFileError> {
        let keys = read(path)?;
        Ok(CardSigner::with_keys(Some(path.to_owned()), keys))
    }

    /// From the bytes of a private JWK Set (no file to reload).
    pub fn from_jwks(text: &[u8]) -> Result<CardSigner, KeyFileError> {
        Ok(CardSigner::with_keys(None, checked(text)?))
    }

    fn with_keys(path: Option<PathBuf>, keys: Vec<Key>) -> CardSigner {
        CardSigner {
            path,
            current: RwLock::new(Arc::new(key_set(0, keys))),
            generations: AtomicU64::new(0),
        }
    }

    fn current(&self) -> Arc<KeySet> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the key file again; the new keys sign from the next request on. An unusable file
    /// changes nothing (the error says why, without the file's contents). Returns how many
    /// keys were read.
    pub fn reload(&self) -> Result<usize, KeyFileError> {
        let Some(path) = &self.path else {
            return Ok(self.current().keys.len());
        };
        let keys = read(path)?;
        let count = keys.len();
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Arc::new(key_set(generation, keys));
        Ok(count)
    }

    /// The public JWK Set of the keys live now, as served (with its ETag).
    pub fn jwks(&self) -> Arc<Built> {
        self.jwks_at(now())
    }

    fn jwks_at(&self, now: f64) -> Arc<Built> {
        let set = self.current();
        let live = set.live(now);
        let mut cached = set.jwks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, built)) = cached.as_ref().filter(|(kept, _)| *kept == live) {
            return built.clone();
        }
        let public: Vec<&Value> = live.iter().map(|&index| &set.keys[index].public).collect();
        // A Vec of JSON values always serializes.
        let body = serde_json::to_vec(&json!({ "keys": public })).unwrap_or_default();
        let built = Arc::new(Built::new(body));
        *cached = Some((live, built.clone()));
        built
    }

    /// What a signed card built for `base` is cached under: the base, the reading of the key
    /// file and the live keys, so that a reload or an expiry re-signs the card.
    pub fn cache_key(&self, base: &str) -> String {
        let set = self.current();
        let live: Vec<String> = set.live(now()).iter().map(usize::to_string).collect();
        format!("{base} keys {} {}", set.generation, live.join(","))
    }

    /// The base URL of a signed card: `--public-url` and the base path, whatever the request
    /// says; `None` without a public URL (then nothing is signed: [`Self::from_config`]).
    pub fn card_base(config: &GatewayConfig) -> Option<String> {
        let public = config.public_url.as_ref()?;
        Some(format!("{}{}", public.origin(), config.base_path()))
    }

    /// `card` (a JSON object) with `signatures`: one per live key over its JCS form without
    /// them (none at all once every key has expired).
    pub fn sign(&self, card: &impl serde::Serialize) -> Result<Vec<u8>, serde_json::Error> {
        self.sign_at(card, now())
    }

    fn sign_at(
        &self,
        card: &impl serde::Serialize,
        now: f64,
    ) -> Result<Vec<u8>, serde_json::Error> {
        let mut card = serde_json::to_value(card)?;
        let Some(object) = card.as_object_mut() else {
            return serde_json::to_vec(&card);
        };
        object.remove("signatures");
        let set = self.current();
        let live = set.live(now);
        if live.is_empty() {
            if !set.none_live_logged.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "every card signing key has expired: the cards are served unsigned"
                );
            }
            return serde_json::to_vec(&card);
        }
        let payload = B64.encode(serde_json_canonicalizer::to_vec(&card)?);
        let signatures: Vec<Value> = live
            .iter()
            .map(|&index| {
                let key = &set.keys[index];
                let input = format!("{}.{payload}", key.protected);
                json!({
                    "protected": key.protected,
                    "signature": B64.encode(key.sign(input.as_bytes())),
                })
            })
            .collect();
        if let Some(object) = card.as_object_mut() {
            object.insert("signatures".into(), Value::Array(signatures));
        }
        serde_json::to_vec(&card)
    }
}

fn key_set(generation: u64, keys: Vec<Key>) -> KeySet {
    KeySet {
        generation,
        keys,
        jwks: Mutex::new(None),
        none_live_logged: AtomicBool::new(false),
    }
}

fn read(path: &Path) -> Result<Vec<Key>, KeyFileError> {
    let text = std::fs::read(path).map_err(|source| KeyFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    checked(&text)
}

/// The keys of a private JWK Set, at least one of them live.
fn checked(text: &[u8]) -> Result<Vec<Key>, KeyFileError> {
    let keys = keys::parse(text)?;
    let now = now();
    if !keys.iter().any(|key| key.live_at(now)) {
        return Err(KeyFileError::AllExpired);
    }
    Ok(keys)
}

/// Until `shutdown`: each SIGHUP reads the key file again ([`CardSigner::reload`]). An
/// unusable file keeps the keys in use and logs one error, without the file's contents. The
/// signal is watched from this call on (not from the future's first poll), so a SIGHUP sent
/// once the gateway answers is never missed.
pub fn reload_on_hangup(
    signer: Option<Arc<CardSigner>>,
    shutdown: CancellationToken,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                got = hangups.recv() => {
                    if got.is_none() {
                        return;
                    }
                    let Some(signer) = &signer else {
                        tracing::info!("SIGHUP: no card signing key file to reload");
                        continue;
                    };
                    match signer.reload() {
                        Ok(keys) => tracing::info!(keys, "SIGHUP: card signing keys reloaded"),
                        Err(err) => tracing::error!(
                            error = %err,
                            "SIGHUP: the card signing key file is unusable; the previous keys stay in use"
                        ),
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests;
