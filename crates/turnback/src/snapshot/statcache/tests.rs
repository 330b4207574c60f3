//! The stat cache's tests: its encoding, its search, and a delta laid over a whole cache.

use super::codec::{decode, encode, encode_delta};
use super::*;
use crate::base::varint;

fn stat(mtime_ns: i64) -> Stat {
    Stat { mode: 0o100644, size: 3, mtime_ns, ctime_ns: mtime_ns, device: 1, inode: 9 }
}

#[test]
fn round_trips_and_trusts_only_old_unchanged_files() {
    let mut cache = StatCache { taken_at_ns: 10_000_000_000, tree_ids: vec![ContentId([7; 32])], ..Default::default() };
    cache.push(b"old.txt", Cached { stat: stat(1_000_000_000), id: ContentId([1; 32]) });
    cache.push(b"racy.txt", Cached { stat: stat(9_500_000_000), id: ContentId([2; 32]) });
    let back = decode(&cache.encode()).unwrap();
    assert_eq!((back.taken_at_ns, back.tree_ids.clone()), (cache.taken_at_ns, cache.tree_ids.clone()));
    assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_000)), Some(ContentId([1; 32])));
    assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_001)), None, "any stat change means read again");
    assert_eq!(back.clean_id(b"racy.txt", &stat(9_500_000_000)), None, "racily clean entries are re-read");
    assert_eq!(back.clean_id(b"new.txt", &stat(1)), None);
}

#[test]
fn shared_prefixes_round_trip_and_any_truncation_is_malformed_not_a_panic() {
    let mut cache = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
    for (i, p) in ["src/a.rs", "src/ab.rs", "src/b/c.rs", "z", "ünï/ß.txt"].iter().enumerate() {
        cache.push(p.as_bytes(), Cached { stat: stat(i as i64), id: ContentId([i as u8; 32]) });
    }
    cache.shape = Some(Shape { root: ContentId([9; 32]), others: [4; 32] });
    let bytes = cache.encode();
    let back = decode(&bytes).unwrap();
    assert_eq!(back.entries, cache.entries);
    assert_eq!(back.tree_ids, cache.tree_ids);
    assert_eq!(back.shape, cache.shape);
    for cut in MAGIC.len()..bytes.len() {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} accepted");
    }
}

#[test]
fn a_walks_paths_asked_in_order_are_found_where_they_are() {
    let paths = ["a/b", "a/b/c", "a/b.c", "a.c", "b"];
    let cache = StatCache::of_entries(
        paths.iter().map(|p| (p.as_bytes().to_vec(), Cached { stat: stat(1), id: ContentId([1; 32]) })).collect(),
    );
    let back = decode(&cache.encode()).unwrap();
    // A walk's paths, asked in order from where the last was found, are found where
    // they are, and those not cached where they would go.
    let mut hint = 0;
    let walked: [&[u8]; 6] = [b"a/a", b"a/b", b"a/b/d", b"a/b.c", b"a.c", b"c"];
    let found: Vec<_> = walked
        .iter()
        .map(|p| {
            let at = back.entries.find_from(hint, p);
            hint = at.map_or_else(|i| i, |i| i + 1);
            at
        })
        .collect();
    assert_eq!(found, [Err(0), Ok(0), Err(2), Ok(2), Ok(3), Err(5)]);
}

#[test]
fn a_search_from_any_hint_finds_what_a_search_of_the_whole_cache_finds() {
    // Paths in component order with their directories' entries between them.
    let mut paths: Vec<Vec<u8>> = Vec::new();
    for d in ["", "a/", "a/b/", "a.b/", "c/"] {
        for f in ["a", "b", "c.c", "d/e", "z"] {
            paths.push(format!("{d}{f}").into_bytes());
        }
    }
    paths.sort_by(|a, b| component_order(a, b));
    paths.dedup();
    let cache = StatCache::of_entries(
        paths.iter().step_by(2).map(|p| (p.clone(), Cached { stat: stat(1), id: ContentId([1; 32]) })).collect(),
    );
    let n = cache.entries.len();
    for p in &paths {
        let whole = cache.entries.search(0, n, p);
        for hint in 0..=n + 2 {
            assert_eq!(cache.entries.find_from(hint, p), whole, "{} from {hint}", String::from_utf8_lossy(p));
        }
    }
    assert_eq!(Files::default().find_from(3, b"a"), Err(0));
}

#[test]
fn a_cache_of_another_layout_is_not_read_and_one_out_of_order_is_malformed() {
    let mut cache = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
    cache.push(b"a", Cached { stat: stat(1), id: ContentId([1; 32]) });
    cache.push(b"b", Cached { stat: stat(2), id: ContentId([2; 32]) });
    cache.generation = [7; 16];
    let bytes = cache.encode();
    assert_eq!(decode(&bytes).unwrap().generation, [7; 16]);
    // An unreleased layout (TBS3 to TBS5): nothing is read, the next snapshot reads all.
    for old in [b"TBS3", b"TBS4", b"TBS5"] {
        let mut older = bytes.clone();
        older[..4].copy_from_slice(old);
        assert!(decode(&older).unwrap().entries.is_empty(), "{}", String::from_utf8_lossy(old));
    }
    // Out of order is no layout of turnback's: the same cache with its paths swapped.
    let mut wrong = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
    wrong.push(b"b", Cached { stat: stat(2), id: ContentId([2; 32]) });
    wrong.push(b"a", Cached { stat: stat(1), id: ContentId([1; 32]) });
    wrong.generation = [7; 16];
    let wrong = decode(&wrong.encode()).unwrap_err();
    assert_eq!(wrong.code, crate::error::ErrorCode::Corrupt, "paths out of order are malformed: {wrong:?}");
}

fn whole(paths: &[&str]) -> StatCache {
    let entries = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_bytes().to_vec(), Cached { stat: stat(i as i64), id: ContentId([i as u8; 32]) }))
        .collect();
    StatCache { taken_at_ns: 10_000_000_000, tree_ids: vec![ContentId([1; 32])], ..StatCache::of_entries(entries) }
}

/// A delta as [`seal_delta`] encodes it, decoded.
fn delta_of(entries: &[(&str, Option<Cached>)], generation: [u8; 16]) -> DecodedDelta {
    let mut out = Vec::new();
    let shape = Shape { root: ContentId([8; 32]), others: [2; 32] };
    let entries: Vec<(&[u8], Option<Cached>)> = entries.iter().map(|(p, c)| (p.as_bytes(), *c)).collect();
    encode_delta(&mut out, generation, 20_000_000_000, &entries, &[ContentId([5; 32])], shape).unwrap();
    for cut in 0..out.len() {
        assert!(decode_delta(&out[..cut]).is_err(), "a delta cut at {cut} is accepted");
    }
    decode_delta(&out).unwrap()
}

#[test]
fn a_delta_laid_over_the_whole_cache_gives_removes_and_joins_entries_in_order() {
    let mut cache = whole(&["a/x", "b", "c/d", "e"]);
    let given = |t: i64| Some(Cached { stat: stat(t), id: ContentId([t as u8; 32]) });
    let delta = delta_of(
        &[("a/w", given(50)), ("a/x", None), ("b", given(60)), ("c/d", None), ("d", given(70)), ("z", None)],
        cache.generation,
    );
    cache.lay(delta).expect("small");
    let order: Vec<&[u8]> = cache.entries.iter().map(|(p, _)| p).collect();
    assert_eq!(order, [&b"a/w"[..], b"b", b"d", b"e"]);
    let given_now: Vec<bool> = (0..4).map(|i| cache.given(i)).collect();
    assert_eq!(given_now, [true, true, true, false]);
    let ids: Vec<ContentId> = (0..4).map(|i| cache.id(i)).collect();
    assert_eq!(ids, [50, 60, 70, 3].map(|b| ContentId([b; 32])), "each id from where its entry came");
    assert_eq!(cache.delta.removed, [b"a/x".to_vec(), b"c/d".to_vec()], "a removal of a path never cached is dropped");
    assert_eq!(cache.shape.map(|s| s.root), Some(ContentId([8; 32])), "the delta's shape");
    assert!(cache.names_tree(&ContentId([5; 32])) && cache.names_tree(&ContentId([1; 32])));
    // An entry the delta gave is trusted from the delta's walk on; the whole cache's
    // from its own: a file modified 1 s before the whole cache's walk is racy there.
    assert_eq!(cache.clean_id(b"e", &stat(3)), Some(ContentId([3; 32])));
    assert_eq!(cache.clean_id(b"d", &stat(70)), Some(ContentId([70; 32])));
    let mut late = whole(&["f"]);
    late.entries.set_stat(0, stat(9_000_000_000)).unwrap();
    assert_eq!(late.clean_id(b"f", &stat(9_000_000_000)), None);
    late.lay(delta_of(&[("f", Some(Cached { stat: stat(9_000_000_000), id: ContentId([4; 32]) }))], [0; 16]))
        .expect("small");
    assert_eq!(late.clean_id(b"f", &stat(9_000_000_000)), Some(ContentId([4; 32])), "settled at the delta's walk");
}

#[test]
fn shared_prefixes_cannot_blow_up_a_small_input() {
    let (len, count) = (100_000usize, 1_000usize);
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&0i128.to_le_bytes());
    varint::put(&mut b, count as u64);
    varint::put(&mut b, 0);
    varint::put(&mut b, len as u64);
    b.extend(std::iter::repeat_n(b'a', len));
    for i in 1..count {
        varint::put(&mut b, len as u64);
        varint::put(&mut b, 1);
        b.push(i as u8);
    }
    b.extend(std::iter::repeat_n(0u8, 92 * count));
    varint::put(&mut b, 0);
    b.push(0);
    assert!(decode(&b).is_err(), "{} input bytes must not decode into ~100 MB of paths", b.len());
}

#[test]
fn files_keep_each_ones_device_and_a_cache_on_more_devices_than_an_item_counts_does_not_load() {
    // Files on a few devices, interleaved: each reads back with its own.
    let mut cache = StatCache::default();
    for (i, device) in [7u64, u64::MAX, 7, 0, u64::MAX].into_iter().enumerate() {
        let s = Stat { device, ..stat(i as i64) };
        cache.push(format!("f{i}").as_bytes(), Cached { stat: s, id: ContentId([i as u8; 32]) });
    }
    let back = decode(&cache.encode()).unwrap();
    let devices: Vec<u64> = back.entries.iter().map(|(_, s)| s.device).collect();
    assert_eq!(devices, [7, u64::MAX, 7, 0, u64::MAX]);
    assert_eq!(back.entries, cache.entries);
    // One device more than an item's index holds: the cache does not load.
    let many = |devices: u64| {
        let paths: Vec<Vec<u8>> = (0..devices).map(|d| format!("{d:08}").into_bytes()).collect();
        let entries = || {
            paths.iter().enumerate().map(|(d, p)| {
                (p.as_slice(), Cached { stat: Stat { device: d as u64, ..stat(1) }, id: ContentId([0; 32]) })
            })
        };
        let mut out = Vec::new();
        encode(&mut out, 0, &entries, &[], None, [0; 16]).unwrap();
        decode(&out)
    };
    assert_eq!(many(1 << 16).unwrap().entries.len(), 1 << 16);
    let err = many((1 << 16) + 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::Corrupt, "{err:?}");
}

#[test]
fn the_nth_number_outside_a_set_counts_past_its_members() {
    let outside = |set: &[u32]| -> Vec<usize> { (0..8).map(|n| nth_outside(set, n)).collect() };
    assert_eq!(outside(&[]), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(outside(&[0, 1, 5]), [2, 3, 4, 6, 7, 8, 9, 10]);
    assert_eq!(outside(&[3, 4, 6]), [0, 1, 2, 5, 7, 8, 9, 10]);
}

#[test]
fn random_deltas_laid_over_a_whole_cache_give_each_entry_its_stat_id_and_origin() {
    // Whole cache: even-numbered paths; a delta replaces, removes and joins (odd
    // numbers) at random. Each entry after laying must be what a plain map says.
    let mut rng = turnback_fuzz::mutate::Rng::new(0x2545_f491_4f6c_dd1d);
    let mut next = |m: u64| rng.below(m as usize) as u64;
    let path = |n: u64| format!("p{n:05}").into_bytes();
    for round in 0..40 {
        let n = 1 + next(200);
        let mut cache = StatCache { taken_at_ns: 10_000_000_000, ..Default::default() };
        let mut model = std::collections::BTreeMap::new();
        for k in 0..n {
            let c = Cached { stat: stat(k as i64), id: ContentId([k as u8; 32]) };
            cache.push(&path(2 * k), c);
            model.insert(path(2 * k), (c, false));
        }
        let mut entries: Vec<(Vec<u8>, Option<Cached>)> = Vec::new();
        for p in 0..2 * n + 2 {
            let given = Some(Cached { stat: stat(1000 + p as i64), id: ContentId([200 - (p % 100) as u8; 32]) });
            let change = match next(5) {
                0 => given,
                1 => None,
                _ => continue,
            };
            // Removing a path never cached is dropped; anything else changes the map.
            match change {
                Some(c) => {
                    model.insert(path(p), (c, true));
                }
                None => {
                    model.remove(&path(p));
                }
            }
            entries.push((path(p), change));
        }
        let delta = DecodedDelta {
            generation: [0; 16],
            taken_at_ns: 20_000_000_000,
            entries,
            tree_ids: Vec::new(),
            shape: None,
        };
        cache.lay(delta).unwrap();
        let got: Vec<(Vec<u8>, Cached, bool)> = (0..cache.entries.len())
            .map(|i| {
                let c = Cached { stat: cache.entries.stat(i), id: cache.id(i) };
                (cache.entries.path(i).to_vec(), c, cache.given(i))
            })
            .collect();
        let expected: Vec<(Vec<u8>, Cached, bool)> = model.into_iter().map(|(p, (c, g))| (p, c, g)).collect();
        assert!(got == expected, "round {round}: {got:?} != {expected:?}");
    }
}
