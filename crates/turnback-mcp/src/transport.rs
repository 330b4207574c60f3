//! The server's stdio transport: one JSON-RPC message per line, read within [`MESSAGE_CAP`],
//! and every request answered — an oversized one included.
//!
//! Invariants:
//! - Memory is bounded by the cap, not by what a client sends: a line is buffered only while
//!   it fits; past the cap its bytes are scanned (for the request's `id`) and dropped.
//! - Every request gets an answer. A request over the cap gets a JSON-RPC error naming the
//!   limit, with its own `id` wherever in the line the client put it (the scan follows
//!   strings and nesting, so an `"id"` inside the parameters is never taken for it).
//!   Well-formed JSON that is not a valid message gets "invalid request" with its `id` when
//!   it has one. Only what cannot be answered is dropped: text that is not JSON (answering
//!   it could start an error storm with a peer that echoes), and notifications.
//! - Reading is cancellation-safe: `receive` is polled inside the service's `select!`, so
//!   every piece of read state lives on the struct and no await separates taking bytes from
//!   the buffer and recording them. Answers written from `receive` go through a spawned task
//!   holding the writer's lock, so a cancelled `receive` never leaves half a line on stdout.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ErrorCode, ErrorData, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Stdin, Stdout};
use tokio::sync::Mutex;

/// Most bytes of one incoming message (16 MiB, as the MCP SDK's own default): far above any
/// edit an agent sends, and a bound on what one request costs in memory. Larger files are
/// for `turnback fs write` or the agent's own tools, which turnback observes.
pub const MESSAGE_CAP: usize = 16 * 1024 * 1024;

/// The stdio transport; see the module docs.
pub struct Stdio {
    read: BufReader<Stdin>,
    write: Arc<Mutex<Stdout>>,
    line: Vec<u8>,
    /// Set while the rest of an oversized line is being scanned and dropped.
    oversized: Option<IdScan>,
    cap: usize,
}

impl Stdio {
    pub fn new() -> Stdio {
        Stdio {
            read: BufReader::new(tokio::io::stdin()),
            write: Arc::new(Mutex::new(tokio::io::stdout())),
            line: Vec::new(),
            oversized: None,
            cap: MESSAGE_CAP,
        }
    }

    /// Writes `message` and a newline under the writer's lock, in a task of its own.
    fn answer(&self, message: TxJsonRpcMessage<RoleServer>) {
        let write = Arc::clone(&self.write);
        tokio::spawn(async move {
            let _ = write_line(&write, &message).await;
        });
    }
}

impl Default for Stdio {
    fn default() -> Self {
        Stdio::new()
    }
}

async fn write_line(write: &Mutex<Stdout>, message: &TxJsonRpcMessage<RoleServer>) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(message)?;
    bytes.push(b'\n');
    let mut out = write.lock().await;
    out.write_all(&bytes).await?;
    out.flush().await
}

/// What one line turned out to be.
enum Line {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// An answer to send instead of a message (an invalid or oversized request).
    Answer(Box<TxJsonRpcMessage<RoleServer>>),
    Ignored,
}

impl Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = std::result::Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move { write_line(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(available) => available,
                Err(_) => return None,
            };
            if available.is_empty() {
                return None;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..take];
            let ended = newline.is_some();
            let done = if let Some(scan) = &mut self.oversized {
                scan.feed(chunk);
                ended.then(|| {
                    let scan = self.oversized.take().expect("scanning");
                    Line::Answer(Box::new(too_large(scan.id(), self.cap)))
                })
            } else if self.line.len() + take > self.cap {
                let mut scan = IdScan::default();
                scan.feed(&self.line);
                scan.feed(chunk);
                self.line.clear();
                if ended {
                    Some(Line::Answer(Box::new(too_large(scan.id(), self.cap))))
                } else {
                    self.oversized = Some(scan);
                    None
                }
            } else {
                self.line.extend_from_slice(chunk);
                ended.then(|| {
                    let line = classify(&self.line);
                    self.line.clear();
                    line
                })
            };
            self.read.consume(take);
            match done {
                Some(Line::Message(message)) => return Some(*message),
                Some(Line::Answer(answer)) => self.answer(*answer),
                Some(Line::Ignored) | None => {}
            }
        }
    }

    async fn close(&mut self) -> std::result::Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
}

/// The error answering a request over `cap` bytes.
fn too_large(id: Option<RequestId>, cap: usize) -> TxJsonRpcMessage<RoleServer> {
    let message = format!(
        "request too large: turnback's MCP server reads at most {} MiB per message; write a larger file with \
         `turnback fs write` or the agent's own tools (turnback records what they change)",
        cap / (1024 * 1024)
    );
    let data = serde_json::json!({ "code": "request-too-large", "limitBytes": cap });
    TxJsonRpcMessage::<RoleServer>::error(ErrorData::new(ErrorCode::INVALID_REQUEST, message, Some(data)), id)
}

/// Parses one whole line (with its newline): a message, an answer for a request that is not
/// one, or nothing (blank, not JSON, or a notification that cannot be answered).
fn classify(line: &[u8]) -> Line {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Ignored;
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => Line::Message(Box::new(message)),
        Err(_) => match serde_json::from_slice::<Value>(line) {
            // A request with an id is answered; anything else has no one to answer.
            Ok(Value::Object(fields)) => match fields.get("id").cloned().map(serde_json::from_value::<RequestId>) {
                Some(Ok(id)) if fields.contains_key("method") => {
                    Line::Answer(Box::new(TxJsonRpcMessage::<RoleServer>::error(
                        ErrorData::new(ErrorCode::INVALID_REQUEST, Cow::Borrowed("invalid request"), None),
                        Some(id),
                    )))
                }
                _ => Line::Ignored,
            },
            _ => Line::Ignored,
        },
    }
}

/// A streaming scan of a JSON object for its top-level `"id"` value, fed in pieces: strings
/// and nesting are followed, so only a key of the outermost object counts.
#[derive(Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, whether the next string is a key.
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    /// Capturing the value of the top-level `"id"` (raw JSON, at most [`ID_CAP`] bytes).
    capturing: bool,
    raw: Vec<u8>,
    id: Option<Vec<u8>>,
}

/// Most bytes of an id value kept (a longer one is not answered by id).
const ID_CAP: usize = 256;

impl IdScan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn keep(&mut self, b: u8) {
        if self.capturing && self.raw.len() <= ID_CAP {
            self.raw.push(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.reading_key = false;
                self.keep(b);
                return;
            }
            if self.reading_key {
                if self.key.len() <= 8 {
                    self.key.push(b);
                }
            } else {
                self.keep(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.reading_key = true;
                    self.key.clear();
                } else {
                    self.keep(b);
                }
            }
            b'{' | b'[' => {
                self.keep(b);
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish();
                }
                self.keep(b);
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                if self.key == b"id" {
                    self.capturing = true;
                    self.raw.clear();
                }
            }
            b',' if self.depth == 1 => {
                self.finish();
                self.expect_key = true;
            }
            _ => self.keep(b),
        }
    }

    fn finish(&mut self) {
        if self.capturing {
            self.capturing = false;
            self.id = Some(std::mem::take(&mut self.raw));
        }
    }

    /// The request's id, if the outermost object had a usable one.
    fn id(&self) -> Option<RequestId> {
        let raw = self.id.as_deref().or(self.capturing.then_some(self.raw.as_slice()))?;
        if raw.len() > ID_CAP {
            return None;
        }
        serde_json::from_slice(raw).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(text: &str, pieces: usize) -> Option<RequestId> {
        let mut scan = IdScan::default();
        let bytes = text.as_bytes();
        let step = bytes.len().div_ceil(pieces.max(1)).max(1);
        for chunk in bytes.chunks(step) {
            scan.feed(chunk);
        }
        scan.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is_and_however_the_line_is_cut() {
        let cases = [
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"y"}}"#, Some(RequestId::Number(7))),
            (
                r#"{"method":"tools/call","params":{"id":1,"content":"a \"id\": 3 }"},"jsonrpc":"2.0","id":"abc"}"#,
                Some(RequestId::String("abc".into())),
            ),
            (r#"{ "id" : -2 , "method":"x"}"#, Some(RequestId::Number(-2))),
            (r#"{"method":"x","params":{"id":5}}"#, None),
            (r#"{"method":"x","id":{"nested":1}}"#, None),
            (r#"{"method":"x","id":"unterminated"#, None),
            (r#"[{"id":1}]"#, None),
        ];
        for (text, want) in cases {
            for pieces in [1, 3, text.len()] {
                assert_eq!(id_of(text, pieces), want, "{text} in {pieces} pieces");
            }
        }
    }

    #[test]
    fn a_request_that_is_json_but_not_a_message_is_answered_by_its_id_and_noise_is_not() {
        let answered = |line: &str| match classify(line.as_bytes()) {
            Line::Answer(answer) => Some(serde_json::to_value(*answer).unwrap()),
            _ => None,
        };
        let a = answered(r#"{"jsonrpc":"2.0","id":4,"method":42}"#).expect("answered");
        assert_eq!(a["id"], 4, "{a}");
        assert_eq!(a["error"]["code"], -32600, "{a}");
        assert!(answered("not json at all").is_none());
        assert!(answered(r#"{"jsonrpc":"2.0","method":42}"#).is_none(), "a notification has no one to answer");
        assert!(answered("   ").is_none());
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Line::Message(_)));
    }

    #[test]
    fn the_too_large_answer_names_the_limit_and_keeps_the_id() {
        let v = serde_json::to_value(too_large(Some(RequestId::Number(9)), MESSAGE_CAP)).unwrap();
        assert_eq!(v["id"], 9);
        assert!(v["error"]["message"].as_str().unwrap().contains("16 MiB"), "{v}");
        assert_eq!(v["error"]["data"]["limitBytes"], MESSAGE_CAP);
    }
}
