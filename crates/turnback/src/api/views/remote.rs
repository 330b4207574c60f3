//! The view of a configured remote (never a credential: those come from the environment).

use serde::Serialize;

/// A configured remote (no credentials: they come from the environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    /// Its name.
    pub name: String,
    /// `s3://BUCKET/PREFIX` as given.
    pub url: String,
    /// The bucket.
    pub bucket: String,
    /// The prefix inside it (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// The S3 endpoint (MinIO, Garage, R2, Ceph…); none: AWS.
    pub endpoint: Option<String>,
    /// The region; none: `AWS_REGION` / `AWS_DEFAULT_REGION`, else the default.
    pub region: Option<String>,
}

impl From<&crate::remote::RemoteConfig> for Remote {
    fn from(r: &crate::remote::RemoteConfig) -> Self {
        Remote {
            name: r.name.clone(),
            url: r.url.clone(),
            bucket: r.bucket.clone(),
            prefix: r.prefix.clone(),
            endpoint: r.endpoint.clone(),
            region: r.region.clone(),
        }
    }
}
