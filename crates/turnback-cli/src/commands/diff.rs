//! `turnback diff`.

use serde_json::json;
use turnback::object::ContentId;
use turnback::snapshot::{self, SnapshotKind, SnapshotRecord};
use turnback::{Error, Result, Session, Store, Workspace, diff, turn};

use crate::app::Ctx;
use crate::output::Outcome;

fn root(r: &SnapshotRecord) -> Result<ContentId> {
    r.root.as_deref().and_then(ContentId::from_hex).ok_or_else(|| {
        Error::invalid(format!("snapshot {} was skipped ({})", r.snapshot_id, r.skipped.as_deref().unwrap_or("?")))
    })
}

fn live(store: &Store, ws: &Workspace, session: &Session) -> Result<SnapshotRecord> {
    snapshot::take(store, ws, session, SnapshotKind::AdHoc)
}

fn resolve(store: &Store, ws: &Workspace, session: &Session, id: &str) -> Result<SnapshotRecord> {
    if id == "live" { live(store, ws, session) } else { snapshot::get(store, id) }
}

pub fn run(
    ctx: &Ctx,
    turn_index: Option<u64>,
    from: Option<String>,
    to: Option<String>,
    stat: bool,
    numstat: bool,
) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let (a, b) = match (from, to) {
        (Some(f), Some(t)) => (resolve(&store, &ws, &session, &f)?, resolve(&store, &ws, &session, &t)?),
        (Some(f), None) => (resolve(&store, &ws, &session, &f)?, live(&store, &ws, &session)?),
        _ => {
            let t = match turn_index {
                Some(i) => turn::by_index(&store, &session.id, i)?,
                None => turn::list(&store, &session.id)?.pop().ok_or_else(|| Error::not_found("a turn"))?,
            };
            let start = t
                .snapshot
                .id
                .as_deref()
                .ok_or_else(|| Error::not_found(format!("turn {}'s start snapshot", t.index)))?;
            let end = match t.end_snapshot.as_ref().and_then(|e| e.id.clone()) {
                Some(id) => snapshot::get(&store, &id)?,
                None => live(&store, &ws, &session)?,
            };
            (snapshot::get(&store, start)?, end)
        }
    };
    let changes = diff::trees(&store, &root(&a)?, &root(&b)?)?;
    let (counts, patch) = diff::report(&store, &changes, !stat && !numstat)?;
    let mut json = json!({ "from": a.snapshot_id, "to": b.snapshot_id, "changes": counts });
    let text = if numstat {
        counts
            .iter()
            .map(|c| match (c.added, c.deleted) {
                (Some(x), Some(y)) => format!("{x}\t{y}\t{}\n", c.path),
                _ => format!("-\t-\t{}\n", c.path),
            })
            .collect()
    } else if stat {
        let mut t = String::new();
        let (mut add, mut del) = (0, 0);
        for c in &counts {
            match (c.added, c.deleted) {
                (Some(x), Some(y)) => {
                    add += x;
                    del += y;
                    t.push_str(&format!(
                        " {} | {} {}{}\n",
                        c.path,
                        x + y,
                        "+".repeat(x.min(40) as usize),
                        "-".repeat(y.min(40) as usize)
                    ));
                }
                _ => t.push_str(&format!(" {} | Bin\n", c.path)),
            }
        }
        t.push_str(&format!(" {} files changed, {add} insertions(+), {del} deletions(-)\n", counts.len()));
        t
    } else {
        json["patch"] = json!(patch);
        patch
    };
    Ok(Outcome::ok(json, text))
}
