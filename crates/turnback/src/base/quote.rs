//! Names and text made safe to show on a terminal.
//!
//! A file name may hold any byte but `/` and NUL: an escape sequence (`ESC[2J` clears the
//! screen), a carriage return (which lets the rest of the name overwrite the line it is on,
//! forging a line of a plan), a newline, a bidirectional override, an invisible character
//! (a zero-width space makes `a\u{200b}.txt` look like `a.txt`), or bytes that are not
//! UTF-8. Shown raw, such a name takes over the terminal of the person reading it; shown
//! lossily (invalid bytes as U+FFFD), two different names look the same.
//!
//! Invariants: what [`quote_name`] and [`escape_controls`] return holds no control
//! character, no bidirectional formatting character and no invalid UTF-8 ([`escape_lines`]
//! keeps newlines, tabs and the `\r` of a `\r\n`, and nothing else); [`quote_name`] also
//! escapes every other format character (zero-width spaces and joiners, word joiners, the
//! byte-order mark, soft hyphens, tag characters). A name that needs none of that
//! (printable UTF-8, no `"` or `\`) is returned as it is. Quoting follows git's
//! `core.quotePath` form — the whole name in double quotes, C escapes (`\a`, `\b`, `\t`,
//! `\n`, `\v`, `\f`, `\r`, `\"`, `\\`), every other escaped byte (each byte of invalid
//! UTF-8 among them) as a backslash and three octal digits (`"bad\377.txt"`) — except that
//! printable non-ASCII UTF-8 stays readable, as with `core.quotePath=false`. So quoting is
//! one-to-one: a bare name holds no `"`, a quoted one begins with one, and its escapes give
//! back exactly its bytes, so two different names never look the same. Only output for
//! people is quoted; JSON keeps names exact.

use std::borrow::Cow;
use std::fmt::Write;

/// A file name (or path) as people should see it: unchanged when it is printable UTF-8 with
/// no `"` or `\`, else in double quotes with every unsafe byte escaped (see the module).
pub fn quote_name(name: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(name) {
        Ok(text) if !text.chars().any(|c| c == '"' || c == '\\' || unsafe_char(c) || invisible(c)) => {
            Cow::Borrowed(text)
        }
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

/// A format character (Unicode category Cf, as of Unicode 15.1) that [`unsafe_char`] lets
/// through: it draws nothing, so in a name it would make two names look alike. Free text
/// keeps them (a zero-width joiner is part of many emoji).
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200D}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206A}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
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
                c if unsafe_char(c) || (form == Form::Quoted && invisible(c)) => {
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
    fn names_print_as_git_quotes_them() {
        let table: &[(&[u8], &str)] = &[
            (b"plain.txt", "plain.txt"),
            (b"with space.txt", "with space.txt"),
            ("caf\u{e9}/\u{65e5}\u{672c}.md".as_bytes(), "caf\u{e9}/\u{65e5}\u{672c}.md"),
            (br#"say "hi".txt"#, r#""say \"hi\".txt""#),
            (br"back\slash.txt", r#""back\\slash.txt""#),
            (b"tab\there\nnewline", r#""tab\there\nnewline""#),
            (b"\x07\x08\x0b\x0c\r", r#""\a\b\v\f\r""#),
            (b"esc\x1b[2J.txt", r#""esc\033[2J.txt""#),
            (b"del\x7f", r#""del\177""#),
            (b"bad\xff.txt", r#""bad\377.txt""#),
            (b"cut-\xe2\x80.txt", r#""cut-\342\200.txt""#),
            ("rtl-\u{202e}txt.exe".as_bytes(), r#""rtl-\342\200\256txt.exe""#),
            ("zero\u{200b}width".as_bytes(), r#""zero\342\200\213width""#),
            ("bom\u{feff}.txt".as_bytes(), r#""bom\357\273\277.txt""#),
            ("tag\u{e0041}.txt".as_bytes(), r#""tag\363\240\201\201.txt""#),
            ("soft\u{ad}hyphen".as_bytes(), r#""soft\302\255hyphen""#),
        ];
        for (name, shown) in table {
            assert_eq!(quote_name(name), *shown, "{:?}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn names_differing_only_in_invalid_bytes_print_differently() {
        let (a, b) = (quote_name(b"a\xff.txt"), quote_name(b"a\xfe.txt"));
        assert_eq!((a.as_ref(), b.as_ref()), (r#""a\377.txt""#, r#""a\376.txt""#));
        assert!(!a.contains('\u{fffd}') && !b.contains('\u{fffd}'));
        // A valid name holding U+FFFD itself is not an invalid one either.
        assert_eq!(quote_name("a\u{fffd}.txt".as_bytes()), "a\u{fffd}.txt");
    }

    /// Reads a shown name back into its bytes: what makes quoting one-to-one.
    fn unquote(shown: &str) -> Vec<u8> {
        let Some(inner) = shown.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
            assert!(!shown.contains('"') && !shown.contains('\\'), "{shown}");
            return shown.as_bytes().to_vec();
        };
        let (mut out, mut rest) = (Vec::new(), inner.as_bytes());
        while let Some((&b, tail)) = rest.split_first() {
            rest = tail;
            if b == b'"' {
                panic!("a bare quote inside {shown}");
            }
            if b != b'\\' {
                out.push(b);
                continue;
            }
            let (&e, tail) = rest.split_first().expect("an escape");
            rest = tail;
            out.push(match e {
                b'a' => 7,
                b'b' => 8,
                b't' => b'\t',
                b'n' => b'\n',
                b'v' => 11,
                b'f' => 12,
                b'r' => b'\r',
                b'"' | b'\\' => e,
                b'0'..=b'3' => {
                    let digits = std::str::from_utf8(&[e, rest[0], rest[1]]).unwrap().to_string();
                    rest = &rest[2..];
                    u8::from_str_radix(&digits, 8).unwrap()
                }
                _ => panic!("unknown escape in {shown}"),
            });
        }
        out
    }

    #[test]
    fn different_names_never_print_the_same() {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for a in 0u8..=255 {
            for b in 0u8..=255 {
                names.push(vec![a, b]);
            }
            names.push(vec![0xe2, 0x80, a]);
            names.push(vec![0xf3, 0xa0, 0x81, a]);
            names.push(vec![b'"', a, b'\\']);
        }
        names.extend(["\u{fffd}", "\"\u{fffd}\"", r"\377", r#""\377""#].map(|s| s.as_bytes().to_vec()));
        let mut seen = std::collections::HashMap::new();
        for name in &names {
            let shown = quote_name(name).into_owned();
            assert_eq!(unquote(&shown), *name, "{shown}");
            if let Some(other) = seen.insert(shown.clone(), name) {
                assert_eq!(other, name, "{other:?} and {name:?} both print as {shown}");
            }
        }
    }

    #[test]
    fn free_text_keeps_its_quotes_and_loses_its_controls() {
        assert!(matches!(escape_controls(r#"echo "hi""#), Cow::Borrowed(_)));
        // Text keeps its zero-width joiners (emoji are made of them); names do not.
        assert!(matches!(escape_lines("family \u{1f468}\u{200d}\u{1f469}"), Cow::Borrowed(_)));
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
            assert!(!shown.chars().any(|c| unsafe_char(c) || invisible(c)), "{b:#x}: {shown:?}");
            if let Ok(text) = std::str::from_utf8(&name) {
                let shown = escape_lines(text);
                assert!(!shown.chars().any(|c| unsafe_char(c) && c != '\n' && c != '\t'), "{b:#x}: {shown:?}");
            }
        }
    }
}
