//! A real S3 server for the remote tests: Garage, started on 127.0.0.1 in a temporary
//! directory by each test that needs one, and stopped when the test ends.
//!
//! The binary is `$TURNBACK_GARAGE`, else `garage` on `PATH`. Without it a test prints
//! that it skips, unless `TURNBACK_REQUIRE_S3=1` (CI), where it fails. No mock: every
//! request goes over loopback HTTP to Garage's S3 API. The test's own S3 client (to read,
//! alter and delete raw objects) is `object_store` too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::common::{Env, unique};

/// The region Garage is configured with.
pub const REGION: &str = "garage";
/// The bucket every test server holds.
pub const BUCKET: &str = "turnback-test";

/// A running single-node Garage with one bucket and one key allowed on it.
pub struct Garage {
    dir: tempfile::TempDir,
    child: Child,
    /// The S3 endpoint (`http://127.0.0.1:PORT`).
    pub endpoint: String,
    /// The access key id.
    pub key_id: String,
    /// The secret key.
    pub secret: String,
    client: AmazonS3,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Garage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Garage").field("endpoint", &self.endpoint).finish()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TURNBACK_GARAGE").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("garage")).find(|p| p.is_file())
}

/// A free TCP port on 127.0.0.1 (bound, then released for Garage to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port").local_addr().expect("port").port()
}

/// Starts a Garage server, or returns `None` (printing why) when there is no binary and
/// `TURNBACK_REQUIRE_S3` is not set.
pub fn start() -> Option<Garage> {
    if !super::tools::available(super::tools::Tool::Garage) {
        return None;
    }
    Some(Garage::start(binary()?))
}

/// `n` hex digits derived from a fresh unique string.
fn hex_digits(n: usize) -> String {
    let mut out = String::new();
    while out.len() < n {
        out.extend(unique("").bytes().rev().map(|b| format!("{:x}", b % 16)));
    }
    out.truncate(n);
    out
}

impl Garage {
    /// `garage server --single-node --default-bucket`: one node, its layout made, one
    /// access key and one bucket it may use, from `GARAGE_DEFAULT_*`.
    fn start(binary: PathBuf) -> Self {
        let dir = tempfile::tempdir().expect("garage directory");
        let (rpc, s3) = (free_port(), free_port());
        let config = format!(
            "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"lmdb\"\nreplication_factor = 1\n\
             compression_level = \"none\"\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\n\
             rpc_secret = \"{secret}\"\n\n[s3_api]\ns3_region = \"{REGION}\"\napi_bind_addr = \"127.0.0.1:{s3}\"\n\
             root_domain = \".s3.garage.localhost\"\n",
            meta = dir.path().join("meta").display(),
            data = dir.path().join("data").display(),
            secret = hex_digits(64),
        );
        let config_path = dir.path().join("garage.toml");
        std::fs::write(&config_path, config).expect("write garage.toml");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(0o600)).expect("chmod garage.toml");
        let (key_id, secret) = (format!("GK{}", hex_digits(24)), hex_digits(64));
        let log = std::fs::File::create(dir.path().join("garage.log")).expect("garage log");
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config_path)
            .args(["server", "--single-node", "--default-bucket"])
            .env("GARAGE_DEFAULT_ACCESS_KEY", &key_id)
            .env("GARAGE_DEFAULT_SECRET_KEY", &secret)
            .env("GARAGE_DEFAULT_BUCKET", BUCKET)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let endpoint = format!("http://127.0.0.1:{s3}");
        let client = AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_region(REGION)
            .with_access_key_id(&key_id)
            .with_secret_access_key(&secret)
            .build()
            .expect("client");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut garage = Garage { dir, child, endpoint, key_id, secret, client, runtime };
        // Ready once the bucket lists.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listed: Result<Vec<_>, _> = garage.runtime.block_on(garage.client.list(None).try_collect());
            match listed {
                Ok(_) => break,
                Err(e) => {
                    if let Ok(Some(status)) = garage.child.try_wait() {
                        panic!("garage exited ({status}): {}", garage.log());
                    }
                    assert!(Instant::now() < deadline, "garage not ready after 60 s ({e}): {}", garage.log());
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        garage
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("garage.log")).unwrap_or_default()
    }

    /// Garage's own files (metadata and data blocks, stored uncompressed).
    pub fn storage_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets the AWS variables of this server in `env` and adds remote `name` at a fresh
    /// prefix (returned) through `turnback remote add`.
    pub fn connect(&self, env: &mut Env, name: &str, prefix: &str) {
        self.credentials(env);
        let url = format!("s3://{BUCKET}/{prefix}");
        env.ok(&["remote", "add", name, &url, "--endpoint", &self.endpoint, "--region", REGION], None);
    }

    /// Sets only the credentials (the remote is configured another way).
    pub fn credentials(&self, env: &mut Env) {
        env.set_var("AWS_ACCESS_KEY_ID", &self.key_id);
        env.set_var("AWS_SECRET_ACCESS_KEY", &self.secret);
        env.set_var("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
    }

    /// Every object under `prefix`: its name (without the prefix) and bytes.
    pub fn objects(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.runtime.block_on(async {
            let listed: Vec<_> =
                self.client.list(Some(&ObjectPath::from(prefix))).try_collect().await.expect("list objects");
            let mut out = Vec::new();
            for meta in listed {
                let bytes = self.client.get(&meta.location).await.expect("get").bytes().await.expect("bytes");
                let name = meta.location.as_ref().strip_prefix(&format!("{prefix}/")).unwrap_or_default().to_string();
                out.push((name, bytes.to_vec()));
            }
            out.sort();
            out
        })
    }

    /// Replaces the object `prefix/name` with `bytes`.
    pub fn put(&self, prefix: &str, name: &str, bytes: Vec<u8>) {
        let path = ObjectPath::from(format!("{prefix}/{name}"));
        self.runtime.block_on(self.client.put(&path, PutPayload::from(bytes))).expect("put object");
    }

    /// Deletes the object `prefix/name`.
    pub fn delete(&self, prefix: &str, name: &str) {
        let path = ObjectPath::from(format!("{prefix}/{name}"));
        self.runtime.block_on(self.client.delete(&path)).expect("delete object");
    }
}
