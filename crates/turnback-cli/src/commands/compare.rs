//! `turnback compare`.

use turnback::{CompareRequest, CompareSide, Comparison, NumStat, Result, escape_controls, quote_name};

use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, a: String, b: String, turn: Option<u64>, patch: bool) -> Result<Outcome> {
    let report = ctx.open(false)?.compare(&CompareRequest { a, b, turn, patch })?;
    Ok(Outcome::of(&report, text(&report)))
}

fn text(c: &Comparison) -> String {
    let mut t = format!("fork point: turn {} \"{}\"\n", c.fork_point.turn, escape_controls(&c.fork_point.preview));
    for (label, side) in [("A", &c.a), ("B", &c.b)] {
        t.push_str(&side_text(label, side));
    }
    t.push_str(&format!("\nA and B differ in {} file(s):\n", c.differences.len()));
    t.push_str(&stat_lines(&c.differences));
    if let Some(p) = &c.patch {
        t.push_str("\ndiff from A's result to B's:\n");
        t.push_str(p);
    }
    t
}

fn side_text(label: &str, s: &CompareSide) -> String {
    let mut t = format!(
        "\n{label}: session {}, turn {} \"{}\": {} file(s) changed since the fork point\n",
        quote_name(s.session_id.as_bytes()),
        s.turn,
        escape_controls(&s.preview),
        s.changes.len()
    );
    t.push_str(&stat_lines(&s.changes));
    if let Some(p) = &s.patch {
        t.push_str(p);
    }
    t
}

/// One line per path: how it changed and its +/- counts (`binary` when not text).
pub fn stat_lines(changes: &[NumStat]) -> String {
    changes
        .iter()
        .map(|c| {
            let counts = match (c.added, c.deleted) {
                (Some(x), Some(y)) => format!("+{x} -{y}"),
                _ => "binary".into(),
            };
            let change = serde_json::to_value(c.change).ok().and_then(|v| v.as_str().map(String::from));
            format!("  {:<13} {:>12}  {}\n", change.unwrap_or_default(), counts, quote_name(c.path_bytes()))
        })
        .collect()
}
