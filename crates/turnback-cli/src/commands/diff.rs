//! `turnback diff`.

use turnback::{DiffReport, DiffRequest, Result, quote_name};

use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(
    ctx: &Ctx,
    turn: Option<u64>,
    from: Option<String>,
    to: Option<String>,
    stat: bool,
    numstat: bool,
) -> Result<Outcome> {
    let req = DiffRequest { turn, from, to, patch: !stat && !numstat };
    let report = ctx.open(false)?.diff(&req)?;
    let text = if numstat {
        numstat_text(&report)
    } else if stat {
        stat_text(&report)
    } else {
        report.patch.clone().unwrap_or_default() + &left_out_text(&report)
    };
    Ok(Outcome::of(&report, text))
}

/// The files left out of either snapshot for their size: their changes are not shown.
fn left_out_text(report: &DiffReport) -> String {
    report.left_out.iter().map(|l| format!("left out {}\n", crate::output::left_out(&l.path, &l.reason))).collect()
}

fn numstat_text(report: &DiffReport) -> String {
    report
        .changes
        .iter()
        .map(|c| match (c.added, c.deleted) {
            (Some(x), Some(y)) => format!("{x}\t{y}\t{}\n", quote_name(c.path_bytes())),
            _ => format!("-\t-\t{}\n", quote_name(c.path_bytes())),
        })
        .collect()
}

fn stat_text(report: &DiffReport) -> String {
    let mut t = String::new();
    let (mut add, mut del) = (0, 0);
    for c in &report.changes {
        match (c.added, c.deleted) {
            (Some(x), Some(y)) => {
                add += x;
                del += y;
                t.push_str(&format!(
                    " {} | {} {}{}\n",
                    quote_name(c.path_bytes()),
                    x + y,
                    "+".repeat(x.min(40) as usize),
                    "-".repeat(y.min(40) as usize)
                ));
            }
            _ => t.push_str(&format!(" {} | Bin\n", quote_name(c.path_bytes()))),
        }
    }
    t.push_str(&format!(" {} files changed, {add} insertions(+), {del} deletions(-)\n", report.changes.len()));
    t + &left_out_text(report)
}
