//! MemoryStore: placeholder being written.
use std::sync::Arc;
pub trait Clock: Send + Sync { fn now_ms(&self) -> u64; }
pub struct SystemClock;
impl Clock for SystemClock { fn now_ms(&self) -> u64 { crate::protocol::Timestamp::now().as_millis() } }
pub struct MemoryStoreConfig;
pub struct MemoryStore { _clock: Arc<dyn Clock> }
