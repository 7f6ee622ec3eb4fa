//! Members: the callers an operator lists in `--member-tokens-file`. A member runs the private
//! entrypoints (worker `--private`) and reads the A2A extended card; everyone else is told the
//! private entrypoints do not exist.
//!
//! The file holds one member per line, `NAME SHA256HEX`: a name (what the member's extended
//! card shows it) and the lowercase or uppercase hex SHA-256 of the member's token. `#` starts
//! a comment; blank lines are ignored. A line that is not that refuses the start, naming its
//! number and never its content (it may hold a token pasted by mistake). The file is read
//! once, at start; at most [`MAX_FILE_BYTES`] and [`MAX_MEMBERS`].
//!
//! A caller is a member when the token it identifies with hashes to a listed hash: the same
//! token, read by the same rule, as the A2A bindings' caller (`Authorization: Bearer`, which
//! decides, else `Task-Access-Token`), on every route and binding (gRPC metadata is read as the
//! header map it is). So a member's tasks are owned by its token like anyone's. The token is
//! never logged or echoed; only its hash is compared.

use std::collections::HashMap;
use std::path::Path;

use axum::http::HeaderMap;
use protocol::token::{AccessToken, OwnerHash};

/// The largest member file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most members one file lists.
pub const MAX_MEMBERS: usize = 10_000;
/// The longest member name.
const MAX_NAME_CHARS: usize = 128;

/// Why the member file cannot be used. Never carries a line's content.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    #[error("cannot read the member tokens file {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the member tokens file is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    #[error("the member tokens file is not UTF-8 text")]
    NotText,
    #[error("the member tokens file lists more than {MAX_MEMBERS} members")]
    TooMany,
    #[error("member tokens file, line {0}: {1}")]
    Line(usize, &'static str),
}

/// The members, by the hash of their token.
#[derive(Debug, Default)]
pub struct Members {
    by_hash: HashMap<OwnerHash, String>,
}

impl Members {
    /// The members of `--member-tokens-file`; `None` when it is not set.
    pub fn from_config(
        config: &crate::core::config::GatewayConfig,
    ) -> Result<Option<Members>, MembersError> {
        config
            .member_tokens_file
            .as_deref()
            .map(Members::load)
            .transpose()
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Members, MembersError> {
        use std::io::Read;
        let read = |source| MembersError::Read {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        // One byte past the bound tells a file at the bound from a larger one.
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(MembersError::TooLarge);
        }
        let text = String::from_utf8(bytes).map_err(|_| MembersError::NotText)?;
        Members::parse(&text)
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Members, MembersError> {
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(name), Some(hash), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(MembersError::Line(
                    number,
                    "expected two fields, NAME and SHA256HEX",
                ));
            };
            if name.chars().count() > MAX_NAME_CHARS
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c))
            {
                return Err(MembersError::Line(
                    number,
                    "a name has 1 to 128 of the characters A-Z a-z 0-9 - _ . @ :",
                ));
            }
            let Some(hash) = OwnerHash::from_hex(&hash.to_ascii_lowercase()) else {
                return Err(MembersError::Line(
                    number,
                    "the second field must be the 64 hex digits of the token's SHA-256",
                ));
            };
            if !names.insert(name.to_owned()) {
                return Err(MembersError::Line(number, "this name is listed twice"));
            }
            if by_hash.insert(hash, name.to_owned()).is_some() {
                return Err(MembersError::Line(number, "this hash is listed twice"));
            }
            if by_hash.len() > MAX_MEMBERS {
                return Err(MembersError::TooMany);
            }
        }
        Ok(Members { by_hash })
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The name of the member whose token `headers` carry, if the caller is one.
    pub fn member(&self, headers: &HeaderMap) -> Option<&str> {
        let token = token(headers)?;
        self.by_hash.get(&token.owner_hash()).map(String::as_str)
    }
}

/// Whether a caller sees and runs private entrypoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer<'a> {
    /// Anyone: private entrypoints do not exist for it.
    Public,
    /// A listed member, by name.
    Member(&'a str),
}

impl<'a> Viewer<'a> {
    /// The caller of a request with `headers`, under `members` (none: nobody is a member).
    pub fn of(members: Option<&'a Members>, headers: &HeaderMap) -> Viewer<'a> {
        match members.and_then(|members| members.member(headers)) {
            Some(name) => Viewer::Member(name),
            None => Viewer::Public,
        }
    }

    /// Whether this caller may see and run `entrypoint`.
    pub fn sees(self, entrypoint: &store::registry::EntrypointInfo) -> bool {
        !entrypoint.private || matches!(self, Viewer::Member(_))
    }
}

/// The caller's token, by the A2A bindings' rule ([`crate::core::caller::token`]); here a
/// malformed or missing token only means "not a member".
fn token(headers: &HeaderMap) -> Option<AccessToken> {
    crate::core::caller::token(headers).ok()
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, header};

    use super::*;

    const TOKEN: &str = "a-member-token-of-enough-length";

    fn hash(token: &str) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(token.as_bytes()))
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
            headers.insert(header::AUTHORIZATION, value);
        }
        headers
    }

    #[test]
    fn comments_blank_lines_and_either_case_of_hex() -> Result<(), MembersError> {
        let text = format!(
            "# members\n\n  alice {}  # the first\nbob\t{}\n",
            hash(TOKEN).to_uppercase(),
            hash("another-token-of-enough-length")
        );
        let members = Members::parse(&text)?;
        assert_eq!(members.len(), 2);
        assert_eq!(members.member(&bearer(TOKEN)), Some("alice"));
        assert_eq!(
            members.member(&bearer("another-token-of-enough-length")),
            Some("bob")
        );
        assert_eq!(
            members.member(&bearer("not-a-member-but-long-enough")),
            None
        );
        assert_eq!(members.member(&HeaderMap::new()), None);
        Ok(())
    }

    #[test]
    fn task_access_token_identifies_unless_a_bearer_is_given() -> Result<(), MembersError> {
        let members = Members::parse(&format!("alice {}", hash(TOKEN)))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            crate::http::extract::TASK_ACCESS_TOKEN,
            HeaderValue::from_static(TOKEN),
        );
        assert_eq!(members.member(&headers), Some("alice"));
        // An MPP payment in Authorization leaves the identification to Task-Access-Token.
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Payment abc"),
        );
        assert_eq!(members.member(&headers), Some("alice"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer not-a-member-but-long-enough"),
        );
        assert_eq!(members.member(&headers), None);
        Ok(())
    }

    #[test]
    fn a_bad_line_names_its_number_and_never_its_content() {
        let secret = "s3cr3t-canary-token-pasted-by-mistake";
        let cases = [
            format!("alice {}\n{secret}\n", hash(TOKEN)),
            format!("# ok\nalice {secret}\n"),
            format!("alice {} extra\n", hash(TOKEN)),
            format!("al{secret}/ice {}\n", hash(TOKEN)),
            format!("alice {}\nalice {}\n", hash(TOKEN), hash(secret)),
            format!("alice {}\nbob {}\n", hash(TOKEN), hash(TOKEN)),
        ];
        let lines = [2, 2, 1, 1, 2, 2];
        for (text, line) in cases.iter().zip(lines) {
            match Members::parse(text) {
                Err(err @ MembersError::Line(number, _)) => {
                    assert_eq!(number, line, "{err}");
                    assert!(!err.to_string().contains("s3cr3t"), "{err}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn bounded_in_members_and_bytes() -> Result<(), Box<dyn std::error::Error>> {
        let many: String = (0..=MAX_MEMBERS)
            .map(|n| format!("m{n} {}\n", hash(&format!("token-number-{n:020}"))))
            .collect();
        assert!(matches!(Members::parse(&many), Err(MembersError::TooMany)));
        let dir = std::env::temp_dir().join(format!("members-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("big");
        std::fs::write(&path, vec![b'#'; MAX_FILE_BYTES as usize + 1])?;
        let big = Members::load(&path);
        std::fs::remove_dir_all(&dir)?;
        assert!(matches!(big, Err(MembersError::TooLarge)));
        Ok(())
    }

    #[test]
    fn only_members_see_private_entrypoints() -> Result<(), MembersError> {
        let members = Members::parse(&format!("alice {}", hash(TOKEN)))?;
        let entrypoint = store::registry::EntrypointInfo {
            key: "secret".into(),
            description: String::new(),
            input_schema: serde_json::json!({}),
            output_schema: serde_json::json!({}),
            streaming: false,
            price: None,
            retry_safe: false,
            siwx: None,
            private: true,
            paused: None,
        };
        assert!(Viewer::of(Some(&members), &bearer(TOKEN)).sees(&entrypoint));
        assert!(!Viewer::of(Some(&members), &HeaderMap::new()).sees(&entrypoint));
        assert!(!Viewer::of(None, &bearer(TOKEN)).sees(&entrypoint));
        Ok(())
    }
}
