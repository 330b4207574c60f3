//! `turnback demo`: a short real story, run by this very binary in a throwaway workspace
//! and store (a fresh random key; nothing outside a temporary directory is touched).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use turnback::{Error, ErrorCode, Result};

use crate::output::{Outcome, err, out};

/// Where the story runs, and how it calls turnback.
struct Stage {
    exe: PathBuf,
    root: PathBuf,
    ws: PathBuf,
    key: String,
}

impl Stage {
    /// Prints `$ shown`, runs turnback with `args` (and `stdin`), prints what it said.
    fn turnback(&self, shown: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
        say_raw(&format!("\n$ {shown}\n"))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .current_dir(&self.ws)
            .env("TURNBACK_HOME", self.root.join("store"))
            .env("TURNBACK_KEY", &self.key)
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("TURNBACK_SESSION", "demo")
            .env_remove("TURNBACK_KEY_FILE")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::new(ErrorCode::Io, format!("turnback: {e}")))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            use std::io::Write;
            pipe.write_all(text.as_bytes()).map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        }
        let out = child.wait_with_output().map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        say_raw(&text)?;
        err(&String::from_utf8_lossy(&out.stderr));
        // A preview with conflicts answers 3 (partial); anything else must succeed.
        if !matches!(out.status.code(), Some(0 | 3)) {
            return Err(Error::new(ErrorCode::Io, format!("`{shown}` failed ({})", out.status)));
        }
        Ok(text)
    }

    /// Someone other than turnback changes a file (a person, or the agent's shell).
    fn by_hand(&self, shown: &str, rel: &str, content: &str) -> Result<()> {
        say_raw(&format!("\n$ {shown}\n"))?;
        let path = self.ws.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        }
        std::fs::write(&path, content).map_err(|e| Error::new(ErrorCode::Io, format!("{}: {e}", path.display())))
    }

    fn show(&self, rel: &str) -> Result<()> {
        say_raw(&format!("\n$ cat {rel}\n"))?;
        match std::fs::read_to_string(self.ws.join(rel)) {
            Ok(text) => say_raw(&text),
            Err(_) => say_raw(&format!("cat: {rel}: No such file or directory\n")),
        }
    }
}

/// Prints the story's text as it is (a closed pipe drops the rest quietly).
fn say_raw(text: &str) -> Result<()> {
    out(text).map_err(|e| Error::new(ErrorCode::Io, format!("cannot write the output: {e}")))
}

fn say(text: &str) -> Result<()> {
    say_raw(&format!("\n# {text}\n"))
}

pub fn run() -> Result<Outcome> {
    let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
    let root = std::env::temp_dir().join(format!("turnback-demo-{}-{}", std::process::id(), turnback::now_ms()));
    let ws = root.join("workspace");
    std::fs::create_dir_all(&ws).map_err(|e| Error::new(ErrorCode::Io, format!("{}: {e}", ws.display())))?;
    let key = turnback::new_master_key()?;
    let stage = Stage { exe, root: root.clone(), ws, key };
    let result = story(&stage);
    let _ = std::fs::remove_dir_all(&root);
    result?;
    Ok(Outcome::of(
        &serde_json::json!({ "demo": "done" }),
        "\n# That's turnback. The demo's workspace and store are gone.",
    ))
}

fn story(s: &Stage) -> Result<()> {
    say(&format!("A throwaway workspace at {} and an encrypted store beside it.", s.ws.display()))?;
    say("Turn 1: the agent creates a small app.")?;
    s.turnback(
        r#"turnback turn begin --prompt "Create a greeting app""#,
        &["turn", "begin", "--prompt", "Create a greeting app"],
        None,
    )?;
    let app = "def greet(name):\n    return 'Hello ' + name\n";
    s.turnback("turnback fs create app.py < app.py", &["fs", "create", "app.py"], Some(app))?;
    s.turnback("turnback fs create README.md", &["fs", "create", "README.md"], Some("# Greeter\n\nSays hello.\n"))?;
    s.turnback(
        r#"turnback fs edit app.py --old "'Hello '" --new "'Hello, '""#,
        &["fs", "edit", "app.py", "--old", "'Hello '", "--new", "'Hello, '"],
        None,
    )?;
    s.turnback("turnback turn end", &["turn", "end"], None)?;

    say("A person improves the README between turns.")?;
    s.by_hand(
        "echo 'Says hello, politely.' >> README.md   (by hand)",
        "README.md",
        "# Greeter\n\nSays hello.\nSays hello, politely.\n",
    )?;

    say("Turn 2: the agent adds a farewell and a test, and runs the tests in a shell.")?;
    s.turnback(
        r#"turnback turn begin --prompt "Add a farewell and test it""#,
        &["turn", "begin", "--prompt", "Add a farewell and test it"],
        None,
    )?;
    let app2 = "def greet(name):\n    return 'Hello, ' + name\n\ndef farewell(name):\n    return 'Bye, ' + name\n";
    s.turnback("turnback fs write app.py < app.py", &["fs", "write", "app.py"], Some(app2))?;
    let test = "from app import greet, farewell\n\ndef test_both():\n    assert greet('Ann') == 'Hello, Ann'\n    assert farewell('Ann') == 'Bye, Ann'\n";
    s.turnback("turnback fs create test_app.py < test_app.py", &["fs", "create", "test_app.py"], Some(test))?;
    s.by_hand("pytest > results.txt   (the agent's shell command)", "results.txt", "1 passed\n")?;
    s.turnback(r#"turnback turn shell "pytest > results.txt""#, &["turn", "shell", "pytest > results.txt"], None)?;
    s.turnback("turnback turn end", &["turn", "end"], None)?;
    s.turnback("turnback diff --turn 2 --stat", &["diff", "--turn", "2", "--stat"], None)?;

    say("After the turn, the person fixes app.py by hand.")?;
    s.by_hand("$EDITOR app.py   (by hand: 'Bye, ' -> 'Goodbye, ')", "app.py", &app2.replace("'Bye, '", "'Goodbye, '"))?;

    say("Take turn 2 back. The preview shows the person's edit as a conflict: it is left alone.")?;
    let preview = s.turnback("turnback rewind --to 2", &["rewind", "--to", "2"], None)?;
    let plan = preview
        .lines()
        .find_map(|l| l.split("(plan ").nth(1).map(|p| p.trim_end_matches(')').to_string()))
        .ok_or_else(|| Error::new(ErrorCode::Io, "the preview named no plan"))?;
    let applied = s.turnback(
        &format!("turnback rewind --to 2 --apply --plan {plan}"),
        &["rewind", "--to", "2", "--apply", "--plan", &plan],
        None,
    )?;
    for rel in ["app.py", "README.md", "test_app.py", "results.txt"] {
        s.show(rel)?;
    }

    say("Changed your mind? The rewind is itself undoable.")?;
    let undo = applied
        .lines()
        .find_map(|l| l.split("`turnback rollback ").nth(1).and_then(|r| r.split(' ').next()).map(str::to_string))
        .ok_or_else(|| Error::new(ErrorCode::Io, "the rewind named no checkpoint"))?;
    s.turnback(&format!("turnback rollback {undo} --apply"), &["rollback", &undo, "--apply"], None)?;
    for rel in ["test_app.py", "results.txt"] {
        s.show(rel)?;
    }
    s.turnback("turnback verify --deep", &["verify", "--deep"], None)?;
    Ok(())
}
