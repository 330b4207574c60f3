//! Mutations of an input: byte-level ones for binary formats, and structure-aware ones for
//! JSON and JSON Lines, which keep the document parseable often enough to reach the code
//! behind the parser (a wrong type in a known field, a key missing, a number out of range,
//! a line dropped or repeated).
//!
//! Invariants:
//! - Every mutation is a pure function of the random source and the inputs: a run is
//!   reproduced by its seed.
//! - No mutation makes an input larger than [`MAX_INPUT`].

use serde_json::{Map, Number, Value};

/// The largest input a mutation produces.
pub const MAX_INPUT: usize = 1 << 20;

/// A small, fast, seedable random source (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A source that yields the same sequence for the same `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.bits() % n as u64) as usize }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Values at the edges of integer fields: lengths, counts, sizes, offsets.
const EDGES: [u64; 12] =
    [0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x1_0000_0000, i64::MAX as u64, u64::MAX];

/// One to four byte-level mutations of `input`; `other` is another input of the corpus to
/// splice from.
pub fn bytes(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    if rng.one_in(64) {
        let len = rng.below(256);
        return (0..len).map(|_| rng.bits() as u8).collect();
    }
    for _ in 0..1 + rng.below(4) {
        once(rng, &mut out, other);
    }
    out.truncate(MAX_INPUT);
    out
}

fn once(rng: &mut Rng, out: &mut Vec<u8>, other: &[u8]) {
    let len = out.len();
    match rng.below(11) {
        0 if len > 0 => {
            let at = rng.below(len);
            out[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            out[at] = [0, 1, 0x7f, 0x80, 0xff, rng.bits() as u8][rng.below(6)];
        }
        2 if len > 0 => {
            // An edge value over an integer field of 1, 2, 4 or 8 bytes, either byte order.
            let width = [1, 2, 4, 8][rng.below(4)].min(len);
            let at = rng.below(len - width + 1);
            let v = EDGES[rng.below(EDGES.len())];
            let b = if rng.one_in(2) { v.to_le_bytes() } else { v.to_be_bytes() };
            out[at..at + width].copy_from_slice(&b[..width]);
        }
        3 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.bits() as u8).collect();
            out.splice(at..at, bytes);
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let end = at + 1 + rng.below((len - at).min(64));
            out.drain(at..end);
        }
        5 if len > 0 => {
            let at = rng.below(len);
            let end = at + 1 + rng.below((len - at).min(256));
            let copy = out[at..end].to_vec();
            let to = rng.below(len + 1);
            out.splice(to..to, copy);
        }
        6 => out.truncate(rng.below(len + 1)),
        7 if !other.is_empty() => {
            // This input's head, the other's tail.
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            out.truncate(cut);
            out.extend_from_slice(&other[from..]);
        }
        8 if !other.is_empty() && len > 0 => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(64));
            let at = rng.below(len);
            let end = (at + n).min(len);
            out.splice(at..end, other[from..from + n].iter().copied());
        }
        9 => {
            // A huge LEB128 varint: a length or count no input can hold.
            let at = rng.below(len + 1);
            let n = 5 + rng.below(6);
            let mut v: Vec<u8> = vec![0xff; n - 1];
            v.push(0x01);
            out.splice(at..at, v);
        }
        _ if len > 0 => {
            // Repeat a stretch many times: long runs reach limits and quadratic paths.
            let at = rng.below(len);
            let end = at + 1 + rng.below((len - at).min(16));
            let chunk = out[at..end].to_vec();
            let times = 1 + rng.below(512);
            let to = rng.below(len + 1);
            out.splice(to..to, chunk.iter().copied().cycle().take(chunk.len() * times));
        }
        _ => out.push(rng.bits() as u8),
    }
}

/// Object keys seen in a corpus: structure-aware mutations add them where they were not.
#[derive(Debug, Clone, Default)]
pub struct Keys(Vec<String>);

impl Keys {
    /// Collects every object key of every JSON value in `docs` (JSON Lines read line by line).
    pub fn of(docs: &[Vec<u8>]) -> Self {
        let mut keys = std::collections::BTreeSet::new();
        for doc in docs {
            for value in values(doc) {
                collect_keys(&value, &mut keys);
            }
        }
        Keys(keys.into_iter().collect())
    }

    fn pick(&self, rng: &mut Rng) -> String {
        if self.0.is_empty() || rng.one_in(8) {
            format!("k{}", rng.below(100))
        } else {
            self.0[rng.below(self.0.len())].clone()
        }
    }
}

fn collect_keys(value: &Value, keys: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                keys.insert(k.clone());
                collect_keys(v, keys);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_keys(v, keys)),
        _ => {}
    }
}

/// The JSON values of `doc`: itself if it parses whole, else each line that parses.
fn values(doc: &[u8]) -> Vec<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(doc) {
        return vec![v];
    }
    doc.split(|b| *b == b'\n').filter_map(|line| serde_json::from_slice(line).ok()).collect()
}

/// A mutation of one JSON document, structure-aware three times in four.
pub fn json(rng: &mut Rng, input: &[u8], other: &[u8], keys: &Keys) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<Value>(input) else { return bytes(rng, input, other) };
    if rng.one_in(4) {
        return bytes(rng, input, other);
    }
    let donor = values(other);
    for _ in 0..1 + rng.below(3) {
        mutate_value(rng, &mut value, keys, &donor);
    }
    let mut out = serde_json::to_vec(&value).unwrap_or_default();
    out.truncate(MAX_INPUT);
    out
}

/// A mutation of a JSON Lines document: of one line's value, or of the lines themselves.
pub fn json_lines(rng: &mut Rng, input: &[u8], other: &[u8], keys: &Keys) -> Vec<u8> {
    if rng.one_in(5) {
        return bytes(rng, input, other);
    }
    let mut lines: Vec<Vec<u8>> = input.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    let n = lines.len();
    match rng.below(6) {
        0 if n > 1 => {
            lines.remove(rng.below(n));
        }
        1 => {
            let line = lines[rng.below(n)].clone();
            lines.insert(rng.below(n + 1), line);
        }
        2 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            lines.swap(a, b);
        }
        3 => {
            // A line another document holds (a record of another kind, or another session).
            let theirs: Vec<&[u8]> = other.split(|b| *b == b'\n').collect();
            let line = theirs[rng.below(theirs.len())].to_vec();
            lines.insert(rng.below(n + 1), line);
        }
        _ => {
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(n);
                lines[at] = json(rng, &lines[at], other, keys);
            }
        }
    }
    let mut out = lines.join(&b'\n');
    out.truncate(MAX_INPUT);
    out
}

/// Counts the nodes of `value` (itself included).
fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

fn mutate_value(rng: &mut Rng, root: &mut Value, keys: &Keys, donor: &[Value]) {
    let total = count(root);
    let target = rng.below(total);
    let node = nth_node(root, target);
    match rng.below(10) {
        0 => *node = edge_value(rng),
        1 => {
            if let Value::Object(map) = node
                && !map.is_empty()
            {
                let k = map.keys().nth(rng.below(map.len())).cloned().unwrap_or_default();
                map.remove(&k);
            } else {
                *node = edge_value(rng);
            }
        }
        2 => {
            if let Value::Object(map) = node {
                map.insert(keys.pick(rng), edge_value(rng));
            } else {
                *node = edge_value(rng);
            }
        }
        3 => {
            if let Value::Array(items) = node
                && !items.is_empty()
            {
                let i = rng.below(items.len());
                if rng.one_in(2) {
                    items.remove(i);
                } else {
                    let copy = items[i].clone();
                    items.insert(rng.below(items.len() + 1), copy);
                }
            } else {
                *node = Value::Array(vec![node.take()]);
            }
        }
        4 if !donor.is_empty() => {
            // A value from another document of the corpus: the right shape in the wrong place.
            let d = &donor[rng.below(donor.len())];
            let mut d = d.clone();
            let pick = rng.below(count(&d));
            *node = nth_node(&mut d, pick).take();
        }
        5 => {
            // Nesting past serde_json's limit of 128 (deeper would overflow our own stack).
            let depth = 100 + rng.below(200);
            let mut v = Value::Null;
            for _ in 0..depth {
                v = if rng.one_in(2) {
                    Value::Array(vec![v])
                } else {
                    Value::Object(Map::from_iter([("a".into(), v)]))
                };
            }
            *node = v;
        }
        6 => {
            if let Value::String(s) = node {
                *s = edge_string(rng, s);
            } else {
                *node = Value::String(edge_string(rng, ""));
            }
        }
        7 => {
            // The same key's value in another type.
            *node = match node {
                Value::String(s) => s.parse::<f64>().ok().and_then(Number::from_f64).map_or(Value::Null, Value::Number),
                Value::Number(n) => Value::String(n.to_string()),
                Value::Bool(b) => Value::String(b.to_string()),
                Value::Null => Value::Bool(true),
                Value::Array(a) => a.first().cloned().unwrap_or(Value::Null),
                Value::Object(m) => Value::Array(m.values().cloned().collect()),
            };
        }
        _ => {
            if let Value::Array(items) = node
                && items.len() > 1
            {
                let (a, b) = (rng.below(items.len()), rng.below(items.len()));
                items.swap(a, b);
            } else {
                *node = edge_value(rng);
            }
        }
    }
}

/// The `n`th node of `value` in pre-order (the root if `n` is past the end).
fn nth_node(value: &mut Value, n: usize) -> &mut Value {
    fn locate(value: &Value, n: &mut usize, path: &mut Vec<usize>) -> bool {
        if *n == 0 {
            return true;
        }
        *n -= 1;
        let children: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => return false,
        };
        for (i, child) in children.into_iter().enumerate() {
            path.push(i);
            if locate(child, n, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    let mut left = n;
    if !locate(value, &mut left, &mut path) {
        return value;
    }
    let mut node = value;
    for i in path {
        node = match node {
            Value::Array(items) => &mut items[i],
            Value::Object(map) => map.values_mut().nth(i).expect("index from the same walk"),
            _ => unreachable!("a path only goes through containers"),
        };
    }
    node
}

fn edge_value(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => Value::from(-1),
        3 => Value::from(u64::MAX),
        4 => Value::from(i64::MIN),
        5 => Number::from_f64(1e308).map_or(Value::Null, Value::Number),
        6 => Number::from_f64(-0.5).map_or(Value::Null, Value::Number),
        7 => Value::from(""),
        8 => Value::Array(vec![]),
        9 => Value::Object(Map::new()),
        10 => Value::from(rng.bits() % 1000),
        _ => Value::String(edge_string(rng, "")),
    }
}

fn edge_string(rng: &mut Rng, base: &str) -> String {
    match rng.below(7) {
        0 => String::new(),
        1 => "x".repeat(1 + rng.below(100_000)),
        2 => format!("{base}\u{1b}[2J\r\n\0"),
        3 => format!("../../{base}/../etc/passwd"),
        4 => format!("{base}\u{202e}\u{fffd}é\u{10ffff}"),
        5 => "1970-01-01T00:00:00Z".to_string(),
        _ => base.chars().rev().collect(),
    }
}
