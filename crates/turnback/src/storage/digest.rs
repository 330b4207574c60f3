//! Keyed digests of the store's indexes, so that a row deleted, added, changed or moved
//! behind turnback's back is seen by `verify`, even when nothing is left dangling.
//!
//! Every table marked `digested` in [`schema`] is written only through [`put`] and
//! [`delete`] (a test fails on any other write), which update, **in the same
//! transaction**, two rows of [`schema::INDEX_DIGESTS`]: one for the row's group (the key
//! up to its first `/`: the session) and one for the whole table. Each holds the number of
//! rows and the sum, modulo 2^256, of one keyed MAC per row over the table's name, the
//! row's key and its value (sealed values too: an older copy of a sealed row is a different
//! value). A table's total starts from a keyed seed, not from zero, and its row is always
//! there: a table wiped with every digest row of it, or with its total set to nothing, no
//! longer adds up. Without the master key nobody can make a sum that matches rows they
//! changed, and a whole group removed with its digest row still breaks the table's total.
//!
//! Whether a store keeps digests at all is in its key check (`storage/keys.rs`), which only
//! the master key makes: a new store gets its totals in the transaction that writes its
//! key check ([`init_in`]); a store from before digests gets them once, on its first open
//! by this version ([`upgrade`], trusting what it holds then); no store ever recomputes
//! them again, so deleting digest rows cannot make turnback trust what is left.
//!
//! Invariants: after any committed transaction of a store that keeps digests, each digest
//! row equals the sum over the rows it covers and every digested table has its total row;
//! [`check`] changes nothing.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::storage::keys::KeyRing;
use crate::storage::kv::{KeyValueStore, Ns, Txn};
use crate::storage::schema;

/// The number of rows and the sum of their MACs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Digest {
    rows: u64,
    sum: [u8; 32],
}

impl Digest {
    fn decode(bytes: &[u8]) -> Option<Self> {
        let (rows, sum) = bytes.split_at_checked(8)?;
        Some(Digest { rows: u64::from_be_bytes(rows.try_into().ok()?), sum: sum.try_into().ok()? })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = self.rows.to_be_bytes().to_vec();
        out.extend_from_slice(&self.sum);
        out
    }

    fn add(&mut self, mac: &[u8; 32]) {
        self.rows = self.rows.wrapping_add(1);
        let mut carry = 0u16;
        for (sum, m) in self.sum.iter_mut().zip(mac) {
            let s = u16::from(*sum) + u16::from(*m) + carry;
            *sum = s as u8;
            carry = s >> 8;
        }
    }

    fn subtract(&mut self, mac: &[u8; 32]) {
        self.rows = self.rows.wrapping_sub(1);
        let mut borrow = 0i16;
        for (sum, m) in self.sum.iter_mut().zip(mac) {
            let d = i16::from(*sum) - i16::from(*m) - borrow;
            *sum = d.rem_euclid(256) as u8;
            borrow = i16::from(d < 0);
        }
    }
}

fn digested() -> impl Iterator<Item = Ns> {
    schema::TABLES.iter().filter(|t| t.digested).map(|t| t.name)
}

/// The group of a row: its key up to the first `/` (the session), or the whole key.
fn group_of(key: &[u8]) -> &[u8] {
    key.split(|b| *b == b'/').next().unwrap_or(key)
}

fn group_row(ns: Ns, group: &[u8]) -> Vec<u8> {
    let mut k = format!("{ns}/").into_bytes();
    k.extend_from_slice(group);
    k
}

fn mac(keys: &KeyRing, ns: Ns, key: &[u8], value: &[u8]) -> [u8; 32] {
    let mut material = Vec::with_capacity(ns.len() + key.len() + value.len() + 9);
    material.extend_from_slice(ns.as_bytes());
    material.push(0);
    material.extend_from_slice(&(key.len() as u64).to_be_bytes());
    material.extend_from_slice(key);
    material.extend_from_slice(value);
    keys.lookup_id("index-digest", &material)
}

/// The total of table `ns` with no rows: a keyed seed, so an empty total cannot be made
/// up without the key.
fn empty_total(keys: &KeyRing, ns: Ns) -> Digest {
    Digest { rows: 0, sum: keys.lookup_id("index-digest-empty-table", ns.as_bytes()) }
}

fn update(keys: &KeyRing, txn: &mut dyn Txn, ns: Ns, key: &[u8], old: Option<&[u8]>, new: Option<&[u8]>) -> Result<()> {
    debug_assert!(schema::is_digested(ns), "{ns} is not a digested table");
    let old = old.map(|v| mac(keys, ns, key, v));
    let new = new.map(|v| mac(keys, ns, key, v));
    for (row, is_total) in [(group_row(ns, group_of(key)), false), (ns.as_bytes().to_vec(), true)] {
        // A missing total stays wrong (the seed is not added back): `check` reports it.
        let mut d = txn.get(schema::INDEX_DIGESTS, &row)?.and_then(|v| Digest::decode(&v)).unwrap_or_default();
        if let Some(old) = &old {
            d.subtract(old);
        }
        if let Some(new) = &new {
            d.add(new);
        }
        if !is_total && d.rows == 0 && d.sum == [0; 32] {
            txn.delete(schema::INDEX_DIGESTS, &row)?;
        } else {
            txn.put(schema::INDEX_DIGESTS, &row, &d.encode())?;
        }
    }
    Ok(())
}

/// Writes `value` under `key` of the digested table `ns`, and its digests.
pub(crate) fn put(keys: &KeyRing, txn: &mut dyn Txn, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
    let old = txn.get(ns, key)?;
    if old.as_deref() == Some(value) {
        // The same row, the same MAC: nothing to write.
        return Ok(());
    }
    txn.put(ns, key, value)?;
    update(keys, txn, ns, key, old.as_deref(), Some(value))
}

/// Deletes `key` of the digested table `ns`, and updates its digests; whether it was there.
pub(crate) fn delete(keys: &KeyRing, txn: &mut dyn Txn, ns: Ns, key: &[u8]) -> Result<bool> {
    let Some(old) = txn.get(ns, key)? else { return Ok(false) };
    txn.delete(ns, key)?;
    update(keys, txn, ns, key, Some(&old), None)?;
    Ok(true)
}

/// Digests by group (session).
type Groups = BTreeMap<Vec<u8>, Digest>;
/// Digests by group, and the table's total.
type Sums = (Groups, Digest);

/// The digests the rows of `ns` add up to: by group, and in total.
fn sums(
    keys: &KeyRing,
    ns: Ns,
    rows: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> (BTreeMap<Vec<u8>, Digest>, Digest) {
    let mut groups: BTreeMap<Vec<u8>, Digest> = BTreeMap::new();
    let mut total = empty_total(keys, ns);
    for (k, v) in rows {
        let m = mac(keys, ns, &k, &v);
        groups.entry(group_of(&k).to_vec()).or_default().add(&m);
        total.add(&m);
    }
    (groups, total)
}

/// The digests the rows of `ns` add up to now: by group, and in total.
fn computed(keys: &KeyRing, kv: &dyn KeyValueStore, ns: Ns) -> Result<Sums> {
    let mut rows = Vec::new();
    kv.scan(ns, b"", &mut |k, v| {
        rows.push((k.to_vec(), v.to_vec()));
        Ok(true)
    })?;
    Ok(sums(keys, ns, &mut rows.into_iter()))
}

/// The digests stored for `ns`: by group, and the total (none: its row is missing).
fn stored(kv: &dyn KeyValueStore, ns: Ns) -> Result<(Groups, Option<Digest>)> {
    let unreadable = Digest { rows: u64::MAX, sum: [0; 32] };
    let prefix = format!("{ns}/");
    let mut groups = BTreeMap::new();
    kv.scan(schema::INDEX_DIGESTS, prefix.as_bytes(), &mut |k, v| {
        groups.insert(k[prefix.len()..].to_vec(), Digest::decode(v).unwrap_or(unreadable));
        Ok(true)
    })?;
    let total = kv.get(schema::INDEX_DIGESTS, ns.as_bytes())?.map(|v| Digest::decode(&v).unwrap_or(unreadable));
    Ok((groups, total))
}

/// Writes the totals of a new store's (empty) digested tables, in the transaction that
/// writes its key check.
pub(crate) fn init_in(keys: &KeyRing, txn: &mut dyn Txn) -> Result<()> {
    for ns in digested() {
        txn.put(schema::INDEX_DIGESTS, ns.as_bytes(), &empty_total(keys, ns).encode())?;
    }
    Ok(())
}

/// What is wrong with one digested index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Its rows do not add up to their digest.
    Rows {
        /// The table.
        ns: Ns,
        /// The group (session) whose rows differ; none: a whole group is gone or was
        /// added, with its digest row.
        group: Option<String>,
        /// Rows there now.
        rows: u64,
        /// Rows the digest says there were.
        expected: u64,
    },
    /// The table's total row is gone: the table may have been wiped with its digests.
    TotalMissing {
        /// The table.
        ns: Ns,
        /// Rows there now.
        rows: u64,
    },
}

impl Mismatch {
    /// What it concerns.
    pub(crate) fn what(&self) -> String {
        match self {
            Mismatch::Rows { ns, group: Some(g), .. } => format!("{ns} of session {g}"),
            Mismatch::Rows { ns, group: None, .. } | Mismatch::TotalMissing { ns, .. } => ns.to_string(),
        }
    }

    /// The sentence `verify` reports.
    pub(crate) fn describe(&self) -> String {
        match self {
            Mismatch::Rows { ns, group, rows, expected } => {
                let whose = group.as_ref().map(|g| format!(" of {g}")).unwrap_or_default();
                let change = if rows < expected {
                    format!("{} row(s) missing", expected - rows)
                } else if rows > expected {
                    format!("{} row(s) added", rows - expected)
                } else {
                    "rows altered or moved".to_string()
                };
                format!(
                    "the {ns}{whose} index holds {rows} row(s) that do not match its keyed digest ({expected} row(s)): {change} outside turnback"
                )
            }
            Mismatch::TotalMissing { ns, rows } => format!(
                "the {ns} index ({rows} row(s)) has no keyed total: its digests were deleted outside turnback, \
                 perhaps with the table's rows"
            ),
        }
    }
}

/// Compares every digested table with its digests. Changes nothing. `kv` should be a read
/// snapshot (`KeyValueStore::read_snapshot`): rows and digests read apart from each other
/// while a writer commits do not add up.
pub(crate) fn check(keys: &KeyRing, kv: &dyn KeyValueStore) -> Result<Vec<Mismatch>> {
    let mut out = Vec::new();
    for ns in digested() {
        let (groups, total) = computed(keys, kv, ns)?;
        // Race tests commit a write here: the caller reads one snapshot, so both agree.
        crate::base::failpoint::hit("verify-digest-rows-read");
        let (stored_groups, stored_total) = stored(kv, ns)?;
        let Some(stored_total) = stored_total else {
            out.push(Mismatch::TotalMissing { ns, rows: total.rows });
            continue;
        };
        let mut any = false;
        let mut names: Vec<&Vec<u8>> = groups.keys().chain(stored_groups.keys()).collect();
        names.sort();
        names.dedup();
        for g in names {
            let have = groups.get(g).copied().unwrap_or_default();
            let want = stored_groups.get(g).copied().unwrap_or_default();
            if have != want {
                any = true;
                let group = Some(String::from_utf8_lossy(g).into_owned());
                out.push(Mismatch::Rows { ns, group, rows: have.rows, expected: want.rows });
            }
        }
        if !any && total != stored_total {
            out.push(Mismatch::Rows { ns, group: None, rows: total.rows, expected: stored_total.rows });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_then_subtracting_a_mac_gives_back_the_digest() {
        let mut d = Digest::default();
        let a = [0xffu8; 32];
        let b: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
        d.add(&a);
        d.add(&b);
        d.subtract(&a);
        let mut only_b = Digest::default();
        only_b.add(&b);
        assert_eq!(d, only_b);
        d.subtract(&b);
        assert_eq!(d, Digest::default());
        assert_eq!(Digest::decode(&only_b.encode()), Some(only_b));
    }

    use crate::storage::crypto::SecretKey;
    use crate::storage::keys::{self, KeySource};
    use crate::storage::kv::MemoryKv;

    fn ring(kv: &MemoryKv) -> KeyRing {
        KeyRing::open_with(kv, SecretKey([3u8; 32]), KeySource::Env, &init_in).unwrap()
    }

    fn write(keys: &KeyRing, kv: &MemoryKv, key: &[u8], value: &[u8]) {
        let mut txn = kv.begin().unwrap();
        put(keys, &mut *txn, schema::TURNS_BY_SESSION, key, value).unwrap();
        txn.commit().unwrap();
    }

    fn wipe_digests(kv: &MemoryKv) {
        let mut txn = kv.begin().unwrap();
        for k in txn.keys(schema::INDEX_DIGESTS, b"").unwrap() {
            txn.delete(schema::INDEX_DIGESTS, &k).unwrap();
        }
        txn.commit().unwrap();
    }

    #[test]
    fn a_new_store_has_every_total_and_checks_clean() {
        let kv = MemoryKv::new();
        let keys = ring(&kv);
        assert_eq!(check(&keys, &kv).unwrap(), vec![]);
        for ns in digested() {
            assert!(kv.contains(schema::INDEX_DIGESTS, ns.as_bytes()).unwrap(), "{ns} has its total");
        }
        write(&keys, &kv, b"s1/0000000001", b"t1");
        write(&keys, &kv, b"s1/0000000001", b"t1");
        assert_eq!(check(&keys, &kv).unwrap(), vec![]);
    }

    #[test]
    fn an_unreleased_builds_store_from_before_digests_is_too_old_and_deleted_digests_stay_missing() {
        let kv = MemoryKv::new();
        let keys = ring(&kv);
        write(&keys, &kv, b"s1/0000000001", b"t1");
        let other = MemoryKv::new();
        ring(&other);
        keys::write_check_v1(&other, &SecretKey([3u8; 32])).unwrap();
        let refused = KeyRing::open_with(&other, SecretKey([3u8; 32]), KeySource::Env, &init_in).unwrap_err();
        assert_eq!(refused.code, crate::error::ErrorCode::StoreTooOld);
        // Digests deleted are never recomputed: the table reports them missing.
        wipe_digests(&kv);
        let keys = ring(&kv);
        let found = check(&keys, &kv).unwrap();
        assert!(found.iter().all(|m| matches!(m, Mismatch::TotalMissing { .. })) && !found.is_empty(), "{found:?}");
    }

    #[test]
    fn an_older_copy_of_a_sealed_row_does_not_add_up() {
        let kv = MemoryKv::new();
        let keys = ring(&kv);
        let ns = schema::HISTORY_TOTALS;
        let mut txn = kv.begin().unwrap();
        put(&keys, &mut *txn, ns, b"s1", b"sealed totals, 1 entry").unwrap();
        txn.commit().unwrap();
        let mut txn = kv.begin().unwrap();
        put(&keys, &mut *txn, ns, b"s1", b"sealed totals, 2 entries").unwrap();
        // The older copy put back by hand, around the digests.
        txn.put(ns, b"s1", b"sealed totals, 1 entry").unwrap();
        txn.commit().unwrap();
        assert_eq!(check(&keys, &kv).unwrap().len(), 1);
    }

    #[test]
    fn a_row_belongs_to_the_group_before_its_first_slash() {
        assert_eq!(group_of(b"s1/0000000001"), b"s1");
        assert_eq!(group_of(b"s1"), b"s1");
    }
}
