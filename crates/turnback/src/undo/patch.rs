//! Safe choices' artifacts: the sanitized patch and the three-way merge.
//!
//! Invariants: a sanitized patch never contains a line that looks like a secret (it is
//! replaced by a marker) and never contains binary content (binary files are described);
//! these files are written only into the workspace, beside the file they concern, never
//! into the store (they are plaintext).

use std::sync::OnceLock;

use regex::Regex;

use crate::storage::content::ContentClass;

const REDACTED: &str = "[redacted by turnback: this line looks like a secret]";

fn secret_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new(concat!(
            r"(?i)(",
            r"(api[_-]?key|secret|token|passw(or)?d|pwd|private[_-]?key|client[_-]?secret|auth|credential|bearer)\s*[:=]",
            r"|-----BEGIN [A-Z ]*PRIVATE KEY-----",
            r"|\bAKIA[0-9A-Z]{16}\b",
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"|\bsk-[A-Za-z0-9_-]{16,}",
            r"|\bxox[abposr]-[A-Za-z0-9-]{10,}",
            r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}",
            r"|://[^/\s:@]+:[^/\s@]+@",
            r")"
        ))
        .expect("valid secret pattern")
    })
}

/// Whether `line` looks like it carries a secret.
pub(crate) fn looks_secret(line: &str) -> bool {
    secret_pattern().is_match(line)
}

/// A unified diff taking `current` to `target` for the file `name`, with secret-looking
/// lines redacted; binary or non-UTF-8 content is described, not included.
pub(crate) fn sanitized_patch(name: &str, current: Option<&[u8]>, target: Option<&[u8]>) -> String {
    let binary = |b: Option<&[u8]>| {
        b.is_some_and(|b| ContentClass::of(b) == ContentClass::BinaryBlob || std::str::from_utf8(b).is_err())
    };
    if binary(current) || binary(target) {
        let size = |b: Option<&[u8]>| b.map_or("absent".to_string(), |b| format!("{} bytes", b.len()));
        return format!(
            "# turnback: {name} is binary; its content is not included.\n# Binary files a/{name} and b/{name} differ ({} now, {} before the rolled-back changes)\n",
            size(current),
            size(target)
        );
    }
    let mut options = diffy::DiffOptions::new();
    let from = if current.is_some() { format!("a/{name}") } else { "/dev/null".to_string() };
    let to = if target.is_some() { format!("b/{name}") } else { "/dev/null".to_string() };
    options.set_original_filename(from).set_modified_filename(to);
    let patch = options.create_patch(utf8_or_empty(current), utf8_or_empty(target)).to_string();
    let mut out = String::with_capacity(patch.len());
    for (i, line) in patch.lines().enumerate() {
        let is_body = i >= 2 && matches!(line.chars().next(), Some('+' | '-' | ' '));
        if is_body && looks_secret(&line[1..]) {
            out.push_str(&line[..1]);
            out.push_str(REDACTED);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// A three-way merge: the person's `current` version and the rollback's `target`, both
/// descended from the agent's `base`. Returns the merged text and whether it has conflict
/// markers; `None` for binary or non-UTF-8 content.
pub(crate) fn three_way_merge(base: &[u8], current: &[u8], target: &[u8]) -> Option<(String, bool)> {
    let (base, current, target) = (as_text(base)?, as_text(current)?, as_text(target)?);
    Some(match diffy::merge(base, current, target) {
        Ok(merged) => (merged, false),
        Err(conflicted) => (conflicted, true),
    })
}

fn utf8_or_empty(b: Option<&[u8]>) -> &str {
    b.and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
}

fn as_text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok().filter(|_| ContentClass::of(b) == ContentClass::FileContent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_lines_are_redacted_and_others_kept() {
        let current = "a = 1\nAPI_KEY=abc123def456\nb = 2\n";
        let target = "a = 1\nb = 3\npassword: hunter2hunter2\n";
        let patch = sanitized_patch("conf.env", Some(current.as_bytes()), Some(target.as_bytes()));
        assert!(!patch.contains("abc123def456") && !patch.contains("hunter2"), "{patch}");
        assert!(patch.contains("-b = 2") && patch.contains("+b = 3"), "{patch}");
        assert_eq!(patch.matches(REDACTED).count(), 2, "{patch}");
        assert!(patch.starts_with("--- a/conf.env\n+++ b/conf.env\n"), "{patch}");
    }

    #[test]
    fn known_token_shapes_look_secret() {
        for s in [
            "aws = AKIAABCDEFGHIJKLMNOP",
            "-----BEGIN RSA PRIVATE KEY-----",
            "token = ghp_abcdefghijklmnopqrstuvwxyz0123",
            "OPENAI=sk-abcdefghijklmnop1234",
            "url = https://user:pa55@example.com/x",
        ] {
            assert!(looks_secret(s), "{s}");
        }
        assert!(!looks_secret("let total = a + b;"));
    }

    #[test]
    fn binary_files_are_described_not_included() {
        let patch = sanitized_patch("img.png", Some(b"\x89PNG\0\0secret"), Some(b"\x89PNG\0old"));
        assert!(patch.contains("is binary") && !patch.contains("secret"), "{patch}");
    }

    #[test]
    fn merge_keeps_both_sides_or_marks_conflicts() {
        let base = b"one\ntwo\nthree\n";
        let person = b"one (person)\ntwo\nthree\n";
        let rollback = b"one\ntwo\nthree (original)\n";
        let (merged, conflicted) = three_way_merge(base, person, rollback).unwrap();
        assert!(!conflicted);
        assert_eq!(merged, "one (person)\ntwo\nthree (original)\n");
        let (merged, conflicted) = three_way_merge(base, b"ONE\ntwo\nthree\n", b"uno\ntwo\nthree\n").unwrap();
        assert!(conflicted && merged.contains("<<<<<<<") && merged.contains(">>>>>>>"), "{merged}");
        assert!(three_way_merge(b"\0", b"a", b"b").is_none());
    }
}
