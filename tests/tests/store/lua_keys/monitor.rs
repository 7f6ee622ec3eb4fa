//! A MONITOR connection that records every command a redis-server runs, scripts' own
//! commands included (`[0 lua] "CMD" ...`), parsed back into their arguments.
//!
//! A plain blocking socket on a thread of its own: MONITOR answers one status line per
//! command, forever, which no client library here reads. [`Monitor::finish`] sends a marker
//! command on another connection and stops at its line, so every command that completed
//! before the call is in the record.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;

use crate::BoxError;

/// Where a monitored command came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A client connection.
    Client,
    /// A script, through `redis.call`/`redis.pcall`.
    Lua,
}

/// One monitored command: its origin and its arguments (the command name first), as bytes.
#[derive(Debug, Clone)]
pub struct Line {
    pub origin: Origin,
    pub args: Vec<Vec<u8>>,
}

impl Line {
    /// The command's name, upper case.
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|name| String::from_utf8_lossy(name).to_ascii_uppercase())
            .unwrap_or_default()
    }
}

pub struct Monitor {
    port: u16,
    marker: String,
    reader: JoinHandle<Result<Vec<Line>, String>>,
}

impl Monitor {
    /// Starts recording the server on `port`; returns once MONITOR is on, so every command
    /// sent after this call is recorded.
    pub fn start(port: u16) -> Result<Monitor, BoxError> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.write_all(b"*1\r\n$7\r\nMONITOR\r\n")?;
        let mut reader = BufReader::new(stream);
        let mut first = String::new();
        reader.read_line(&mut first)?;
        if first.trim_end() != "+OK" {
            return Err(format!("MONITOR answered {first:?}").into());
        }
        let marker = format!(
            "lua-keys-monitor-end-{}",
            protocol::token::AccessToken::generate().expose()
        );
        let end = marker.clone();
        let reader = std::thread::spawn(move || record(reader, &end));
        Ok(Monitor {
            port,
            marker,
            reader,
        })
    }

    /// Stops recording and returns every command recorded, in the order the server ran them.
    pub fn finish(self) -> Result<Vec<Line>, BoxError> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        let marker = self.marker.as_bytes();
        let mut command = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", marker.len()).into_bytes();
        command.extend_from_slice(marker);
        command.extend_from_slice(b"\r\n");
        stream.write_all(&command)?;
        let lines = self
            .reader
            .join()
            .map_err(|_| "the MONITOR reader panicked")??;
        Ok(lines)
    }
}

/// Reads monitor lines until the marker's ECHO.
fn record(mut reader: BufReader<TcpStream>, marker: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let read = reader
            .read_until(b'\n', &mut raw)
            .map_err(|err| format!("MONITOR read: {err}"))?;
        if read == 0 {
            return Err("MONITOR connection closed before the end marker".into());
        }
        let text = String::from_utf8_lossy(&raw);
        let Some(body) = text.trim_end().strip_prefix('+') else {
            return Err(format!("unexpected MONITOR reply {text:?}"));
        };
        let line = parse(body).ok_or_else(|| format!("unparsed MONITOR line {body:?}"))?;
        if line.origin == Origin::Client
            && line.name() == "ECHO"
            && line.args.get(1).map(Vec::as_slice) == Some(marker.as_bytes())
        {
            return Ok(lines);
        }
        lines.push(line);
    }
}

/// Parses `1700000000.123456 [0 127.0.0.1:5555] "SET" "k" "v"` (arguments quoted as
/// `sdscatrepr` writes them).
pub fn parse(body: &str) -> Option<Line> {
    let open = body.find('[')?;
    let close = open + body[open..].find(']')?;
    let client = &body[open + 1..close];
    let origin = match client.split_once(' ') {
        Some((_, "lua")) => Origin::Lua,
        Some(_) => Origin::Client,
        None => return None,
    };
    let args = unquote_all(&body.as_bytes()[close + 1..])?;
    Some(Line { origin, args })
}

/// The quoted arguments of a monitor line, unescaped.
fn unquote_all(mut rest: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    loop {
        while let [b' ', tail @ ..] = rest {
            rest = tail;
        }
        let [b'"', tail @ ..] = rest else {
            return rest.is_empty().then_some(args);
        };
        rest = tail;
        let mut arg = Vec::new();
        loop {
            match rest {
                [b'"', tail @ ..] => {
                    rest = tail;
                    break;
                }
                [b'\\', b'x', hi, lo, tail @ ..] => {
                    let hex = [*hi, *lo];
                    let hex = std::str::from_utf8(&hex).ok()?;
                    arg.push(u8::from_str_radix(hex, 16).ok()?);
                    rest = tail;
                }
                [b'\\', escaped, tail @ ..] => {
                    arg.push(match escaped {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'a' => 7,
                        b'b' => 8,
                        other => *other,
                    });
                    rest = tail;
                }
                [byte, tail @ ..] => {
                    arg.push(*byte);
                    rest = tail;
                }
                [] => return None,
            }
        }
        args.push(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_parse_with_their_escapes() {
        let line = parse(r#"1796506235.323238 [0 127.0.0.1:56896] "set" "x\"y" "a\nb\x01\\""#);
        let line = line.map(|line| (line.origin, line.args));
        assert_eq!(
            line,
            Some((
                Origin::Client,
                vec![b"set".to_vec(), b"x\"y".to_vec(), b"a\nb\x01\\".to_vec()]
            ))
        );
        let lua = parse(r#"1796506235.302275 [0 lua] "SET" "k1" "a""#);
        assert_eq!(lua.map(|line| line.origin), Some(Origin::Lua));
    }
}
