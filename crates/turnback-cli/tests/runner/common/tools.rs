//! The test tools this project did not write (the MCP Python SDK, tmux, Node.js, Garage,
//! GNU time):
//! whether this machine has each, asked once per test binary.
//!
//! Invariants: a missing tool is one line on the terminal per test binary — which tool,
//! which tests skip, and the command that provisions it — written past the test harness's
//! output capture, so a contributor sees it among the results instead of a silent pass.
//! Where the tool's `TURNBACK_REQUIRE_*` variable is set (CI sets them all), a missing tool
//! fails the test instead: CI never skips.

use std::io::Write;
use std::process::Command;
use std::sync::OnceLock;

/// One tool some tests need.
#[derive(Clone, Copy)]
pub enum Tool {
    /// The official MCP Python SDK: drives `turnback mcp` as a client.
    McpClient,
    /// tmux: runs `turnback ui` in a real terminal.
    Tmux,
    /// Node.js: runs the opencode plugin.
    Node,
    /// Garage: the S3 server the remote tests push to.
    Garage,
    /// GNU time (`/usr/bin/time -v`): measures a run's peak memory.
    GnuTime,
}

impl Tool {
    const ALL: [Tool; 5] = [Tool::McpClient, Tool::Tmux, Tool::Node, Tool::Garage, Tool::GnuTime];

    fn index(self) -> usize {
        self as usize
    }

    /// The variable that makes the tool required (CI sets it).
    fn required_by(self) -> &'static str {
        match self {
            Tool::McpClient => "TURNBACK_REQUIRE_MCP_CLIENT",
            Tool::Tmux => "TURNBACK_REQUIRE_TMUX",
            Tool::Node => "TURNBACK_REQUIRE_NODE",
            Tool::Garage => "TURNBACK_REQUIRE_S3",
            Tool::GnuTime => "TURNBACK_REQUIRE_TIME",
        }
    }

    /// The skip line: the tool, the tests it gates, and how to get it.
    fn skip_line(self) -> &'static str {
        match self {
            Tool::McpClient => {
                "skipped: the MCP server tests (no MCP Python SDK); enable: python3 -m pip install mcp==2.3.0, or scripts/test-tools.sh"
            }
            Tool::Tmux => {
                "skipped: the `turnback ui` terminal tests (no tmux); enable: apt-get install tmux, or scripts/test-tools.sh"
            }
            Tool::Node => "skipped: the opencode plugin tests (no node); enable: install Node.js 20 or newer",
            Tool::Garage => {
                "skipped: the S3 remote tests (no garage binary); enable: cargo install garage --version 2.5.0 --locked, or scripts/test-tools.sh"
            }
            Tool::GnuTime => {
                "skipped: the peak-memory tests (no /usr/bin/time); enable: apt-get install time, or scripts/test-tools.sh"
            }
        }
    }

    fn present(self) -> bool {
        let runs =
            |program: &str, args: &[&str]| Command::new(program).args(args).output().is_ok_and(|o| o.status.success());
        match self {
            Tool::McpClient => runs("python3", &["-c", "import mcp.client.stdio"]),
            Tool::Tmux => runs("tmux", &["-V"]),
            Tool::Node => runs("node", &["--version"]),
            Tool::Garage => super::garage::binary().is_some(),
            Tool::GnuTime => std::path::Path::new("/usr/bin/time").is_file(),
        }
    }
}

/// Whether `tool` is here. When it is not: panics if it is required, else prints its skip
/// line (once per test binary) and returns false.
pub fn available(tool: Tool) -> bool {
    static SEEN: [OnceLock<bool>; Tool::ALL.len()] = [const { OnceLock::new() }; Tool::ALL.len()];
    let found = *SEEN[tool.index()].get_or_init(|| {
        let found = tool.present();
        if !found && !required(tool) {
            // `eprintln!` is captured by the harness for passing tests; the handle is not.
            let _ = writeln!(std::io::stderr(), "{}", tool.skip_line());
        }
        found
    });
    assert!(found || !required(tool), "{} is set, so this test must run: {}", tool.required_by(), tool.skip_line());
    found
}

fn required(tool: Tool) -> bool {
    std::env::var_os(tool.required_by()).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Says, once per test binary, that a check needing what this machine does not allow (root
/// to mount a tmpfs, say) was skipped: a line the harness does not capture.
pub fn skipped(line: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == line) {
        said.push(line.to_string());
        let _ = writeln!(std::io::stderr(), "skipped: {line}");
    }
}
