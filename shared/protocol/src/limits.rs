//! Bounds on what a task stores: its input (checked by the gateway before anything is stored
//! or paid for) and its result (checked by the worker before the terminal write). Sizes are
//! of the value serialized as compact JSON, the form the stores keep.

use serde::Serialize;

/// Default bound on a task's input, in bytes of JSON (256 KiB).
pub const DEFAULT_MAX_INPUT_BYTES: usize = 256 * 1024;

/// Default bound on a task's result (a handler's output), in bytes of JSON (256 KiB).
pub const DEFAULT_MAX_RESULT_BYTES: usize = 256 * 1024;

/// Whether `value` serialized as compact JSON takes more than `limit` bytes. Counts without
/// building the text, and stops counting as soon as the limit is passed.
pub fn exceeds<T: Serialize + ?Sized>(value: &T, limit: usize) -> bool {
    let mut counter = Counter { written: 0, limit };
    // The only error a counter raises is the limit passed; a value that does not serialize
    // at all is not this check's business (it is stored as nothing larger than it is).
    serde_json::to_writer(&mut counter, value).is_err() && counter.written > limit
}

/// An `io::Write` that only counts, failing once more than `limit` bytes came.
struct Counter {
    written: usize,
    limit: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written = self.written.saturating_add(buf.len());
        if self.written > self.limit {
            Err(std::io::Error::other("size limit passed"))
        } else {
            Ok(buf.len())
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::exceeds;

    #[test]
    fn counts_compact_json_bytes() {
        let value = json!({"text": "abc"});
        let size = value.to_string().len();
        assert!(!exceeds(&value, size));
        assert!(exceeds(&value, size - 1));
        assert!(exceeds(&json!("x".repeat(1000)), 1000));
        assert!(!exceeds(&json!("x".repeat(1000)), 1002));
    }
}
