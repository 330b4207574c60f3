//! Fuzz targets for the hook payloads of each agent: any bytes on a hook's standard input
//! translate to protocol events or to `invalid-argument`, never a panic, a hang, or an
//! allocation sized by the input's claims. The corpus (`crates/turnback-cli/fuzz/hook-<agent>/`)
//! is the documented payloads the agent tests deliver (`tests/runner/test_agents.rs`,
//! `test_claude_code.rs`, which cite each agent's hook reference), one file per event and
//! tool; `regressions/` holds inputs that once failed.

use std::path::PathBuf;

use turnback::ErrorCode;
use turnback_fuzz::{Fuzz, Shape};

use super::{answer, translate};
use crate::cli::HookAgent;

#[global_allocator]
static ALLOC: turnback_fuzz::Tracking = turnback_fuzz::Tracking;

fn fuzz(agent: HookAgent, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz").join(format!("hook-{name}"));
    Fuzz::new(&format!("hook-{name}"), &dir, Shape::Json).run(|input| {
        let text = String::from_utf8_lossy(input);
        match translate(agent, &text) {
            Ok(t) => {
                // The answer an agent reads back is always well-formed for it.
                let reply = answer(agent, &t.name);
                assert!(reply.is_empty() || serde_json::from_str::<serde_json::Value>(&reply).is_ok(), "{reply}");
                let kinds: Vec<String> = t
                    .events
                    .iter()
                    .map(|e| {
                        serde_json::to_value(e)
                            .ok()
                            .and_then(|v| v["event"].as_str().map(str::to_string))
                            .unwrap_or_default()
                    })
                    .collect();
                format!("{} -> {kinds:?} {}", t.name, t.transcript.is_some())
            }
            Err(e) => {
                assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
                let first: String = e.message.chars().take(40).filter(|c| !c.is_ascii_digit()).collect();
                format!("error: {first}")
            }
        }
    });
}

#[test]
fn fuzz_hook_claude_code() {
    fuzz(HookAgent::ClaudeCode, "claude-code");
}

#[test]
fn fuzz_hook_codex() {
    fuzz(HookAgent::Codex, "codex");
}

#[test]
fn fuzz_hook_gemini() {
    fuzz(HookAgent::Gemini, "gemini");
}

#[test]
fn fuzz_hook_cursor() {
    fuzz(HookAgent::Cursor, "cursor");
}

#[test]
fn fuzz_hook_opencode() {
    fuzz(HookAgent::Opencode, "opencode");
}
