//! The scan's tests: the walk merged with the stat cache, entry by entry.

use super::*;
use crate::snapshot::statcache::Cached;
use crate::storage::content::ContentId;

fn stat(n: u64) -> Stat {
    Stat { mode: 0o100644, size: n, mtime_ns: 1, ctime_ns: 1, device: 1, inode: n }
}

fn entry(path: &str, kind: Kind, n: u64) -> Entry {
    Entry { path: path.as_bytes().to_vec(), kind, stat: stat(n) }
}

/// One entry as a scan holds it: path, kind, stat, cache index, and how it is kept
/// (`c`: a reference to the cache, `f`: an own file, `o`: another own entry).
type Kept = (Vec<u8>, Kind, Stat, Option<usize>, char);

fn seen(scan: &Scan<'_>) -> Vec<Kept> {
    (0..scan.len())
        .map(|i| {
            let f = scan.get(i);
            let kept = match scan.slot_of(i).0 {
                Slot::Cached { .. } => 'c',
                Slot::File(_) => 'f',
                Slot::Own(_) => 'o',
            };
            (f.path.to_vec(), f.kind.clone(), f.stat, f.cached, kept)
        })
        .collect()
}

#[test]
fn entries_walked_before_the_cache_was_loaded_are_matched_as_if_it_had_been_there() {
    let cached = ["a", "b/c", "b/d", "b.x", "e", "f"];
    let cache = StatCache::of_entries(
        cached
            .iter()
            .enumerate()
            .map(|(n, p)| (p.as_bytes().to_vec(), Cached { stat: stat(n as u64), id: ContentId([n as u8; 32]) }))
            .collect(),
    );
    // As cached; changed; new; a symlink where a file was; as cached; new.
    let walked = || {
        vec![
            entry("a", Kind::File, 0),
            entry("b/c", Kind::File, 9),
            entry("b/cc", Kind::File, 2),
            entry("b.x", Kind::Symlink(b"t".to_vec()), 3),
            entry("e", Kind::File, 4),
            entry("g", Kind::File, 5),
        ]
    };
    let expected = vec![
        (b"a".to_vec(), Kind::File, stat(0), Some(0), 'c'),
        (b"b/c".to_vec(), Kind::File, stat(9), Some(1), 'f'),
        (b"b/cc".to_vec(), Kind::File, stat(2), None, 'f'),
        (b"b.x".to_vec(), Kind::Symlink(b"t".to_vec()), stat(3), Some(3), 'o'),
        (b"e".to_vec(), Kind::File, stat(4), Some(4), 'c'),
        (b"g".to_vec(), Kind::File, stat(5), None, 'f'),
    ];
    // Every split between entries walked before the cache was there and after.
    for loaded_at in 0..=walked().len() {
        let (mut hint, mut files) = (0, FileRecords::default());
        let entries = walked()
            .into_iter()
            .enumerate()
            .map(|(k, e)| {
                // As the walk keeps them before the cache is there: a file recorded,
                // anything else boxed.
                if k < loaded_at && e.kind == Kind::File {
                    Slot::File(files.put(&e.stat, NOT_MATCHED, &e.path))
                } else if k < loaded_at {
                    Slot::Own(Box::new(Own { entry: e, cached: NOT_MATCHED }))
                } else {
                    Slot::matched(&cache, e, &mut hint, &mut files)
                }
            })
            .collect();
        let scan = Scan::new(Walked { walk: Walk { entries, ..Walk::default() }, files }, &cache);
        assert_eq!(seen(&scan), expected, "cache loaded after {loaded_at} entries");
        // The records of files found cached once matched are given back: only the
        // three files kept as records remain.
        let recorded: usize = [&b"b/c"[..], b"b/cc", b"g"].iter().map(|p| RECORD_HEAD + p.len()).sum();
        assert_eq!(scan.files.0.len(), recorded, "cache loaded after {loaded_at} entries");
        assert_eq!(scan.position(b"b.x"), Some(3));
        assert_eq!(scan.position(b"b/d"), None);
    }
}

#[test]
fn file_records_kept_per_directory_read_back_as_walked() {
    // Files in many directories, walked in parallel: each directory's records are moved
    // into the scan's buffer at its own offset when it is closed.
    let dir = tempfile::tempdir().unwrap();
    for d in 0..40 {
        for f in 0..(d % 7 + 1) {
            let path = dir.path().join(format!("d{d}/s{}/f{f}.txt", d % 3));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("{d}-{f}").repeat(d + 1)).unwrap();
        }
    }
    std::os::unix::fs::symlink("d0", dir.path().join("link")).unwrap();
    let found = walk::walk(dir.path(), &[]).unwrap().entries;
    let seen = |scan: &Scan<'_>| -> Vec<(Vec<u8>, Kind, Stat)> {
        scan.iter().map(|e| (e.path.to_vec(), e.kind.clone(), e.stat)).collect()
    };
    let expected: Vec<(Vec<u8>, Kind, Stat)> = found.iter().map(|e| (e.path.clone(), e.kind.clone(), e.stat)).collect();
    // Every third file cached as walked: the rest are recorded.
    let cached = || -> Vec<(Vec<u8>, Cached)> {
        found
            .iter()
            .filter(|e| e.kind == Kind::File)
            .step_by(3)
            .map(|e| (e.path.clone(), Cached { stat: e.stat, id: ContentId([1; 32]) }))
            .collect()
    };
    for loaded in [true, false] {
        // Loaded before the walk: matched as walked, so each directory holds references
        // to the cache and records both, moved into the scan's buffer when closed. Not
        // loaded: files recorded until the walk waits for the cache, which comes later,
        // and matched when the scan is made.
        let loading = OnceLock::new();
        if loaded {
            let _ = loading.set(StatCache::of_entries(cached()));
        }
        let walked = std::thread::scope(|scope| {
            if !loaded {
                scope.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    let _ = loading.set(StatCache::of_entries(cached()));
                });
            }
            Scan::walk(dir.path(), &[], walk::NO_OWN_TEMPS, &loading).unwrap()
        });
        // Entries kept by reference and recorded.
        let kinds = |slots: &[Slot]| {
            let count = |f: fn(&Slot) -> bool| slots.iter().filter(|s| f(s)).map(Slot::len).sum::<usize>();
            (count(|s| matches!(s, Slot::Cached { .. })), count(|s| matches!(s, Slot::File(_))))
        };
        let files = expected.iter().filter(|e| e.1 == Kind::File).count();
        let (cached, recorded) = kinds(&walked.walk.entries);
        if loaded {
            assert_eq!((cached, recorded), (files.div_ceil(3), files - files.div_ceil(3)), "matched as walked");
        } else {
            assert!(recorded > files - files.div_ceil(3), "files walked before the cache was there recorded");
        }
        let scan = Scan::new(walked, loading.get().expect("set before the walk ended"));
        assert_eq!(seen(&scan), expected, "cache loaded during the walk: {loaded}");
        assert_eq!(kinds(&scan.slots).0, files.div_ceil(3), "every cached file a reference once matched");
    }
}

#[test]
fn files_as_cached_are_kept_as_runs_that_read_back_entry_by_entry_in_walk_order() {
    let dir = tempfile::tempdir().unwrap();
    let put = |rel: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, rel).unwrap();
    };
    // Directory `a` lists b, c/ and d: c's new file comes between b and d, which follow
    // each other in the cache, so the walk must not join d to b's run across c.
    for rel in ["a/b", "a/c/n", "a/d", "a/e", "z/1", "z/2", "z/3", "z/4"] {
        put(rel);
    }
    std::os::unix::fs::symlink("a", dir.path().join("z/l")).unwrap();
    let found = walk::walk(dir.path(), &[]).unwrap().entries;
    let expected: Vec<(Vec<u8>, Kind, Stat)> = found.iter().map(|e| (e.path.clone(), e.kind.clone(), e.stat)).collect();
    let cached: Vec<(Vec<u8>, Cached)> = found
        .iter()
        .filter(|e| e.kind == Kind::File && e.path != b"a/c/n")
        .map(|e| (e.path.clone(), Cached { stat: e.stat, id: ContentId([1; 32]) }))
        .collect();
    let loading = OnceLock::new();
    let _ = loading.set(StatCache::of_entries(cached));
    let cache = loading.get().unwrap();
    let walked = Scan::walk(dir.path(), &[], walk::NO_OWN_TEMPS, &loading).unwrap();
    // Joined within each directory by the walk: a/b; a/c/n; a/d..a/e; z/1..z/4; z/l.
    let items: Vec<usize> = walked.walk.entries.iter().map(Slot::len).collect();
    assert_eq!(items, [1, 1, 2, 4, 1], "joined as walked");
    let mut scan = Scan::new(walked, cache);
    let seen = |scan: &Scan<'_>| -> Vec<(Vec<u8>, Kind, Stat)> {
        (0..scan.len()).map(|i| scan.get(i)).map(|e| (e.path.to_vec(), e.kind.clone(), e.stat)).collect()
    };
    assert_eq!(seen(&scan), expected, "entry by entry");
    let iterated: Vec<_> = scan.iter().map(|e| (e.path.to_vec(), e.kind.clone(), e.stat)).collect();
    assert_eq!(iterated, expected, "in order");
    // a/b; a/c/n; a/d..a/e..z/1..z/4 (one run across directories once flattened); z/l.
    let shape: Vec<(char, usize)> =
        scan.slots.iter().map(|s| (if matches!(s, Slot::Cached { .. }) { 'c' } else { 'o' }, s.len())).collect();
    assert_eq!(shape, [('c', 1), ('o', 1), ('c', 6), ('o', 1)]);
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(scan.position(&e.0), Some(i), "{}", String::from_utf8_lossy(&e.0));
    }
    assert_eq!(scan.position(b"a/c"), None);
    // Leaving files out of the middle of a run splits it where they were.
    scan.retain(|e| e.path != b"z/2" && e.path != b"a/e");
    let left: Vec<_> = expected.iter().filter(|e| e.0 != b"z/2" && e.0 != b"a/e").cloned().collect();
    assert_eq!(seen(&scan), left);
    assert_eq!(scan.slots.iter().map(Slot::len).collect::<Vec<_>>(), [1, 1, 1, 1, 2, 1]);
    assert_eq!(scan.position(b"z/3"), Some(4));
}

#[test]
fn a_walk_keeps_so_many_entries_before_the_cache_is_there_and_then_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    for d in 0..12 {
        for f in 0..25 {
            let path = dir.path().join(format!("d{d}/f{f}"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("{d} {f}")).unwrap();
        }
    }
    let found = walk::walk(dir.path(), &[]).unwrap().entries;
    let cached = || -> Vec<(Vec<u8>, Cached)> {
        found.iter().map(|e| (e.path.clone(), Cached { stat: e.stat, id: ContentId([1; 32]) })).collect()
    };
    // The cache comes only once the walk has long been past its allowance.
    let loading = OnceLock::new();
    let walked = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = loading.set(StatCache::of_entries(cached()));
        });
        Scan::walk(dir.path(), &[], walk::NO_OWN_TEMPS, &loading).unwrap()
    });
    let unmatched = walked
        .walk
        .entries
        .iter()
        .filter(|s| matches!(s, Slot::File(at) if walked.files.cached_field(*at) == NOT_MATCHED))
        .count();
    assert_eq!(unmatched, KEPT_BEFORE_LOADED, "the first entries recorded, the rest matched once it came");
    let scan = Scan::new(walked, loading.get().unwrap());
    let seen: Vec<_> = scan.iter().map(|e| (e.path.to_vec(), e.stat, e.cached.is_some())).collect();
    assert_eq!(seen, found.iter().map(|e| (e.path.clone(), e.stat, true)).collect::<Vec<_>>());
    assert!(scan.slots.iter().all(|s| matches!(s, Slot::Cached { .. })), "every file a reference");
}
