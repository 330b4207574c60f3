//! Rendering tests: the screens drawn on ratatui's test backend at 80×24 and 160×48, on a
//! real store with two agent turns and a person's edit after them.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use turnback::{BeginRequest, KeyConfig, Mutation, Options, Turnback};

use super::state::{App, Ask, Screen};

struct Fixture {
    _dir: tempfile::TempDir,
    options: Options,
    ws: std::path::PathBuf,
}

/// Turn 1 creates `notes.txt`, turn 2 creates `plan.md` and edits `notes.txt`; then a
/// person edits `notes.txt` by hand.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("project");
    std::fs::create_dir(&ws).unwrap();
    let options = Options {
        store: Some(dir.path().join("store")),
        keys: KeyConfig::with_key(turnback::new_master_key().unwrap()),
        create: true,
        ..Options::new(&ws)
    };
    let tb = Turnback::open(&options).unwrap();
    let begin = |p: &str| BeginRequest { prompt: Some(p.into()), ..Default::default() };
    tb.begin_turn(&begin("write the notes"), None).unwrap();
    tb.mutate(Mutation::Create { path: "notes.txt".into(), content: b"one\n".to_vec() }, false).unwrap();
    tb.end_turn(None).unwrap();
    tb.begin_turn(&begin("add a plan"), None).unwrap();
    tb.mutate(Mutation::Create { path: "plan.md".into(), content: b"# plan\nstep\n".to_vec() }, false).unwrap();
    tb.end_turn(None).unwrap();
    std::fs::write(ws.join("notes.txt"), "one\nadded by hand\n").unwrap();
    Fixture { _dir: dir, options: Options { create: false, ..options }, ws }
}

/// One frame once every diff asked for is back.
fn draw(app: &mut App, width: u16, height: u16) -> String {
    app.diffs.settle();
    draw_now(app, width, height)
}

/// One frame as the screen would draw it now, whatever is still computing.
fn draw_now(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    super::draw(&mut terminal, app).unwrap();
    let buffer = terminal.backend().buffer();
    (0..height)
        .map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect::<String>().trim_end().to_string() + "\n")
        .collect()
}

#[test]
fn the_timeline_lists_sessions_and_turns_with_the_newest_chosen() {
    let f = fixture();
    let mut app = App::open(&f.options).unwrap();
    app.open_turn();
    app.back();
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains(" Sessions "), "{screen}");
        assert!(screen.contains("1 ") && screen.contains("write the notes"), "{screen}");
        assert!(screen.lines().any(|l| l.starts_with("│> ") && l.contains("add a plan")), "newest chosen:\n{screen}");
        assert!(screen.contains("1 file +2 -0"), "its stat once known:\n{screen}");
        assert!(screen.contains("1 file +2 -0  1 checkpoint"), "its checkpoint count:\n{screen}");
        assert!(screen.contains("+2 -0  plan.md"), "{screen}");
        assert!(screen.contains("q quit"), "{screen}");
    }
}

fn press(app: &mut App, code: crossterm::event::KeyCode) {
    let key = crossterm::event::KeyEvent::new(code, crossterm::event::KeyModifiers::NONE);
    super::keys::handle(app, &crossterm::event::Event::Key(key));
}

/// At 60×20 the help does not fit: it says how to close it whatever the size, its keys
/// scroll it (not the timeline below it) down to its last line, and esc closes it.
#[test]
fn the_help_scrolls_to_its_last_line_and_says_how_to_close_it_on_a_small_screen() {
    use crossterm::event::KeyCode;
    let f = fixture();
    let mut app = App::open(&f.options).unwrap();
    let selected = app.selected;
    press(&mut app, KeyCode::Char('?'));
    let last = "Set NO_COLOR for no colour.";
    let screen = draw(&mut app, 60, 20);
    assert!(screen.contains("Keys · esc/? close"), "{screen}");
    assert!(screen.contains("↓ more"), "says there is more:\n{screen}");
    assert!(!screen.contains(last), "the last line does not fit:\n{screen}");
    press(&mut app, KeyCode::PageDown);
    let screen = draw(&mut app, 60, 20);
    assert!(screen.contains("? this help · q quit") && screen.contains(last), "scrolled to the end:\n{screen}");
    assert!(screen.contains("Keys · esc/? close") && screen.contains("↑ more"), "{screen}");
    for _ in 0..3 {
        press(&mut app, KeyCode::Char('k'));
    }
    press(&mut app, KeyCode::Char('j'));
    let screen = draw(&mut app, 60, 20);
    assert!(!screen.contains(last) && screen.contains("↑↓ more"), "two lines up:\n{screen}");
    assert_eq!(app.selected, selected, "the keys scrolled the help, not the timeline");
    let screen = draw(&mut app, 40, 8);
    assert!(screen.lines().last().unwrap().starts_with("esc/? close"), "the footer says it too:\n{screen}");
    let screen = draw(&mut app, 24, 4);
    assert!(screen.contains("Keys · esc/? close"), "too small for a footer, the title says it:\n{screen}");
    press(&mut app, KeyCode::Esc);
    assert!(!app.help && !app.quit);
    assert!(!draw(&mut app, 60, 20).contains("esc/? close"));
}

#[test]
fn the_turn_view_shows_the_diff_with_markers_and_the_conversation() {
    let f = fixture();
    let mut app = App::open(&f.options).unwrap();
    app.color = false;
    app.open_turn();
    assert!(matches!(app.screen, Screen::Turn));
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains("Turn 2: start → end"), "{screen}");
        assert!(screen.contains("+++ b/plan.md") && screen.contains("+# plan"), "{screen}");
        assert!(screen.contains("you:") && screen.contains("add a plan"), "{screen}");
    }
}

#[test]
fn the_rewind_preview_shows_a_persons_edit_left_alone_and_u_undoes_the_apply() {
    let f = fixture();
    let mut app = App::open(&f.options).unwrap();
    app.move_by(-1);
    app.preview_rewind();
    assert!(matches!(app.screen, Screen::Rewind(_)));
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains("Rewind to the start of turn 1"), "{screen}");
        assert!(screen.contains("delete       plan.md"), "{screen}");
        assert!(screen.contains("! leave alone notes.txt (a person's edit"), "{screen}");
        assert!(screen.contains("y apply this plan"), "{screen}");
    }
    app.confirm();
    assert!(!f.ws.join("plan.md").exists(), "the agent's file is gone");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("notes.txt")).unwrap(),
        "one\nadded by hand\n",
        "the person's edit stays"
    );
    assert!(draw(&mut app, 80, 24).contains("press u to undo it"));
    app.undo();
    assert_eq!(std::fs::read_to_string(f.ws.join("plan.md")).unwrap(), "# plan\nstep\n", "the undo puts it back");
    assert_eq!(app.applied.len(), 2);
}

#[test]
fn fork_from_the_screen_then_compare_shows_where_the_fork_went_its_own_way() {
    let f = fixture();
    let mut app = App::open(&f.options).unwrap();
    app.move_by(-1);
    let into = f.ws.with_file_name("project-try-b");
    app.ask(Ask::ForkInto);
    app.asking.as_mut().unwrap().1 = into.display().to_string();
    app.answer();
    let fork = app.last_fork.clone().expect("forked");
    assert_eq!(std::fs::read_to_string(into.join("notes.txt")).unwrap(), "one\n", "the files right after turn 1");
    assert!(draw(&mut app, 80, 24).contains("c compares with it"));

    // The fork's own turn 2, in its own working tree.
    let tb = Turnback::open(&Options {
        session: Some(fork.clone()),
        ..Options { workspace: into.clone(), ..f.options.clone() }
    })
    .unwrap();
    tb.begin_turn(&BeginRequest { prompt: Some("a different plan".into()), ..Default::default() }, None).unwrap();
    tb.mutate(Mutation::Create { path: "plan.md".into(), content: b"# other\n".to_vec() }, false).unwrap();
    tb.end_turn(None).unwrap();

    app.ask(Ask::CompareWith);
    assert_eq!(app.asking.as_ref().unwrap().1, fork, "the fork just made is offered");
    app.answer();
    assert!(matches!(app.screen, Screen::Compare(_)), "{}", app.status);
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains("fork point: turn 1 write the notes"), "{screen}");
        assert!(screen.contains("differ in 1 file(s)") && screen.contains("+1 -2  plan.md"), "{screen}");
    }
}

/// A third turn that creates `a.txt` and `b.txt`, then a person's edit of `a.txt`: rolling
/// the turn back conflicts on `a.txt` and takes `b.txt` back.
fn with_a_conflicting_turn(f: &Fixture) {
    let tb = Turnback::open(&f.options).unwrap();
    tb.begin_turn(&BeginRequest { prompt: Some("two files".into()), ..Default::default() }, None).unwrap();
    tb.mutate(Mutation::Create { path: "a.txt".into(), content: b"agent a\n".to_vec() }, false).unwrap();
    tb.mutate(Mutation::Create { path: "b.txt".into(), content: b"agent b\n".to_vec() }, false).unwrap();
    tb.end_turn(None).unwrap();
    std::fs::write(f.ws.join("a.txt"), "agent a\nand the person's line\n").unwrap();
}

#[test]
fn a_rollback_preview_offers_the_safe_choices_and_a_chosen_skip_leaves_the_path_alone() {
    let f = fixture();
    with_a_conflicting_turn(&f);
    let mut app = App::open(&f.options).unwrap();
    app.preview_rollback();
    let Screen::Rollback(view) = &app.screen else { panic!("no rollback preview: {}", app.status) };
    let conflict = view.analysis.targets.iter().position(|t| t.path.display() == "a.txt").unwrap();
    app.move_cursor(conflict as i64);
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains("Roll back turn 3's edits"), "{screen}");
        assert!(screen.contains("> ! conflict    a.txt"), "the conflict under the cursor:\n{screen}");
        assert!(screen.contains("take back    b.txt"), "{screen}");
        assert!(screen.contains("s skip"), "{screen}");
    }
    app.choose(turnback::Choice::Skip);
    let Screen::Rollback(view) = &app.screen else { panic!("{}", app.status) };
    assert_eq!(view.choices, [(turnback::RelPath::new("a.txt").unwrap(), turnback::Choice::Skip)]);
    let screen = draw(&mut app, 160, 48);
    assert!(screen.contains("a.txt") && screen.contains("[your choice: skip]"), "{screen}");
    app.confirm();
    assert!(matches!(app.screen, Screen::Done(_)), "{}", app.status);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("a.txt")).unwrap(),
        "agent a\nand the person's line\n",
        "the skipped path is left alone"
    );
    assert!(!f.ws.join("b.txt").exists(), "the rest of the turn is taken back");
}

#[test]
fn one_checkpoint_of_a_turn_is_chosen_from_a_list_previewed_and_rolled_back() {
    let f = fixture();
    with_a_conflicting_turn(&f);
    let mut app = App::open(&f.options).unwrap();
    app.diffs.settle();
    app.pick_checkpoint();
    let Screen::Checkpoints(pick) = &app.screen else { panic!("no list: {}", app.status) };
    assert_eq!(pick.checkpoints.len(), 2);
    let screen = draw(&mut app, 80, 24);
    assert!(screen.contains("Checkpoints of turn 3") && screen.contains("b.txt"), "{screen}");
    app.move_cursor(1);
    app.preview_picked();
    let Screen::Rollback(view) = &app.screen else { panic!("{}", app.status) };
    assert_eq!(view.analysis.targets.len(), 1, "only that checkpoint");
    assert_eq!(view.analysis.targets[0].path.display(), "b.txt");
    assert!(draw(&mut app, 80, 24).contains("Roll back checkpoint"));
    app.confirm();
    assert!(!f.ws.join("b.txt").exists());
    assert!(f.ws.join("a.txt").exists(), "the other checkpoint of the turn is not touched");
    app.undo();
    assert_eq!(std::fs::read_to_string(f.ws.join("b.txt")).unwrap(), "agent b\n", "u puts it back");
}

#[test]
fn the_screen_draws_while_a_diff_is_still_computing_and_shows_it_once_back() {
    let f = fixture();
    let mut app = App::open_with(&f.options, super::diffs::Diffs::start_held(&f.options)).unwrap();
    app.open_turn();
    let screen = draw_now(&mut app, 80, 24);
    assert!(screen.contains("Turn 2: start → end") && screen.contains("computing…"), "{screen}");
    app.back();
    let screen = draw_now(&mut app, 80, 24);
    assert!(screen.contains("computing its diff…"), "{screen}");
    app.diffs.release();
    let screen = draw(&mut app, 80, 24);
    assert!(screen.contains("1 file +2 -0"), "{screen}");
    assert!(screen.contains("+2 -0  plan.md"), "{screen}");
}

/// Opening and switching turns on a workspace of 200 turns over 3000 files, measured
/// (`cargo test -p turnback-cli --release --bin turnback ui_bench -- --ignored --nocapture`;
/// the numbers are in docs/benchmarks.md).
#[test]
#[ignore = "a measurement, not a check: run it by hand"]
fn ui_bench_open_and_switch_on_200_turns() {
    // TURNBACK_UI_BENCH_DIR keeps the workspace and store between runs (built once).
    let kept = std::env::var_os("TURNBACK_UI_BENCH_DIR").map(std::path::PathBuf::from);
    let temp = tempfile::tempdir().unwrap();
    let dir = kept.clone().unwrap_or_else(|| temp.path().to_path_buf());
    // TURNBACK_UI_BENCH_TREE: a real tree to work in (the Linux source from
    // ../shared/bench/get-linux-tree.sh), its first-snapshot limits raised to take it whole.
    let tree = std::env::var_os("TURNBACK_UI_BENCH_TREE").map(std::path::PathBuf::from);
    let ws = tree.clone().unwrap_or_else(|| dir.join("project"));
    let key_file = dir.join("key");
    let reuse = kept.is_some() && key_file.exists();
    let key = if reuse { std::fs::read_to_string(&key_file).unwrap() } else { turnback::new_master_key().unwrap() };
    let options = Options {
        store: Some(dir.join("store")),
        keys: KeyConfig::with_key(key.clone()),
        create: true,
        ..Options::new(&ws)
    };
    if !reuse {
        if tree.is_some() {
            std::fs::create_dir_all(dir.join("store")).unwrap();
            let settings = "[snapshots]\nfirst-max-size = \"8 GiB\"\nfirst-max-files = 1000000\n";
            std::fs::write(dir.join("store/settings.toml"), settings).unwrap();
        }
        build_200_turns(&ws, &options);
        if kept.is_some() {
            std::fs::write(&key_file, &key).unwrap();
        }
    }
    let options = Options { create: false, ..options };
    let phases = std::time::Instant::now();
    let tb = Turnback::open(&options).unwrap();
    let t_open = phases.elapsed();
    tb.turn_records().unwrap();
    let t_turns = phases.elapsed();
    tb.sessions().unwrap();
    tb.session_info(None).unwrap();
    let t_sessions = phases.elapsed();
    tb.checkpoints(None, false).unwrap();
    let t_checkpoints = phases.elapsed();
    println!(
        "facade calls, cumulative: open {t_open:?}, turns {t_turns:?}, sessions {t_sessions:?}, checkpoints {t_checkpoints:?}"
    );

    let opened = std::time::Instant::now();
    let mut app = App::open(&options).unwrap();
    draw_now(&mut app, 160, 48);
    let open = opened.elapsed();
    app.diffs.settle();
    let first_diffs = opened.elapsed();

    let mut switches = Vec::new();
    let mut arrivals = Vec::new();
    for _ in 0..50 {
        let at = std::time::Instant::now();
        app.move_by(-1);
        draw_now(&mut app, 160, 48);
        switches.push(at.elapsed());
        app.diffs.settle();
        arrivals.push(at.elapsed());
    }
    switches.sort();
    drop(temp);
    arrivals.sort();
    println!(
        "open (first frame): {open:?}; the {EAGER} newest diffs back after {first_diffs:?}",
        EAGER = super::state::EAGER_DIFFS
    );
    println!(
        "switch to an older turn (frame drawn): median {:?}, max {:?}; its diff back: median {:?}, max {:?}",
        switches[25], switches[49], arrivals[25], arrivals[49]
    );
}

/// 3000 files in 30 directories, then 200 turns that each rewrite three of them.
fn build_200_turns(ws: &std::path::Path, options: &Options) {
    for d in 0..30 {
        std::fs::create_dir_all(ws.join(format!("dir{d}"))).unwrap();
        for i in 0..100 {
            std::fs::write(ws.join(format!("dir{d}/file{i}.rs")), format!("fn f{i}() {{}}\n// {d}\n").repeat(20))
                .unwrap();
        }
    }
    let tb = Turnback::open(options).unwrap();
    let built = std::time::Instant::now();
    for t in 0..200 {
        tb.begin_turn(&BeginRequest { prompt: Some(format!("turn {t}")), ..Default::default() }, None).unwrap();
        for k in 0..3 {
            let path = format!("dir{}/file{}.rs", (t * 7 + k) % 30, (t * 13 + k) % 100);
            let content = format!("fn changed_by_turn_{t}() {{}}\n").into_bytes();
            tb.mutate(Mutation::Write { path: path.into(), content }, false).unwrap();
        }
        tb.end_turn(None).unwrap();
    }
    println!("built 200 turns over 3000 files in {:?}", built.elapsed());
}

/// Turn 3: an agent's shell command creates `out.txt` and rewrites `notes.txt`.
fn with_a_shell_command(f: &Fixture) {
    use turnback::{AgentEvent, ToolCall, ToolEffect};
    let tb = Turnback::open(&f.options).unwrap();
    tb.begin_turn(&BeginRequest { prompt: Some("build it".into()), ..Default::default() }, None).unwrap();
    let call = ToolCall {
        id: Some("toolu_make".into()),
        name: "Bash".into(),
        effect: ToolEffect::RunsShell,
        command: Some("make all".into()),
        ..ToolCall::default()
    };
    tb.record_event(&AgentEvent::ToolStarted { call: call.clone() }, None).unwrap();
    std::fs::write(f.ws.join("out.txt"), "built\n").unwrap();
    std::fs::write(f.ws.join("notes.txt"), "rewritten by make\n").unwrap();
    let done = tb.record_event(&AgentEvent::ToolFinished { call }, None).unwrap();
    assert!(done.checkpoint.is_some(), "the command is a checkpoint");
    tb.end_turn(None).unwrap();
}

#[test]
fn a_shell_command_shows_in_its_turn_with_its_files_and_is_rolled_back_and_undone_from_the_screen() {
    use crossterm::event::KeyCode;
    let f = fixture();
    with_a_shell_command(&f);
    let mut app = App::open(&f.options).unwrap();
    app.open_turn();
    for (w, h) in [(80, 24), (160, 48)] {
        let screen = draw(&mut app, w, h);
        assert!(screen.contains("Checkpoints (1) · e roll one back"), "{screen}");
        assert!(screen.contains("shell $ make all  (2 files: notes.txt, out.txt)"), "{screen}");
    }
    press(&mut app, KeyCode::Char('e'));
    let Screen::Checkpoints(pick) = &app.screen else { panic!("no list: {}", app.status) };
    assert_eq!(pick.checkpoints.len(), 1);
    assert!(draw(&mut app, 160, 48).contains("> "), "the command is chosen");
    press(&mut app, KeyCode::Enter);
    let Screen::Rollback(view) = &app.screen else { panic!("no preview: {}", app.status) };
    let paths: Vec<String> = view.analysis.targets.iter().map(|t| t.path.display()).collect();
    assert_eq!(paths, ["notes.txt", "out.txt"], "exactly the command's files");
    let screen = draw(&mut app, 160, 48);
    assert!(screen.contains("take back    notes.txt") && screen.contains("take back    out.txt"), "{screen}");
    press(&mut app, KeyCode::Char('y'));
    assert!(matches!(app.screen, Screen::Done(_)), "{}", app.status);
    assert!(!f.ws.join("out.txt").exists(), "the file it created goes");
    assert_eq!(std::fs::read_to_string(f.ws.join("notes.txt")).unwrap(), "one\nadded by hand\n", "and its edit");
    press(&mut app, KeyCode::Char('u'));
    assert_eq!(std::fs::read_to_string(f.ws.join("out.txt")).unwrap(), "built\n", "u brings its results back");
    assert_eq!(std::fs::read_to_string(f.ws.join("notes.txt")).unwrap(), "rewritten by make\n");
}
