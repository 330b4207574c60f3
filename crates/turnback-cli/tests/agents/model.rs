//! A scripted model server on 127.0.0.1 that speaks, with streaming, what each real agent
//! calls: Anthropic Messages (Claude Code), OpenAI Responses (Codex CLI), the Gemini API
//! (Gemini CLI) and OpenAI chat completions (opencode through a custom provider).
//!
//! A story's script is a list of prompts, each a list of steps. Every prompt the person
//! types carries its marker (`(tb-NAME)`); the server answers a request by finding the
//! newest user message with a marker and counting the tool results after it: that count
//! is the step to play. So the answer depends only on the conversation the agent sends,
//! never on the order of requests: retries, title generators, compaction, sub-agents with
//! their own markers and requests made twice all get the right step. A request without a
//! marker, or one whose step names a tool the request does not offer, is answered with
//! plain text.
//!
//! Invariants: one request per connection (`Connection: close`), every request is logged
//! (dialect, path, the step played) for the failure report, and a `Hang` step holds its
//! connection open until the agent hangs up or the server is dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One answer of the model.
#[derive(Debug, Clone)]
pub enum Step {
    /// A tool call: the tool's name and its input (a JSON object; for a freeform tool such as
    /// Codex's `apply_patch`, a JSON string holding the tool's text).
    Call(String, Value),
    /// The final text of the turn.
    Text(String),
    /// An API error the agent does not retry (HTTP 400).
    Fail,
    /// Another step, answered only after this many milliseconds (the model thinking).
    After(u64, Box<Step>),
    /// No answer until the agent hangs up: the turn stays mid-request (for an interrupt).
    Hang,
}

/// A tool call step.
pub fn call(name: &str, input: Value) -> Step {
    Step::Call(name.to_string(), input)
}

/// A text step.
pub fn text(s: &str) -> Step {
    Step::Text(s.to_string())
}

/// What the model answers for each marked prompt.
#[derive(Debug, Clone, Default)]
pub struct Script {
    prompts: Vec<(String, Vec<Step>)>,
}

impl Script {
    /// An empty script: every request gets plain text.
    pub fn new() -> Self {
        Script::default()
    }

    /// Adds the steps for the prompt marked `(tb-NAME)`.
    pub fn prompt(mut self, name: &str, steps: Vec<Step>) -> Self {
        self.prompts.push((marker(name), steps));
        self
    }
}

/// The marker a prompt named `name` carries.
pub fn marker(name: &str) -> String {
    format!("(tb-{name})")
}

/// The wire protocol of a request, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /v1/messages`: Claude Code.
    Anthropic,
    /// `POST /v1/responses`: Codex CLI.
    Responses,
    /// `POST /v1beta/models/M:streamGenerateContent` (and `generateContent`, `countTokens`).
    Gemini,
    /// `POST /v1/chat/completions`: opencode's OpenAI-compatible provider.
    Chat,
}

/// A request as the log keeps it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The request path.
    pub path: String,
    /// What the server played (`step 2 of (tb-1)`, `text (no marker)`, …).
    pub played: String,
}

/// The running server; dropped, it stops accepting and ends hanging answers.
#[derive(Debug)]
pub struct ModelServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    log: Arc<Mutex<Vec<Logged>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
    }
}

impl ModelServer {
    /// Starts a server playing `script` on a free port of 127.0.0.1.
    pub fn start(script: Script) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the model server");
        let url = format!("http://{}", listener.local_addr().expect("model server address"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared { script, log: log.clone(), stop: stop.clone(), ids: AtomicU64::new(1) });
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, &shared);
                });
            }
        });
        ModelServer { url, log, stop }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
}

#[derive(Debug)]
struct Shared {
    script: Script,
    log: Arc<Mutex<Vec<Logged>>>,
    stop: Arc<AtomicBool>,
    ids: AtomicU64,
}

impl Shared {
    fn id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }
}

struct Request {
    path: String,
    body: Vec<u8>,
}

fn read_request(conn: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (mut length, mut chunked, mut zstd) = (0usize, false, false);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((&header, ""));
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
        match name.as_str() {
            "content-length" => length = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "content-encoding" => zstd = value.contains("zstd"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    if zstd {
        body = zstd::decode_all(&body[..])?;
    }
    Ok(Request { path, body })
}

fn serve(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let req = read_request(&conn)?;
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let dialect = if req.path.contains("/messages") {
        Dialect::Anthropic
    } else if req.path.contains("/responses") {
        Dialect::Responses
    } else if req.path.contains("/chat/completions") {
        Dialect::Chat
    } else if req.path.contains("/models/") && req.path.contains(':') {
        Dialect::Gemini
    } else {
        shared.log.lock().unwrap().push(Logged { path: req.path.clone(), played: "404".into() });
        return respond(&mut conn, "404 Not Found", "application/json", b"{}");
    };
    if dialect == Dialect::Gemini && req.path.contains(":countTokens") {
        shared.log.lock().unwrap().push(Logged { path: req.path.clone(), played: "count".into() });
        return respond(&mut conn, "200 OK", "application/json", br#"{"totalTokens":1}"#);
    }
    if dialect == Dialect::Anthropic && req.path.contains("count_tokens") {
        shared.log.lock().unwrap().push(Logged { path: req.path.clone(), played: "count".into() });
        return respond(&mut conn, "200 OK", "application/json", br#"{"input_tokens":1}"#);
    }
    let conversation = Conversation::of(dialect, &body);
    let (mut step, played) = conversation.step(&shared.script);
    while let Step::After(ms, then) = step {
        std::thread::sleep(Duration::from_millis(ms));
        step = *then;
    }
    shared.log.lock().unwrap().push(Logged { path: req.path.clone(), played });
    let streaming = match dialect {
        Dialect::Gemini => req.path.contains("streamGenerateContent"),
        _ => body.get("stream").and_then(Value::as_bool).unwrap_or(false),
    };
    match step {
        Step::Fail => {
            let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "scripted failure",
                "code": 400, "status": "INVALID_ARGUMENT"}});
            respond(&mut conn, "400 Bad Request", "application/json", error.to_string().as_bytes())
        }
        Step::Hang => {
            let deadline = Instant::now() + Duration::from_secs(120);
            conn.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut buf = [0u8; 1];
            while Instant::now() < deadline && !shared.stop.load(Ordering::SeqCst) {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            Ok(())
        }
        Step::Call(name, input) => answer(&mut conn, dialect, streaming, &[(name, input)], None, shared),
        Step::Text(t) => answer(&mut conn, dialect, streaming, &[], Some(&t), shared),
        Step::After(..) => unreachable!("waited for above"),
    }
}

fn respond(conn: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    conn.write_all(body)?;
    conn.flush()
}

/// The conversation of a request, as far as the script needs it.
#[derive(Debug, Default)]
struct Conversation {
    /// The tools the request offers.
    tools: Vec<String>,
    /// In order: `Some(text)` for a user message's text, `None` for a tool result.
    items: Vec<Option<String>>,
}

impl Conversation {
    fn of(dialect: Dialect, body: &Value) -> Conversation {
        let mut c = Conversation::default();
        let arr = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
        match dialect {
            Dialect::Anthropic => {
                c.tools =
                    arr(body.get("tools")).iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
                for m in arr(body.get("messages")) {
                    if m["role"] != "user" {
                        continue;
                    }
                    match &m["content"] {
                        Value::String(s) => c.items.push(Some(s.clone())),
                        Value::Array(blocks) => {
                            for b in blocks {
                                match b["type"].as_str() {
                                    Some("text") => c.items.push(b["text"].as_str().map(str::to_string)),
                                    Some("tool_result") => c.items.push(None),
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            Dialect::Responses => {
                c.tools =
                    arr(body.get("tools")).iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
                for item in arr(body.get("input")) {
                    match item["type"].as_str() {
                        Some("message") if item["role"] == "user" => {
                            for part in arr(item.get("content")) {
                                if let Some(t) = part["text"].as_str() {
                                    c.items.push(Some(t.to_string()));
                                }
                            }
                        }
                        Some(t) if t.ends_with("call_output") => c.items.push(None),
                        _ => {}
                    }
                }
            }
            Dialect::Gemini => {
                for t in arr(body.get("tools")) {
                    c.tools.extend(
                        arr(t.get("functionDeclarations"))
                            .iter()
                            .filter_map(|f| f["name"].as_str().map(str::to_string)),
                    );
                }
                for content in arr(body.get("contents")) {
                    if content["role"] == "model" {
                        continue;
                    }
                    for part in arr(content.get("parts")) {
                        if let Some(t) = part["text"].as_str() {
                            c.items.push(Some(t.to_string()));
                        } else if part.get("functionResponse").is_some() {
                            c.items.push(None);
                        }
                    }
                }
            }
            Dialect::Chat => {
                c.tools = arr(body.get("tools"))
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect();
                for m in arr(body.get("messages")) {
                    match m["role"].as_str() {
                        Some("user") => match &m["content"] {
                            Value::String(s) => c.items.push(Some(s.clone())),
                            Value::Array(parts) => c
                                .items
                                .extend(parts.iter().filter_map(|p| p["text"].as_str().map(|t| Some(t.to_string())))),
                            _ => {}
                        },
                        Some("tool") => c.items.push(None),
                        _ => {}
                    }
                }
            }
        }
        c
    }

    /// The step to play, and what the log says of it.
    fn step(&self, script: &Script) -> (Step, String) {
        let found = self.items.iter().enumerate().rev().find_map(|(i, item)| {
            let text = item.as_deref()?;
            script.prompts.iter().find(|(m, _)| text.contains(m.as_str())).map(|p| (i, p))
        });
        let Some((at, (m, steps))) = found else {
            return (Step::Text("Done.".into()), "text (no marker)".into());
        };
        let n = self.items[at + 1..].iter().filter(|i| i.is_none()).count();
        let step = steps.get(n).or(steps.last()).cloned().unwrap_or(Step::Text("Done.".into()));
        let offered = |name: &str| self.tools.iter().any(|t| t == name);
        let step = match step {
            Step::Call(name, _) if !offered(&name) => Step::Text(format!("(no tool {name} offered)")),
            s => s,
        };
        (step, format!("step {n} of {m}"))
    }
}

/// Writes a successful answer: tool calls, or a text.
fn answer(
    conn: &mut TcpStream,
    dialect: Dialect,
    streaming: bool,
    calls: &[(String, Value)],
    text: Option<&str>,
    shared: &Shared,
) -> std::io::Result<()> {
    let id = shared.id();
    let events: Vec<(Option<&str>, Value)> = match dialect {
        Dialect::Anthropic => anthropic(id, calls, text),
        Dialect::Responses => responses(id, calls, text),
        Dialect::Gemini => vec![(None, gemini(id, calls, text))],
        Dialect::Chat => chat(id, calls, text),
    };
    if !streaming {
        let body = match dialect {
            Dialect::Anthropic => anthropic_message(id, calls, text),
            Dialect::Gemini => events[0].1.clone(),
            Dialect::Chat => chat_message(id, calls, text),
            Dialect::Responses => events.last().map(|e| e.1["response"].clone()).unwrap_or_default(),
        };
        return respond(conn, "200 OK", "application/json", body.to_string().as_bytes());
    }
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )?;
    for (event, data) in events {
        if let Some(e) = event {
            writeln!(conn, "event: {e}")?;
        }
        write!(conn, "data: {data}\n\n")?;
        conn.flush()?;
    }
    if dialect == Dialect::Chat {
        write!(conn, "data: [DONE]\n\n")?;
    }
    conn.flush()
}

fn input_json(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn anthropic(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Vec<(Option<&'static str>, Value)> {
    let mut ev = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": {"id": format!("msg_{id}"), "type": "message", "role": "assistant",
            "model": "claude-scripted", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    )];
    let mut index = 0;
    if let Some(t) = text {
        ev.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        ev.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
        ));
        ev.push((Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0})));
        index = 1;
    }
    for (k, (name, input)) in calls.iter().enumerate() {
        let i = index + k;
        ev.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use",
                "id": format!("toolu_{id}_{k}"), "name": name, "input": {}}}),
        ));
        ev.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input_json(input)}}),
        ));
        ev.push((Some("content_block_stop"), json!({"type": "content_block_stop", "index": i})));
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    ev.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
    ));
    ev.push((Some("message_stop"), json!({"type": "message_stop"})));
    ev
}

fn anthropic_message(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Value {
    let mut content: Vec<Value> = text.map(|t| json!({"type": "text", "text": t})).into_iter().collect();
    for (k, (name, input)) in calls.iter().enumerate() {
        content.push(json!({"type": "tool_use", "id": format!("toolu_{id}_{k}"), "name": name, "input": input}));
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": "claude-scripted",
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 5}})
}

fn responses(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Vec<(Option<&'static str>, Value)> {
    let mut items = Vec::new();
    if let Some(t) = text {
        items.push(json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}]}));
    }
    for (k, (name, input)) in calls.iter().enumerate() {
        let call_id = format!("call_{id}_{k}");
        items.push(match input {
            // A freeform tool (apply_patch) takes its text as is.
            Value::String(s) => {
                json!({"type": "custom_tool_call", "id": format!("ctc_{id}_{k}"), "status": "completed",
                "call_id": call_id, "name": name, "input": s})
            }
            v => json!({"type": "function_call", "id": format!("fc_{id}_{k}"), "status": "completed",
                "call_id": call_id, "name": name, "arguments": v.to_string()}),
        });
    }
    let response = |status: &str, output: &[Value]| {
        json!({"id": format!("resp_{id}"), "object": "response", "status": status, "model": "gpt-scripted", "output": output,
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}})
    };
    let mut ev =
        vec![(Some("response.created"), json!({"type": "response.created", "response": response("in_progress", &[])}))];
    for (i, item) in items.iter().enumerate() {
        ev.push((
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "output_index": i, "item": item}),
        ));
        if let Some(t) = text.filter(|_| item["type"] == "message") {
            ev.push((
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i, "content_index": 0, "delta": t}),
            ));
        }
        ev.push((
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": i, "item": item}),
        ));
    }
    ev.push((
        Some("response.completed"),
        json!({"type": "response.completed", "response": response("completed", &items)}),
    ));
    ev
}

fn gemini(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Value {
    let mut parts: Vec<Value> = text.map(|t| json!({"text": t})).into_iter().collect();
    for (k, (name, input)) in calls.iter().enumerate() {
        parts.push(json!({"functionCall": {"id": format!("call_{id}_{k}"), "name": name, "args": input}}));
    }
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-scripted", "responseId": format!("resp_{id}")})
}

fn chat(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Vec<(Option<&'static str>, Value)> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut ev = vec![(None, chunk(json!({"role": "assistant", "content": ""}), Value::Null))];
    if let Some(t) = text {
        ev.push((None, chunk(json!({"content": t}), Value::Null)));
    }
    for (k, (name, input)) in calls.iter().enumerate() {
        ev.push((
            None,
            chunk(
                json!({"tool_calls": [{"index": k, "id": format!("call_{id}_{k}"), "type": "function",
                    "function": {"name": name, "arguments": input_json(input)}}]}),
                Value::Null,
            ),
        ));
    }
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    ev.push((None, chunk(json!({}), json!(finish))));
    ev.push((
        None,
        json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "created": 0, "model": "scripted", "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
    ));
    ev
}

fn chat_message(id: u64, calls: &[(String, Value)], text: Option<&str>) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(k, (name, input))| {
            json!({"id": format!("call_{id}_{k}"), "type": "function", "function": {"name": name, "arguments": input_json(input)}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": text.unwrap_or("")});
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}
