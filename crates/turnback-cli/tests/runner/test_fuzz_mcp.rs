//! Fuzzing the MCP server as a client reaches it: one real `turnback mcp` process, fed
//! mutated JSON-RPC messages on its standard input (the seeds, `fuzz/mcp-requests/`, are a
//! call of every tool with valid arguments, `tools/list`, `ping`, a cancellation and a
//! method it does not serve). After every message a `ping` must be answered: the server
//! never dies, hangs or stops answering, whatever a client sends. And whatever the paths in
//! the arguments say, nothing outside the workspace changes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};
use turnback_fuzz::{Fuzz, Shape};

use crate::common::{Env, files_under};

struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Server {
    fn start(env: &Env) -> Server {
        let mut child = env
            .command(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("turnback mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server { child, stdin, lines };
        server.send(
            json!({ "jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "fuzz", "version": "1" } } })
            .to_string()
            .as_bytes(),
        );
        server.answer_to(&json!("init"));
        server.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string().as_bytes());
        server
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).and_then(|()| self.stdin.write_all(b"\n")).expect("the server reads its input");
        self.stdin.flush().unwrap();
    }

    /// Every response until the one to `id`, which is returned last.
    fn answer_to(&mut self, id: &Value) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let line = match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => line,
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    panic!(
                        "no answer to {id} (the server {})",
                        status.map_or("hangs".into(), |s| format!("exited: {s}"))
                    );
                }
            };
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
            let done = v.get("id") == Some(id);
            seen.push(v);
            if done {
                return seen;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `dir` but the workspace and the store, with its bytes.
fn outside(env: &Env, dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .filter(|p| !p.starts_with(&env.ws) && !p.starts_with(&env.store))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

#[test]
fn fuzz_mcp_requests() {
    let env = Env::new();
    env.write("src/lexer.rs", "pub fn lex() {}\n");
    env.write("notes.txt", "keep\n");
    std::fs::write(env.root.join("outside.txt"), "not the workspace's\n").unwrap();
    std::fs::write(env.home.join(".bashrc"), "export PATH\n").unwrap();
    let before = outside(&env, &env.root);
    let mut server = Server::start(&env);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/mcp-requests");
    let mut probe = 0u64;
    Fuzz::new("mcp-requests", &dir, Shape::Json).run(|input| {
        // One message per line: the transport's framing, which mutations may break in two.
        server.send(input);
        probe += 1;
        let id = json!(format!("probe-{probe}"));
        server.send(json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }).to_string().as_bytes());
        let answers = server.answer_to(&id);
        let to_input: Vec<String> = answers[..answers.len() - 1]
            .iter()
            .map(|a| match (a.get("error"), a.pointer("/result/isError")) {
                (Some(e), _) => format!("error {}", e["code"]),
                (None, Some(Value::Bool(true))) => {
                    let text = a.pointer("/result/content/0/text").and_then(Value::as_str).unwrap_or("");
                    let code = serde_json::from_str::<Value>(text)
                        .ok()
                        .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
                    format!("tool error {}", code.unwrap_or_default())
                }
                (None, _) => "result".to_string(),
            })
            .collect();
        format!("{to_input:?}")
    });
    drop(server);
    assert_eq!(outside(&env, &env.root), before, "nothing outside the workspace and the store changed");
}

#[test]
fn an_oversized_request_gets_an_error_naming_the_limit_and_the_server_goes_on() {
    let env = Env::new();
    let mut server = Server::start(&env);
    for (n, megabytes) in [(1, 20usize), (2, 200)] {
        // The id after the parameters, as the TypeScript SDK writes it; an "id" inside them.
        let content = "x".repeat(megabytes * 1_000_000);
        let request = json!({ "jsonrpc": "2.0", "method": "tools/call",
            "params": { "name": "write_file", "arguments": { "path": "big.txt", "content": content, "id": 99 } },
            "id": n });
        server.send(request.to_string().as_bytes());
        let answers = server.answer_to(&json!(n));
        let answer = answers.last().unwrap();
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        assert_eq!(answer["error"]["data"]["code"], "request-too-large", "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("16 MiB"), "{answer}");
        server.send(json!({ "jsonrpc": "2.0", "id": format!("ping-{n}"), "method": "ping" }).to_string().as_bytes());
        server.answer_to(&json!(format!("ping-{n}")));
    }
    assert!(!env.ws.join("big.txt").exists(), "nothing was written");
    let peak = crate::common::peak_rss_kib(server.child.id()) * 1024;
    assert!(peak > 0 && peak < 128 << 20, "a 200 MB request is read in bounded memory: peak {} MiB", peak >> 20);
}
