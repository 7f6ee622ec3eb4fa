//! A Server-Sent Events parser (the WHATWG `text/event-stream` rules) that accepts the stream
//! in chunks of any size: a line, a `\r\n` pair or a UTF-8 character split across chunks
//! parses the same as in one piece.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, `"message"` when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id seen so far (`id:` persists across events, as in browsers).
    pub id: Option<String>,
    /// A `retry:` value sent with this event, in milliseconds.
    pub retry: Option<u64>,
}

/// An event larger than the parser's limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server-sent event larger than {0} bytes")]
pub struct SseTooLarge(pub usize);

/// Incremental parser: feed chunks with [`SseParser::push`], collect events.
#[derive(Debug)]
pub struct SseParser {
    buffer: Vec<u8>,
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    retry: Option<u64>,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(16 * 1024 * 1024)
    }
}

impl SseParser {
    /// A parser refusing events (or lines) over `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser {
            buffer: Vec::new(),
            started: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            last_id: None,
            retry: None,
            max_event_bytes,
        }
    }

    /// Parses `chunk` and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        self.buffer.extend_from_slice(chunk);
        if !self.started {
            // A UTF-8 byte order mark may open the stream; wait until we can tell.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            if self.buffer.len() < BOM.len() && BOM.starts_with(&self.buffer) {
                return Ok(Vec::new());
            }
            if self.buffer.starts_with(BOM) {
                self.buffer.drain(..BOM.len());
            }
            self.started = true;
        }
        let mut events = Vec::new();
        let mut start = 0;
        let mut index = 0;
        while index < self.buffer.len() {
            match self.buffer[index] {
                b'\n' => {
                    let line = self.buffer[start..index].to_vec();
                    self.line(&line, &mut events);
                    index += 1;
                    start = index;
                }
                b'\r' => {
                    if index + 1 == self.buffer.len() {
                        // Maybe the first half of `\r\n`: decide with the next chunk.
                        break;
                    }
                    let line = self.buffer[start..index].to_vec();
                    self.line(&line, &mut events);
                    index += if self.buffer[index + 1] == b'\n' {
                        2
                    } else {
                        1
                    };
                    start = index;
                }
                _ => index += 1,
            }
        }
        self.buffer.drain(..start);
        if self.buffer.len() + self.data.len() > self.max_event_bytes {
            return Err(SseTooLarge(self.max_event_bytes));
        }
        Ok(events)
    }

    /// The stream ended. A trailing lone `\r` ends its line; an event not followed by a
    /// blank line is discarded, as the specification says.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if self.buffer.last() == Some(&b'\r') {
            let line = self.buffer[..self.buffer.len() - 1].to_vec();
            self.line(&line, &mut events);
        }
        self.buffer.clear();
        events
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(colon) => {
                let value = &text[colon + 1..];
                (&text[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&text[..], ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok();
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let retry = self.retry.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        events.push(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
            retry,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_chunks(input: &[u8], sizes: &[usize]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        let mut rest = input;
        let mut turn = 0;
        while !rest.is_empty() {
            let size = sizes[turn % sizes.len()].clamp(1, rest.len());
            turn += 1;
            let (chunk, tail) = rest.split_at(size);
            events.extend(parser.push(chunk).unwrap_or_default());
            rest = tail;
        }
        events.extend(parser.finish());
        events
    }

    const STREAM: &[u8] =
        "\u{FEFF}: comment\r\nid: 0\r\nevent: run-start\r\ndata: {\"a\":1}\r\n\r\n\
        event:text\rdata:  héllo\rdata: wörld\r\revent: statusUpdate\ndata\nid\n\n\
        data: tail without blank line"
            .as_bytes();

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: "run-start".into(),
                data: "{\"a\":1}".into(),
                id: Some("0".into()),
                retry: None,
            },
            SseEvent {
                event: "text".into(),
                data: " héllo\nwörld".into(),
                id: Some("0".into()),
                retry: None,
            },
            SseEvent {
                event: "statusUpdate".into(),
                data: String::new(),
                id: Some(String::new()),
                retry: None,
            },
        ]
    }

    #[test]
    fn whole_stream() {
        assert_eq!(parse_in_chunks(STREAM, &[STREAM.len()]), expected());
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        for size in 1..=STREAM.len() {
            assert_eq!(parse_in_chunks(STREAM, &[size]), expected(), "size {size}");
        }
        assert_eq!(parse_in_chunks(STREAM, &[1, 3, 2, 7, 1, 5]), expected());
        // Every split point into two chunks.
        for split in 0..STREAM.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&STREAM[..split]).unwrap_or_default();
            events.extend(parser.push(&STREAM[split..]).unwrap_or_default());
            events.extend(parser.finish());
            assert_eq!(events, expected(), "split {split}");
        }
    }

    #[test]
    fn retry_and_default_event_name() {
        let events = parse_in_chunks(b"retry: 250\ndata: x\n\ndata: y\n\n", &[4]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event, "message");
        assert_eq!(events[0].retry, Some(250));
        assert_eq!(events[1].retry, None);
    }

    #[test]
    fn oversized_events_are_refused() {
        let mut parser = SseParser::new(8);
        assert!(parser.push(b"data: 0123456789").is_err());
    }
}
