//! Where the access token comes from: `--token`, else `--token-file`, else
//! `TASK_ACCESS_TOKEN`. Never printed (only `send` prints a token, one it just generated).

use std::path::Path;

use crate::Failure;

pub fn resolve(
    flag: Option<&str>,
    file: Option<&Path>,
    env: Option<&str>,
) -> Result<Option<String>, Failure> {
    if let Some(token) = flag {
        return non_empty(token, "--token").map(Some);
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Failure::usage(format!(
                "cannot read --token-file {}: {err}",
                path.display()
            ))
        })?;
        return non_empty(&text, "--token-file").map(Some);
    }
    match env {
        Some(token) if !token.trim().is_empty() => Ok(Some(token.trim().to_owned())),
        _ => Ok(None),
    }
}

fn non_empty(token: &str, source: &str) -> Result<String, Failure> {
    let token = token.trim();
    if token.is_empty() {
        Err(Failure::usage(format!("{source} gave an empty token")))
    } else {
        Ok(token.to_owned())
    }
}
