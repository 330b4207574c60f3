//! The per-session stat cache: what each file looked like when its content was last read.
//!
//! Invariants:
//! - It is stored sealed (paths are secret) and written in the same transaction as the
//!   snapshot it describes, so every content id in it names an object that snapshot keeps
//!   alive.
//! - A file is taken as unchanged only if every stat field (type and mode, size, mtime,
//!   ctime, device, inode) matches **and** its mtime is older than the moment the cached
//!   walk began by more than [`RACY_MARGIN_NS`]. A file written in the same instant as the
//!   walk (the "racily clean" case of git and jj) could change again without its mtime
//!   moving on a coarse clock, so it is read again. The margin covers file systems that
//!   keep whole seconds.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::kv::Ns;
use crate::object::ContentId;
use crate::store::Store;
use crate::walk::Stat;

pub(crate) const NS_STATCACHE: Ns = "statcache";
const SCHEMA: u16 = 1;
const MAGIC: &[u8; 4] = b"TBS2";
/// How much older than the walk a file's mtime must be to be trusted unread.
pub const RACY_MARGIN_NS: i128 = 2_000_000_000;

/// One cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    /// Its stat when read.
    pub stat: Stat,
    /// Its content id.
    pub id: ContentId,
}

/// A session's stat cache.
#[derive(Debug, Default)]
pub struct StatCache {
    /// When the walk that produced it began (ns since epoch).
    pub taken_at_ns: i128,
    /// Path → what it was.
    pub entries: HashMap<Vec<u8>, Cached>,
    /// The directory node ids of the snapshot it describes.
    pub tree_ids: Vec<ContentId>,
}

impl StatCache {
    /// The content id of `path` if its stat proves it unchanged since it was read.
    pub fn clean_id(&self, path: &[u8], stat: &Stat) -> Option<ContentId> {
        let c = self.entries.get(path)?;
        (c.stat == *stat && stat.mtime_ns + RACY_MARGIN_NS < self.taken_at_ns).then_some(c.id)
    }

    /// Loads the cache of `session` (empty if none).
    ///
    /// # Errors
    /// `corrupt` if it does not verify.
    pub fn load(store: &Store, session: &str) -> Result<Self> {
        match store.kv().get(NS_STATCACHE, session.as_bytes())? {
            Some(v) => decode(&store.open_bytes(NS_STATCACHE, session.as_bytes(), &v)?),
            None => Ok(StatCache::default()),
        }
    }

    /// The sealed value to store for `session`.
    pub(crate) fn seal(&self, store: &Store, session: &str) -> Result<Vec<u8>> {
        store.seal_bytes_at_level(NS_STATCACHE, session.as_bytes(), SCHEMA, &self.encode(), 1)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.entries.len() * 120);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.taken_at_ns.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (path, c) in &self.entries {
            out.extend_from_slice(&(path.len() as u32).to_le_bytes());
            out.extend_from_slice(path);
            let s = &c.stat;
            out.extend_from_slice(&s.mode.to_le_bytes());
            out.extend_from_slice(&s.size.to_le_bytes());
            out.extend_from_slice(&s.mtime_ns.to_le_bytes());
            out.extend_from_slice(&s.ctime_ns.to_le_bytes());
            out.extend_from_slice(&s.device.to_le_bytes());
            out.extend_from_slice(&s.inode.to_le_bytes());
            out.extend_from_slice(&c.id.0);
        }
        out.extend_from_slice(&(self.tree_ids.len() as u32).to_le_bytes());
        for id in &self.tree_ids {
            out.extend_from_slice(&id.0);
        }
        out
    }
}

fn decode(bytes: &[u8]) -> Result<StatCache> {
    let bad = || Error::corrupt("stat cache", "malformed");
    let mut at = 0;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = bytes.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(s)
    };
    if take(4)? != MAGIC {
        // An older format is not an error: the next snapshot reads everything again.
        return Ok(StatCache::default());
    }
    let taken_at_ns = i128::from_le_bytes(take(16)?.try_into().expect("16"));
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
    let mut entries = HashMap::with_capacity(count);
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        let path = take(len)?.to_vec();
        let stat = Stat {
            mode: u32::from_le_bytes(take(4)?.try_into().expect("4")),
            size: u64::from_le_bytes(take(8)?.try_into().expect("8")),
            mtime_ns: i128::from_le_bytes(take(16)?.try_into().expect("16")),
            ctime_ns: i128::from_le_bytes(take(16)?.try_into().expect("16")),
            device: u64::from_le_bytes(take(8)?.try_into().expect("8")),
            inode: u64::from_le_bytes(take(8)?.try_into().expect("8")),
        };
        let id = ContentId(take(32)?.try_into().expect("32"));
        entries.insert(path, Cached { stat, id });
    }
    let trees = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
    let mut tree_ids = Vec::with_capacity(trees);
    for _ in 0..trees {
        tree_ids.push(ContentId(take(32)?.try_into().expect("32")));
    }
    Ok(StatCache { taken_at_ns, entries, tree_ids })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime_ns: i128) -> Stat {
        Stat { mode: 0o100644, size: 3, mtime_ns, ctime_ns: mtime_ns, device: 1, inode: 9 }
    }

    #[test]
    fn round_trips_and_trusts_only_old_unchanged_files() {
        let mut cache =
            StatCache { taken_at_ns: 10_000_000_000, entries: HashMap::new(), tree_ids: vec![ContentId([7; 32])] };
        cache.entries.insert(b"old.txt".to_vec(), Cached { stat: stat(1_000_000_000), id: ContentId([1; 32]) });
        cache.entries.insert(b"racy.txt".to_vec(), Cached { stat: stat(9_500_000_000), id: ContentId([2; 32]) });
        let back = decode(&cache.encode()).unwrap();
        assert_eq!((back.taken_at_ns, back.tree_ids.clone()), (cache.taken_at_ns, cache.tree_ids.clone()));
        assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_000)), Some(ContentId([1; 32])));
        assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_001)), None, "any stat change means read again");
        assert_eq!(back.clean_id(b"racy.txt", &stat(9_500_000_000)), None, "racily clean entries are re-read");
        assert_eq!(back.clean_id(b"new.txt", &stat(1)), None);
    }
}
