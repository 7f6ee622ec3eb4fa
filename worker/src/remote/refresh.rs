//! The periodic card refresh (`--agent-refresh-secs`): every agent's card is read again, and
//! the hosted set replaced when what it describes changed. An entrypoint gone from a card
//! stops being taken (runs under way finish) and leaves the registry entry, so gateways stop
//! admitting it; a new one is hosted after the same checks as at start (a priced one is
//! refused, a key another owner holds is refused, each with a warning); a changed description,
//! schema or streaming flag is picked up. A card that cannot be read keeps the last good one.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Agents;
use crate::entrypoint::Entrypoints;
use crate::runtime::Hosted;

/// How often cards are read again by default.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(30);

/// Reads the cards every `every` until `stop`, replacing `hosted` on a change. `finish` applies
/// what the worker's flags add to a set (`--retry-safe`, `--siwx`, `--price`, for the keys
/// present); a set it refuses is logged and not hosted.
pub async fn run(
    mut agents: Agents,
    hosted: Hosted,
    every: Duration,
    finish: impl Fn(Entrypoints) -> Result<Entrypoints, String>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = agents.refresh() => {}
        }
        let Ok(composed) = agents.compose(false) else {
            continue;
        };
        let next = match finish(composed) {
            Ok(next) => next,
            Err(err) => {
                tracing::warn!(error = %err, "keeping the hosted entrypoints: the refreshed set is refused");
                continue;
            }
        };
        if next.infos() != hosted.infos() {
            hosted.replace(next);
        }
    }
}
