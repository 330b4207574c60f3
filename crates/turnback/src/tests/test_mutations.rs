//! Checkpointed mutations through the library: content round-trips, classes, caps,
//! retention and key rotation.

use crate::api::maintenance;
use crate::api::mutation::Mutation;
use crate::checkpoint::artifact::ImageRole;
use crate::checkpoint::{self, CoverageState, EffectKind, ImageRecord, StageState};
use crate::error::ErrorCode;
use crate::session::Session;
use crate::storage::content::ContentClass;
use crate::storage::settings::SettingsOverrides;

use crate::tests::common::Env;

fn read(env: &Env, r: &checkpoint::CheckpointRecord, role: ImageRole) -> Option<Vec<u8>> {
    checkpoint::read_image(&env.store, r, 0, role).unwrap().map(|(_, b)| b)
}

#[test]
fn thai_and_binary_content_round_trip_byte_for_byte() {
    let env = Env::new();
    let thai = "สวัสดีชาวโลก — ทดสอบการย้อนกลับ\n".repeat(50);
    let r = env.write("ภาษาไทย.txt", thai.as_bytes());
    assert_eq!(read(&env, &r, ImageRole::Post).unwrap(), thai.as_bytes());
    assert_eq!(r.targets[0].path.display(), "ภาษาไทย.txt");
    let post = r.targets[0].post_image.as_ref().unwrap();
    assert_eq!(post.size, thai.len() as u64, "sizes are bytes, not characters");
    assert_eq!(post.content_class, Some(ContentClass::FileContent));

    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let r = env.write("blob.bin", &binary);
    assert_eq!(r.targets[0].post_image.as_ref().unwrap().content_class, Some(ContentClass::BinaryBlob));
    assert_eq!(read(&env, &r, ImageRole::Post).unwrap(), binary);
    let edited = env.write("blob.bin", b"now text");
    assert_eq!(read(&env, &edited, ImageRole::Pre).unwrap(), binary);
}

#[test]
fn nul_after_the_first_8_kib_is_still_file_content() {
    let mut bytes = vec![b'a'; 8 * 1024];
    bytes.push(0);
    assert_eq!(ContentClass::of(&bytes), ContentClass::FileContent);
    bytes[8 * 1024 - 1] = 0;
    assert_eq!(ContentClass::of(&bytes), ContentClass::BinaryBlob);
}

#[test]
fn each_mutation_records_a_self_sufficient_checkpoint() {
    let env = Env::new();
    let created = env.apply(Mutation::Create { path: "d/e/f.txt".into(), content: b"one two".to_vec() }).unwrap();
    let t = &created.targets[0];
    assert_eq!(t.effect, EffectKind::Create);
    assert!(!t.pre_image.present);
    let created_dirs: Vec<String> = t.created_dirs.iter().map(|p| p.display()).collect();
    assert_eq!(created_dirs, ["d", "d/e"]);
    assert_eq!(std::fs::read(env.path("d/e/f.txt")).unwrap(), b"one two");

    let edited = env
        .apply(Mutation::Edit { path: "d/e/f.txt".into(), old: "two".into(), new: "three".into(), all: false })
        .unwrap();
    let t = &edited.targets[0];
    assert_eq!(t.effect, EffectKind::Edit);
    let (pre, post) = (&t.pre_image, t.post_image.as_ref().unwrap());
    assert_ne!(pre.digest, post.digest);
    let identity = pre.identity.unwrap();
    assert!(identity.inode > 0 && identity.mode & 0o777 != 0);
    assert_eq!(read(&env, &edited, ImageRole::Pre).unwrap(), b"one two");
    assert_eq!(edited.parent_checkpoint_ids, vec![created.checkpoint_id.clone()]);

    let deleted = env.apply(Mutation::Delete { path: "d/e/f.txt".into() }).unwrap();
    let post = deleted.targets[0].post_image.as_ref().unwrap();
    assert_eq!(
        post,
        &ImageRecord { present: false, digest: None, size: 0, content_class: None, artifact_id: None, identity: None }
    );
    assert!(!env.path("d/e/f.txt").exists());
    assert_eq!(read(&env, &deleted, ImageRole::Pre).unwrap(), b"one three");
}

#[test]
fn store_cap_evicts_expired_checkpoints_before_refusing() {
    let overrides =
        SettingsOverrides { store_cap: Some("100".into()), retention_prompt_rounds: Some(1), ..Default::default() };
    let env = Env::with_overrides(overrides);
    let first = env.write("a.txt", &[b'x'; 60]);
    assert_eq!(checkpoint::usage(&env.store).unwrap(), 60);
    // Still in round 0: the first checkpoint is retained, so there is no room.
    let err = env.apply(Mutation::Write { path: "b.txt".into(), content: vec![b'y'; 60] }).unwrap_err();
    assert_eq!(err.code, ErrorCode::OverCap);
    assert!(!env.path("b.txt").exists(), "a refused mutation changes nothing");
    let details = err.details.unwrap();
    assert_eq!(details["capacity"]["storeUsage"], 60);
    assert_eq!(details["unprotectedScope"][0], "b.txt");
    // One prompt round later it is past its 1-round window and gets evicted to make room.
    Session::advance_round(&env.store, &env.session.id).unwrap();
    let second = env.write("b.txt", &[b'y'; 60]);
    assert_eq!(second.coverage_state, CoverageState::FullyProtected);
    assert_eq!(env.record(&first.checkpoint_id).retention_state, checkpoint::RetentionState::Evicted);
    assert_eq!(checkpoint::usage(&env.store).unwrap(), 60);
}

#[test]
fn confirmed_unprotected_mutation_keeps_digests_but_no_content() {
    let env = Env::with_overrides(SettingsOverrides { checkpoint_cap: Some("10".into()), ..Default::default() });
    let r = env.apply_confirmed(Mutation::Write { path: "big.txt".into(), content: vec![b'z'; 11] }, true).unwrap();
    assert_eq!(r.coverage_state, CoverageState::Unprotected);
    assert_eq!(r.stage_state, StageState::Committed);
    assert!(r.artifact_ids.is_empty());
    assert!(r.targets[0].post_image.as_ref().unwrap().digest.is_some());
    assert_eq!(checkpoint::read_image(&env.store, &r, 0, ImageRole::Post).unwrap_err().code, ErrorCode::NotFound);
}

#[test]
fn rotation_keeps_old_data_readable_and_reencrypt_moves_it() {
    let mut env = Env::new();
    let before = env.write("a.txt", b"written under v1");
    let report = env.store.rotate_keys(false).unwrap();
    assert_eq!(report.new_version, 2);
    let after = env.write("b.txt", b"written under v2");
    env.reopen();
    let (meta_old, old) = checkpoint::read_image(&env.store, &before, 0, ImageRole::Post).unwrap().unwrap();
    let (meta_new, _) = checkpoint::read_image(&env.store, &after, 0, ImageRole::Post).unwrap().unwrap();
    assert_eq!((meta_old.key_version, meta_new.key_version), (1, 2));
    assert_eq!(old, b"written under v1");
    let report = env.store.rotate_keys(true).unwrap();
    assert!(report.reencrypted > 0);
    let usage = env.store.key_usage().unwrap();
    assert_eq!(usage[&1] + usage[&2], 0, "{usage:?}");
    assert!(usage[&3] > 0);
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
    assert_eq!(read(&env, &before, ImageRole::Post).unwrap(), b"written under v1");
}

#[test]
fn interrupted_reencryption_is_finished_by_running_it_again() {
    let mut env = Env::new();
    for i in 0..5 {
        env.write(&format!("f{i}.txt"), format!("content {i}").as_bytes());
    }
    env.store.rotate_keys(false).unwrap();
    // Simulate an interruption: only some objects were rewritten (mixed versions).
    env.write("g.txt", b"new under v2");
    env.reopen();
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
    env.store.rotate_keys(true).unwrap();
    let usage = env.store.key_usage().unwrap();
    assert_eq!(usage.iter().filter(|(v, n)| **v != 3 && **n > 0).count(), 0, "{usage:?}");
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
}

#[test]
fn gc_removes_content_of_evicted_checkpoints_only() {
    let env = Env::with_overrides(SettingsOverrides { retention_prompt_rounds: Some(1), ..Default::default() });
    env.write("a.txt", b"old round content");
    Session::advance_round(&env.store, &env.session.id).unwrap();
    let kept = env.write("b.txt", b"current round content");
    let report = maintenance::gc(&env.store).unwrap();
    assert_eq!(report.eviction.evicted, 1);
    assert_eq!(report.objects_removed, 1);
    assert_eq!(read(&env, &kept, ImageRole::Post).unwrap(), b"current round content");
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
}

#[test]
fn a_checkpoint_counts_the_turn_that_began_after_the_caller_read_its_session() {
    let env = Env::new();
    assert_eq!(env.session.prompt_round, 0, "the caller's session value says round 0");
    // Meanwhile another process begins turn 1.
    let id = crate::session::turn::new_id();
    let new = crate::session::turn::NewTurn { prompt: Some("p"), background: false };
    crate::session::turn::record(&env.store, &env.session, &id, new, false, None, &|_, _| Ok(())).unwrap();
    let record = env.write("a.txt", b"x");
    assert_eq!(record.prompt_round, Some(1), "the round is read when the checkpoint is staged");
}

#[test]
fn an_edit_of_a_file_too_large_to_hold_follows_the_same_rules_and_keeps_both_images() {
    let env = Env::new();
    // Over the size a mutation holds whole: the edit streams, matches across its pieces too.
    let mut big = b"x".repeat(5 << 20);
    big.extend_from_slice(b"needle here, twin here");
    let r = env.write("big.txt", &big);
    let edit = |old: &str, new: &str, all: bool| {
        env.apply(Mutation::Edit { path: "big.txt".into(), old: old.into(), new: new.into(), all })
    };
    assert_eq!(edit("absent", "y", false).unwrap_err().code, ErrorCode::EditNoMatch);
    assert_eq!(edit("here", "there", false).unwrap_err().code, ErrorCode::EditNotUnique);
    assert_eq!(edit("x", "x", false).unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(std::fs::read(env.path("big.txt")).unwrap() == big, "a refused edit changes nothing");
    let done = edit("here", "there", true).unwrap();
    let expected = [&b"x".repeat(5 << 20)[..], b"needle there, twin there"].concat();
    assert!(std::fs::read(env.path("big.txt")).unwrap() == expected);
    assert!(read(&env, &done, ImageRole::Pre).unwrap() == big, "the pre-image is the file before");
    assert!(read(&env, &done, ImageRole::Post).unwrap() == expected, "the post-image is the edit");
    assert_eq!(r.targets[0].post_image.as_ref().unwrap().digest, done.targets[0].pre_image.digest);
}
