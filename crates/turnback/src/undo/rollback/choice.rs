//! The safe choices' side files (sanitized patch, three-way merge) and `rollback resolve`.
//! Side files are plaintext and go only into the workspace, never into the store.

use crate::fs::body::Body;
use serde::{Deserialize, Serialize};

use super::*;
use crate::base::hex::hex;
use crate::base::time::{format_ms, now_ms};
use crate::checkpoint::artifact::ImageRole;
use crate::checkpoint::{self, CheckpointRecord};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, Observed};
use crate::fs::relpath::RelPath;
use crate::session::workspace::Workspace;
use crate::storage::schema;
use crate::storage::store::Store;
use crate::undo::patch;

const RESOLUTION_SCHEMA: u16 = 1;
use super::analysis::*;
use super::decision::*;
use crate::undo::guarded;

/// The content a path had before the oldest selected step, and the agent's newest result.
pub(super) fn endpoints(refs: &[&CheckpointRecord], store: &Store, p: &PathPlan) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let steps = step_indices(refs, &p.steps);
    let oldest = steps.last().and_then(|&(ri, ti)| pre_bytes(store, refs[ri], ti).1).and_then(|b| whole(store, &b));
    let newest = steps
        .first()
        .and_then(|&(ri, ti)| checkpoint::read_image(store, refs[ri], ti, ImageRole::Post).ok().flatten())
        .map(|(_, b)| b);
    (oldest, newest)
}

/// The bytes of `body`, whole (a patch or a merge is made of whole texts); `None` if
/// they cannot be read.
pub(super) fn whole(store: &Store, body: &Body) -> Option<Vec<u8>> {
    match body {
        Body::Stored { id, .. } => store.read_object(&crate::storage::content::ContentId(*id)).ok().map(|(_, b)| b),
        _ => crate::fs::body::read_whole(body).ok().flatten(),
    }
}

pub(super) fn side_path(path: &RelPath, suffix: &str) -> Result<RelPath> {
    let mut bytes = path.as_bytes().to_vec();
    bytes.extend_from_slice(suffix.as_bytes());
    RelPath::new(bytes)
}

/// Refuses a side file whose place holds something other than a file (checked before the
/// undo, so an impossible choice changes nothing).
fn check_side_file(ctx: Context<'_>, rel: &RelPath) -> Result<()> {
    match files::open_parent(&ctx.workspace.root, rel, false) {
        Ok(parent) => match parent.observe()? {
            Observed::Absent | Observed::File { .. } => Ok(()),
            _ => Err(Error::new(ErrorCode::PathRejected, format!("{}: not a regular file", rel.display()))),
        },
        // Its folder is missing: it is made when the file is written.
        Err(e) if e.code == ErrorCode::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn write_side_file(ctx: Context<'_>, rel: &RelPath, content: &[u8]) -> Result<()> {
    let parent = files::open_parent(&ctx.workspace.root, rel, true)?;
    let temp = files::temp_name(rel, &uuid::Uuid::now_v7().to_string());
    match parent.observe()? {
        Observed::Absent | Observed::File { .. } => {}
        _ => return Err(Error::new(ErrorCode::PathRejected, format!("{}: not a regular file", rel.display()))),
    }
    parent.replace(&temp, &content, Some(0o600))?;
    Ok(())
}

/// A pending user-authored resolution (sealed in the store: it names a path).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(super) struct Resolution {
    workspace_id: String,
    path: RelPath,
    merge_file: RelPath,
    expected: ThreeWayState,
    checkpoint_ids: Vec<String>,
    created_at: String,
}

pub(super) fn resolution_key(store: &Store, ws: &Workspace, path: &RelPath) -> Vec<u8> {
    let mut name = ws.id.as_bytes().to_vec();
    name.push(0);
    name.extend_from_slice(path.as_bytes());
    hex(&store.keys().lookup_id("resolution", &name)).into_bytes()
}

/// A caller's choice for a conflicting path, checked and computed, not yet written.
pub(super) struct PreparedChoice {
    file: ChoiceFile,
    content: Vec<u8>,
    /// For a merge: the pending resolution, sealed, under its key.
    resolution: Option<(Vec<u8>, Vec<u8>)>,
}

/// Checks that `choice` can be carried out for path `p` and computes its side file (a
/// sanitized patch, or a three-way merge with its pending resolution), writing nothing.
///
/// # Errors
/// `invalid-argument` for a merge without the three versions or of a binary file;
/// `path-rejected` if the side file's place holds something other than a file.
pub(super) fn prepare_choice(
    ctx: Context<'_>,
    refs: &[&CheckpointRecord],
    p: &PathPlan,
    choice: Choice,
) -> Result<Option<PreparedChoice>> {
    let (original, agent) = endpoints(refs, ctx.store, p);
    let real = p.real_bytes.as_ref().and_then(|b| whole(ctx.store, b));
    let name = p.path.display();
    let prepared = match choice {
        Choice::Skip => return Ok(None),
        Choice::Patch => {
            let text = patch::sanitized_patch(&name, real.as_deref(), original.as_deref());
            let file = side_path(&p.path, ".turnback.patch")?;
            let file = ChoiceFile { path: p.path.clone(), choice, file, has_conflict_markers: false };
            PreparedChoice { file, content: text.into_bytes(), resolution: None }
        }
        Choice::Resolve => {
            let (Some(current), Some(original), Some(agent)) = (real.as_deref(), original.as_deref(), agent.as_deref())
            else {
                return Err(Error::invalid(format!(
                    "{name}: a three-way merge needs the file now, the original and the agent's version; use patch or skip"
                )));
            };
            let Some((merged, markers)) = patch::three_way_merge(agent, current, original) else {
                return Err(Error::invalid(format!("{name}: binary files cannot be merged; use patch or skip")));
            };
            let file = side_path(&p.path, ".turnback-merge")?;
            let resolution = Resolution {
                workspace_id: ctx.workspace.id.clone(),
                path: p.path.clone(),
                merge_file: file.clone(),
                expected: p.real.state(),
                checkpoint_ids: p.steps.iter().map(|s| s.checkpoint_id.clone()).collect(),
                created_at: format_ms(now_ms()),
            };
            let key = resolution_key(ctx.store, ctx.workspace, &p.path);
            let sealed = ctx.store.seal_record(schema::RESOLUTIONS, &key, RESOLUTION_SCHEMA, &resolution)?;
            let file = ChoiceFile { path: p.path.clone(), choice, file, has_conflict_markers: markers };
            PreparedChoice { file, content: merged.into_bytes(), resolution: Some((key, sealed)) }
        }
    };
    check_side_file(ctx, &prepared.file.file)?;
    Ok(Some(prepared))
}

/// Writes a prepared choice's side file (and records its pending resolution).
pub(super) fn write_choice(ctx: Context<'_>, prepared: PreparedChoice) -> Result<ChoiceFile> {
    write_side_file(ctx, &prepared.file.file, &prepared.content)?;
    if let Some((key, sealed)) = &prepared.resolution {
        let mut txn = ctx.store.kv().begin()?;
        txn.put(schema::RESOLUTIONS, key, sealed)?;
        txn.commit()?;
    }
    Ok(prepared.file)
}

/// Applies the person's edited merge file for `path` through the guarded-apply engine:
/// only if the file is still as it was when the merge was written, with a checkpoint first.
///
/// # Errors
/// `not-found` without a pending resolution; `invalid-argument` if conflict markers are
/// left; `conflict` if the file changed since the merge was written.
pub(crate) fn resolve(ctx: Context<'_>, path: &RelPath) -> Result<ResolveResult> {
    let key = resolution_key(ctx.store, ctx.workspace, path);
    let target =
        guarded::Target { store: ctx.store, workspace: ctx.workspace, session: ctx.session, failpoints: FAILPOINTS };
    let make = || Resolving::new(ctx, &key, path);
    let (done, checkpoint_id) = guarded::apply(target, None, make, |_| Ok(()))?;
    let checkpoint_id = checkpoint_id.ok_or_else(|| Error::invalid("nothing to write"))?;
    if done.refused {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!("{} changed while it was being written; it was left as it is", path.display()),
        ));
    }
    let _ = done.merge_parent.remove_temp(done.merge_parent.name());
    let mut txn = ctx.store.kv().begin()?;
    txn.delete(schema::RESOLUTIONS, &key)?;
    txn.commit()?;
    Ok(ResolveResult { path: path.clone(), checkpoint_id, excluded_effects: super::excluded_effects() })
}

/// A resolution's writes share a rollback's failpoints.
const FAILPOINTS: [&str; 3] = ["rollback-committed", "rollback-before-swap", "rollback-written"];

/// A resolution being applied: the one write of the merged file.
struct Resolving {
    plan: PathPlan,
    merge_parent: files::Parent,
    refused: bool,
}

impl Resolving {
    /// Reads the pending resolution and the edited merge file, and checks the file is
    /// still as it was when the merge was written (under the workspace lock).
    fn new(ctx: Context<'_>, key: &[u8], path: &RelPath) -> Result<Self> {
        let resolution: Resolution = ctx
            .store
            .get_record(schema::RESOLUTIONS, key)?
            .ok_or_else(|| Error::not_found(format!("a pending resolution for {}", path.display())))?;
        let merge_parent = files::open_parent(&ctx.workspace.root, &resolution.merge_file, false)?;
        let Current::File { body, .. } = merge_parent.read()? else {
            return Err(Error::not_found(format!("the merge file {}", resolution.merge_file.display())));
        };
        let merged = crate::fs::body::read_whole(&body)?.unwrap_or_default();
        let text = String::from_utf8_lossy(&merged);
        if text.lines().any(|l| l.starts_with("<<<<<<<") || l.starts_with(">>>>>>>")) {
            return Err(Error::invalid(format!(
                "{} still has conflict markers; edit it, then run resolve again",
                resolution.merge_file.display()
            )));
        }
        let (seen, bytes) = observe(ctx.store, ctx.workspace, path, None, &WrittenBack::new())?;
        if seen.state() != resolution.expected {
            return Err(Error::new(
                ErrorCode::Conflict,
                format!("{} changed since the merge was written; nothing was changed", path.display()),
            ));
        }
        let mode = match &seen {
            Seen::File { identity: Some(identity), .. } => Some(identity.permissions()),
            _ => None,
        };
        let plan = PathPlan {
            path: path.clone(),
            real: seen,
            real_bytes: bytes,
            steps: Vec::new(),
            write: Some(Final::File { body: Body::Held(merged.to_vec()), mode }),
        };
        Ok(Resolving { plan, merge_parent, refused: false })
    }
}

impl guarded::Plan for Resolving {
    fn plan_id(&self) -> &str {
        ""
    }

    fn writes(&self) -> Vec<guarded::Write> {
        vec![write_of(&self.plan)]
    }

    fn written(&mut self, _root: &std::path::Path, _index: usize, refused: Option<guarded::Refused>) {
        self.refused = refused.is_some();
    }
}
