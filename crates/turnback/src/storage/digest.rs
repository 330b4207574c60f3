//! Keyed digests of the store's indexes, so that a row deleted, added, changed or moved
//! behind turnback's back is seen by `verify`, even when nothing is left dangling.
//!
//! Every table marked `digested` in [`schema`] is written only through [`put`] and
//! [`delete`], which update, **in the same transaction**, two rows of
//! [`schema::INDEX_DIGESTS`]: one for the row's group (the key up to its first `/`: the
//! session) and one for the whole table. Each holds the number of rows and the sum, modulo
//! 2^256, of one keyed MAC per row (over the table's name, the row's key and, for a table
//! whose values are not sealed, its value; a sealed value authenticates itself). Without
//! the master key nobody can make a sum that matches rows they changed, and a whole group
//! removed with its digest row still breaks the table's total.
//!
//! Invariants: after any committed transaction, each digest row equals the sum over the
//! rows it covers; [`recompute_once`] brings a store written before digests were kept to
//! that state once (trusting what it holds then); [`check`] changes nothing.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::storage::keys::KeyRing;
use crate::storage::kv::{KeyValueStore, Ns, Txn};
use crate::storage::schema;

/// Marks a store whose digests were computed over what it held (once, on first open).
const RECOMPUTED: &[u8] = b"~recomputed";

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

fn is_digested(ns: Ns) -> bool {
    schema::TABLES.iter().any(|t| t.name == ns && t.digested)
}

fn is_sealed(ns: Ns) -> bool {
    schema::TABLES.iter().any(|t| t.name == ns && t.sealed)
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
    if !is_sealed(ns) {
        material.extend_from_slice(value);
    }
    keys.lookup_id("index-digest", &material)
}

fn update(keys: &KeyRing, txn: &mut dyn Txn, ns: Ns, key: &[u8], old: Option<&[u8]>, new: Option<&[u8]>) -> Result<()> {
    debug_assert!(is_digested(ns), "{ns} is not a digested table");
    for row in [group_row(ns, group_of(key)), ns.as_bytes().to_vec()] {
        let mut d = txn.get(schema::INDEX_DIGESTS, &row)?.and_then(|v| Digest::decode(&v)).unwrap_or_default();
        if let Some(old) = old {
            d.subtract(&mac(keys, ns, key, old));
        }
        if let Some(new) = new {
            d.add(&mac(keys, ns, key, new));
        }
        if d.rows == 0 && d.sum == [0; 32] {
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

/// The digests the rows of `ns` add up to now: by group, and in total.
fn computed(keys: &KeyRing, kv: &dyn KeyValueStore, ns: Ns) -> Result<(BTreeMap<Vec<u8>, Digest>, Digest)> {
    let mut groups: BTreeMap<Vec<u8>, Digest> = BTreeMap::new();
    let mut total = Digest::default();
    kv.scan(ns, b"", &mut |k, v| {
        let m = mac(keys, ns, k, v);
        groups.entry(group_of(k).to_vec()).or_default().add(&m);
        total.add(&m);
        Ok(true)
    })?;
    Ok((groups, total))
}

/// The digests stored for `ns`: by group, and the total.
fn stored(kv: &dyn KeyValueStore, ns: Ns) -> Result<(BTreeMap<Vec<u8>, Digest>, Digest)> {
    let prefix = format!("{ns}/");
    let mut groups = BTreeMap::new();
    kv.scan(schema::INDEX_DIGESTS, prefix.as_bytes(), &mut |k, v| {
        groups.insert(k[prefix.len()..].to_vec(), Digest::decode(v).unwrap_or(Digest { rows: u64::MAX, sum: [0; 32] }));
        Ok(true)
    })?;
    let total = match kv.get(schema::INDEX_DIGESTS, ns.as_bytes())? {
        Some(v) => Digest::decode(&v).unwrap_or(Digest { rows: u64::MAX, sum: [0; 32] }),
        None => Digest::default(),
    };
    Ok((groups, total))
}

/// Computes every digest from the rows the store holds, once: for a store written before
/// digests were kept. A store that has them already is left alone.
pub(crate) fn recompute_once(keys: &KeyRing, kv: &dyn KeyValueStore) -> Result<()> {
    if kv.contains(schema::INDEX_DIGESTS, RECOMPUTED)? {
        return Ok(());
    }
    let mut txn = kv.begin()?;
    if txn.get(schema::INDEX_DIGESTS, RECOMPUTED)?.is_some() {
        return Ok(());
    }
    for key in txn.keys(schema::INDEX_DIGESTS, b"")? {
        txn.delete(schema::INDEX_DIGESTS, &key)?;
    }
    for ns in schema::TABLES.iter().filter(|t| t.digested).map(|t| t.name) {
        // Read through the transaction: rows written meanwhile by others are counted.
        let mut groups: BTreeMap<Vec<u8>, Digest> = BTreeMap::new();
        let mut total = Digest::default();
        for k in txn.keys(ns, b"")? {
            let Some(v) = txn.get(ns, &k)? else { continue };
            let m = mac(keys, ns, &k, &v);
            groups.entry(group_of(&k).to_vec()).or_default().add(&m);
            total.add(&m);
        }
        for (group, d) in groups {
            txn.put(schema::INDEX_DIGESTS, &group_row(ns, &group), &d.encode())?;
        }
        if total.rows > 0 {
            txn.put(schema::INDEX_DIGESTS, ns.as_bytes(), &total.encode())?;
        }
    }
    txn.put(schema::INDEX_DIGESTS, RECOMPUTED, b"")?;
    txn.commit()
}

/// One digested index whose rows do not add up to its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The table.
    pub ns: Ns,
    /// The group (session) whose rows differ; none: a whole group is gone or was added,
    /// with its digest row.
    pub group: Option<String>,
    /// Rows there now.
    pub rows: u64,
    /// Rows the digest says there were.
    pub expected: u64,
}

impl Mismatch {
    /// The sentence `verify` reports.
    pub fn describe(&self) -> String {
        let whose = self.group.as_ref().map(|g| format!(" of {g}")).unwrap_or_default();
        let change = if self.rows < self.expected {
            format!("{} row(s) missing", self.expected - self.rows)
        } else if self.rows > self.expected {
            format!("{} row(s) added", self.rows - self.expected)
        } else {
            "rows altered or moved".to_string()
        };
        format!(
            "the {}{whose} index holds {} row(s) that do not match its keyed digest ({} row(s)): {change} outside turnback",
            self.ns, self.rows, self.expected
        )
    }
}

/// Compares every digested table with its digests. Changes nothing.
pub(crate) fn check(keys: &KeyRing, kv: &dyn KeyValueStore) -> Result<Vec<Mismatch>> {
    let mut out = Vec::new();
    for ns in schema::TABLES.iter().filter(|t| t.digested).map(|t| t.name) {
        let (groups, total) = computed(keys, kv, ns)?;
        let (stored_groups, stored_total) = stored(kv, ns)?;
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
                out.push(Mismatch { ns, group, rows: have.rows, expected: want.rows });
            }
        }
        if !any && total != stored_total {
            out.push(Mismatch { ns, group: None, rows: total.rows, expected: stored_total.rows });
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

    #[test]
    fn a_row_belongs_to_the_group_before_its_first_slash() {
        assert_eq!(group_of(b"s1/0000000001"), b"s1");
        assert_eq!(group_of(b"s1"), b"s1");
    }
}
