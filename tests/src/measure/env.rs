//! A bench's settings from the environment: an empty variable counts as unset.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::Res;

pub fn env_or<T: FromStr>(name: &str, default: T) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map_err(|err| format!("{name}={text:?}: {err}").into()),
        _ => Ok(default),
    }
}

/// A comma-separated list (`default` when unset).
pub fn env_list<T: FromStr>(name: &str, default: &str) -> Res<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    let text = std::env::var(name)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| default.to_owned());
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<T>()
                .map_err(|err| format!("{name}: {part:?}: {err}").into())
        })
        .collect()
}

/// The path in `var`, else `target/<profile>/<name>`, next to `target/<profile>/deps/<the
/// running bench>`.
pub fn bin_from_env(var: &str, name: &str) -> PathBuf {
    match std::env::var(var) {
        Ok(path) if !path.trim().is_empty() => PathBuf::from(path.trim()),
        _ => std::env::current_exe()
            .ok()
            .and_then(|exe| {
                exe.parent()
                    .and_then(Path::parent)
                    .map(|dir| dir.join(name))
            })
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../target/release")
                    .join(name)
            }),
    }
}

/// An error naming the first of `bins` that is not a file, and `how` to get it.
pub fn require_bins(bins: &[&Path], how: &str) -> Res<()> {
    match bins.iter().find(|bin| !bin.is_file()) {
        Some(missing) => Err(format!("{} not found: {how}", missing.display()).into()),
        None => Ok(()),
    }
}
