//! The Lua scripts, one per transition (see `shared/lua/`), with includes resolved at build
//! time. `redis::Script::invoke_async` sends EVALSHA and reloads on NOSCRIPT, so a Redis restart
//! or SCRIPT FLUSH costs one extra round trip, never an error.

use redis::Script;

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

pub struct Scripts {
    pub create: Script,
    pub claim: Script,
    pub take: Script,
    pub renew: Script,
    pub activate: Script,
    pub hand_off: Script,
    pub record_receipt: Script,
    pub attach_receipt: Script,
    pub emit: Script,
    pub await_input: Script,
    pub resume: Script,
    pub cas: Script,
    pub finish_take: Script,
    pub due: Script,
    pub recover: Script,
    pub layout: Script,
}

impl Scripts {
    pub fn load() -> Self {
        Scripts {
            create: Script::new(lua!("create")),
            claim: Script::new(lua!("claim")),
            take: Script::new(lua!("take")),
            renew: Script::new(lua!("renew")),
            activate: Script::new(lua!("activate")),
            hand_off: Script::new(lua!("hand_off")),
            record_receipt: Script::new(lua!("record_receipt")),
            attach_receipt: Script::new(lua!("attach_receipt")),
            emit: Script::new(lua!("emit")),
            await_input: Script::new(lua!("await_input")),
            resume: Script::new(lua!("resume")),
            cas: Script::new(lua!("cas")),
            finish_take: Script::new(lua!("finish_take")),
            due: Script::new(lua!("due")),
            recover: Script::new(lua!("recover")),
            layout: Script::new(lua!("layout")),
        }
    }
}
