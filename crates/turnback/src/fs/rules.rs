//! The ignore rules a walk honours: each directory's `.ignore` and `.gitignore`, the
//! repository's `.git/info/exclude`, and the same files in every directory above the
//! workspace up to the filesystem root (as git would for a subdirectory of a repository).
//! The user's global git configuration is not read.
//!
//! Invariants:
//! - The verdict for a path is the one the `ignore` crate's walker gives with the options
//!   turnback used before it walked on its own (hidden files kept, parents read, no
//!   repository required, no global gitignore): per kind of file the nearest directory
//!   with a matching rule decides, and `.ignore` outranks `.gitignore`, which outranks
//!   `info/exclude`. The walk's tests hold the two walkers to the same result on random
//!   trees.
//! - Matching is on paths relative to the directory whose file holds the rule; every
//!   matcher is rooted at an absolute directory, so a relative path is never mistaken for
//!   one that carries the root's prefix.
//! - Only directories with at least one rule are kept in the chain: a path is matched
//!   against as many levels as have rules, not as deep as it lies.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// How a workspace-relative path is made relative to a level's directory.
#[derive(Debug)]
enum Base {
    /// A directory of the workspace: strip this many bytes (its path and the `/`).
    Inside(usize),
    /// A directory above the workspace: put this in front (the workspace's path from
    /// there, and a `/`).
    Above(Vec<u8>),
}

/// One directory's rules, and the rules of the directories above it.
#[derive(Debug)]
struct Level {
    base: Base,
    /// `.ignore`, `.gitignore`, `info/exclude`, in the order they rank.
    files: [Gitignore; 3],
    parent: Option<Arc<Level>>,
}

/// The rules in force in one directory (cheap to clone: shared with the directories above).
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules(Option<Arc<Level>>);

/// An ignore file that could not be read whole, or a rule in it that is not a valid glob
/// (the rules that are valid still count).
#[derive(Debug)]
pub(crate) struct Problem {
    /// The ignore file (or the directory whose rules did not build).
    pub path: PathBuf,
    /// What went wrong.
    pub reason: String,
}

/// Which ignore-related names a directory's listing holds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Markers {
    /// `.ignore`.
    pub ignore: bool,
    /// `.gitignore`.
    pub gitignore: bool,
    /// `.git` (of any kind).
    pub git: bool,
}

impl Markers {
    /// Notes `name` if it is one of the names looked for.
    pub(crate) fn note(&mut self, name: &[u8]) {
        match name {
            b".ignore" => self.ignore = true,
            b".gitignore" => self.gitignore = true,
            b".git" => self.git = true,
            _ => {}
        }
    }
}

impl Rules {
    /// The rules of every directory above `root` (absolute and canonical), nearest last
    /// read; problems reading them are added to `notes`.
    pub(crate) fn above(root: &Path, notes: &mut Vec<Problem>) -> Rules {
        let root_bytes = root.as_os_str().as_bytes();
        let mut rules = Rules::default();
        let parents: Vec<&Path> = root.ancestors().skip(1).collect();
        for dir in parents.into_iter().rev() {
            let dir_bytes = dir.as_os_str().as_bytes();
            let mut prefix = root_bytes[dir_bytes.len()..].to_vec();
            if prefix.first() == Some(&b'/') {
                prefix.remove(0);
            }
            prefix.push(b'/');
            let found = Markers { ignore: true, gitignore: true, git: true };
            rules = rules.with(dir, Base::Above(prefix), found, notes);
        }
        rules
    }

    /// The rules inside directory `rel` of the workspace at `root` (absolute), given what its
    /// listing holds; problems reading its ignore files are added to `notes`. A directory
    /// with none of the names (nearly all of them) shares its parent's rules, and nothing is
    /// read or built for it.
    pub(crate) fn enter(&self, root: &Path, rel: &[u8], found: Markers, notes: &mut Vec<Problem>) -> Rules {
        if !(found.ignore || found.gitignore || found.git) {
            return self.clone();
        }
        let dir = if rel.is_empty() { root.to_path_buf() } else { root.join(OsStr::from_bytes(rel)) };
        let strip = if rel.is_empty() { 0 } else { rel.len() + 1 };
        self.clone().with(&dir, Base::Inside(strip), found, notes)
    }

    fn with(self, dir: &Path, base: Base, found: Markers, notes: &mut Vec<Problem>) -> Rules {
        let exclude = if found.git { git_common_dir(dir).map(|git| git.join("info/exclude")) } else { None };
        let files = [
            matcher(dir, found.ignore.then(|| dir.join(".ignore")), notes),
            matcher(dir, found.gitignore.then(|| dir.join(".gitignore")), notes),
            matcher(dir, exclude, notes),
        ];
        if files.iter().all(Gitignore::is_empty) {
            return self;
        }
        Rules(Some(Arc::new(Level { base, files, parent: self.0 })))
    }

    /// Whether workspace-relative `rel` (a directory if `is_dir`) is ignored.
    pub(crate) fn ignored(&self, rel: &[u8], is_dir: bool) -> bool {
        let mut verdicts: [Option<bool>; 3] = [None; 3];
        let mut joined = Vec::new();
        let mut level = self.0.as_deref();
        while let Some(l) = level {
            let path = match &l.base {
                Base::Inside(strip) => &rel[*strip..],
                Base::Above(prefix) => {
                    joined.clear();
                    joined.extend_from_slice(prefix);
                    joined.extend_from_slice(rel);
                    &joined[..]
                }
            };
            let path = Path::new(OsStr::from_bytes(path));
            for (verdict, file) in verdicts.iter_mut().zip(&l.files) {
                if verdict.is_none() {
                    *verdict = match file.matched(path, is_dir) {
                        Match::Ignore(_) => Some(true),
                        Match::Whitelist(_) => Some(false),
                        Match::None => None,
                    };
                }
            }
            if verdicts.iter().all(Option::is_some) {
                break;
            }
            level = l.parent.as_deref();
        }
        verdicts.into_iter().flatten().next() == Some(true)
    }
}

/// The matcher of the ignore file at `path`, rooted at `dir`; empty (nothing built) if
/// there is none. A file that cannot be read whole, or a line that is not a valid glob, is
/// noted; the lines that are valid still count.
fn matcher(dir: &Path, path: Option<PathBuf>, notes: &mut Vec<Problem>) -> Gitignore {
    let Some(path) = path else { return Gitignore::empty() };
    let mut builder = GitignoreBuilder::new(dir);
    // Followed, as git reads it: an ignore file may be a symlink.
    if path.exists()
        && let Some(e) = builder.add(&path)
    {
        notes.push(Problem { path, reason: e.to_string() });
    }
    builder.build().unwrap_or_else(|e| {
        notes.push(Problem { path: dir.to_path_buf(), reason: e.to_string() });
        Gitignore::empty()
    })
}

/// The directory holding `info/exclude` for the repository whose `.git` is in `dir`: `.git`
/// itself, or for a worktree (a `.git` file saying `gitdir: PATH`) the common directory
/// that `PATH/commondir` names. `None` if `.git` is neither or says nothing usable.
pub(crate) fn git_common_dir(dir: &Path) -> Option<PathBuf> {
    let git = dir.join(".git");
    let meta = std::fs::metadata(&git).ok()?;
    if !meta.is_file() {
        return Some(git);
    }
    let first_line = |p: &Path| std::fs::read_to_string(p).ok().and_then(|t| t.lines().next().map(str::to_string));
    let real = PathBuf::from(first_line(&git)?.strip_prefix("gitdir: ")?);
    let common = first_line(&real.join("commondir"))?;
    Some(if common.starts_with('.') { real.join(common) } else { PathBuf::from(common) })
}
