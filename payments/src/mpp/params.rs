//! Reading a `WWW-Authenticate` value (RFC 9110, section 11.6.1): a comma-separated list of
//! challenges, each an auth-scheme followed by a token68 or by comma-separated auth-params
//! (`name=token` or `name="quoted-string"`, names without regard to case).
//!
//! ```text
//! WWW-Authenticate = #challenge
//! challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
//! auth-param       = token BWS "=" BWS ( token / quoted-string )
//! token68          = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
//! ```
//!
//! Used by the paying side on a 402; it never panics and is bounded in size and count.
//! Quoted-pairs are unescaped as RFC 9110 says (`\x` is `x`); mppx's own `\uXXXX` escape for
//! non-Latin-1 description text is not decoded (it can only appear in `description`, which is
//! display text).

use super::MAX_CHALLENGE_HEADER_BYTES;

/// Most challenges and parameters read from one value.
const MAX_CHALLENGES: usize = 32;
const MAX_PARAMS: usize = 64;

/// One challenge: its scheme, and either its auth-params (names lowercased) or its token68.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthChallenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
    pub token68: Option<String>,
}

impl AuthChallenge {
    /// The value of parameter `name` (lowercase).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Why a `WWW-Authenticate` value could not be read. Messages quote nothing of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("WWW-Authenticate is larger than {MAX_CHALLENGE_HEADER_BYTES} bytes")]
    TooLarge,
    #[error("WWW-Authenticate is not valid challenge syntax (at byte {0})")]
    Syntax(usize),
    #[error("WWW-Authenticate has an unterminated quoted-string")]
    Unterminated,
    #[error("WWW-Authenticate repeats the parameter {0:?} in one challenge")]
    Duplicate(String),
    #[error("WWW-Authenticate has too many challenges or parameters")]
    TooMany,
}

/// `tchar` of RFC 9110.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn peek_at(&self, index: usize) -> Option<u8> {
        self.bytes.get(index).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn skip_ows_and_commas(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.at += 1;
        }
    }

    fn run(&mut self, keep: impl Fn(u8) -> bool) -> &str {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        // The run holds ASCII bytes only, so it is valid UTF-8.
        self.bytes
            .get(start..self.at)
            .and_then(|run| std::str::from_utf8(run).ok())
            .unwrap_or("")
    }

    /// A quoted-string's content, the cursor on its opening quote.
    fn quoted(&mut self) -> Result<String, ParamError> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(ParamError::Unterminated);
            };
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => match self.peek() {
                    Some(next) if next == b'\t' || (next >= 0x20 && next != 0x7f) => {
                        out.push(next);
                        self.at += 1;
                    }
                    Some(_) => return Err(ParamError::Syntax(self.at)),
                    None => return Err(ParamError::Unterminated),
                },
                b'\t' => out.push(b),
                _ if b < 0x20 || b == 0x7f => return Err(ParamError::Syntax(self.at - 1)),
                _ => out.push(b),
            }
        }
        // Only ASCII bytes were taken out of valid UTF-8, so it stays valid; checked anyway.
        String::from_utf8(out).map_err(|_| ParamError::Syntax(self.at))
    }

    /// Whether the `=` at the cursor starts an auth-param's value (rather than ending a
    /// token68): it is followed, past optional whitespace, by something other than `=`, `,`
    /// or the end.
    fn equals_starts_value(&self) -> bool {
        let mut index = self.at + 1;
        while matches!(self.peek_at(index), Some(b' ' | b'\t')) {
            index += 1;
        }
        !matches!(self.peek_at(index), None | Some(b'=' | b','))
    }
}

/// The challenges of a `WWW-Authenticate` value (several header lines joined with `, ` read
/// as one).
pub fn parse(value: &str) -> Result<Vec<AuthChallenge>, ParamError> {
    if value.len() > MAX_CHALLENGE_HEADER_BYTES {
        return Err(ParamError::TooLarge);
    }
    let mut cursor = Cursor {
        bytes: value.as_bytes(),
        at: 0,
    };
    let mut out: Vec<AuthChallenge> = Vec::new();
    loop {
        cursor.skip_ows_and_commas();
        if cursor.peek().is_none() {
            break;
        }
        let start = cursor.at;
        let name = cursor.run(is_tchar).to_owned();
        if name.is_empty() {
            return Err(ParamError::Syntax(start));
        }
        let after_name = cursor.at;
        cursor.skip_ows();
        if cursor.peek() == Some(b'=') && cursor.equals_starts_value() {
            // An auth-param of the challenge being read.
            let Some(current) = out.last_mut() else {
                return Err(ParamError::Syntax(start));
            };
            if current.token68.is_some() {
                return Err(ParamError::Syntax(start));
            }
            cursor.at += 1;
            cursor.skip_ows();
            let value = if cursor.peek() == Some(b'"') {
                cursor.quoted()?
            } else {
                cursor.run(is_tchar).to_owned()
            };
            if value.is_empty() && cursor.bytes.get(cursor.at.saturating_sub(1)) != Some(&b'"') {
                return Err(ParamError::Syntax(cursor.at));
            }
            let key = name.to_ascii_lowercase();
            if current.param(&key).is_some() {
                return Err(ParamError::Duplicate(key));
            }
            if current.params.len() >= MAX_PARAMS {
                return Err(ParamError::TooMany);
            }
            current.params.push((key, value));
            cursor.skip_ows();
            if !matches!(cursor.peek(), None | Some(b',')) {
                return Err(ParamError::Syntax(cursor.at));
            }
            continue;
        }
        // A new challenge.
        cursor.at = after_name;
        if out.len() >= MAX_CHALLENGES {
            return Err(ParamError::TooMany);
        }
        let mut challenge = AuthChallenge {
            scheme: name,
            params: Vec::new(),
            token68: None,
        };
        if cursor.peek() == Some(b' ') {
            cursor.skip_ows();
            let before = cursor.at;
            let mut token68 = cursor.run(is_token68_char).to_owned();
            token68.push_str(cursor.run(|b| b == b'='));
            let mut probe = Cursor {
                bytes: cursor.bytes,
                at: cursor.at,
            };
            probe.skip_ows();
            if !token68.is_empty() && matches!(probe.peek(), None | Some(b',')) {
                challenge.token68 = Some(token68);
                cursor.at = probe.at;
            } else {
                // Not a token68: auth-params follow (or the next challenge).
                cursor.at = before;
            }
        } else if !matches!(cursor.peek(), None | Some(b',' | b'\t')) {
            return Err(ParamError::Syntax(cursor.at));
        }
        out.push(challenge);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn params(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_several_challenges_and_schemes() -> TestResult {
        let value = r#"Basic realm="x", Payment id="a,b", realm=api.example.com,method="evm" , INTENT = "charge", request="eyJ9", Bearer, Negotiate abc+/==, Payment id="c\"d\\e", realm="", method=tempo, intent=charge, request=e30"#;
        let parsed = parse(value)?;
        assert_eq!(
            parsed,
            vec![
                AuthChallenge {
                    scheme: "Basic".into(),
                    params: params(&[("realm", "x")]),
                    token68: None
                },
                AuthChallenge {
                    scheme: "Payment".into(),
                    params: params(&[
                        ("id", "a,b"),
                        ("realm", "api.example.com"),
                        ("method", "evm"),
                        ("intent", "charge"),
                        ("request", "eyJ9"),
                    ]),
                    token68: None
                },
                AuthChallenge {
                    scheme: "Bearer".into(),
                    params: vec![],
                    token68: None
                },
                AuthChallenge {
                    scheme: "Negotiate".into(),
                    params: vec![],
                    token68: Some("abc+/==".into())
                },
                AuthChallenge {
                    scheme: "Payment".into(),
                    params: params(&[
                        ("id", "c\"d\\e"),
                        ("realm", ""),
                        ("method", "tempo"),
                        ("intent", "charge"),
                        ("request", "e30"),
                    ]),
                    token68: None
                },
            ]
        );
        assert_eq!(parse("")?, vec![]);
        assert_eq!(parse(" , ,")?, vec![]);
        assert_eq!(
            parse("Basic abc=")?.first().and_then(|c| c.token68.clone()),
            Some("abc=".into())
        );
        Ok(())
    }

    #[test]
    fn refuses_bad_syntax_without_panicking() {
        for (value, expected) in [
            ("id=\"x\"", ParamError::Syntax(0)),
            ("Payment id=\"x", ParamError::Unterminated),
            ("Payment id=\"x\\", ParamError::Unterminated),
            (
                "Payment id=\"a\", id=\"b\"",
                ParamError::Duplicate("id".into()),
            ),
            ("Payment id=\"a\", ID=b", ParamError::Duplicate("id".into())),
            ("Payment id=\"a\"b", ParamError::Syntax(14)),
            ("Payment id=\"a\r\nb\"", ParamError::Syntax(13)),
            ("Payment id=\"a\\\nb\"", ParamError::Syntax(14)),
            ("Payment id=@", ParamError::Syntax(11)),
            ("Payment \"x\"", ParamError::Syntax(8)),
            ("Basic abc, x=1, y=2", ParamError::Syntax(11)),
            ("Pay;ment id=1", ParamError::Syntax(3)),
        ] {
            assert_eq!(parse(value), Err(expected), "{value:?}");
        }
        assert_eq!(
            parse(&"a".repeat(MAX_CHALLENGE_HEADER_BYTES + 1)),
            Err(ParamError::TooLarge)
        );
        assert_eq!(
            parse(&"A, ".repeat(MAX_CHALLENGES + 1)),
            Err(ParamError::TooMany)
        );
        let many: Vec<String> = (0..=MAX_PARAMS).map(|i| format!("p{i}=1")).collect();
        assert_eq!(
            parse(&format!("P {}", many.join(","))),
            Err(ParamError::TooMany)
        );
        // Whatever comes in, an answer and no panic.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let alphabet = b"Payment id=\"\\,; \t\r\n=abcXYZ019+/_-~\x7f\xc3\xa9";
        for _ in 0..5_000 {
            let mut text = Vec::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            for shift in 0..(state % 40) {
                let pick = (state.rotate_left(shift as u32 * 5) % alphabet.len() as u64) as usize;
                text.push(alphabet.get(pick).copied().unwrap_or(b'a'));
            }
            let text = String::from_utf8_lossy(&text);
            let _ = parse(&text);
        }
    }
}
