//! `turnback ui` in a real terminal: tmux runs it, `send-keys` presses the keys a person
//! would, `capture-pane` reads the screen, and the files on disk are checked after each
//! apply and undo.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// Whether tmux is there; in CI (`TURNBACK_REQUIRE_TMUX`) it must be.
fn tmux_available() -> bool {
    crate::common::tools::available(crate::common::tools::Tool::Tmux)
}

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {}", show_output(&out));
        out
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", "-t", "ui", k]);
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "ui"]).stdout).into_owned()
    }

    /// Waits (up to 15 s) for the screen to show `text`.
    fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(start.elapsed() < Duration::from_secs(15), "never showed {text:?}:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.socket).arg("kill-server").output();
    }
}

fn turn(env: &Env, prompt: &str, path: &str, content: &str) {
    env.ok(&["turn", "begin", "--prompt", prompt], None);
    env.ok(&["fs", "create", path], Some(content.as_bytes()));
    env.ok(&["turn", "end"], None);
}

#[test]
fn ui_in_tmux_walks_to_turn_2_rewinds_it_and_undoes_the_rewind() {
    if !tmux_available() {
        return;
    }
    let env = Env::new();
    turn(&env, "write the notes", "notes.txt", "one\n");
    turn(&env, "add a plan", "plan.md", "# plan\n");
    turn(&env, "add extras", "extra.txt", "more\n");
    env.write("notes.txt", "one\nadded by hand\n");

    // The command line tmux runs: the hermetic environment, then `turnback ui`, then the
    // exit code, with the pane kept so what it printed can be read.
    let cmd = env.command(&["ui"]);
    let mut script = String::from("#!/bin/sh\n");
    for (name, value) in cmd.get_envs() {
        if let Some(v) = value {
            script.push_str(&format!("export {}='{}'\n", name.to_string_lossy(), v.to_string_lossy()));
        }
    }
    script.push_str(&format!(
        "cd '{}'\n'{}' ui\necho \"exit=$?\"\nsleep 60\n",
        env.ws.display(),
        cmd.get_program().to_string_lossy()
    ));
    let script_path = env.root.join("ui.sh");
    std::fs::write(&script_path, script).unwrap();
    chmod(&script_path, 0o755);

    let tmux = Tmux { socket: unique("turnback-ui") };
    tmux.cmd(&["new-session", "-d", "-s", "ui", "-x", "100", "-y", "30", script_path.to_str().unwrap()]);
    let screen = tmux.wait_for("add extras");
    assert!(screen.contains("write the notes") && screen.contains("add a plan"), "{screen}");

    tmux.keys(&["k"]);
    tmux.wait_for("turn 2: add a plan");
    tmux.keys(&["r"]);
    let preview = tmux.wait_for("Rewind to the start of turn 2");
    assert!(preview.contains("delete       plan.md") && preview.contains("delete       extra.txt"), "{preview}");
    assert!(preview.contains("leave alone notes.txt"), "the person's edit is left alone:\n{preview}");
    tmux.keys(&["y"]);
    tmux.wait_for("press u to undo it");
    assert_eq!(env.read("plan.md"), None, "turn 2's file is gone");
    assert_eq!(env.read("extra.txt"), None, "turn 3's file is gone");
    assert_eq!(env.read("notes.txt").unwrap(), b"one\nadded by hand\n", "the person's edit stays");

    tmux.keys(&["u"]);
    tmux.wait_for("undid:");
    assert_eq!(env.read("plan.md").unwrap(), b"# plan\n", "the undo puts turn 2's file back");
    assert_eq!(env.read("extra.txt").unwrap(), b"more\n");
    assert_eq!(env.read("notes.txt").unwrap(), b"one\nadded by hand\n");

    tmux.keys(&["q"]);
    let after = tmux.wait_for("exit=0");
    let printed: Vec<&str> = after.lines().filter(|l| l.starts_with("turnback ui:")).collect();
    assert_eq!(printed.len(), 1, "one line of what was applied:\n{after}");
    assert!(
        printed[0].contains("rewound the workspace to the start of turn 2") && printed[0].contains("undid"),
        "{after}"
    );
}
