//! The watcher's memory of what changed: each path with the sequence number of its latest
//! event, bounded.
//!
//! Invariants:
//! - Sequence numbers only grow; every event gets a new one, so "changed since mark `m`" is
//!   exactly "sequence greater than `m`".
//! - `floor` is the sequence number at or after the last moment events may have been lost
//!   (an overflow of the kernel's queue or of this set, a watch that failed): a mark below
//!   it cannot be answered, and the snapshot walks the whole tree instead.
//! - At most `max` paths are held; one more clears the set and raises the floor, so memory
//!   stays bounded however many files change.

use std::collections::HashMap;

/// Paths dirtied, with the sequence number of each one's latest event.
#[derive(Debug)]
pub(crate) struct Dirty {
    paths: HashMap<Vec<u8>, u64>,
    seq: u64,
    floor: u64,
    max: usize,
    overflows: u64,
}

/// What a question about a mark gets.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Since {
    /// Every path changed after the mark (each once), in no particular order.
    Paths(Vec<Vec<u8>>),
    /// Events after the mark may have been lost: walk everything.
    Lost,
}

impl Dirty {
    pub(crate) fn new(max: usize) -> Self {
        Dirty { paths: HashMap::new(), seq: 0, floor: 0, max: max.max(1), overflows: 0 }
    }

    /// Records an event on `path`; returns its sequence number.
    pub(crate) fn touch(&mut self, path: Vec<u8>) -> u64 {
        self.seq += 1;
        if self.paths.len() >= self.max && !self.paths.contains_key(&path) {
            self.lost();
            self.overflows += 1;
            return self.seq;
        }
        self.paths.insert(path, self.seq);
        self.seq
    }

    /// Events may have been lost up to now: forget everything, raise the floor.
    pub(crate) fn lost(&mut self) -> u64 {
        self.seq += 1;
        self.floor = self.seq;
        self.paths = HashMap::new();
        self.seq
    }

    /// A new sequence number with no path (a sync's mark).
    pub(crate) fn tick(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// What changed after `mark`.
    pub(crate) fn since(&self, mark: u64) -> Since {
        if mark < self.floor || mark > self.seq {
            return Since::Lost;
        }
        Since::Paths(self.paths.iter().filter(|(_, s)| **s > mark).map(|(p, _)| p.clone()).collect())
    }

    /// Paths held, the floor, the latest sequence number and how often the bound was hit.
    pub(crate) fn counts(&self) -> (usize, u64, u64, u64) {
        (self.paths.len(), self.floor, self.seq, self.overflows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(s: Since) -> Vec<Vec<u8>> {
        match s {
            Since::Paths(mut p) => {
                p.sort();
                p
            }
            Since::Lost => panic!("lost"),
        }
    }

    #[test]
    fn a_mark_sees_exactly_what_changed_after_it() {
        let mut d = Dirty::new(10);
        d.touch(b"a".to_vec());
        let m = d.tick();
        assert!(sorted(d.since(m)).is_empty());
        d.touch(b"b".to_vec());
        d.touch(b"a".to_vec());
        assert_eq!(sorted(d.since(m)), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(sorted(d.since(0)), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(d.since(d.counts().2 + 1), Since::Lost, "a mark from the future is not ours");
    }

    #[test]
    fn past_the_bound_everything_before_is_lost() {
        let mut d = Dirty::new(2);
        let m = d.tick();
        d.touch(b"a".to_vec());
        d.touch(b"b".to_vec());
        d.touch(b"a".to_vec());
        assert_eq!(d.counts().0, 2, "a path touched again takes no room");
        d.touch(b"c".to_vec());
        assert_eq!(d.since(m), Since::Lost);
        assert_eq!(d.counts().0, 0);
        let after = d.tick();
        d.touch(b"d".to_vec());
        assert_eq!(sorted(d.since(after)), vec![b"d".to_vec()]);
        d.lost();
        assert_eq!(d.since(after), Since::Lost);
    }
}
