//! RedisStore: placeholder being written.
pub struct RedisStoreConfig;
pub struct RedisStore;
