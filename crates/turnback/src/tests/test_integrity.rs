//! Every read is verified: altered bytes, metadata or ids are `corrupt`, and no content
//! reaches the caller; a wrong key is `key-mismatch`.

use crate::api::maintenance;
use crate::base::hex::unhex;
use crate::checkpoint::artifact::ImageRole;
use crate::checkpoint::{self, CheckpointRecord};
use crate::error::ErrorCode;
use crate::storage::store::Store;

use crate::tests::common::{Env, OTHER_KEY, options};

fn post_artifact(record: &CheckpointRecord) -> (String, Vec<u8>) {
    let image = record.targets[0].post_image.as_ref().unwrap();
    (image.artifact_id.clone().unwrap(), unhex(image.digest.as_deref().unwrap()).unwrap())
}

fn read_post(env: &Env, record: &CheckpointRecord) -> crate::error::Result<Vec<u8>> {
    checkpoint::read_image(&env.store, record, 0, ImageRole::Post).map(|o| o.unwrap().1)
}

fn assert_corrupt_everywhere(env: &Env, record: &CheckpointRecord) {
    let err = read_post(env, record).unwrap_err();
    assert_eq!(err.code, ErrorCode::Corrupt, "{err}");
    let report = maintenance::verify(&env.store, true).unwrap();
    assert!(!report.clean);
    assert!(report.problems.iter().any(|p| p.code == "corrupt"), "{:?}", report.problems);
}

#[test]
fn intact_content_reads_back_and_verifies() {
    let env = Env::new();
    let r = env.write("a.txt", b"hello");
    assert_eq!(read_post(&env, &r).unwrap(), b"hello");
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
}

#[test]
fn flipped_ciphertext_byte_is_corrupt_and_returns_no_content() {
    let env = Env::new();
    let r = env.write("a.txt", b"secret content that must not leak");
    let (_, object_id) = post_artifact(&r);
    env.tamper("objects", &object_id, |v| {
        let last = v.len() - 1;
        v[last] ^= 0x40;
    });
    assert_corrupt_everywhere(&env, &r);
}

#[test]
fn altered_digest_in_artifact_metadata_is_corrupt() {
    let env = Env::new();
    let other = env.write("b.txt", b"other content");
    let r = env.write("a.txt", b"content");
    let (artifact_id, _) = post_artifact(&r);
    let other_digest = other.targets[0].post_image.as_ref().unwrap().digest.clone().unwrap();
    env.tamper("artifacts", artifact_id.as_bytes(), |v| {
        let mut json: serde_json::Value = serde_json::from_slice(v).unwrap();
        json["digest"] = other_digest.clone().into();
        *v = serde_json::to_vec(&json).unwrap();
    });
    assert_corrupt_everywhere(&env, &r);
}

#[test]
fn altered_content_class_is_corrupt() {
    let env = Env::new();
    let r = env.write("a.txt", b"text content");
    let (_, object_id) = post_artifact(&r);
    // In the object's plain header (byte 9 is the class code).
    env.tamper("objects", &object_id, |v| v[9] = 2);
    assert_corrupt_everywhere(&env, &r);

    let env = Env::new();
    let r = env.write("a.txt", b"text content");
    let (artifact_id, _) = post_artifact(&r);
    // And in the artifact's metadata.
    env.tamper("artifacts", artifact_id.as_bytes(), |v| {
        let mut json: serde_json::Value = serde_json::from_slice(v).unwrap();
        json["contentClass"] = "binary-blob".into();
        *v = serde_json::to_vec(&json).unwrap();
    });
    assert_corrupt_everywhere(&env, &r);
}

#[test]
fn record_stored_under_another_id_is_corrupt() {
    let env = Env::new();
    let a = env.write("a.txt", b"one");
    let b = env.write("b.txt", b"two");
    let a_value = env.store.kv().get("checkpoints", a.checkpoint_id.as_bytes()).unwrap().unwrap();
    env.tamper("checkpoints", b.checkpoint_id.as_bytes(), |v| *v = a_value.clone());
    let err = checkpoint::get(&env.store, &b.checkpoint_id).unwrap_err();
    assert_eq!(err.code, ErrorCode::Corrupt);
    assert!(!maintenance::verify(&env.store, false).unwrap().clean);
}

#[test]
fn flipped_byte_in_a_checkpoint_record_is_corrupt() {
    let env = Env::new();
    let a = env.write("a.txt", b"one");
    env.tamper("checkpoints", a.checkpoint_id.as_bytes(), |v| v[20] ^= 1);
    assert_eq!(checkpoint::get(&env.store, &a.checkpoint_id).unwrap_err().code, ErrorCode::Corrupt);
}

#[test]
fn ciphertext_copied_onto_another_object_is_corrupt() {
    let env = Env::new();
    let a = env.write("a.txt", b"first file");
    let b = env.write("b.txt", b"second file");
    let (_, a_object) = post_artifact(&a);
    let (_, b_object) = post_artifact(&b);
    let a_value = env.store.kv().get("objects", &a_object).unwrap().unwrap();
    env.tamper("objects", &b_object, |v| *v = a_value.clone());
    assert_corrupt_everywhere(&env, &b);
    // The original is still fine.
    assert_eq!(read_post(&env, &a).unwrap(), b"first file");
}

#[test]
fn wrong_master_key_is_key_mismatch_not_corruption() {
    let env = Env::new();
    env.write("a.txt", b"x");
    let err = Store::open(&options(env.dir.path(), OTHER_KEY)).unwrap_err();
    assert_eq!(err.code, ErrorCode::KeyMismatch);
}

#[test]
fn missing_key_with_data_is_key_unavailable() {
    let env = Env::new();
    env.write("a.txt", b"x");
    let mut opts = options(env.dir.path(), "unused");
    opts.keys = crate::storage::keys::KeyConfig {
        default_file: Some(env.dir.path().join("conf/turnback/master.key")),
        ..Default::default()
    };
    let err = Store::open(&opts).unwrap_err();
    assert_eq!(err.code, ErrorCode::KeyUnavailable);
    assert!(!env.dir.path().join("conf/turnback/master.key").exists());
}
