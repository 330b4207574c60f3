//! The one decision function of rollback: what to do with one target, from its pre-
//! and post-image and what is at the path. Pure: no I/O, so preview and apply agree.

use super::*;
use crate::checkpoint::{CheckpointRecord, CommitState, ImageRecord, RetentionState, StageState};
use crate::fs::files::FileIdentity;

pub(super) fn conflict(reason_code: ConflictReason, detail: impl Into<String>) -> Outcome {
    Outcome::Conflict { reason_code, safe_choices: SAFE_CHOICES.to_vec(), detail: detail.into() }
}

pub(super) fn mismatch(detail: impl Into<String>) -> Outcome {
    Outcome::Mismatch { reason_code: "identity-changed".into(), detail: detail.into() }
}

pub(super) fn inaccessible(cause: &str) -> Outcome {
    Outcome::Inaccessible { cause_code: cause.into() }
}

/// What can be said about a checkpoint record as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordStatus {
    /// Committed and verified.
    Usable,
    /// Its process died before the mutation was dispatched: nothing happened.
    Abandoned,
    /// Its process died after dispatch: the journal ends in `OperationUnknownOutcome`.
    UnknownOutcome,
    /// Not committed (an incomplete stage, or an external stage awaiting commit).
    RecoveryLocked,
    /// Its content was evicted by retention.
    Evicted,
}

pub(super) fn record_status(r: &CheckpointRecord) -> RecordStatus {
    match r.stage_state {
        StageState::Committed if r.retention_state == RetentionState::Evicted => RecordStatus::Evicted,
        StageState::Committed => RecordStatus::Usable,
        StageState::Unreachable => match r.mutation.commit_state {
            CommitState::Abandoned => RecordStatus::Abandoned,
            CommitState::UnknownOutcome => RecordStatus::UnknownOutcome,
            _ => RecordStatus::RecoveryLocked,
        },
        StageState::Staging | StageState::Staged => RecordStatus::RecoveryLocked,
    }
}

/// Whether the stored pre-image bytes can be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PreBytes {
    /// Read and verified (or not needed: the file did not exist).
    Available,
    /// Not stored (unprotected) or gone.
    Missing,
    /// Evicted by retention.
    Evicted,
    /// Failed verification.
    Corrupt,
    /// Belongs to an incomplete stage.
    Locked,
}

/// What is at the path, as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// Nothing; `moved` names a sibling that is the same file renamed, or a name equal
    /// but for case or Unicode form.
    Absent { moved: Option<String> },
    /// A regular file. `written_back`: turnback itself wrote this very file (its device
    /// and inode) with these bytes, taking back a rollback or a rewind: a file that is
    /// another inode than the mutation left, but the same bytes put back by an undo, is
    /// still the mutation's result (not someone's recreation).
    File { digest: String, identity: Option<FileIdentity>, held_by: Vec<u32>, written_back: bool },
    /// A symlink at the path or one of its parents.
    BehindSymlink,
    /// A directory or special file.
    Other,
    /// Exists but cannot be read.
    Unreadable,
}

impl Seen {
    pub(super) fn state(&self) -> ThreeWayState {
        match self {
            Seen::Absent { .. } => ThreeWayState::Absent,
            Seen::File { digest, identity, .. } => {
                ThreeWayState::Present { digest: digest.clone(), version: identity.as_ref().map(version_of) }
            }
            _ => ThreeWayState::Unknown,
        }
    }

    pub(super) fn digest(&self) -> Option<&str> {
        match self {
            Seen::File { digest, .. } => Some(digest),
            _ => None,
        }
    }
}

pub(super) fn version_of(id: &FileIdentity) -> String {
    format!("{}:{}:{}", id.device, id.inode, id.mtime_ns)
}

pub(super) fn image_state(image: Option<&ImageRecord>) -> ThreeWayState {
    match image {
        Some(i) if !i.present => ThreeWayState::Absent,
        Some(ImageRecord { digest: Some(d), identity, .. }) => {
            ThreeWayState::Present { digest: d.clone(), version: identity.as_ref().map(version_of) }
        }
        _ => ThreeWayState::Unknown,
    }
}

/// Everything [`decide`] looks at for one target.
#[derive(Debug, Clone)]
pub(super) struct Inputs<'a> {
    pub status: RecordStatus,
    pub pre: &'a ImageRecord,
    pub post: Option<&'a ImageRecord>,
    pub seen: &'a Seen,
    /// Whether `seen` is a state an earlier (newer) step of this rollback would leave,
    /// rather than what is on disk: then there is no identity to compare.
    pub virtual_state: bool,
    pub pre_bytes: PreBytes,
    pub excluded: bool,
    /// A newer mutation of this path could not be taken back by this rollback (or was
    /// already taken back by someone else): an older one must not be built on top.
    pub later_not_taken_back: bool,
}

/// The one decision: what to do with one target. Used by preview and apply alike. Three
/// phases, in order: what refuses the target whatever the file holds; what the file holds
/// now against what the mutation left; whether the original can be read back.
pub(super) fn decide(i: &Inputs<'_>) -> Outcome {
    match refusal(i) {
        Err(refused) => refused,
        Ok(post) => needs_original(i, against_now(i, post)),
    }
}

/// Phase 1: the caller's exclusion, the record's state, a later mutation that stays, and
/// what stands at the path; else the mutation's result, to compare with.
fn refusal<'a>(i: &Inputs<'a>) -> Result<&'a ImageRecord, Outcome> {
    if i.excluded {
        return Err(Outcome::Skipped { reason: "excluded by the caller (skip-target)".into() });
    }
    match i.status {
        RecordStatus::Usable => {}
        RecordStatus::Abandoned => {
            return Err(Outcome::Skipped { reason: "not covered: the mutation was never dispatched".into() });
        }
        RecordStatus::UnknownOutcome => {
            return Err(Outcome::UnknownOutcome {
                reason: "the operation's journal ends in OperationUnknownOutcome".into(),
            });
        }
        RecordStatus::RecoveryLocked => return Err(inaccessible("recovery-locked")),
        RecordStatus::Evicted => return Err(inaccessible("evicted")),
    }
    let Some(post) = i.post else { return Err(inaccessible("recovery-locked")) };
    if i.later_not_taken_back {
        return Err(conflict(
            ConflictReason::ContentConflict,
            "a later mutation of this file cannot be taken back (or someone else already changed it back), so this one cannot either",
        ));
    }
    match i.seen {
        Seen::BehindSymlink => {
            return Err(conflict(ConflictReason::BehindSymlink, "the path is a symlink or behind one"));
        }
        Seen::Unreadable => return Err(inaccessible("unreadable")),
        Seen::Other => {
            return Err(conflict(ConflictReason::TargetRecreated, "something other than a file is there now"));
        }
        Seen::File { held_by, .. } if !held_by.is_empty() => {
            return Err(Outcome::UnknownOutcome { reason: format!("the file is open in process(es) {held_by:?}") });
        }
        _ => {}
    }
    if i.pre.present && i.pre.digest.is_none() {
        return Err(conflict(ConflictReason::NoPreImageDigest, "the checkpoint has no digest of the original"));
    }
    Ok(post)
}

/// Phase 2: the file now (absent or a regular file) against the mutation's result `post`
/// and its original.
fn against_now(i: &Inputs<'_>, post: &ImageRecord) -> Outcome {
    let inverse = match (i.pre.present, post.present) {
        (false, _) => InverseOperation::DeleteFile,
        (true, false) => {
            InverseOperation::RestoreFromArtifact { artifact_id: i.pre.artifact_id.clone().unwrap_or_default() }
        }
        (true, true) => {
            InverseOperation::RestorePreImage { pre_image_digest: i.pre.digest.clone().unwrap_or_default() }
        }
    };
    let expected = image_state(Some(i.pre));
    let eligible = |no_op: bool| Outcome::AppliedEligible {
        inverse_operation: inverse.clone(),
        expected_current: expected.clone(),
        no_op,
    };
    // Already as it was before the mutation: nothing to write.
    let at_pre = match i.seen {
        Seen::Absent { .. } => !i.pre.present,
        Seen::File { digest, .. } => i.pre.digest.as_deref() == Some(digest.as_str()),
        _ => false,
    };
    let at_post = match i.seen {
        Seen::Absent { .. } => !post.present,
        Seen::File { digest, .. } => post.digest.as_deref() == Some(digest.as_str()),
        _ => false,
    };
    if i.virtual_state && !at_post {
        // The newer mutation started from something other than this one's result:
        // someone else changed the file in between, and that version is theirs.
        return conflict(
            ConflictReason::ContentConflict,
            "someone else changed the file between this mutation and a later one",
        );
    }
    if at_pre {
        return eligible(true);
    }
    match (post.present, i.seen) {
        (true, Seen::Absent { moved: Some(name) }) => mismatch(format!("the file is now at {name:?}")),
        (true, Seen::Absent { moved: None }) => {
            conflict(ConflictReason::TargetDeleted, "the file the agent wrote was deleted since")
        }
        (true, Seen::File { digest, identity, written_back, .. }) => {
            let same_content = post.digest.as_deref() == Some(digest.as_str());
            let same_file = i.virtual_state
                || *written_back
                || match (identity, post.identity) {
                    (Some(now), Some(then)) if then.names_a_file() => {
                        (now.device, now.inode) == (then.device, then.inode)
                    }
                    _ => true,
                };
            match (same_content, same_file) {
                (true, true) => eligible(false),
                (true, false) => mismatch("the same content is there, but as a different file (recreated)"),
                (false, true) => conflict(ConflictReason::ContentConflict, "the file was changed since"),
                (false, false) => conflict(ConflictReason::TargetRecreated, "a different file is there now"),
            }
        }
        (false, Seen::Absent { .. }) => eligible(false),
        (false, Seen::File { .. }) => {
            conflict(ConflictReason::TargetRecreated, "a file was created where the agent deleted one")
        }
        _ => unreachable!("symlinks, others and unreadable files were decided above"),
    }
}

/// Phase 3: an eligible restore needs the original's bytes, readable and verified.
fn needs_original(i: &Inputs<'_>, outcome: Outcome) -> Outcome {
    if !outcome.eligible() || !i.pre.present {
        return outcome;
    }
    match i.pre_bytes {
        PreBytes::Available => outcome,
        PreBytes::Missing => inaccessible("missing-artifact"),
        PreBytes::Evicted => inaccessible("evicted"),
        PreBytes::Locked => inaccessible("recovery-locked"),
        PreBytes::Corrupt => conflict(ConflictReason::BinaryCorrupt, "the stored original failed verification"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(present: bool, digest: &str, inode: u64, artifact: bool) -> ImageRecord {
        ImageRecord {
            present,
            digest: present.then(|| digest.to_string()),
            size: 1,
            content_class: None,
            artifact_id: (present && artifact).then(|| "a".to_string()),
            identity: present.then_some(FileIdentity {
                device: 1,
                inode,
                mode: 0o100644,
                size: 1,
                mtime_ns: 0,
                ctime_ns: 0,
            }),
        }
    }

    fn file(digest: &str, inode: u64) -> Seen {
        Seen::File {
            digest: digest.into(),
            identity: Some(FileIdentity { device: 1, inode, mode: 0o100644, size: 1, mtime_ns: 0, ctime_ns: 0 }),
            held_by: vec![],
            written_back: false,
        }
    }

    fn run(pre: &ImageRecord, post: &ImageRecord, seen: &Seen) -> Outcome {
        decide(&Inputs {
            status: RecordStatus::Usable,
            pre,
            post: Some(post),
            seen,
            virtual_state: false,
            pre_bytes: PreBytes::Available,
            excluded: false,
            later_not_taken_back: false,
        })
    }

    fn reason(o: &Outcome) -> String {
        match o {
            Outcome::Conflict { reason_code, .. } => {
                serde_json::to_value(reason_code).unwrap().as_str().unwrap().to_string()
            }
            Outcome::Mismatch { reason_code, .. } => reason_code.clone(),
            other => other.category().to_string(),
        }
    }

    #[test]
    fn edit_rolls_back_only_when_current_is_the_agents_version() {
        let (pre, post) = (image(true, "A", 7, true), image(true, "B", 7, true));
        assert!(matches!(run(&pre, &post, &file("B", 7)), Outcome::AppliedEligible { no_op: false, .. }));
        assert!(matches!(run(&pre, &post, &file("A", 7)), Outcome::AppliedEligible { no_op: true, .. }));
        assert_eq!(reason(&run(&pre, &post, &file("P", 7))), "content-conflict");
        assert_eq!(reason(&run(&pre, &post, &file("P", 9))), "target-recreated");
        assert_eq!(reason(&run(&pre, &post, &file("B", 9))), "identity-changed");
        assert_eq!(reason(&run(&pre, &post, &Seen::Absent { moved: None })), "target-deleted");
        assert_eq!(reason(&run(&pre, &post, &Seen::Absent { moved: Some("b".into()) })), "identity-changed");
        assert_eq!(reason(&run(&pre, &post, &Seen::BehindSymlink)), "behind-symlink");
        assert_eq!(reason(&run(&pre, &post, &Seen::Unreadable)), "inaccessible");
    }

    #[test]
    fn create_and_delete_have_their_inverses() {
        let absent = image(false, "", 0, false);
        let created = image(true, "B", 7, true);
        match run(&absent, &created, &file("B", 7)) {
            Outcome::AppliedEligible { inverse_operation: InverseOperation::DeleteFile, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run(&absent, &created, &Seen::Absent { moved: None }),
            Outcome::AppliedEligible { no_op: true, .. }
        ));
        let original = image(true, "A", 7, true);
        match run(&original, &absent, &Seen::Absent { moved: None }) {
            Outcome::AppliedEligible { inverse_operation: InverseOperation::RestoreFromArtifact { .. }, .. } => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(reason(&run(&original, &absent, &file("P", 3))), "target-recreated");
    }

    #[test]
    fn stored_original_problems_block_the_inverse() {
        let (pre, post) = (image(true, "A", 7, true), image(true, "B", 7, true));
        let mut i = Inputs {
            status: RecordStatus::Usable,
            pre: &pre,
            post: Some(&post),
            seen: &file("B", 7),
            virtual_state: false,
            pre_bytes: PreBytes::Corrupt,
            excluded: false,
            later_not_taken_back: false,
        };
        assert_eq!(reason(&decide(&i)), "binary-corrupt");
        i.pre_bytes = PreBytes::Missing;
        assert_eq!(decide(&i), inaccessible("missing-artifact"));
        let no_digest = ImageRecord { digest: None, ..pre.clone() };
        i.pre = &no_digest;
        assert_eq!(reason(&decide(&i)), "no-pre-image-digest");
        i.pre = &pre;
        i.status = RecordStatus::UnknownOutcome;
        assert_eq!(decide(&i).category(), "unknown-outcome");
        i.status = RecordStatus::Usable;
        let Seen::File { digest, identity, .. } = file("B", 7) else { unreachable!() };
        let held = Seen::File { digest, identity, held_by: vec![42], written_back: false };
        i.seen = &held;
        assert_eq!(decide(&i).category(), "unknown-outcome");
        i.excluded = true;
        assert_eq!(decide(&i).category(), "skipped");
    }
}
