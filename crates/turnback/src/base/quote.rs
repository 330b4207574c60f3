//! Names and text made safe to show on a terminal.
//!
//! A file name may hold any byte but `/` and NUL: an escape sequence (`ESC[2J` clears the
//! screen), a carriage return (which lets the rest of the name overwrite the line it is on,
//! forging a line of a plan), a newline, a bidirectional override, or bytes that are not
//! UTF-8. Shown raw, such a name takes over the terminal of the person reading it.
//!
//! Invariants: what [`quote_name`] and [`escape_controls`] return holds no control
//! character, no bidirectional formatting character and no invalid UTF-8 ([`escape_lines`]
//! keeps newlines, tabs and the `\r` of a `\r\n`, and nothing else); a name that
//! needs none of that (printable UTF-8, no `"` or `\`) is returned as it is. Quoting
//! follows git's `core.quotePath` form — the whole name in double quotes, C escapes (`\t`,
//! `\n`, `\r`, `\"`, `\\`), other bytes as three octal digits — except that printable
//! non-ASCII UTF-8 stays readable. Only output for people is quoted; JSON keeps names exact.

use std::borrow::Cow;
use std::fmt::Write;

/// A file name (or path) as people should see it: unchanged when it is printable UTF-8 with
/// no `"` or `\`, else in double quotes with every unsafe byte escaped.
pub fn quote_name(name: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(name) {
        Ok(text) if !text.chars().any(|c| c == '"' || c == '\\' || unsafe_char(c)) => Cow::Borrowed(text),
        _ => {
            let mut out = String::with_capacity(name.len() + 2);
            out.push('"');
            escape_into(&mut out, name, Form::Quoted);
            out.push('"');
            Cow::Owned(out)
        }
    }
}

/// Free text (a reason, a shell command) as people should see it: control and
/// bidirectional formatting characters escaped in place, quotes left alone.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_into(&mut out, text.as_bytes(), Form::Text);
    Cow::Owned(out)
}

/// Multi-line free text (a prompt, a reply) as people should see it: like
/// [`escape_controls`], but its lines stay lines and its tabs tabs (a `\r` is kept only as
/// part of a `\r\n`; alone it could overwrite the line it ends).
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    let kept = |(i, c): (usize, char)| match c {
        '\n' | '\t' => true,
        '\r' => text[i + 1..].starts_with('\n'),
        c => !unsafe_char(c),
    };
    if text.char_indices().all(kept) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_into(&mut out, text.as_bytes(), Form::Lines);
    Cow::Owned(out)
}

/// How much [`escape_into`] escapes.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// A name in double quotes: its quotes and backslashes too.
    Quoted,
    /// One line of text: every control character.
    Text,
    /// Lines of text: every control character but newlines, tabs and `\r\n`.
    Lines,
}

/// Whether showing `c` raw could move the cursor, change the terminal or reorder the line.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}')
        || ('\u{202A}'..='\u{202E}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

fn escape_into(out: &mut String, bytes: &[u8], form: Form) {
    let lines = form == Form::Lines;
    for chunk in bytes.utf8_chunks() {
        let mut chars = chunk.valid().chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\t' | '\n' if lines => out.push(c),
                '\r' if lines && chars.peek() == Some(&'\n') => out.push(c),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\u{b}' => out.push_str("\\v"),
                '\u{c}' => out.push_str("\\f"),
                '\r' => out.push_str("\\r"),
                '"' if form == Form::Quoted => out.push_str("\\\""),
                '\\' if form == Form::Quoted => out.push_str("\\\\"),
                c if unsafe_char(c) => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\{b:03o}");
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\{b:03o}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_name_is_shown_as_it_is() {
        assert!(matches!(quote_name("src/main.rs".as_bytes()), Cow::Borrowed("src/main.rs")));
        assert_eq!(quote_name("docs/résumé – ½.md".as_bytes()), "docs/résumé – ½.md");
    }

    #[test]
    fn control_characters_and_invalid_utf8_are_quoted_as_git_does() {
        assert_eq!(quote_name(b"clear\x1b[2J.txt"), r#""clear\033[2J.txt""#);
        assert_eq!(quote_name(b"a\rb\nc\td"), r#""a\rb\nc\td""#);
        assert_eq!(quote_name(b"bad-\xff\xfe.txt"), r#""bad-\377\376.txt""#);
        assert_eq!(quote_name(br#"say "hi"\now"#), r#""say \"hi\"\\now""#);
        assert_eq!(quote_name("x\u{202e}txt.exe".as_bytes()), r#""x\342\200\256txt.exe""#);
        assert_eq!(quote_name("c1\u{9b}2J".as_bytes()), r#""c1\302\2332J""#);
    }

    #[test]
    fn free_text_keeps_its_quotes_and_loses_its_controls() {
        assert!(matches!(escape_controls(r#"echo "hi""#), Cow::Borrowed(_)));
        assert_eq!(escape_controls("rm -rf x\r$ ls\x1b[2J"), r"rm -rf x\r$ ls\033[2J");
    }

    #[test]
    fn multi_line_text_keeps_its_lines_and_loses_its_controls() {
        assert!(matches!(escape_lines("one\n\ttwo\r\nthree"), Cow::Borrowed(_)));
        let shown = escape_lines("title\x1b]0;pwned\x07\nclear\x1b[2J\rover");
        assert_eq!(shown, "title\\033]0;pwned\\a\nclear\\033[2J\\rover");
        assert_eq!(escape_lines("ends in\r"), r"ends in\r");
    }

    #[test]
    fn nothing_unsafe_survives_quoting() {
        for b in 0u8..=255 {
            let name = [b'a', b, b'z'];
            let shown = quote_name(&name);
            assert!(!shown.chars().any(unsafe_char), "{b:#x}: {shown:?}");
            if let Ok(text) = std::str::from_utf8(&name) {
                let shown = escape_lines(text);
                assert!(!shown.chars().any(|c| unsafe_char(c) && c != '\n' && c != '\t'), "{b:#x}: {shown:?}");
            }
        }
    }
}
