//! The bucket: an S3-compatible object store reached through the `object_store` crate, and
//! the only place that speaks to the network.
//!
//! Invariants:
//! - Every request runs on this module's own tokio runtime (two worker threads); the rest
//!   of the library stays synchronous. Uploads and downloads of many objects run at most
//!   [`PARALLEL`] at once.
//! - Every request is retried on network errors and server errors with exponential
//!   back-off ([`retry`]: 100 ms doubling to 15 s, at most 8 attempts, 3 minutes in all);
//!   a request that still fails is `io`, never partial: an object is written whole or not
//!   at all (S3 `PutObject` is atomic).
//! - Credentials come only from the environment (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and everything else `object_store` reads
//!   from `AWS_*` variables: web identity, container credentials, instance metadata), else
//!   from the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!   `~/.aws/credentials`, profile `AWS_PROFILE`, else `default`). turnback never writes
//!   them anywhere.
//! - Names are relative to the remote's prefix; the bucket sees only them and the bytes
//!   given (already sealed by [`seal`](crate::remote::seal)).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig};

use crate::error::{Error, ErrorCode, Result};
use crate::remote::RemoteConfig;

/// Requests in flight at once.
pub(crate) const PARALLEL: usize = 8;

/// One listed object: its name under the prefix, size and last change (ms since epoch).
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub name: String,
    pub size: u64,
    pub modified_ms: i64,
}

/// An open bucket (at a prefix).
pub(crate) struct Bucket {
    store: Arc<AmazonS3>,
    prefix: String,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("prefix", &self.prefix).finish()
    }
}

/// Request retries: network and server errors are retried with exponential back-off.
fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2.0,
        },
        max_retries: 8,
        retry_timeout: Duration::from_secs(180),
    }
}

/// Access key, secret and token from a shared credentials file's `profile`, if it has one.
fn profile_credentials() -> Option<(String, String, Option<String>)> {
    let file = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".aws/credentials")))?;
    let profile = std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "default".into());
    let text = std::fs::read_to_string(file).ok()?;
    let values = ini_section(&text, &profile);
    Some((
        values.get("aws_access_key_id")?.clone(),
        values.get("aws_secret_access_key")?.clone(),
        values.get("aws_session_token").cloned(),
    ))
}

/// The `key = value` pairs of section `[name]` of an INI text.
fn ini_section(text: &str, name: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = section.trim() == name;
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

fn remote_error(what: &str, e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { .. } => Error::not_found(format!("remote object {what}")),
        other => Error::new(ErrorCode::Io, format!("remote {what}: {other}")),
    }
}

impl Bucket {
    /// Opens the bucket `config` names, with credentials from the environment.
    ///
    /// # Errors
    /// `invalid-argument` for a configuration `object_store` refuses; `io` if the runtime
    /// cannot start.
    pub(crate) fn open(config: &RemoteConfig) -> Result<Self> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&config.bucket).with_retry(retry());
        let env_has_key = std::env::var_os("AWS_ACCESS_KEY_ID").is_some_and(|v| !v.is_empty());
        if !env_has_key && let Some((id, secret, token)) = profile_credentials() {
            builder = builder.with_access_key_id(id).with_secret_access_key(secret);
            if let Some(token) = token {
                builder = builder.with_token(token);
            }
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        let region = config
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()))
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok().filter(|r| !r.is_empty()));
        if let Some(region) = region {
            builder = builder.with_region(region);
        }
        let store = builder.build().map_err(|e| Error::invalid(format!("remote {}: {e}", config.name)))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::new(ErrorCode::Io, format!("starting the network runtime: {e}")))?;
        Ok(Bucket { store: Arc::new(store), prefix: config.prefix.clone(), runtime })
    }

    fn path(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix))
        }
    }

    fn name_of(&self, path: &ObjectPath) -> String {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            full.to_string()
        } else {
            full.strip_prefix(&format!("{}/", self.prefix)).unwrap_or(full).to_string()
        }
    }

    /// Writes `bytes` as `name` (replacing it, if it exists).
    pub(crate) fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(name);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map(drop)
            .map_err(|e| remote_error(name, e))
    }

    /// Writes `bytes` as `name` only if no object has that name (a conditional write,
    /// `If-None-Match: *`); returns whether it wrote. A server that does not implement
    /// conditional writes is told to write plainly: callers only use this for names no
    /// other writer can choose (random ids), so the condition is a second guard.
    pub(crate) fn create(&self, name: &str, bytes: Vec<u8>) -> Result<bool> {
        let path = self.path(name);
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.runtime.block_on(self.store.put_opts(&path, PutPayload::from(bytes.clone()), opts)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
            Err(object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }) => {
                self.put(name, bytes).map(|()| true)
            }
            Err(e) => Err(remote_error(name, e)),
        }
    }

    /// Writes many objects, at most [`PARALLEL`] at once; `done` is told each one's size
    /// as it lands.
    pub(crate) fn put_all(&self, objects: Vec<(String, Vec<u8>)>, done: &(dyn Fn(u64) + Sync)) -> Result<()> {
        let store = &self.store;
        let work = futures::stream::iter(objects.into_iter().map(|(name, bytes)| {
            let path = self.path(&name);
            async move {
                let len = bytes.len() as u64;
                store.put(&path, PutPayload::from(bytes)).await.map_err(|e| remote_error(&name, e))?;
                done(len);
                Ok::<_, Error>(())
            }
        }))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>();
        self.runtime.block_on(work).map(drop)
    }

    /// Reads the object `name`.
    ///
    /// # Errors
    /// `not-found` if it is not there; `io` for other failures.
    pub(crate) fn get(&self, name: &str) -> Result<Vec<u8>> {
        let path = self.path(name);
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map(|b| b.to_vec())
            .map_err(|e| remote_error(name, e))
    }

    /// Reads many objects, at most [`PARALLEL`] at once, handing each to `each` in the
    /// order they arrive.
    pub(crate) fn get_each(&self, names: &[String], each: &mut dyn FnMut(&str, Vec<u8>) -> Result<()>) -> Result<()> {
        let store = &self.store;
        self.runtime.block_on(async {
            let mut stream = futures::stream::iter(names.iter().map(|name| {
                let path = self.path(name);
                async move {
                    let got = async { store.get(&path).await?.bytes().await }.await;
                    (name, got)
                }
            }))
            .buffer_unordered(PARALLEL);
            while let Some((name, got)) = stream.next().await {
                let bytes = got.map_err(|e| remote_error(name, e))?;
                each(name, bytes.to_vec())?;
            }
            Ok(())
        })
    }

    /// Whether each of `names` exists.
    pub(crate) fn exist_each(&self, names: &[String]) -> Result<Vec<bool>> {
        let store = &self.store;
        let work = futures::stream::iter(names.iter().map(|name| {
            let path = self.path(name);
            async move {
                match store.head(&path).await {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(remote_error(name, e)),
                }
            }
        }))
        .buffered(PARALLEL)
        .try_collect::<Vec<bool>>();
        self.runtime.block_on(work)
    }

    /// Every object whose name starts with `dir` (a folder such as `s/`, or `""`).
    pub(crate) fn list(&self, dir: &str) -> Result<Vec<Listed>> {
        let prefix = match (self.prefix.is_empty(), dir.trim_end_matches('/')) {
            (true, "") => None,
            (true, d) => Some(ObjectPath::from(d)),
            (false, "") => Some(ObjectPath::from(self.prefix.as_str())),
            (false, d) => Some(ObjectPath::from(format!("{}/{d}", self.prefix))),
        };
        let listed = self
            .runtime
            .block_on(self.store.list(prefix.as_ref()).try_collect::<Vec<_>>())
            .map_err(|e| remote_error("listing", e))?;
        Ok(listed
            .into_iter()
            .map(|m| Listed {
                name: self.name_of(&m.location),
                size: m.size,
                modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect())
    }

    /// Deletes `names`, at most [`PARALLEL`] at once (an absent one is not an error).
    pub(crate) fn delete_all(&self, names: &[String]) -> Result<()> {
        let store = &self.store;
        let work = futures::stream::iter(names.iter().map(|name| {
            let path = self.path(name);
            async move {
                match store.delete(&path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(remote_error(name, e)),
                }
            }
        }))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>();
        self.runtime.block_on(work).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_keys_are_read_from_its_section_only() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[ci]\n# comment\nAWS_ACCESS_KEY_ID=C\naws_secret_access_key= D \naws_session_token = T\n";
        let d = ini_section(text, "default");
        assert_eq!((d["aws_access_key_id"].as_str(), d["aws_secret_access_key"].as_str()), ("A", "B"));
        assert!(!d.contains_key("aws_session_token"));
        let ci = ini_section(text, "ci");
        assert_eq!((ci["aws_access_key_id"].as_str(), ci["aws_secret_access_key"].as_str()), ("C", "D"));
        assert_eq!(ci["aws_session_token"], "T");
        assert!(ini_section(text, "missing").is_empty());
    }
}
