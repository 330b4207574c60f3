//! The architecture, checked: the library's layers import only downward, no module imports
//! itself back through others, every table of the store is touched only by its owner, and
//! the doors (the command line with its hooks, the MCP server) reach the work around a turn
//! only through the runtime they install.
//!
//! The checks read the source files (everything under `src/` but the unit-test modules at
//! the bottom of files, and this file) and look at every `use` declaration — re-exports
//! too, since re-exporting is depending — with its use-tree expanded (`crate::{a::X,
//! b::{self, c::Y}}`, across lines, `super::super::`, `self::`, a module's own
//! submodules), and at every `crate::…`, `super::…` and `self::…` path written inline.
//! `checks_see_what_they_must` proves the reading on lines that must fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may use modules of its own layer or of layers
/// before it in this list.
const LAYERS: &[&str] =
    &["base", "error", "fs", "watch", "storage", "checkpoint", "snapshot", "session", "undo", "remote", "api", "agent"];

/// One library source file as a module: `checkpoint/mod.rs` is `checkpoint`,
/// `checkpoint/artifact.rs` is `checkpoint::artifact`.
#[derive(Debug)]
struct Module {
    path: String,
    file: String,
    code: String,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn modules() -> Vec<Module> {
    let root = src_dir();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let file = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            if file == "lib.rs" || file == "layering_tests.rs" {
                continue;
            }
            let module = file.trim_end_matches(".rs").trim_end_matches("/mod").replace('/', "::");
            let text = std::fs::read_to_string(&path).unwrap();
            out.push(Module { path: module, file, code: without_tests(&text) });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn without_tests(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The longest known module path that `path` (`a::b::c::Item`) starts with.
fn resolve<'m>(known: &'m BTreeSet<String>, path: &str) -> Option<&'m String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len()).rev().find_map(|n| known.get(&parts[..n].join("::")))
}

/// The absolute path (from the crate root, without `crate::`) of `path` written in module
/// `module`; `None` for a path into another crate.
fn absolute(module: &str, path: &str, known: &BTreeSet<String>) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if module.is_empty() { Vec::new() } else { module.split("::").collect() };
    match segments.first().copied() {
        Some("crate") => {
            base.clear();
            segments.remove(0);
        }
        Some("self") => {
            segments.remove(0);
        }
        Some("super") => {
            while segments.first() == Some(&"super") {
                segments.remove(0);
                base.pop()?;
            }
        }
        // A module's own submodule, named bare.
        Some(first) if known.contains(&format!("{module}::{first}")) => {}
        _ => return None,
    }
    base.extend(segments);
    Some(base.join("::"))
}

/// A use-tree (`a::{b, c::{self, D}}`, aliases allowed) as the paths it names.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        return vec![path.split_whitespace().collect()];
    };
    let prefix: String = tree[..open].split_whitespace().collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut from) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[from..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(expand)
        .map(|p| if p == "self" { prefix.trim_end_matches("::").to_string() } else { format!("{prefix}{p}") })
        .collect()
}

/// The `use` declarations of `code` (re-exports included), each with the paths it names;
/// and the code left without them.
fn uses(code: &str) -> (Vec<(String, Vec<String>)>, String) {
    let mut out = Vec::new();
    let mut rest = String::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let after_vis = t.strip_prefix("pub").map_or(t, |r| {
            let r = r.trim_start();
            if r.starts_with('(') { r.split_once(')').map_or(r, |(_, x)| x).trim_start() } else { r }
        });
        let Some(tree) = after_vis.strip_prefix("use ") else {
            rest.push_str(line);
            rest.push('\n');
            continue;
        };
        let mut statement = tree.to_string();
        while !statement.contains(';') {
            let Some(next) = lines.next() else { break };
            statement.push(' ');
            statement.push_str(next.trim());
        }
        let tree = statement.split(';').next().unwrap_or("");
        let visibility = &t[..t.len() - after_vis.len()];
        out.push((format!("{visibility}use {}", tree.split_whitespace().collect::<Vec<_>>().join(" ")), expand(tree)));
    }
    (out, rest)
}

/// Every path written inline (`crate::…`, `super::…`, `self::…`) in `code`.
fn inline_paths(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in code.lines() {
        for start in ["crate::", "super::", "self::"] {
            for (i, _) in line.match_indices(start) {
                let before = line[..i].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let path: String =
                    line[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
                out.push((path, line.trim().to_string()));
            }
        }
    }
    out
}

/// Whether `line` is a re-export (`pub use`, `pub(crate) use`, …).
fn is_reexport(line: &str) -> bool {
    line.trim_start().starts_with("pub")
}

/// Every module `m` refers to (other than itself), with the line that does.
fn references(m: &Module, known: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let (declarations, rest) = uses(&m.code);
    let named = declarations.into_iter().flat_map(|(line, paths)| paths.into_iter().map(move |p| (p, line.clone())));
    for (path, line) in named.chain(inline_paths(&rest)) {
        let Some(target) = absolute(&m.path, path.trim_end_matches("::"), known) else { continue };
        if let Some(module) = resolve(known, &target) {
            if *module != m.path {
                // A plain use is kept over a re-export of the same module: it is the edge.
                let kept = out.entry(module.clone()).or_insert_with(|| line.clone());
                if is_reexport(kept) && !is_reexport(&line) {
                    *kept = line;
                }
            }
        } else if let Some(first) = target.split("::").next()
            && first.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && !["Error", "ErrorCode", "Result"].contains(&first)
        {
            // A root re-export used from inside the library hides the real layer.
            out.insert(format!("<root {first}>"), line);
        }
    }
    out
}

fn layer(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or(module);
    LAYERS.iter().position(|l| *l == top).unwrap_or_else(|| panic!("module {module} is in no layer"))
}

#[test]
fn layers_import_only_downward() {
    let modules = modules();
    let known: BTreeSet<String> = modules.iter().map(|m| m.path.clone()).collect();
    let mut wrong = Vec::new();
    for m in &modules {
        for (target, line) in references(m, &known) {
            if target.starts_with("<root") {
                wrong.push(format!("{} uses {target} (name the module): {line}", m.file));
            } else if layer(&target) > layer(&m.path) {
                wrong.push(format!("{} ({}) imports up into {target}: {line}", m.file, LAYERS[layer(&m.path)]));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that go up a layer:\n{}", wrong.join("\n"));
}

#[test]
fn no_module_imports_itself_back() {
    let modules = modules();
    let known: BTreeSet<String> = modules.iter().map(|m| m.path.clone()).collect();
    let graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| {
            // A module re-exporting its own submodules' items is their face, not their user:
            // not an edge (the submodules may use the module's own items).
            let inside = format!("{}::", m.path);
            let edges = references(m, &known)
                .into_iter()
                .filter(|(t, line)| {
                    let face = is_reexport(line) && t.starts_with(&inside);
                    !t.starts_with('<') && !face
                })
                .map(|(t, _)| t)
                .collect();
            (m.path.clone(), edges)
        })
        .collect();
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            cycles.push(cycle.join(" -> "));
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, cycles);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// Every table constant of `storage/schema.rs` (`CHECKPOINTS`, …) with its table.
fn table_consts() -> BTreeMap<String, &'static crate::storage::schema::Table> {
    use crate::storage::schema::TABLES;
    let text = std::fs::read_to_string(src_dir().join("storage/schema.rs")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some((ident, rest)) = t.split_once(" = \"")
            && ident.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        {
            let name = rest.split('"').next().unwrap();
            let table = TABLES.iter().find(|t| t.name == name).expect("listed");
            out.insert(ident.to_string(), table);
        }
    }
    out
}

/// The writes in `code` that go straight to a digested table (`txn.put(schema::X, …)`,
/// `delete`, `put_if_absent`) instead of through `digest::put` / `digest::delete`.
fn direct_digested_writes(code: &str, digested: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("schema::") {
        let ident: String = code[i + 8..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !digested.contains(&ident) {
            continue;
        }
        let before = code[..i].trim_end();
        let Some(call) = before.strip_suffix('(') else { continue };
        let call = call.trim_end();
        if [".put", ".delete", ".put_if_absent"].iter().any(|w| call.ends_with(w)) {
            let line = code[..i].lines().count();
            out.push(format!("line {line}: a direct write to schema::{ident}"));
        }
    }
    out
}

/// Whether `code` walks the table list and writes a table named by a variable.
fn writes_tables_chosen_at_run_time(code: &str) -> bool {
    let walks = code.contains("schema::sealed()") || code.contains("schema::TABLES");
    let writes = [".put(", ".delete(", ".put_if_absent("]
        .iter()
        .any(|w| code.match_indices(w).any(|(i, _)| !code[i + w.len()..].trim_start().starts_with("schema::")));
    walks && writes
}

#[test]
fn digested_tables_are_written_only_through_digest() {
    let digested: BTreeSet<String> =
        table_consts().into_iter().filter(|(_, t)| t.digested).map(|(ident, _)| ident).collect();
    assert!(!digested.is_empty());
    let mut wrong = Vec::new();
    for m in modules().iter().filter(|m| m.file != "storage/digest.rs") {
        wrong.extend(direct_digested_writes(&m.code, &digested).into_iter().map(|w| format!("{}: {w}", m.file)));
    }
    // A table chosen at run time (`schema::sealed()`, `schema::TABLES`) may be a digested
    // one: a module writing such a table must route digested tables through digest.
    for m in modules().iter().filter(|m| m.file != "storage/digest.rs") {
        if writes_tables_chosen_at_run_time(&m.code) && !m.code.contains("schema::is_digested") {
            wrong.push(format!("{}: writes tables chosen at run time without schema::is_digested", m.file));
        }
    }
    assert!(wrong.is_empty(), "digested tables written around storage/digest.rs:\n{}", wrong.join("\n"));
    assert!(writes_tables_chosen_at_run_time("for ns in schema::sealed() {\n    txn.put(ns, &k, &v)?;\n}"));
    assert!(!writes_tables_chosen_at_run_time("for ns in schema::sealed() {\n    kv.scan(ns, b\"\", f)?;\n}"));
    // The check sees a direct write written each of these ways, and lets digest's through.
    let one: BTreeSet<String> = ["HISTORY_TOTALS".to_string()].into();
    for code in [
        "txn.put(schema::HISTORY_TOTALS, k, v)?;",
        "txn.delete(\n    schema::HISTORY_TOTALS,\n    k,\n)?;",
        "(*txn).put_if_absent( schema::HISTORY_TOTALS, k, v)",
    ] {
        assert_eq!(direct_digested_writes(code, &one).len(), 1, "not seen: {code}");
    }
    assert!(direct_digested_writes("digest::put(keys, txn, schema::HISTORY_TOTALS, k, v)?;", &one).is_empty());
    assert!(direct_digested_writes("txn.get(schema::HISTORY_TOTALS, k)?;", &one).is_empty());
}

#[test]
fn every_table_is_touched_only_by_its_owner() {
    use crate::storage::schema::TABLES;
    let modules = modules();
    let consts = table_consts();
    assert_eq!(consts.len(), TABLES.len(), "every table has a constant");
    let mut wrong = Vec::new();
    for m in modules.iter().filter(|m| m.file != "storage/schema.rs") {
        for (i, _) in m.code.match_indices("schema::") {
            let ident: String =
                m.code[i + 8..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if ident.is_empty() || ident == "TABLES" || !ident.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                continue;
            }
            let Some(table) = consts.get(&ident) else {
                wrong.push(format!("{} names an unknown table schema::{ident}", m.file));
                continue;
            };
            let owned =
                if table.owner.ends_with('/') { m.file.starts_with(table.owner) } else { m.file == table.owner };
            if !owned {
                wrong.push(format!("{} touches table {:?}, owned by {}", m.file, table.name, table.owner));
            }
        }
        for line in m.code.lines().filter(|l| l.contains("use crate::storage::schema::")) {
            if consts.keys().any(|c| line.contains(c.as_str())) {
                wrong.push(format!("{} imports table names directly; name them as schema::NAME", m.file));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "tables touched by modules that do not own them:\n{}", wrong.join("\n"));
}

/// The library calls a door may make that another door's behaviour depends on, and the one
/// file of the doors each is for: the work the [`Runtime`](crate::Runtime) runs around a
/// turn is decided by the library, so a door makes these calls only where it implements the
/// runtime's part (a detached child) or a person's explicit command.
const DOOR_CALLS: &[(&str, &str, &str)] = &[
    ("take_turn_start_snapshot(", "turnback-cli/src/commands/detached.rs", "the start snapshot's child"),
    ("watch_start(", "turnback-cli/src/commands/watch.rs", "`turnback watch start`"),
    (".push(", "turnback-cli/src/commands/remote.rs", "`turnback push` (which an auto-push runs)"),
    ("with_start_snapshot(", "turnback-cli/src/runtime.rs", "the command line's runtime"),
    ("with_watcher(", "turnback-cli/src/runtime.rs", "the command line's runtime"),
    ("with_push(", "turnback-cli/src/runtime.rs", "the command line's runtime"),
];

/// Every door source file (crate-relative path, code without its unit tests).
fn door_files() -> Vec<(String, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crates directory").to_path_buf();
    let mut out = Vec::new();
    for door in ["turnback-cli/src", "turnback-mcp/src"] {
        let mut stack = vec![crates.join(door)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a door's sources") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                    let rel = path.strip_prefix(&crates).expect("under crates").to_string_lossy().into_owned();
                    out.push((rel, without_tests(&std::fs::read_to_string(&path).expect("a source file"))));
                }
            }
        }
    }
    out
}

/// The places in `code` that call `call` as the library's: for `.push(`, only a call of
/// three arguments (`Turnback::push`; a `Vec`'s takes one).
fn calls_of(code: &str, call: &str) -> usize {
    code.match_indices(call)
        .filter(|(at, _)| {
            if call != ".push(" {
                return true;
            }
            let (mut depth, mut commas) = (0i32, 0);
            for c in code[at + call.len()..].chars() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' if depth == 0 => break,
                    ')' | ']' | '}' => depth -= 1,
                    ',' if depth == 0 => commas += 1,
                    _ => {}
                }
            }
            commas >= 2
        })
        .count()
}

#[test]
fn doors_reach_the_work_around_a_turn_only_through_the_runtime() {
    let files = door_files();
    assert!(files.iter().any(|(f, _)| f.starts_with("turnback-mcp/")), "the MCP server's sources were read");
    let mut wrong = Vec::new();
    for (call, only, why) in DOOR_CALLS {
        let mut seen = 0;
        for (file, code) in &files {
            let n = calls_of(code, call);
            seen += n;
            if n > 0 && file != only {
                wrong.push(format!("{file} calls {call}…) — only {only} may ({why})"));
            }
        }
        assert!(seen > 0, "{call}…) is called nowhere: the rule names a call that is gone");
    }
    assert!(wrong.is_empty(), "a door does the runtime's work itself:\n{}", wrong.join("\n"));
}

#[test]
fn checks_see_what_they_must() {
    // A library push has three arguments; a vector's has one.
    assert_eq!(calls_of("v.push(x); tb.push(name, &which, &|d, t| bar(d, t));", ".push("), 1);
    assert_eq!(calls_of("v.push((a, b)); v.push(f(a, b, c));", ".push("), 0);
    let known: BTreeSet<String> = [
        "api",
        "session",
        "session::turn",
        "storage",
        "storage::kv",
        "undo",
        "undo::guarded",
        "undo::rollback",
        "undo::rollback::apply",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    let module = |path: &str, code: &str| Module { path: path.into(), file: format!("{path}.rs"), code: code.into() };
    let refs = |path: &str, code: &str| references(&module(path, code), &known).into_keys().collect::<Vec<_>>();
    // A use-tree across lines, with `self` and an alias.
    assert_eq!(
        refs("storage::kv", "use crate::{\n    api::Turnback as T,\n    session::{self, turn::Turn},\n};\n"),
        ["api", "session", "session::turn"]
    );
    // A re-export is a dependency.
    assert_eq!(refs("storage", "pub use crate::api::Turnback;"), ["api"]);
    assert_eq!(refs("storage", "pub(crate) use crate::api::Turnback;"), ["api"]);
    // `super::super::` is the grandparent, inline and in a use.
    assert_eq!(refs("undo::rollback::apply", "let x = super::super::guarded::apply(a);"), ["undo::guarded"]);
    assert_eq!(refs("undo::rollback::apply", "use super::super::guarded;"), ["undo::guarded"]);
    // `self::` and a bare submodule name.
    assert_eq!(refs("undo::rollback", "use self::apply::X;"), ["undo::rollback::apply"]);
    assert_eq!(refs("undo::rollback", "use apply::X;"), ["undo::rollback::apply"]);
    // Another crate's paths are not ours.
    assert!(refs("storage", "use serde::Serialize;\nlet v = std::mem::take(&mut x);").is_empty());
    // The layer check fails on an upward use written each of these ways.
    for code in ["use crate::{api::X};", "pub use crate::api::X;", "use crate::{\n    api::X,\n};"] {
        let up = refs("storage", code).into_iter().any(|t| layer(&t) > layer("storage"));
        assert!(up, "an upward import not seen: {code}");
    }
}
