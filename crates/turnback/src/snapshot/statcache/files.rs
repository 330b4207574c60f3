//! The cached files, packed: paths interned in one buffer (sharing their prefixes with
//! the path before), stats in fixed columns, devices numbered, in component order.
//!
//! Invariants: entries stay in component order (whoever adds them keeps it; a cache out
//! of order does not load); every index is within the buffers; a cache that would
//! overflow a column (4 GiB of paths, 65,536 devices) is not made.

use std::io;

use crate::fs::walk::{Stat, component_order};

/// The cached files in component order (kept by whoever adds them): each one's path, in
/// one buffer shared by all (not an allocation each: a million files' paths cost their
/// bytes), and its stat when read, packed ([`PackedFile`]). Their content ids are kept apart
/// ([`StatCache`]): a snapshot that finds most files unchanged never asks for them. The
/// buffer holds at most 4 GiB of paths, and the files are on at most 2^16 devices (a
/// cache with more does not load: [`TOO_LONG`]); it may also hold paths no file refers to
/// any more (removed by a delta), until the next whole cache.
#[derive(Default, Clone)]
pub(crate) struct Files {
    pub(super) paths: Vec<u8>,
    pub(super) items: Vec<PackedFile>,
    /// The devices the files are on (an item holds the index of its own) …
    pub(super) devices: Vec<u64>,
    /// … and the index of each.
    pub(super) device_at: std::collections::HashMap<u64, u16>,
}

/// One file of [`Files`]: where its path lies in the buffer, and its stat with the device
/// as an index in [`Files::devices`] (a tree's files are on a few). Packed: 46 bytes, not
/// the 56 of a span and a [`Stat`] (10 MB on a million files).
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(2))]
pub(super) struct PackedFile {
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) size: u64,
    pub(super) mtime_ns: i64,
    pub(super) ctime_ns: i64,
    pub(super) inode: u64,
    pub(super) mode: u32,
    pub(super) device: u16,
}

impl Files {
    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// File `i`'s path.
    pub(crate) fn path(&self, i: usize) -> &[u8] {
        self.path_of(&self.items[i])
    }

    /// File `i`'s stat when it was read.
    pub(crate) fn stat(&self, i: usize) -> Stat {
        let item = self.items[i];
        Stat {
            mode: item.mode,
            size: item.size,
            mtime_ns: item.mtime_ns,
            ctime_ns: item.ctime_ns,
            device: self.devices[usize::from(item.device)],
            inode: item.inode,
        }
    }

    /// Each path and its stat, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Stat)> + '_ {
        (0..self.len()).map(|i| (self.path(i), self.stat(i)))
    }

    pub(super) fn path_of(&self, item: &PackedFile) -> &[u8] {
        let (start, len) = (item.start, item.len);
        &self.paths[start as usize..][..len as usize]
    }

    /// The index of `device` in [`Files::devices`], added if new; `None` past 2^16.
    pub(super) fn device(&mut self, device: u64) -> Option<u16> {
        // The first few looked at in place, without hashing: most trees are on one or two.
        if let Some(k) = self.devices.iter().take(4).position(|d| *d == device) {
            return Some(k as u16);
        }
        if let Some(&k) = self.device_at.get(&device) {
            return Some(k);
        }
        let k = u16::try_from(self.devices.len()).ok()?;
        self.devices.push(device);
        self.device_at.insert(device, k);
        Some(k)
    }

    /// The packed file of the path at `start`, `len` long, with `stat`; `None` past 2^16
    /// devices.
    pub(super) fn pack(&mut self, start: u32, len: u32, stat: Stat) -> Option<PackedFile> {
        Some(PackedFile {
            start,
            len,
            size: stat.size,
            mtime_ns: stat.mtime_ns,
            ctime_ns: stat.ctime_ns,
            inode: stat.inode,
            mode: stat.mode,
            device: self.device(stat.device)?,
        })
    }

    /// Sets one stat field of file `i` from its encoding `v` in `column`; `None` for a
    /// value it cannot hold.
    pub(super) fn set_column(&mut self, i: usize, column: Column, v: &[u8]) -> Option<()> {
        let x = column.decode(v)?;
        match column {
            Column::Mode => self.items[i].mode = x as u32,
            Column::Size => self.items[i].size = x,
            Column::Mtime => self.items[i].mtime_ns = x as i64,
            Column::Ctime => self.items[i].ctime_ns = x as i64,
            Column::Device => self.items[i].device = self.device(x)?,
            Column::Inode => self.items[i].inode = x,
        }
        Some(())
    }

    /// Sets file `i`'s stat; `None` past 2^16 devices.
    pub(super) fn set_stat(&mut self, i: usize, stat: Stat) -> Option<()> {
        let PackedFile { start, len, .. } = self.items[i];
        self.items[i] = self.pack(start, len, stat)?;
        Some(())
    }

    /// Adds `path` to the buffer, packed with `stat`; `None` past 4 GiB of paths or
    /// 2^16 devices (no real cache has them).
    pub(super) fn pack_new(&mut self, path: &[u8], stat: Stat) -> Option<PackedFile> {
        let (start, len) = self.intern(path)?;
        self.pack(start, len, stat)
    }

    /// Adds `path` to the buffer: where it starts, and its length; `None` past 4 GiB of
    /// paths.
    pub(super) fn intern(&mut self, path: &[u8]) -> Option<(u32, u32)> {
        let start = u32::try_from(self.paths.len()).ok()?;
        let len = u32::try_from(path.len()).ok()?;
        start.checked_add(len)?;
        self.paths.extend_from_slice(path);
        Some((start, len))
    }

    /// Adds a file at the end with a blank stat, each field to be set before it is read
    /// ([`Files::set_column`]; its device index is no device's yet); `None` past 4 GiB of
    /// paths.
    pub(super) fn push_blank(&mut self, path: &[u8]) -> Option<()> {
        let (start, len) = self.intern(path)?;
        let item = PackedFile { start, len, size: 0, mtime_ns: 0, ctime_ns: 0, inode: 0, mode: 0, device: 0 };
        self.items.push(item);
        Some(())
    }

    /// Where `path` is (`Ok`) or would go (`Err`), searched from `from` on when the file
    /// before `from` comes before `path` (galloping: a walk asks in order, so the answer is
    /// usually at `from` or just past it), else among them all.
    pub(crate) fn find_from(&self, from: usize, path: &[u8]) -> std::result::Result<usize, usize> {
        let before = |i: usize| component_order(self.path(i), path).is_lt();
        let n = self.len();
        let from = from.min(n);
        if from > 0 && !before(from - 1) {
            return self.search(0, n, path);
        }
        // Grow the step until the file there is not before `path`, then search the last step.
        let (mut lo, mut step) = (from, 1);
        while lo + step <= n && before(lo + step - 1) {
            lo += step;
            step *= 2;
        }
        self.search(lo, (lo + step).min(n), path)
    }

    /// Where `path` is (`Ok`) or would go (`Err`) among `lo..hi`.
    pub(super) fn search(&self, lo: usize, hi: usize, path: &[u8]) -> std::result::Result<usize, usize> {
        match self.items[lo..hi].binary_search_by(|item| component_order(self.path_of(item), path)) {
            Ok(i) => Ok(lo + i),
            Err(i) => Err(lo + i),
        }
    }

    /// Whether every path comes after the one before.
    pub(crate) fn in_order(&self) -> bool {
        self.items.windows(2).all(|w| component_order(self.path_of(&w[0]), self.path_of(&w[1])).is_lt())
    }
}

/// Why a cache with more than 4 GiB of paths, or on more than 2^16 devices, does not load.
pub(super) const TOO_LONG: &str =
    "its paths are longer than 4 GiB in all, or its files are on more than 65,536 devices";

impl PartialEq for Files {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(|(p, s)| (String::from_utf8_lossy(p), s))).finish()
    }
}

/// One column of the entries' stats, in [`COLUMNS`] order: the writer and the reader
/// share this one table, so their layouts cannot drift apart. The ids' column follows
/// them, [`ID_BYTES`] an entry (written by [`put_columns`], read by [`Input::ids`], and read
/// past or at an entry's place by [`decode_from`] and [`StatCache::ids_of`]).
#[derive(Clone, Copy)]
pub(super) enum Column {
    Mode,
    Size,
    Mtime,
    Ctime,
    Device,
    Inode,
}

/// Every mode, then every size, mtime, ctime, device and inode (then every id).
pub(super) const COLUMNS: [Column; 6] =
    [Column::Mode, Column::Size, Column::Mtime, Column::Ctime, Column::Device, Column::Inode];

impl Column {
    /// Bytes per entry. Times are kept as 16 bytes (the layout predates the 8-byte fields
    /// in memory).
    pub(super) fn width(self) -> usize {
        match self {
            Column::Mode => 4,
            Column::Size | Column::Device | Column::Inode => 8,
            Column::Mtime | Column::Ctime => 16,
        }
    }

    pub(super) fn put(self, out: &mut dyn io::Write, s: &Stat) -> io::Result<()> {
        match self {
            Column::Mode => out.write_all(&s.mode.to_le_bytes()),
            Column::Size => out.write_all(&s.size.to_le_bytes()),
            Column::Mtime => out.write_all(&i128::from(s.mtime_ns).to_le_bytes()),
            Column::Ctime => out.write_all(&i128::from(s.ctime_ns).to_le_bytes()),
            Column::Device => out.write_all(&s.device.to_le_bytes()),
            Column::Inode => out.write_all(&s.inode.to_le_bytes()),
        }
    }

    /// The field its [`width`](Self::width) bytes `v` hold, as 64 bits (a time's two's
    /// complement); `None` for a time past what 8 bytes hold.
    pub(super) fn decode(self, v: &[u8]) -> Option<u64> {
        match self {
            Column::Mode => Some(u64::from(u32::from_le_bytes(v.try_into().expect("4 bytes")))),
            Column::Size | Column::Device | Column::Inode => Some(u64::from_le_bytes(v.try_into().expect("8 bytes"))),
            Column::Mtime | Column::Ctime => {
                i64::try_from(i128::from_le_bytes(v.try_into().expect("16 bytes"))).ok().map(|t| t as u64)
            }
        }
    }

    /// Sets this field of `s` from its encoding `v` ([`decode`](Self::decode)).
    pub(super) fn set(self, s: &mut Stat, v: &[u8]) -> Option<()> {
        let x = self.decode(v)?;
        match self {
            Column::Mode => s.mode = x as u32,
            Column::Size => s.size = x,
            Column::Mtime => s.mtime_ns = x as i64,
            Column::Ctime => s.ctime_ns = x as i64,
            Column::Device => s.device = x,
            Column::Inode => s.inode = x,
        }
        Some(())
    }
}
