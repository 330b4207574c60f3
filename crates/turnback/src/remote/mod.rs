//! Remotes: sessions pushed to and pulled from S3-compatible object storage, still
//! end-to-end encrypted.
//!
//! A remote is a name for `s3://BUCKET/PREFIX` (with an optional endpoint and region); its
//! configuration holds no secret and is kept sealed in the store. What goes to the bucket
//! (all of it sealed under the remote key, [`seal`]):
//!
//! ```text
//! PREFIX/turnback-remote          format object: keyed key check + sealed format
//! PREFIX/p/PACKID                 remote pack: content objects side by side (pack)
//! PREFIX/x/PACKID                 the pack's index: the content ids it holds
//! PREFIX/t/RECORDID               one turn: its record, snapshot records, history
//! PREFIX/s/SESSIONKEY/PUSHID      a manifest: the session, its turns, its packs
//! ```
//!
//! Invariants:
//! - Nothing plain reaches the bucket but ids and sizes: content, names, paths, prompts,
//!   history and the session id itself are sealed; names are random or keyed ids.
//! - A push uploads what the bucket lacks — packs of content objects no indexed pack
//!   holds, turn records not yet there — then the manifest, last (`manifest`). Killed at
//!   any point and run again, it completes; a reader never sees a manifest naming an object
//!   not yet uploaded.
//! - A pull reads the merged manifests, verifies every object it reads (a tampered object
//!   is `corrupt`, a missing one `not-found`), stores the content, checks that every
//!   object the turns' snapshots reach is there, and only then writes the session's
//!   records, in one transaction. The workspace is never written by a pull.
//! - Checkpoints (per-edit undo records) and ad hoc snapshots stay in the store that took
//!   them: a remote carries turns, their start and end snapshots, and the history.

pub(crate) mod bucket;
pub(crate) mod gc;
pub(crate) mod manifest;
pub(crate) mod pack;
pub(crate) mod pull;
pub(crate) mod push;
pub(crate) mod seal;

use serde::{Deserialize, Serialize};

use crate::base::hex::hex;
use crate::error::{Error, ErrorCode, Result};
use crate::session::history::Entry;
use crate::session::turn::Turn;
use crate::snapshot::SnapshotRecord;
use crate::storage::schema;
use crate::storage::store::Store;

const REMOTE_SCHEMA: u16 = 1;

/// A configured remote (no credentials: they come from the environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RemoteConfig {
    /// Its name.
    pub(crate) name: String,
    /// `s3://BUCKET/PREFIX` as given.
    pub(crate) url: String,
    /// The bucket.
    pub(crate) bucket: String,
    /// The prefix inside it (no leading or trailing `/`; may be empty).
    pub(crate) prefix: String,
    /// The S3 endpoint (MinIO, Garage, R2, Ceph…); none: AWS.
    pub(crate) endpoint: Option<String>,
    /// The region; none: `AWS_REGION` / `AWS_DEFAULT_REGION`, else the default.
    pub(crate) region: Option<String>,
}

/// Everything of one turn a remote carries: the turn, its start and end snapshot records,
/// and its history entries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnRecord {
    pub turn: Turn,
    pub snapshots: Vec<SnapshotRecord>,
    pub history: Vec<Entry>,
}

/// Checks a remote name: 1-64 letters, digits, `_`, `-` or `.`, starting with a letter or
/// digit.
fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "remote name {name:?} must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )))
    }
}

/// Where a remote's credentials come from: said when a URL that holds some is refused.
const CREDENTIALS_COME_FROM: &str = "credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or \
     AWS_PROFILE and ~/.aws/credentials) and are never stored";

/// Refuses a URL with credentials in it (`scheme://user:password@host`): a remote's
/// configuration is shown by `remote list` and holds no secret. The message does not
/// repeat the URL.
///
/// # Errors
/// `invalid-argument` if the URL's authority holds a `user@` or `user:password@` part.
fn refuse_credentials(what: &str, url: &str) -> Result<()> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(Error::invalid(format!(
            "the {what} may not hold credentials (user:password@): {CREDENTIALS_COME_FROM}"
        )));
    }
    Ok(())
}

/// Parses `s3://BUCKET[/PREFIX]` into its bucket and prefix.
///
/// # Errors
/// `invalid-argument` for anything else, or for credentials in it.
pub(crate) fn parse_url(url: &str) -> Result<(String, String)> {
    refuse_credentials("remote URL", url)?;
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| Error::invalid(format!("remote URL {url:?} must look like s3://BUCKET/PREFIX")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'));
    if !bucket_ok {
        return Err(Error::invalid(format!(
            "bucket name {bucket:?} must be 3-63 lowercase letters, digits, '-' or '.'"
        )));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
        return Err(Error::invalid(format!("remote prefix {prefix:?} may not hold empty, '.' or '..' parts")));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

fn key_of(store: &Store, name: &str) -> Vec<u8> {
    hex(&store.keys().lookup_id("remote", name.as_bytes())).into_bytes()
}

/// Adds remote `name` for `url`.
///
/// # Errors
/// `invalid-argument` for a bad name, URL or endpoint (credentials in either included);
/// `already-exists` if the name is taken.
pub(crate) fn add(
    store: &Store,
    name: &str,
    url: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<RemoteConfig> {
    validate_name(name)?;
    let (bucket, prefix) = parse_url(url)?;
    if let Some(e) = endpoint {
        refuse_credentials("endpoint", e)?;
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(Error::invalid(format!("endpoint {e:?} must start with http:// or https://")));
        }
    }
    let config = RemoteConfig {
        name: name.to_string(),
        url: url.to_string(),
        bucket,
        prefix,
        endpoint: endpoint.map(|e| e.trim_end_matches('/').to_string()),
        region: region.map(str::to_string),
    };
    let key = key_of(store, name);
    let sealed = store.seal_record(schema::REMOTES, &key, REMOTE_SCHEMA, &config)?;
    let mut txn = store.kv().begin()?;
    if !txn.put_if_absent(schema::REMOTES, &key, &sealed)? {
        return Err(Error::new(ErrorCode::AlreadyExists, format!("remote {name} already exists")));
    }
    txn.commit()?;
    Ok(config)
}

/// The configured remotes, by name.
pub(crate) fn list(store: &Store) -> Result<Vec<RemoteConfig>> {
    let mut out: Vec<RemoteConfig> = Vec::new();
    store.kv().scan(schema::REMOTES, b"", &mut |k, v| {
        out.push(store.open_record(schema::REMOTES, k, v)?);
        Ok(true)
    })?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The remote `name`, or (none given) the only one configured.
///
/// # Errors
/// `not-found` if there is no such remote; `invalid-argument` if none is named and there
/// is not exactly one.
pub(crate) fn get(store: &Store, name: Option<&str>) -> Result<RemoteConfig> {
    match name {
        Some(name) => {
            validate_name(name)?;
            store
                .get_record(schema::REMOTES, &key_of(store, name))?
                .ok_or_else(|| Error::not_found(format!("remote {name}")))
        }
        None => {
            let mut all = list(store)?;
            match all.len() {
                1 => Ok(all.remove(0)),
                0 => Err(Error::not_found("a remote (add one: turnback remote add NAME s3://BUCKET/PREFIX)")),
                _ => Err(Error::invalid("several remotes are configured: name one")),
            }
        }
    }
}

/// Removes remote `name` (the bucket is left as it is).
///
/// # Errors
/// `not-found` if there is no such remote.
pub(crate) fn remove(store: &Store, name: &str) -> Result<RemoteConfig> {
    let config = get(store, Some(name))?;
    let mut txn = store.kv().begin()?;
    txn.delete(schema::REMOTES, &key_of(store, name))?;
    txn.commit()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_clean_prefix() {
        assert_eq!(parse_url("s3://team-bucket/agents/ci/").unwrap(), ("team-bucket".into(), "agents/ci".into()));
        assert_eq!(parse_url("s3://team-bucket").unwrap(), ("team-bucket".into(), String::new()));
        for bad in ["https://x/y", "s3://Up/x", "s3://ab/x", "s3://bucket/a/../b", "s3://bucket/a//b"] {
            assert_eq!(parse_url(bad).unwrap_err().code, ErrorCode::InvalidArgument, "{bad}");
        }
        assert!(validate_name("origin").is_ok() && validate_name("-x").is_err() && validate_name("a/b").is_err());
    }

    #[test]
    fn credentials_in_a_remote_url_or_endpoint_are_refused_without_being_repeated() {
        for (what, url) in [
            ("remote URL", "s3://AKIAEXAMPLE:hunter2@bucket/prefix"),
            ("endpoint", "http://user:hunter2@minio.local:9000"),
            ("endpoint", "https://token@r2.example.com/path"),
            ("endpoint", "user:hunter2@minio.local"),
        ] {
            let e = refuse_credentials(what, url).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{url}");
            assert!(!e.message.contains("hunter2") && e.message.contains("AWS_SECRET_ACCESS_KEY"), "{}", e.message);
        }
        for fine in ["http://minio.local:9000", "https://s3.example.com/a@b", "s3://bucket/user@x"] {
            assert!(refuse_credentials("endpoint", fine).is_ok(), "{fine}");
        }
    }
}
