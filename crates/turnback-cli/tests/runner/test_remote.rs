//! Remotes against a real S3 server (Garage on 127.0.0.1, `common::garage`): push from
//! one store, pull into another, killed pushes, concurrent pushers, tampering, the canary
//! in the bucket, and `gc --remote`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::garage::{self, Garage};
use crate::common::{Env, files_under, str_at, test_key, unique};

/// A store with remote `team` on `garage` at `prefix`, and its workspace initialised.
fn connected(garage: &Garage, prefix: &str) -> Env {
    let mut env = Env::new();
    garage.connect(&mut env, "team", prefix);
    env.ok(&["init"], None);
    env
}

/// One turn: prompt, files written (`None`: deleted) directly in the workspace.
fn turn(env: &Env, session: &str, prompt: &str, files: &[(&str, Option<&str>)]) {
    env.ok(&["--session", session, "turn", "begin", "--prompt", prompt], None);
    for (path, content) in files {
        match content {
            Some(c) => env.write(path, c),
            None => std::fs::remove_file(env.ws.join(path)).expect("delete file"),
        }
    }
    let reply = format!(r#"{{"role":"assistant","content":"done: {prompt}"}}"#);
    env.ok(&["--session", session, "history", "append"], Some(reply.as_bytes()));
    env.ok(&["--session", session, "turn", "end"], None);
}

/// Every file under `dir` by relative path, with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    files_under(dir)
        .into_iter()
        .map(|f| (f.strip_prefix(dir).unwrap().to_string_lossy().into_owned(), std::fs::read(&f).unwrap()))
        .collect()
}

/// What `diff` and `history show` say about `session`, without the store-specific parts.
fn views(env: &Env, session: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for args in [
        vec!["--session", session, "diff", "--turn", "1"],
        vec!["--session", session, "diff", "--turn", "2"],
        vec!["--session", session, "history", "show"],
        vec!["--session", session, "turns"],
    ] {
        out.push(env.json(&args));
    }
    out
}

#[test]
fn push_then_pull_into_a_second_store_gives_the_same_diff_history_and_fork() {
    let Some(garage) = garage::start() else { return };
    let prefix = unique("team/");
    let a = connected(&garage, &prefix);
    a.write("src/lib.rs", "pub fn one() {}\n");
    a.write("README.md", "# project\n");
    turn(&a, "agent-1", "write the parser", &[("src/parser.rs", Some("fn parse() {}\n")), ("notes.txt", Some("n\n"))]);
    turn(&a, "agent-1", "rename parse", &[("src/parser.rs", Some("fn load() {}\n")), ("notes.txt", None)]);
    let pushed = a.json(&["--session", "agent-1", "push", "team"]);
    assert_eq!(pushed["pushed"][0]["turns"], 2, "{pushed:#}");
    assert!(pushed["pushed"][0]["objectsUploaded"].as_u64().unwrap() > 0);

    // Another machine: its own store and workspace, the key carried by `key export`.
    let exported = a.ok(&["key", "export"], None).stdout;
    let mut b = Env::without_key();
    b.ok(&["key", "import"], Some(&exported));
    garage.connect(&mut b, "team", &prefix);
    let listed = b.json(&["session", "list", "--remote", "team"]);
    assert_eq!(str_at(&listed, "/sessions/0/id"), "agent-1");
    assert_eq!(listed["sessions"][0]["turns"], 2);
    let pulled = b.json(&["pull", "team", "--session", "agent-1"]);
    assert_eq!(pulled["pulled"][0]["turnsAdded"], 2, "{pulled:#}");
    assert!(tree(&b.ws).is_empty(), "a pull writes nothing into the workspace");
    b.assert_verify_clean();
    assert_eq!(views(&a, "agent-1"), views(&b, "agent-1"), "diff, history and turns read the same");

    let (fa, fb) = (a.root.join("fork-a"), b.root.join("fork-b"));
    for (env, dir) in [(&a, &fa), (&b, &fb)] {
        let f =
            env.json(&["session", "fork", "--from", "agent-1", "--after-turn", "1", "--into", dir.to_str().unwrap()]);
        assert_eq!(f["turns"], 1);
    }
    let forked = tree(&fa);
    assert_eq!(forked.get("src/parser.rs").map(Vec::as_slice), Some(&b"fn parse() {}\n"[..]));
    assert_eq!(forked, tree(&fb), "the forks are byte-identical");
    b.assert_verify_clean();

    // Pulling again adds nothing; a push from b now has nothing to upload but a manifest.
    assert_eq!(b.json(&["pull", "team", "--session", "agent-1"])["pulled"][0]["turnsAdded"], 0);
    let again = b.json(&["--session", "agent-1", "push", "team"]);
    assert_eq!(again["pushed"][0]["objectsUploaded"], 0, "{again:#}");
    assert_eq!(again["pushed"][0]["recordsUploaded"], 0, "{again:#}");
}

#[test]
fn an_incremental_push_uploads_the_changed_file_and_small_records() {
    let Some(garage) = garage::start() else { return };
    let a = connected(&garage, &unique("inc/"));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..60 {
        // Content that does not compress away: the first push is mostly these bytes.
        let body: String = (0..250)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                format!("{seed:016x}")
            })
            .collect();
        a.write(&format!("src/m{i}/file{i}.rs"), format!("// {body}\npub fn f{i}() {{}}\n"));
    }
    turn(&a, "s", "first", &[("src/new.rs", Some("fn a() {}\n"))]);
    let first = a.json(&["--session", "s", "push", "team"])["pushed"][0].clone();
    turn(&a, "s", "second", &[("src/m7/file7.rs", Some("pub fn changed() {}\n"))]);
    let second = a.json(&["--session", "s", "push", "team"])["pushed"][0].clone();
    // The file, and the directory nodes above it: root, src, src/m7.
    assert_eq!(second["objectsUploaded"], 4, "{second:#}");
    assert_eq!(second["recordsUploaded"], 1, "only the new turn's record: {second:#}");
    assert!(
        second["bytesUploaded"].as_u64().unwrap() * 10 < first["bytesUploaded"].as_u64().unwrap(),
        "{first:#} {second:#}"
    );
}

/// Pulls `session` from `prefix` into a fresh store; returns the store's env and the
/// command's exit code and JSON.
fn pull_fresh(garage: &Garage, prefix: &str, session: &str) -> (Env, Option<i32>, Value) {
    let mut b = Env::new();
    garage.connect(&mut b, "team", prefix);
    let out = b.run(&["--json", "pull", "team", "--session", session], None);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (b, out.status.code(), v)
}

/// The steps of a push a kill test stops it at (`TURNBACK_FAILPOINT`).
const STEPS: [&str; 3] = ["remote-push-packs-uploaded", "remote-push-records-uploaded", "remote-push-before-manifest"];

#[test]
fn a_push_killed_at_random_points_twenty_times_then_completes() {
    let Some(garage) = garage::start() else { return };
    let prefix = unique("kill/");
    let mut a = connected(&garage, &prefix);
    // Small packs: the push makes many uploads, so kills land between them.
    a.set_var("TURNBACK_REMOTE_PACK_BYTES", "8192");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in 0..120 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        a.write(&format!("d{}/f{i}.txt", i % 9), format!("{seed:x}").repeat(60));
    }
    turn(&a, "k", "many files", &[]);
    let mut killed_midway = 0;
    for round in 0..20u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // The first push after new work (rounds 0, 5, 10, 15) is killed where it stands at
        // one of its steps, in turn, so kills land mid-push however fast this machine
        // pushes; the others after a random delay, wherever the push is then.
        let mut cmd = a.command(&["--session", "k", "push", "team"]);
        let step = (round % 5 == 0).then(|| STEPS[(round as usize / 5) % STEPS.len()]);
        if let Some(step) = step {
            cmd.env("TURNBACK_FAILPOINT", step);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        match step {
            // Returns at the failpoint's line, or at the end of a push that never reached it.
            Some(_) => {
                let mut line = String::new();
                let _ =
                    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut line);
            }
            None => std::thread::sleep(Duration::from_millis(seed % 700)),
        }
        if child.try_wait().unwrap().is_none() {
            killed_midway += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
        // Whatever the kill left, a reader sees a whole session or none.
        let (b, code, v) = pull_fresh(&garage, &prefix, "k");
        match code {
            Some(0) => {
                b.assert_verify_clean();
                let turns = v["pulled"][0]["turns"].as_u64().unwrap();
                assert!((1..=1 + round / 5).contains(&turns), "round {round}: {v:#}");
            }
            _ => {
                assert_eq!(v["error"]["code"], "not-found", "round {round}: only `nothing pushed yet` may fail: {v:#}")
            }
        }
        if round % 5 == 4 {
            // New turns between kills, so later pushes have new work too.
            turn(
                &a,
                "k",
                &format!("round {round}"),
                &[(&format!("r{round}.txt"), Some(&format!("{seed:x}").repeat(100)))],
            );
        }
    }
    assert!(killed_midway >= 4, "only {killed_midway} of 20 kills landed during a push");
    a.ok(&["--session", "k", "push", "team"], None);
    let (b, code, v) = pull_fresh(&garage, &prefix, "k");
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["pulled"][0]["turns"], 5, "{v:#}");
    b.assert_verify_clean();
    let (fa, fb) = (a.root.join("fa"), b.root.join("fb"));
    a.ok(&["session", "fork", "--from", "k", "--into", fa.to_str().unwrap()], None);
    b.ok(&["session", "fork", "--from", "k", "--into", fb.to_str().unwrap()], None);
    assert_eq!(tree(&fa), tree(&fb));
}

#[test]
fn a_push_killed_before_its_manifest_shows_nothing_and_gc_removes_it_only_after_the_grace() {
    let Some(garage) = garage::start() else { return };
    let prefix = unique("gc/");
    let a = connected(&garage, &prefix);
    turn(&a, "g", "one", &[("a.txt", Some("first\n"))]);
    a.ok(&["--session", "g", "push", "team"], None);
    turn(&a, "g", "two", &[("b.txt", Some("second\n"))]);
    a.kill_at_failpoint(&["--session", "g", "push", "team"], None, "remote-push-before-manifest");
    let (_, code, v) = pull_fresh(&garage, &prefix, "g");
    assert_eq!(code, Some(0));
    assert_eq!(v["pulled"][0]["turns"], 1, "the unfinished push is not visible: {v:#}");

    let young = a.json(&["gc", "--remote", "team"]);
    assert_eq!(young["deleted"], 0, "{young:#}");
    assert!(young["keptYoung"].as_u64().unwrap() >= 2, "the killed push's pack, index and record: {young:#}");
    let before = garage.objects(&prefix).len();
    let swept = a.json(&["gc", "--remote", "team", "--grace-secs", "0"]);
    assert_eq!(swept["deleted"].as_u64().unwrap() as usize, before - swept["kept"].as_u64().unwrap() as usize);
    assert!(swept["deleted"].as_u64().unwrap() >= 2, "{swept:#}");
    let (b, code, v) = pull_fresh(&garage, &prefix, "g");
    assert_eq!(code, Some(0), "gc removed nothing a manifest names: {v:#}");
    b.assert_verify_clean();

    // Two more pushes: the first manifest is replaced, and gc removes it.
    a.ok(&["--session", "g", "push", "team"], None);
    a.ok(&["--session", "g", "push", "team"], None);
    let manifests = |g: &Garage| g.objects(&prefix).iter().filter(|(n, _)| n.starts_with("s/")).count();
    assert_eq!(manifests(&garage), 3);
    a.ok(&["gc", "--remote", "team", "--grace-secs", "0"], None);
    assert_eq!(manifests(&garage), 1, "replaced manifests go");
    let (_, code, v) = pull_fresh(&garage, &prefix, "g");
    assert_eq!((code, &v["pulled"][0]["turns"]), (Some(0), &Value::from(2)), "{v:#}");
}

#[test]
fn two_stores_pushing_the_same_session_concurrently_lose_no_turn() {
    let Some(garage) = garage::start() else { return };
    let prefix = unique("both/");
    let a = connected(&garage, &prefix);
    turn(&a, "shared", "common start", &[("base.txt", Some("base\n"))]);
    a.ok(&["--session", "shared", "push", "team"], None);
    let b = connected(&garage, &prefix);
    b.ok(&["pull", "team", "--session", "shared"], None);
    for round in 0..3 {
        turn(&a, "shared", &format!("a round {round}"), &[(&format!("a{round}.txt"), Some("from a\n"))]);
        turn(&b, "shared", &format!("b round {round}"), &[(&format!("b{round}.txt"), Some("from b\n"))]);
        let pa = a.command(&["--session", "shared", "push", "team"]).stdout(Stdio::null()).spawn().unwrap();
        let pb = b.command(&["--session", "shared", "push", "team"]).stdout(Stdio::null()).spawn().unwrap();
        for mut p in [pa, pb] {
            assert!(p.wait().unwrap().success());
        }
    }
    let (c, code, v) = pull_fresh(&garage, &prefix, "shared");
    assert_eq!(code, Some(0), "{v:#}");
    let turns = c.json(&["--session", "shared", "turns"]);
    let previews: Vec<&str> =
        turns["turns"].as_array().unwrap().iter().map(|t| t["preview"].as_str().unwrap()).collect();
    assert_eq!(previews.len(), 7, "{previews:?}");
    for round in 0..3 {
        for who in ["a", "b"] {
            assert!(previews.contains(&format!("{who} round {round}").as_str()), "{previews:?}");
        }
    }
    let indexes: Vec<u64> = turns["turns"].as_array().unwrap().iter().map(|t| t["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, (1..=7).collect::<Vec<_>>());
    c.assert_verify_clean();
    // And a, pulling, gets b's turns next to its own.
    a.ok(&["pull", "team", "--session", "shared"], None);
    assert_eq!(a.json(&["--session", "shared", "turns"])["turns"].as_array().unwrap().len(), 7);
    a.assert_verify_clean();
}

#[test]
fn tampered_deleted_and_foreign_key_objects_are_typed_errors_and_nothing_is_written() {
    let Some(garage) = garage::start() else { return };
    let prefix = unique("tamper/");
    let a = connected(&garage, &prefix);
    turn(&a, "t", "one", &[("a.txt", Some("alpha\n")), ("b.txt", Some("beta\n"))]);
    a.ok(&["--session", "t", "push", "team"], None);
    let objects = garage.objects(&prefix);
    let fails = |garage: &Garage, want: &str| {
        let (b, code, v) = pull_fresh(garage, &prefix, "t");
        assert_ne!(code, Some(0), "{v:#}");
        assert_eq!(v["error"]["code"], want, "{v:#}");
        assert!(tree(&b.ws).is_empty(), "nothing written to the workspace");
        assert_eq!(b.json(&["session", "list"])["sessions"], Value::Array(vec![]), "no session recorded");
    };
    for kind in ["p/", "t/", "s/"] {
        let (name, bytes) = objects.iter().find(|(n, _)| n.starts_with(kind)).expect("an object of each kind");
        let mut altered = bytes.clone();
        let at = altered.len() / 2;
        altered[at] ^= 0x40;
        garage.put(&prefix, name, altered);
        fails(&garage, "corrupt");
        garage.put(&prefix, name, bytes.clone());
    }
    let (pack, _) = objects.iter().find(|(n, _)| n.starts_with("p/")).unwrap();
    garage.delete(&prefix, pack);
    fails(&garage, "not-found");
    let (record, bytes) = objects.iter().find(|(n, _)| n.starts_with("t/")).unwrap();
    let restored_pack = objects.iter().find(|(n, _)| n == pack).unwrap().1.clone();
    garage.put(&prefix, pack, restored_pack);
    garage.delete(&prefix, record);
    fails(&garage, "not-found");
    garage.put(&prefix, record, bytes.clone());

    // Another master key: key-mismatch, for pull and push alike.
    let mut other = Env::without_key();
    other.set_var("TURNBACK_KEY", &crate::common::key_b64(0x11));
    garage.connect(&mut other, "team", &prefix);
    assert_eq!(other.fail(&["pull", "team", "--session", "t"], None).code, "key-mismatch");
    other.ok(&["init"], None);
    turn(&other, "t2", "x", &[]);
    assert_eq!(other.fail(&["--session", "t2", "push", "team"], None).code, "key-mismatch");
    let (b, code, _) = pull_fresh(&garage, &prefix, "t");
    assert_eq!(code, Some(0), "restored, it pulls");
    b.assert_verify_clean();
    assert_ne!(test_key(), crate::common::key_b64(0x11));
}

#[test]
fn no_canary_from_contents_names_prompts_or_history_in_any_object_of_the_bucket() {
    let Some(garage) = garage::start() else { return };
    let canary = unique("CanaryRemote");
    let prefix = unique("canary/");
    let a = connected(&garage, &prefix);
    let session = format!("s-{canary}");
    turn(
        &a,
        &session,
        &format!("prompt {canary}"),
        &[
            (&format!("dir-{canary}/file-{canary}.txt"), Some(&format!("content {canary}\n"))),
            ("plain.txt", Some(&canary)),
        ],
    );
    a.ok(&["--session", &session, "push", "team"], None);
    let objects = garage.objects(&prefix);
    assert!(objects.len() >= 5, "{:?}", objects.iter().map(|o| &o.0).collect::<Vec<_>>());
    let needle = canary.as_bytes();
    for (name, bytes) in &objects {
        assert!(!name.contains(&canary), "the canary is in an object name: {name}");
        assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the canary is in object {name}");
    }
    // Garage's own files (metadata and the uncompressed data blocks) hold it nowhere.
    for file in files_under(garage.storage_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the canary is in {}", file.display());
    }
}

#[test]
fn auto_push_sends_the_session_at_each_turn_end_in_the_background() {
    let Some(garage) = garage::start() else { return };
    let a = connected(&garage, &unique("auto/"));
    let settings = a.store.join("settings.toml");
    let mut text = std::fs::read_to_string(&settings).unwrap();
    text.push_str("\n[remote]\nauto-push = \"team\"\n");
    std::fs::write(&settings, text).unwrap();
    turn(&a, "auto", "one", &[("x.txt", Some("x\n"))]);
    turn(&a, "auto", "two", &[("y.txt", Some("y\n"))]);
    // An agent's session that ends without a stop (the person quit mid-turn) is pushed too.
    let prompt = crate::common::claude_event(&a, "quit", "UserPromptSubmit", serde_json::json!({ "prompt": "go" }));
    crate::common::hook(&a, "claude-code", &prompt);
    let end =
        crate::common::claude_event(&a, "quit", "SessionEnd", serde_json::json!({ "reason": "prompt_input_exit" }));
    crate::common::hook(&a, "claude-code", &end);
    // The MCP server's end_turn too: the library pushes at every turn end, whichever door
    // ended it, through the runtime the door installed.
    let mcp = crate::common::mcp_client_available().then(|| {
        let got = a.mcp_calls(&[
            ("begin_turn", serde_json::json!({ "prompt": "by mcp", "new": true })),
            ("end_turn", serde_json::json!({})),
        ]);
        let ended = &got[2];
        (ended["sessionId"].as_str().unwrap().to_string(), ended["index"].as_u64().unwrap())
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = a.json(&["session", "list", "--remote", "team"]);
        let sessions = listed["sessions"].as_array().cloned().unwrap_or_default();
        let turns_of = |id: &str| sessions.iter().find(|s| s["id"] == id).and_then(|s| s["turns"].as_u64());
        let mcp_pushed = mcp.as_ref().is_none_or(|(id, index)| turns_of(id).is_some_and(|t| t >= *index));
        if turns_of("auto") == Some(2) && turns_of("quit").is_some_and(|t| t >= 1) && mcp_pushed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no auto-push arrived: {listed:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Refused at `remote add`, before any server is asked: no S3 server needed.
#[test]
fn credentials_in_the_endpoint_or_bucket_url_are_refused_and_never_listed() {
    let env = Env::new();
    env.ok(&["init"], None);
    let password = "hunter2-S3cret";
    for args in [
        vec!["remote", "add", "team", "s3://bucket/agents", "--endpoint", "http://minio:hunter2-S3cret@127.0.0.1:9000"],
        vec!["remote", "add", "team", "s3://bucket/agents", "--endpoint", "https://hunter2-S3cret@r2.example.com"],
        vec!["remote", "add", "team", "s3://AKIAEXAMPLE:hunter2-S3cret@bucket/agents"],
    ] {
        let refused = env.fail(&args, None);
        assert_eq!(refused.code, "invalid-argument", "{args:?}: {}", refused.message);
        assert!(refused.message.contains("may not hold credentials"), "{}", refused.message);
        assert!(refused.message.contains("AWS_SECRET_ACCESS_KEY"), "says where credentials go: {}", refused.message);
        assert!(!refused.message.contains(password), "the refusal repeats no secret: {}", refused.message);
        let out = env.run(&args, None);
        assert!(!String::from_utf8_lossy(&out.stderr).contains(password), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let listed = env.ok(&["remote", "list"], None);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(!listed.contains(password), "{listed}");
    assert_eq!(listed, "no remotes\n");
    assert_eq!(env.json(&["remote", "list"])["remotes"], serde_json::json!([]));
}
