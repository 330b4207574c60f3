//! Exact-string replacement over a stream fed in pieces: what `fs edit` does to a file too
//! large to hold.
//!
//! Invariants:
//! - The output is exactly what replacing every occurrence of `old` in the whole input,
//!   left to right and without overlaps, would give — however the input is cut into
//!   pieces (a match may span pieces).
//! - Memory holds at most `old.len() - 1` carried bytes and the output of one piece, in
//!   which each replacement is a mark ([`Out::New`]), never a copy of `new`.

/// One stretch of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Out {
    /// Input bytes, unchanged.
    Kept(Vec<u8>),
    /// One replacement: the new string.
    New,
}

/// A replacement of `old` under way (see the module docs).
#[derive(Debug)]
pub(crate) struct Replacer {
    old: Vec<u8>,
    carry: Vec<u8>,
    count: usize,
}

impl Replacer {
    /// Replaces `old` (not empty).
    pub(crate) fn new(old: &[u8]) -> Self {
        debug_assert!(!old.is_empty());
        Replacer { old: old.to_vec(), carry: Vec::new(), count: 0 }
    }

    /// Feeds the next piece of input; appends what can be told of the output to `out`.
    pub(crate) fn feed(&mut self, piece: &[u8], out: &mut Vec<Out>) {
        let buf = [std::mem::take(&mut self.carry).as_slice(), piece].concat();
        let n = self.old.len();
        let (mut i, mut start) = (0, 0);
        while i + n <= buf.len() {
            if buf[i..i + n] == self.old[..] {
                if start < i {
                    out.push(Out::Kept(buf[start..i].to_vec()));
                }
                out.push(Out::New);
                self.count += 1;
                i += n;
                start = i;
            } else {
                i += 1;
            }
        }
        // What is left may be the start of a match: carried into the next piece.
        if start < i {
            out.push(Out::Kept(buf[start..i].to_vec()));
        }
        self.carry = buf[i..].to_vec();
    }

    /// Ends the input: appends the bytes still carried; returns how many replacements were
    /// made.
    pub(crate) fn finish(self, out: &mut Vec<Out>) -> usize {
        if !self.carry.is_empty() {
            out.push(Out::Kept(self.carry));
        }
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], old: &[u8], new: &[u8], cut: usize) -> (Vec<u8>, usize) {
        let mut r = Replacer::new(old);
        let mut outs = Vec::new();
        for piece in input.chunks(cut.max(1)) {
            r.feed(piece, &mut outs);
        }
        let n = r.finish(&mut outs);
        let mut bytes = Vec::new();
        for o in outs {
            match o {
                Out::Kept(b) => bytes.extend_from_slice(&b),
                Out::New => bytes.extend_from_slice(new),
            }
        }
        (bytes, n)
    }

    #[test]
    fn pieces_replace_as_the_whole_does_matches_across_cuts_included() {
        let input = b"aaa b aab ab aaab";
        for cut in 1..=input.len() {
            assert_eq!(run(input, b"aa", b"X", cut), (b"Xa b Xb ab Xab".to_vec(), 3), "cut {cut}");
            assert_eq!(run(input, b"ab", b"", cut), (b"aaa b a  aa".to_vec(), 3), "cut {cut}");
            assert_eq!(run(input, b"zz", b"Y", cut), (input.to_vec(), 0), "cut {cut}");
        }
    }
}
