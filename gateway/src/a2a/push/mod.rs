//! A2A push notifications: a task's configs (created on every binding, see
//! [`crate::a2a::service::push_config`]) and their durable delivery: [`deliver`] (the loop,
//! a task's and a config's deliveries), `send` (one POST and what it came to), `fairness`
//! (each client address's tasks under way, told to each claim), `exhausted` (deliveries given
//! up). What they share, the outbox, the guarded client and the schedule, is the core's
//! [`Push`] (`crate::core::push`).
//!
//! **Who delivers: the gateways.** Every gateway with push notifications on runs a deliverer
//! over the store's outbox (`store::push`). A delivery is the A2A rendering of a run event
//! (a `StreamResponse`), which is the A2A adapter's business, not a worker's: workers stay
//! protocol-agnostic and keep their capacity for runs, and the gateways, stateless and
//! already the cluster's edge to callers' networks, are where egress policy (the SSRF guard)
//! belongs. Any gateway delivers any task's notifications: a task is claimed from its shard's
//! due set for a lease, so a gateway killed mid-delivery leaves the task due again once the
//! lease expires, and another gateway sends what was not confirmed.
//!
//! Guarantees: at least once, in order per task and config (one config's events go one at a
//! time, and its cursor moves only after the receiver answered 2xx); a failed attempt is
//! retried with exponential backoff and full jitter up to `--push-max-attempts`; a delivery
//! that runs out of attempts, or that the receiver or the SSRF policy refuses for good, is
//! given up, kept in the shard's exhausted list and counted (`taskcluster.push.deliveries
//! {outcome="exhausted"}`), and the config goes on with the next event.

pub mod deliver;
mod exhausted;
mod fairness;
mod send;

use crate::core::push::Push;
