//! A fuzzing harness that runs on stable Rust inside `cargo test`: each target is a
//! function fed a committed seed corpus, then mutations of it for a time budget.
//!
//! `cargo-fuzz` needs a nightly compiler, which this project does not use; this harness
//! trades coverage guidance for outcome guidance: an input whose outcome (the error it
//! gives, or `ok`) has not been seen before joins the pool that later inputs are mutated
//! from, so the run walks past one parser error into the next layer's.
//!
//! Invariants:
//! - A target fails its test on the first input that panics, takes longer than
//!   [`SLOW`], or (with [`Tracking`] installed) asks for one allocation larger than its
//!   limit. The input is saved and its path printed, to be committed under the target's
//!   `regressions/` folder, where every later run replays it first.
//! - Every run prints one line to the test's standard error that `cargo test` does not
//!   capture: the target, executions, seconds, distinct outcomes and the seed that
//!   reproduces it (`TURNBACK_FUZZ_SEED`).
//! - `TURNBACK_FUZZ_SECS` sets each target's budget for mutations, after the corpus is
//!   replayed (default 3 s; 0 replays the corpus only).

mod alloc;
pub mod mutate;

use std::collections::HashSet;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use alloc::{Tracking, take_largest};
use mutate::{Keys, Rng};

/// One input that runs longer than this is a failure (a hang, or a quadratic path). Debug
/// builds on a shared 2-core CI machine run some targets (a store opened and snapshotted
/// per input) a hundred times slower than release: they get more room, not a flaky test.
pub const SLOW: Duration = Duration::from_secs(if cfg!(debug_assertions) { 30 } else { 5 });

/// How inputs are mutated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Binary: byte-level mutations only.
    Bytes,
    /// One JSON document (or TOML and other text: byte-level when it does not parse).
    Json,
    /// JSON Lines: one JSON document per line.
    JsonLines,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Inputs executed, corpus included.
    pub executions: u64,
    /// Corpus inputs replayed before mutating.
    pub corpus: usize,
    /// Distinct outcomes seen.
    pub outcomes: usize,
    /// The largest single allocation of any input, if tracked.
    pub largest_allocation: Option<usize>,
}

/// A fuzz target: its name, corpus, and limits.
#[derive(Debug)]
pub struct Fuzz {
    name: String,
    dir: PathBuf,
    corpus: Vec<(String, Vec<u8>)>,
    shape: Shape,
    alloc_base: usize,
    alloc_per_byte: usize,
}

impl Fuzz {
    /// A target called `name`, reading its committed corpus from `dir` (every file under
    /// it, `regressions/` included; a missing folder is an empty corpus).
    pub fn new(name: &str, dir: &Path, shape: Shape) -> Self {
        let mut corpus = Vec::new();
        read_dir(dir, &mut corpus);
        corpus.sort();
        Fuzz { name: name.to_string(), dir: dir.to_path_buf(), corpus, shape, alloc_base: 16 << 20, alloc_per_byte: 64 }
    }

    /// Adds an input made at run time (by the encoder under test, so the corpus follows
    /// the format as it changes). With `TURNBACK_FUZZ_WRITE_SEEDS=1` it is also written to
    /// the corpus folder, to be committed.
    pub fn seed(mut self, label: &str, bytes: Vec<u8>) -> Self {
        if std::env::var_os("TURNBACK_FUZZ_WRITE_SEEDS").is_some_and(|v| v == "1") {
            let file: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
            let _ = std::fs::create_dir_all(&self.dir);
            let _ = std::fs::write(self.dir.join(file), &bytes);
        }
        self.corpus.push((format!("<{label}>"), bytes));
        self
    }

    /// Allows one allocation of at most `base + per_byte × input length` bytes per input.
    pub fn alloc_limit(mut self, base: usize, per_byte: usize) -> Self {
        self.alloc_base = base;
        self.alloc_per_byte = per_byte;
        self
    }

    /// Replays the corpus, then mutates it for the budget, calling `exec` on each input;
    /// `exec` returns the outcome (`"ok"`, an error code…) that guides the search.
    ///
    /// # Panics
    /// On the first failing input, naming the file it was saved to.
    pub fn run(self, mut exec: impl FnMut(&[u8]) -> String) -> Report {
        assert!(!self.corpus.is_empty(), "fuzz {}: an empty corpus", self.name);
        let budget = budget();
        let seed = std::env::var("TURNBACK_FUZZ_SEED")
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                now.as_nanos() as u64 ^ u64::from(std::process::id())
            });
        let mut rng = Rng::new(seed);
        let tracked = {
            take_largest();
            let probe: Vec<u8> = Vec::with_capacity(12_345);
            drop(probe);
            take_largest() >= 12_345
        };
        let keys = if self.shape == Shape::Bytes {
            Keys::default()
        } else {
            Keys::of(&self.corpus.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>())
        };
        let mut pool: Vec<Vec<u8>> = Vec::new();
        let mut outcomes = HashSet::new();
        let mut largest = 0usize;
        let mut executions = 0u64;
        let started = Instant::now();
        let mut one = |input: &[u8], from: &str, executions: &mut u64| -> String {
            take_largest();
            let t = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| exec(input)));
            let took = t.elapsed();
            let asked = take_largest();
            *executions += 1;
            let failure = match &result {
                Err(panic) => Some(format!("panicked: {}", panic_text(panic.as_ref()))),
                Ok(_) if took > SLOW => Some(format!("took {took:?}")),
                Ok(_) if tracked && asked > self.alloc_base + self.alloc_per_byte * input.len() => {
                    Some(format!("allocated {asked} bytes at once for a {}-byte input", input.len()))
                }
                Ok(_) => None,
            };
            if let Some(why) = failure {
                let saved = save(&self.name, input);
                panic!(
                    "fuzz {}: an input ({from}, seed {seed:#x}) {why}; saved to {} — commit it under the \
                     target's corpus regressions/ once fixed",
                    self.name,
                    saved.display()
                );
            }
            largest = largest.max(asked);
            result.unwrap_or_default()
        };
        for (label, input) in &self.corpus {
            let outcome = one(input, label, &mut executions);
            if outcomes.insert(outcome) || pool.len() < 16 {
                pool.push(input.clone());
            }
        }
        let corpus = self.corpus.len();
        // The budget is for mutations: a slow target still gets them after its corpus.
        let mutating = Instant::now();
        while mutating.elapsed() < budget {
            let base = &pool[rng.below(pool.len())];
            let other = &self.corpus[rng.below(corpus)].1;
            let input = match self.shape {
                Shape::Bytes => mutate::bytes(&mut rng, base, other),
                Shape::Json => mutate::json(&mut rng, base, other, &keys),
                Shape::JsonLines => mutate::json_lines(&mut rng, base, other, &keys),
            };
            let outcome = one(&input, "mutated", &mut executions);
            if outcomes.insert(outcome) && pool.len() < 4096 {
                pool.push(input);
            }
        }
        let report =
            Report { executions, corpus, outcomes: outcomes.len(), largest_allocation: tracked.then_some(largest) };
        let alloc = report.largest_allocation.map_or("not tracked".to_string(), |b| format!("{} KiB", b / 1024));
        // Straight to the stream: `cargo test` captures `eprintln!`, and this line is the
        // record of how much fuzzing CI did.
        let _ = writeln!(
            std::io::stderr(),
            "fuzz {}: {} executions in {:.1} s ({} corpus inputs, {} distinct outcomes, largest allocation {alloc}, \
             seed {seed:#x})",
            self.name,
            report.executions,
            started.elapsed().as_secs_f64(),
            report.corpus,
            report.outcomes,
        );
        report
    }
}

/// Each target's time budget.
fn budget() -> Duration {
    let secs = std::env::var("TURNBACK_FUZZ_SECS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(3.0);
    Duration::from_secs_f64(secs.clamp(0.0, 3600.0))
}

fn read_dir(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            read_dir(&path, out);
        } else if path.file_name().is_some_and(|n| n != "README.md")
            && let Ok(bytes) = std::fs::read(&path)
        {
            out.push((path.display().to_string(), bytes));
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a non-string panic".to_string())
}

/// Writes a failing input where it survives the test, named by its content.
fn save(name: &str, input: &[u8]) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in input {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    let dir = std::env::temp_dir().join("turnback-fuzz-failures");
    let path = dir.join(format!("{name}-{h:016x}"));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&path, input);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_input_fails_the_target_and_is_saved() {
        let dir = tempdir();
        std::fs::write(dir.join("seed"), b"ok").unwrap();
        let result = std::panic::catch_unwind(|| {
            Fuzz::new("self-test", &dir, Shape::Bytes).run(|input| {
                assert!(!input.starts_with(b"o"), "the seed itself fails");
                "ok".into()
            })
        });
        let text = panic_text(result.unwrap_err().as_ref());
        assert!(text.contains("panicked: the seed itself fails"), "{text}");
        let saved = text.split("saved to ").nth(1).unwrap().split(' ').next().unwrap();
        assert_eq!(std::fs::read(saved).unwrap(), b"ok");
    }

    #[test]
    fn mutations_reach_new_outcomes_and_stay_bounded() {
        let dir = tempdir();
        std::fs::write(dir.join("a.json"), br#"{"type":"user","message":{"content":[{"text":"hi"}]}}"#).unwrap();
        let mut shapes = HashSet::new();
        let report = Fuzz::new("self-json", &dir, Shape::Json).run(|input| {
            assert!(input.len() <= mutate::MAX_INPUT);
            let outcome = match serde_json::from_slice::<serde_json::Value>(input) {
                Ok(v) => format!("{:?}", v.get("type").map(std::mem::discriminant)),
                Err(e) => format!("{:?}", e.classify()),
            };
            shapes.insert(outcome.clone());
            outcome
        });
        assert!(report.executions > 1, "{report:?}");
        assert!(shapes.len() >= 3, "structure-aware mutations change types and syntax: {shapes:?}");
    }

    fn tempdir() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("turnback-fuzz-self-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
