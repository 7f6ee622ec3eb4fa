//! The official A2A v1.0 bindings (issue P10), built on the `a2a-lf` crate's types. So far:
//! [`mapping`], the runtime's tasks and inputs as A2A messages, tasks and states.

pub mod mapping;
