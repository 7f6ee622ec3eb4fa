//! Prices, in one place (the worker's `--price` flags are the worker crate's):
//!
//! - [`merge`]: one view of each entrypoint out of the live workers' registry entries (price,
//!   Sign-In-With-X policy, payment protocol), failing safe when the workers disagree;
//! - [`route`]: what a request owes for the route it came through (invoke, stream, task
//!   creation), and the x402 terms the payment gate ([`crate::core::pay`]) asks for it.

pub mod merge;
pub mod route;

pub use merge::{merge, warn};
pub use route::{Priced, payments_disabled, price_of};
