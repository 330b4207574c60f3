//! The files a patch in the `apply_patch` format names (Codex's edit tool, and opencode's
//! for the models that use it): `*** Add File: P`, `*** Delete File: P`,
//! `*** Update File: P`, and `*** Move to: Q` after an update (a rename touches both).
//!
//! Invariants: every path is named once, in the order the patch names them; lines inside
//! a hunk are never taken for markers (they begin with `+`, `-`, ` ` or `@@`).

use std::path::PathBuf;

const MARKERS: [&str; 4] = ["*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "];

/// The paths `patch` adds, deletes, updates or moves to, as written (relative to the
/// agent's directory, or absolute).
pub fn paths(patch: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in patch.lines().map(str::trim) {
        let Some(path) = MARKERS.iter().find_map(|m| line.strip_prefix(m)) else { continue };
        let path = PathBuf::from(path.trim());
        if !path.as_os_str().is_empty() && !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_once_in_order_and_hunk_lines_are_not_markers() {
        // The shape of Codex's own fixture (codex-rs/apply-patch/tests/fixtures/scenarios/
        // 002_multiple_operations/patch.txt), with a rename and a line that only looks
        // like a marker inside a hunk.
        let patch = "*** Begin Patch\n*** Add File: nested/new.txt\n+created\n*** Delete File: delete.txt\n\
                     *** Update File: modify.txt\n*** Move to: renamed.txt\n@@\n-line2\n+*** Add File: not-a-file\n\
                     *** Update File: modify.txt\n@@\n-a\n+b\n*** End Patch\n";
        let want: Vec<PathBuf> =
            ["nested/new.txt", "delete.txt", "modify.txt", "renamed.txt"].map(PathBuf::from).into();
        assert_eq!(paths(patch), want);
    }

    #[test]
    fn a_heredoc_wrapper_and_indentation_change_nothing() {
        let patch = "<<'EOF'\n  *** Begin Patch\n  *** Update File: src/a.rs\n@@\n-x\n+y\n*** End Patch\nEOF";
        assert_eq!(paths(patch), vec![PathBuf::from("src/a.rs")]);
    }
}
