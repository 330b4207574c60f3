//! Which other processes hold a file open (Linux: `/proc/*/fd` and `/proc/*/maps`).
//!
//! Invariants: only processes this user can see are examined; our own process is never
//! counted; a process that vanishes mid-scan is simply skipped. On systems without
//! `/proc` the scan finds nothing (and says so through [`available`]).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Whether open handles can be detected here.
pub(crate) fn available() -> bool {
    Path::new("/proc/self/fd").is_dir()
}

/// For each `(device, inode)` in `files`, the pids of other processes holding it open or
/// mapped.
pub(crate) fn holders(files: &HashSet<(u64, u64)>) -> BTreeMap<(u64, u64), Vec<u32>> {
    use std::os::unix::fs::MetadataExt;
    let mut found: BTreeMap<(u64, u64), Vec<u32>> = BTreeMap::new();
    if files.is_empty() {
        return found;
    }
    let me = std::process::id();
    let inodes: HashSet<u64> = files.iter().map(|(_, ino)| *ino).collect();
    let Ok(procs) = std::fs::read_dir("/proc") else { return found };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let mut held = HashSet::new();
        if let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) {
            for fd in fds.flatten() {
                // metadata() follows the magic link to the open file itself.
                if let Ok(m) = std::fs::metadata(fd.path())
                    && files.contains(&(m.dev(), m.ino()))
                {
                    held.insert((m.dev(), m.ino()));
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(entry.path().join("maps")) {
            for line in maps.lines() {
                // address perms offset dev inode path
                let mut cols = line.split_whitespace();
                let (Some(_), Some(_), Some(_), Some(_), Some(ino)) =
                    (cols.next(), cols.next(), cols.next(), cols.next(), cols.next())
                else {
                    continue;
                };
                let Ok(ino) = ino.parse::<u64>() else { continue };
                if ino != 0 && inodes.contains(&ino) {
                    let path: String = cols.collect::<Vec<_>>().join(" ");
                    if let Ok(m) = std::fs::metadata(&path)
                        && files.contains(&(m.dev(), m.ino()))
                    {
                        held.insert((m.dev(), m.ino()));
                    }
                }
            }
        }
        for key in held {
            found.entry(key).or_default().push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn finds_a_child_process_holding_a_file_and_ignores_ourselves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held.txt");
        std::fs::write(&path, "x").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        let key = (m.dev(), m.ino());
        let _mine = std::fs::File::open(&path).unwrap();
        assert!(holders(&HashSet::from([key])).is_empty(), "our own handle does not count");
        let mut child =
            std::process::Command::new("sh").arg("-c").arg("exec 3<\"$0\"; sleep 30").arg(&path).spawn().unwrap();
        let mut seen = Vec::new();
        for _ in 0..200 {
            seen = holders(&HashSet::from([key])).remove(&key).unwrap_or_default();
            if !seen.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen.contains(&child.id()), "{seen:?}");
    }
}
