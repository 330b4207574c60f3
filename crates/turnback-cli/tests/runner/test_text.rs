//! The text a person reads, checked whole: a rollback preview, a rewind preview, `turns`,
//! `checkpoints` and `doctor` on one small story, each compared with its snapshot in
//! `snapshots/` (insta). A changed word, column or line fails with the diff; a new text is
//! accepted deliberately (`INSTA_UPDATE=always`, then read the `.snap`), never silently.
//!
//! Invariants: the story is deterministic — a fixed key, fixed contents, every turn's start
//! snapshot waited for (so never late) and no agent program on `PATH` for `doctor`. What
//! still varies run to run is replaced before comparing, by [`normalise`]: the temporary
//! directory by `[tmp]`, an id the story knows by what it is (`[checkpoint 3]`,
//! `[turn 2 start]`) so a snapshot still says which checkpoint a line is about, any other
//! id or plan id by a number in order of appearance, and every time by `[time]`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::sync::LazyLock;

use regex::{Captures, Regex};

use crate::common::{Env, str_at};

/// Long enough that a start snapshot is never late, however loaded the machine.
const WAIT_MS: &str = "60000";

/// A story's environment and the names of the ids it made.
struct Story {
    env: Env,
    /// Each id the story made, and what to call it in a snapshot.
    names: Vec<(String, String)>,
}

impl Story {
    fn new() -> Story {
        Story { env: Env::new(), names: Vec::new() }
    }

    fn begin(&self, prompt: &str) {
        self.env.ok(&["turn", "begin", "--prompt", prompt, "--wait-ms", WAIT_MS], None);
    }

    fn end(&self) {
        self.env.ok(&["turn", "end"], None);
    }

    /// An agent's edit through `turnback fs ARGS`; its checkpoint is named by its number.
    fn agent(&mut self, args: &[&str], stdin: Option<&[u8]>) {
        let done = self.env.json_with(&[&["fs"], args].concat(), stdin);
        let n = self.names.iter().filter(|(_, name)| name.starts_with("[checkpoint")).count() + 1;
        self.names.push((str_at(&done, "/checkpointId").to_string(), format!("[checkpoint {n}]")));
    }

    /// Names the session, each turn and each turn's snapshots, as `turns --json` lists them.
    fn name_turns(&mut self) {
        let list = self.env.json(&["turns"]);
        self.names.push((str_at(&list, "/sessionId").to_string(), "[session]".into()));
        for t in list["turns"].as_array().expect("turns") {
            let index = &t["index"];
            self.names.push((str_at(t, "/turnId").to_string(), format!("[turn {index}]")));
            self.names.push((str_at(t, "/snapshot/id").to_string(), format!("[turn {index} start]")));
            self.names.push((str_at(t, "/endSnapshot/id").to_string(), format!("[turn {index} end]")));
        }
    }

    /// What `turnback ARGS` shows a person: the command, its stdout, its stderr if any, and
    /// its exit code, normalised.
    fn shown(&self, args: &[&str]) -> String {
        self.shown_by(self.env.command(args), args)
    }

    /// [`shown`](Self::shown) with no agent program on `PATH`.
    fn shown_without_agents(&self, args: &[&str]) -> String {
        let empty = self.env.root.join("no-agents");
        std::fs::create_dir_all(&empty).expect("an empty PATH directory");
        let mut cmd = self.env.command(args);
        cmd.env("PATH", &empty);
        self.shown_by(cmd, args)
    }

    fn shown_by(&self, mut cmd: Command, args: &[&str]) -> String {
        let out = cmd.stdin(Stdio::null()).output().expect("turnback runs");
        let mut text = format!("$ turnback {}\n{}", args.join(" "), String::from_utf8_lossy(&out.stdout));
        if !out.stderr.is_empty() {
            text.push_str(&format!("--- stderr\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        text.push_str(&format!("(exit {})\n", out.status.code().expect("turnback exited normally")));
        normalise(&text, self.env.root.as_os_str(), &self.names)
    }
}

/// Two turns of an agent between a person's edits, each agent edit a checkpoint:
///
/// - before: `README.md`, `src/lib.rs`, `notes.txt` (the person's);
/// - turn 1 "add a greeting": creates `src/greet.rs` (checkpoint 1), edits `README.md` (2);
/// - between the turns the person edits `notes.txt`;
/// - turn 2 "say hello to the world": edits `src/greet.rs` (3), deletes `notes.txt` (4),
///   creates `CHANGELOG.md` (5);
/// - after it the person edits `src/greet.rs` again.
fn story() -> Story {
    let mut s = Story::new();
    s.env.write("README.md", "# demo\n");
    s.env.write("src/lib.rs", "pub mod greet;\n");
    s.env.write("notes.txt", "todo: nothing\n");
    s.begin("add a greeting");
    s.agent(&["create", "src/greet.rs"], Some(b"pub fn hello() -> &'static str {\n    \"hello\"\n}\n"));
    s.agent(&["edit", "README.md", "--old", "# demo", "--new", "# demo: says hello"], None);
    s.end();
    s.env.write("notes.txt", "todo: ship it\n");
    s.begin("say hello to the world");
    s.agent(&["edit", "src/greet.rs", "--old", "\"hello\"", "--new", "\"hello, world\""], None);
    s.agent(&["delete", "notes.txt"], None);
    s.agent(&["create", "CHANGELOG.md"], Some(b"- says hello to the world\n"));
    s.end();
    s.env.write("src/greet.rs", "pub fn hello() -> &'static str {\n    \"hello, world\"\n}\n// by hand\n");
    s.name_turns();
    s
}

/// `text` with what varies run to run replaced: `root` (the temporary directory) by
/// `[tmp]`, each id of `names` by its name, any other id (a UUID) by `[id N]` and plan id
/// (32 hex digits) by `[plan N]`, numbered in order of appearance, and every RFC 3339 time
/// by `[time]`.
fn normalise(text: &str, root: &OsStr, names: &[(String, String)]) -> String {
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b").expect("regex")
    });
    static PLAN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[0-9a-f]{32}\b").expect("regex"));
    static TIME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)").expect("regex"));
    let mut text = text.replace(root.to_str().expect("a UTF-8 temporary directory"), "[tmp]");
    for (id, name) in names {
        text = text.replace(id.as_str(), name);
    }
    let text = numbered(&UUID, &text, "id");
    let text = numbered(&PLAN, &text, "plan");
    TIME.replace_all(&text, "[time]").into_owned()
}

/// Every match of `re` in `text` replaced by `[WHAT N]`, the same match by the same N.
fn numbered(re: &Regex, text: &str, what: &str) -> String {
    let mut seen: HashMap<String, usize> = HashMap::new();
    re.replace_all(text, |c: &Captures| {
        let next = seen.len() + 1;
        format!("[{what} {}]", seen.entry(c[0].to_string()).or_insert(next))
    })
    .into_owned()
}

#[test]
fn a_rollback_preview_names_each_path_its_checkpoint_and_the_choices_on_a_conflict() {
    let s = story();
    insta::assert_snapshot!("rollback_preview", s.shown(&["rollback", "--turn", "2"]));
}

#[test]
fn a_rewind_preview_restores_and_deletes_the_agents_paths_and_leaves_the_persons_edit() {
    let s = story();
    insta::assert_snapshot!("rewind_preview", s.shown(&["rewind", "--to", "2"]));
}

#[test]
fn turns_lists_each_turn_with_its_start_snapshot_and_prompt() {
    let s = story();
    insta::assert_snapshot!("turns", s.shown(&["turns"]));
}

#[test]
fn checkpoints_lists_each_agent_edit_with_its_round_state_and_effect() {
    let s = story();
    insta::assert_snapshot!("checkpoints", s.shown(&["checkpoints"]));
}

#[test]
fn doctor_on_a_healthy_store_finds_no_problem() {
    let s = story();
    insta::assert_snapshot!("doctor", s.shown_without_agents(&["doctor"]));
}

#[test]
fn doctor_says_what_to_do_about_hooks_no_event_has_reached() {
    let s = story();
    s.env.ok(&["install", "claude-code"], None);
    insta::assert_snapshot!("doctor_problem", s.shown_without_agents(&["doctor"]));
}

#[test]
fn normalise_names_known_ids_numbers_the_rest_and_hides_times_and_the_temporary_directory() {
    let names = [("01a2455e-fbf3-737c-b5ee-ab85c3b8d3d5".to_string(), "[session]".to_string())];
    let text = "session 01a2455e-fbf3-737c-b5ee-ab85c3b8d3d5 in /tmp/x1/ws at 2026-12-05T08:43:02.81Z\n\
                plan 39a146cdaf23ef35ef1226d7b23e861c of 01a2455e-fd0e-77d9-8a10-66516b88d9ab, \
                01a2455e-fcc2-71d6-a24e-b91dccd901a2, 01a2455e-fd0e-77d9-8a10-66516b88d9ab\n\
                apply with --plan 39a146cdaf23ef35ef1226d7b23e861c\n";
    assert_eq!(
        normalise(text, OsStr::new("/tmp/x1"), &names),
        "session [session] in [tmp]/ws at [time]\nplan [plan 1] of [id 1], [id 2], [id 1]\napply with --plan [plan 1]\n"
    );
}
