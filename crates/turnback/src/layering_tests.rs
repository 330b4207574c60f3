//! The architecture, checked: the library's layers import only downward, no module imports
//! itself back through others, and every table of the store is touched only by its owner.
//!
//! The checks read the source files (everything under `src/` but the unit-test modules at
//! the bottom of files, and this file) and look at three kinds of references: `crate::…`
//! paths, `super::…` paths, and `use child::…` lines naming a module's own submodule.
//! Re-exports (`pub use`, `pub(crate) use`) are not uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may use modules of its own layer or of layers
/// before it in this list.
const LAYERS: &[&str] =
    &["base", "error", "fs", "storage", "checkpoint", "snapshot", "session", "undo", "api", "agent"];

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

/// Every module `m` refers to (other than itself), with the line that does.
fn references(m: &Module, known: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // `super` is the parent module, for a folder's `mod.rs` and a plain file alike.
    let super_of = m.path.rsplit_once("::").map(|(p, _)| p.to_string()).unwrap_or_default();
    for line in m.code.lines() {
        let t = line.trim_start();
        if t.starts_with("pub use") || t.starts_with("pub(crate) use") || t.starts_with("pub(super) use") {
            continue;
        }
        let mut targets = Vec::new();
        for (i, _) in line.match_indices("crate::") {
            if i > 0 && line.as_bytes()[i - 1].is_ascii_alphanumeric() {
                continue;
            }
            let rest: String =
                line[i + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            targets.push(rest);
        }
        for (i, _) in line.match_indices("super::") {
            if i > 0 && (line.as_bytes()[i - 1].is_ascii_alphanumeric() || line.as_bytes()[i - 1] == b':') {
                continue;
            }
            let rest: String =
                line[i + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            let base = if super_of.is_empty() { rest } else { format!("{super_of}::{rest}") };
            targets.push(base);
        }
        if let Some(used) = t.strip_prefix("use ") {
            let first = used.split("::").next().unwrap_or("");
            let child = format!("{}::{first}", m.path);
            if known.contains(&child) {
                targets.push(format!("{}::{}", m.path, used.trim_end_matches(';')));
            }
        }
        for target in targets {
            if let Some(module) = resolve(known, target.trim_end_matches("::")) {
                if *module != m.path {
                    out.entry(module.clone()).or_insert_with(|| line.trim().to_string());
                }
            } else if let Some(first) = target.split("::").next()
                && first.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && !["Error", "ErrorCode", "Result"].contains(&first)
            {
                // A root re-export used from inside the library hides the real layer.
                out.insert(format!("<root {first}>"), line.trim().to_string());
            }
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
        .map(|m| (m.path.clone(), references(m, &known).into_keys().filter(|t| !t.starts_with('<')).collect()))
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

#[test]
fn every_table_is_touched_only_by_its_owner() {
    use crate::storage::schema::TABLES;
    let modules = modules();
    let consts: BTreeMap<String, &crate::storage::schema::Table> = {
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
    };
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
