//! Reading a JSON document whose size a caller does not control (an agent's hook event, a
//! history entry on stdin) in memory bounded by what is kept, not by what is sent.
//!
//! Invariants:
//! - The input is streamed once. Every JSON string longer than [`STRING_CAP`] bytes (as
//!   written, escapes included) keeps its start, cut on a character boundary — never
//!   inside an escape, a surrogate pair or a UTF-8 sequence — followed by a marker
//!   ([`marker`]) saying how many bytes of text were cut; everything else passes through
//!   unchanged, so a valid document stays valid and means the same but for the cuts.
//! - The document as kept is at most [`DOCUMENT_CAP`] bytes; a larger one is refused
//!   (`FileTooLarge`) without reading further, never allocated whole.
//! - Reading the whole input is unavoidable only for the parts kept: peak memory is about
//!   the kept document plus one read buffer, whatever the input's size.

use std::io::{BufRead, BufReader, Read};

/// Most bytes of one JSON string kept as read (4 MiB): far above anything turnback keeps of
/// one field (the history keeps 256 KiB of a text, 64 KiB of a tool's input or output),
/// and enough for any patch an agent's edit tool carries.
pub(crate) const STRING_CAP: usize = 4 * 1024 * 1024;
/// Most bytes of a document once its long strings are cut (64 MiB).
pub(crate) const DOCUMENT_CAP: usize = 64 * 1024 * 1024;

/// A document read within the caps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounded {
    /// The document as kept (long strings cut, with their markers).
    pub text: String,
    /// How many strings were cut.
    pub cut_strings: u64,
    /// How many bytes of text they lost.
    pub cut_bytes: u64,
}

/// The marker ending a text cut by `n` bytes: `"\n[turnback: cut N bytes]"`. The history's
/// own caps use the same one, and count an earlier cut in their notes ([`earlier_cut`]).
pub(crate) fn marker(n: usize) -> String {
    format!("\n[turnback: cut {n} bytes]")
}

/// A text that already ends with a [`marker`]: the text before it and the bytes cut then
/// (`(text, 0)` if it has none).
pub(crate) fn earlier_cut(text: &str) -> (&str, usize) {
    let Some(start) = text.rfind("\n[turnback: cut ") else { return (text, 0) };
    let number = text[start..].strip_prefix("\n[turnback: cut ").and_then(|r| r.strip_suffix(" bytes]"));
    match number.and_then(|n| n.parse::<usize>().ok()) {
        Some(n) => (&text[..start], n),
        None => (text, 0),
    }
}

/// Reads `input` whole if it holds at most `cap` bytes; `None` once it passes the cap,
/// having read no more than `cap + 1` bytes.
///
/// # Errors
/// I/O errors of `input`.
pub(crate) fn read_at_most(input: impl Read, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut kept = Vec::new();
    input.take(cap.saturating_add(1)).read_to_end(&mut kept)?;
    Ok((kept.len() as u64 <= cap).then_some(kept))
}

/// Reads the JSON document on `input` within [`STRING_CAP`] and [`DOCUMENT_CAP`].
///
/// # Errors
/// I/O errors of `input`; `InvalidData` if what is kept is not UTF-8; `FileTooLarge` if
/// the document as kept is over [`DOCUMENT_CAP`].
pub(crate) fn read_json(input: impl Read) -> std::io::Result<Bounded> {
    read_json_with(input, STRING_CAP, DOCUMENT_CAP)
}

/// Where the reader is in the document.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    /// Between strings.
    Outside,
    /// In a string, keeping it: the raw bytes kept so far.
    Keeping(usize),
    /// In a string past its cap, dropping it: the text bytes dropped so far.
    Dropping(usize),
}

/// An escape being read: after the backslash, and the hex digits of a `\u` so far.
#[derive(Clone, Copy, Default)]
struct Escape {
    active: bool,
    unicode: Option<(u32, u8)>,
    /// The last escape was a high surrogate: its low half must come with it.
    high_surrogate: bool,
}

impl Escape {
    /// Takes one byte of a string; returns the text bytes it completes, if it ends an
    /// escape or is a plain byte (`None` while an escape goes on).
    fn take(&mut self, b: u8) -> Option<usize> {
        if let Some((value, digits)) = self.unicode {
            let value = (value << 4) | (b as char).to_digit(16).unwrap_or(0);
            if digits + 1 < 4 {
                self.unicode = Some((value, digits + 1));
                return None;
            }
            self.unicode = None;
            self.active = false;
            let high = (0xD800..0xDC00).contains(&value);
            let low = (0xDC00..0xE000).contains(&value);
            self.high_surrogate = high;
            // A pair is four bytes of UTF-8, counted with its high half.
            return Some(if high {
                4
            } else if low {
                0
            } else {
                char::from_u32(value).map_or(3, char::len_utf8)
            });
        }
        if self.active {
            if b == b'u' {
                self.unicode = Some((0, 0));
                return None;
            }
            self.active = false;
            self.high_surrogate = false;
            return Some(1);
        }
        if b == b'\\' {
            self.active = true;
            return None;
        }
        self.high_surrogate = false;
        Some(1)
    }

    /// Whether a string may be cut before byte `b`: not inside an escape, not between the
    /// halves of a surrogate pair, not inside a UTF-8 sequence.
    fn boundary_before(&self, b: u8) -> bool {
        !self.active && self.unicode.is_none() && !self.high_surrogate && (b & 0xC0) != 0x80
    }
}

/// [`read_json`] of a document that may be larger once its strings are cut (an agent's
/// whole transcript): at most `document_cap` bytes kept.
///
/// # Errors
/// As [`read_json`].
pub(crate) fn read_json_up_to(input: impl Read, document_cap: usize) -> std::io::Result<Bounded> {
    read_json_with(input, STRING_CAP, document_cap)
}

/// [`read_json`] with explicit caps.
pub(crate) fn read_json_with(input: impl Read, string_cap: usize, document_cap: usize) -> std::io::Result<Bounded> {
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!(
                "the input is larger than {} MiB even with every string over {} MiB cut",
                document_cap >> 20,
                string_cap >> 20
            ),
        )
    };
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut out: Vec<u8> = Vec::new();
    let mut at = At::Outside;
    let mut escape = Escape::default();
    let (mut cut_strings, mut cut_bytes) = (0u64, 0u64);
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut kept_from = 0;
        for (i, &b) in chunk.iter().enumerate() {
            at = match at {
                At::Outside => {
                    if b == b'"' {
                        escape = Escape::default();
                        At::Keeping(0)
                    } else {
                        At::Outside
                    }
                }
                At::Keeping(n) => {
                    if b == b'"' && !escape.active && escape.unicode.is_none() {
                        At::Outside
                    } else if n >= string_cap && escape.boundary_before(b) {
                        // Keep what came before this byte; drop from here.
                        out.extend_from_slice(&chunk[kept_from..i]);
                        let dropped = escape.take(b).unwrap_or(0);
                        At::Dropping(dropped)
                    } else {
                        escape.take(b);
                        At::Keeping(n + 1)
                    }
                }
                At::Dropping(n) => {
                    if b == b'"' && !escape.active && escape.unicode.is_none() {
                        let note = marker(n);
                        out.extend_from_slice(
                            serde_json::to_string(&note).expect("a string").trim_matches('"').as_bytes(),
                        );
                        cut_strings += 1;
                        cut_bytes += n as u64;
                        kept_from = i;
                        At::Outside
                    } else {
                        At::Dropping(n + escape.take(b).unwrap_or(0))
                    }
                }
            };
            if matches!(at, At::Dropping(_)) {
                kept_from = i + 1;
            }
        }
        if !matches!(at, At::Dropping(_)) {
            out.extend_from_slice(&chunk[kept_from..]);
        }
        if out.len() > document_cap {
            return Err(too_large());
        }
        let len = chunk.len();
        reader.consume(len);
    }
    let text = String::from_utf8(out).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Bounded { text, cut_strings, cut_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: &str, cap: usize) -> Bounded {
        read_json_with(input.as_bytes(), cap, 1 << 20).unwrap()
    }

    #[test]
    fn read_at_most_stops_one_byte_past_the_cap_even_of_an_endless_input() {
        assert_eq!(read_at_most(&b"12345"[..], 5).unwrap(), Some(b"12345".to_vec()));
        assert_eq!(read_at_most(&b"123456"[..], 5).unwrap(), None);
        assert_eq!(read_at_most(std::io::repeat(0), 1 << 20).unwrap(), None, "an endless input ends at the cap");
    }

    #[test]
    fn short_documents_pass_through_unchanged() {
        let doc = r#"{"a": "x\"y\\z", "b": [1, 2.5, null, true], "c": "\u00e9\ud83d\ude00"}"#;
        assert_eq!(read(doc, 64), Bounded { text: doc.to_string(), cut_strings: 0, cut_bytes: 0 });
    }

    #[test]
    fn a_long_string_keeps_its_start_and_says_how_much_text_went() {
        let long = "é".repeat(100) + "tail";
        let doc = serde_json::json!({ "p": long, "q": "short" }).to_string();
        let got = read(&doc, 11);
        let v: serde_json::Value = serde_json::from_str(&got.text).unwrap();
        let p = v["p"].as_str().unwrap();
        let (kept, cut) = earlier_cut(p);
        assert_eq!(kept, "éééééé", "cut on a character boundary past the cap");
        assert_eq!(kept.len() + cut, long.len(), "the marker counts the text cut, in bytes");
        assert_eq!(v["q"], "short");
        assert_eq!((got.cut_strings, got.cut_bytes), (1, cut as u64));
    }

    #[test]
    fn never_cut_inside_an_escape_or_a_surrogate_pair() {
        for cap in 0..40 {
            let doc = r#"["ab\n\"\\\u00e9\ud83d\ude00\u0041cd\ud83d\ude00 end"]"#;
            let original: Vec<String> = serde_json::from_str(doc).unwrap();
            let got = read(doc, cap);
            let v: Vec<String> =
                serde_json::from_str(&got.text).unwrap_or_else(|e| panic!("cap {cap}: {e}: {}", got.text));
            let (kept, cut) = earlier_cut(&v[0]);
            assert!(original[0].starts_with(kept), "cap {cap}: {kept:?}");
            assert_eq!(kept.len() + cut, original[0].len(), "cap {cap}: {}", got.text);
        }
    }

    #[test]
    fn a_document_over_its_cap_is_refused_not_kept() {
        let doc = serde_json::json!(vec!["x".repeat(100); 50]).to_string();
        let err = read_json_with(doc.as_bytes(), 1000, 4096).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(read_json_with(doc.as_bytes(), 10, 4096).is_ok(), "fits once its strings are cut");
    }

    #[test]
    fn earlier_cut_reads_only_a_real_marker() {
        assert_eq!(earlier_cut("abc\n[turnback: cut 12 bytes]"), ("abc", 12));
        assert_eq!(earlier_cut("abc\n[turnback: cut many bytes]"), ("abc\n[turnback: cut many bytes]", 0));
        assert_eq!(earlier_cut("abc"), ("abc", 0));
    }
}
