//! Worker ids: what a worker calls itself in leases, the registry and its cancellation channel,
//! and what an operator names to drain it (`POST /console/api/workers/{id}/drain`). An id is
//! written into Redis key names and the operators' audit log, so the worker refuses at start
//! what the console would refuse later: one set of bounds for both.

/// The longest worker id, in bytes.
pub const MAX_WORKER_ID_BYTES: usize = 128;

/// Whether `id` is 1 to [`MAX_WORKER_ID_BYTES`] of ASCII letters, digits and `._:@-` (a
/// worker's default id, `host-pid-suffix`, is).
pub fn valid_worker_id(id: &str) -> bool {
    (1..=MAX_WORKER_ID_BYTES).contains(&id.len()) && id.bytes().all(allowed)
}

fn allowed(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'@' | b'-')
}

/// `id` when [`valid_worker_id`], else the rule it breaks (a command-line value parser).
pub fn parse_worker_id(id: &str) -> Result<String, String> {
    if valid_worker_id(id) {
        Ok(id.to_owned())
    } else {
        Err(format!(
            "a worker id is 1 to {MAX_WORKER_ID_BYTES} of A-Z a-z 0-9 . _ : @ -"
        ))
    }
}

/// `text` made into a part of a valid id: each byte outside the allowed set becomes `-`, cut
/// to `max` bytes (a host name read from the system goes into the default id).
pub fn sanitize_worker_id_part(text: &str, max: usize) -> String {
    text.bytes()
        .take(max)
        .map(|byte| if allowed(byte) { char::from(byte) } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids_are_bounded_in_length_and_characters() {
        assert!(valid_worker_id("host-1234-0a1b2c3d"));
        assert!(valid_worker_id("w1.example:8080"));
        assert!(valid_worker_id("ops@w_1"));
        assert!(valid_worker_id(&"w".repeat(MAX_WORKER_ID_BYTES)));
        assert!(!valid_worker_id(""));
        assert!(!valid_worker_id(&"w".repeat(MAX_WORKER_ID_BYTES + 1)));
        for bad in ["w 1", "w/1", "w{1}", "w|1", "wörker", "w\n1"] {
            assert!(!valid_worker_id(bad), "{bad:?}");
            assert!(parse_worker_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_worker_id("w-1"), Ok("w-1".to_owned()));
    }

    #[test]
    fn a_sanitized_part_is_valid_and_bounded() {
        assert_eq!(sanitize_worker_id_part("my host/é", 64), "my-host---");
        let long = "h".repeat(200);
        assert_eq!(sanitize_worker_id_part(&long, 64).len(), 64);
        assert!(valid_worker_id(&sanitize_worker_id_part("a b{c}", 64)));
    }
}
