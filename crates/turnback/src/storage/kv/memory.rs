//! An in-memory backend with the same transaction semantics, for unit tests.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::error::Result;
use crate::storage::kv::{KeyValueStore, Ns, Txn, Visit};

type MemoryMap = BTreeMap<(Ns, Vec<u8>), Vec<u8>>;

/// An in-memory backend with the same transaction semantics, for unit tests.
#[derive(Debug, Default)]
pub(crate) struct MemoryKv {
    map: Mutex<MemoryMap>,
    /// A read snapshot: writes are refused.
    snapshot: bool,
}

impl MemoryKv {
    /// An empty store.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, MemoryMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn memory_range<'m>(map: &'m MemoryMap, ns: Ns, prefix: &[u8]) -> impl Iterator<Item = (&'m Vec<u8>, &'m Vec<u8>)> {
    map.range((ns, prefix.to_vec())..)
        .take_while(move |((n, k), _)| *n == ns && k.starts_with(prefix))
        .map(|((_, k), v)| (k, v))
}

impl KeyValueStore for MemoryKv {
    fn get(&self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map().get(&(ns, key.to_vec())).cloned())
    }

    fn scan(&self, ns: Ns, prefix: &[u8], f: &mut Visit<'_>) -> Result<()> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            memory_range(&self.map(), ns, prefix).map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in entries {
            if !f(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    fn scan_keys(&self, ns: Ns, prefix: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()> {
        self.scan(ns, prefix, &mut |k, _| f(k))
    }

    fn begin(&self) -> Result<Box<dyn Txn + '_>> {
        if self.snapshot {
            return Err(crate::error::Error::new(
                crate::error::ErrorCode::Io,
                "internal error: a write through a read snapshot",
            ));
        }
        Ok(Box::new(MemoryTxn { map: self.map(), overlay: BTreeMap::new() }))
    }

    fn read_snapshot(&self) -> Result<Box<dyn KeyValueStore>> {
        Ok(Box::new(MemoryKv { map: Mutex::new(self.map().clone()), snapshot: true }))
    }

    fn compact(&self) -> Result<()> {
        Ok(())
    }

    fn disk_bytes(&self) -> Result<u64> {
        Ok(0)
    }
}

struct MemoryTxn<'a> {
    map: MutexGuard<'a, MemoryMap>,
    overlay: BTreeMap<(Ns, Vec<u8>), Option<Vec<u8>>>,
}

impl Txn for MemoryTxn<'_> {
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = (ns, key.to_vec());
        Ok(match self.overlay.get(&k) {
            Some(v) => v.clone(),
            None => self.map.get(&k).cloned(),
        })
    }

    fn keys(&mut self, ns: Ns, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut keys: std::collections::BTreeSet<Vec<u8>> =
            memory_range(&self.map, ns, prefix).map(|(k, _)| k.clone()).collect();
        for ((n, k), v) in &self.overlay {
            if *n == ns && k.starts_with(prefix) {
                if v.is_some() {
                    keys.insert(k.clone());
                } else {
                    keys.remove(k);
                }
            }
        }
        Ok(keys.into_iter().collect())
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.overlay.insert((ns, key.to_vec()), Some(value.to_vec()));
        Ok(())
    }

    fn put_if_absent(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<bool> {
        if self.get(ns, key)?.is_some() {
            return Ok(false);
        }
        self.put(ns, key, value)?;
        Ok(true)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<bool> {
        let existed = self.get(ns, key)?.is_some();
        self.overlay.insert((ns, key.to_vec()), None);
        Ok(existed)
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        let overlay = std::mem::take(&mut self.overlay);
        for (k, v) in overlay {
            match v {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
        Ok(())
    }
}
