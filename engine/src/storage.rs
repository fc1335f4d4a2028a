//! Object-store wiring: which URIs name a table location, how credentials reach the store, and
//! the few operations the engine needs on top of `object_store`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

pub use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use url::Url;

use crate::error::{Error, ErrorKind, Result, ResultExt};

/// The storage systems a table may live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `file:///abs/path`: the local (or mounted) file system.
    File,
    /// `s3://bucket/path`
    S3,
    /// `gs://bucket/path`
    Gcs,
    /// `az://container/path` (account from credentials)
    Azure,
    /// `memory:///path`: one in-process store shared by the whole process; for tests.
    Memory,
}

impl Scheme {
    /// URI schemes accepted in `base_uri` and `path`, in the order error messages list them.
    pub const ACCEPTED: &'static [&'static str] = &["file", "s3", "gs", "az", "memory"];

    fn from_url_scheme(scheme: &str) -> Option<Scheme> {
        match scheme {
            "file" => Some(Scheme::File),
            "s3" => Some(Scheme::S3),
            "gs" => Some(Scheme::Gcs),
            "az" => Some(Scheme::Azure),
            "memory" => Some(Scheme::Memory),
            _ => None,
        }
    }
}

/// A location on storage (a warehouse root or a table base path), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageUri {
    url: Url,
    scheme: Scheme,
}

impl StorageUri {
    /// Parses and validates a URI such as `file:///srv/lake` or `s3://bucket/lake`.
    pub fn parse(text: &str) -> Result<StorageUri> {
        let invalid = |why: &str| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "invalid storage URI \"{text}\": {why}; expected one of {}",
                    Scheme::ACCEPTED.iter().map(|s| format!("{s}://")).collect::<Vec<_>>().join(", ")
                ),
            )
        };
        let url = Url::parse(text.trim()).map_err(|e| invalid(&e.to_string()))?;
        let scheme = Scheme::from_url_scheme(url.scheme())
            .ok_or_else(|| invalid(&format!("unsupported scheme \"{}\"", url.scheme())))?;
        match scheme {
            Scheme::File | Scheme::Memory => {
                if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                    return Err(invalid("a file:// or memory:// URI takes no host (use three slashes)"));
                }
            }
            Scheme::S3 | Scheme::Gcs | Scheme::Azure => {
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(invalid("the bucket or container name is missing"));
                }
            }
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("query strings and fragments are not allowed"));
        }
        Ok(StorageUri { url, scheme })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn as_str(&self) -> &str {
        self.url.as_str().trim_end_matches('/')
    }

    /// Resolves a table `path` option against this base: an absolute URI stands alone, anything
    /// else is a relative path below the base (never above it: `..` is refused).
    pub fn resolve(&self, path: &str) -> Result<StorageUri> {
        if path.contains("://") {
            return StorageUri::parse(path);
        }
        let relative = path.trim_matches('/');
        if relative.split('/').any(|segment| segment == ".." || segment == ".") {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("table path \"{path}\" must not contain \".\" or \"..\" segments"),
            ));
        }
        if relative.is_empty() {
            return Ok(self.clone());
        }
        StorageUri::parse(&format!("{}/{}", self.as_str(), relative))
    }

    /// The local directory of a `file://` URI, for access checks; `None` for other schemes.
    pub fn local_path(&self) -> Option<PathBuf> {
        match self.scheme {
            Scheme::File => self.url.to_file_path().ok(),
            _ => None,
        }
    }

    /// Whether this location is `root` or below it (component-wise, so `/lake2` is not below
    /// `/lake`). Both must be of the same scheme.
    pub fn is_within(&self, root: &StorageUri) -> bool {
        if self.scheme != root.scheme || self.url.host_str() != root.url.host_str() {
            return false;
        }
        let segments = |u: &Url| -> Vec<String> {
            u.path_segments()
                .map(|s| s.filter(|p| !p.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let (mine, theirs) = (segments(&self.url), segments(&root.url));
        mine.len() >= theirs.len() && mine[..theirs.len()] == theirs[..]
    }
}

impl std::fmt::Display for StorageUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `name` is a credential or client option that the store of `scheme` understands
/// (`aws_access_key_id`, `google_service_account_key`, `azure_storage_account_key`, ...).
/// These belong in USER MAPPING options only.
pub fn is_credential_option(scheme: Scheme, name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let store_option = match scheme {
        Scheme::S3 => object_store::aws::AmazonS3ConfigKey::from_str(&name).is_ok(),
        Scheme::Gcs => object_store::gcp::GoogleConfigKey::from_str(&name).is_ok(),
        Scheme::Azure => object_store::azure::AzureConfigKey::from_str(&name).is_ok(),
        Scheme::File | Scheme::Memory => false,
    };
    store_option || object_store::ClientConfigKey::from_str(&name).is_ok()
}

/// The credential options people usually need, for error messages that list valid names.
pub const COMMON_CREDENTIAL_OPTIONS: &[&str] = &[
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "aws_region",
    "aws_endpoint",
    "google_service_account",
    "google_service_account_key",
    "azure_storage_account_name",
    "azure_storage_account_key",
    "azure_storage_sas_key",
];

/// An opened location: the object store and the prefix inside it.
#[derive(Debug, Clone)]
pub struct Storage {
    uri: StorageUri,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
}

fn process_memory_store() -> Arc<InMemory> {
    static STORE: OnceLock<Arc<InMemory>> = OnceLock::new();
    STORE.get_or_init(|| Arc::new(InMemory::new())).clone()
}

impl Storage {
    /// Opens the store for `uri` with credential/client `options` (names as in
    /// [`is_credential_option`]). Opening does no I/O.
    pub fn open(uri: &StorageUri, options: &BTreeMap<String, String>) -> Result<Storage> {
        let (store, prefix): (Arc<dyn ObjectStore>, ObjectPath) = match uri.scheme {
            Scheme::Memory => {
                let prefix = ObjectPath::parse(uri.url.path()).map_err(|e| {
                    Error::new(ErrorKind::InvalidArgument, format!("invalid path in {uri}"))
                        .with_source(e)
                })?;
                (process_memory_store(), prefix)
            }
            _ => {
                let options = options.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone()));
                let (store, prefix) = object_store::parse_url_opts(&uri.url, options)
                    .context(|| format!("opening {uri}"))?;
                (Arc::from(store), prefix)
            }
        };
        Ok(Storage { uri: uri.clone(), store, prefix })
    }

    pub fn uri(&self) -> &StorageUri {
        &self.uri
    }

    /// The full object path of `relative` (slash-separated, relative to this location).
    pub fn path(&self, relative: &str) -> ObjectPath {
        relative
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |path, part| path.child(part))
    }

    /// A Parquet reader of `relative` that fetches only the byte ranges it decodes: the
    /// footer, then the column chunks of the row groups asked for. `size` saves a request.
    pub fn parquet_reader(&self, relative: &str, size: Option<u64>) -> parquet::arrow::async_reader::ParquetObjectReader {
        let reader = parquet::arrow::async_reader::ParquetObjectReader::new(self.store.clone(), self.path(relative));
        match size {
            Some(size) if size > 0 => reader.with_file_size(size),
            _ => reader,
        }
    }

    /// Reads a whole object.
    pub async fn get(&self, relative: &str) -> Result<Bytes> {
        let path = self.path(relative);
        let read = async { self.store.get(&path).await?.bytes().await };
        read.await.context(|| format!("reading {}/{}", self.uri, relative))
    }

    /// Objects directly in the directory `relative` (not below it): `(name, size)` pairs. A
    /// missing directory is empty.
    pub async fn list_dir(&self, relative: &str) -> Result<Vec<(String, u64)>> {
        let prefix = self.path(relative);
        match self.store.list_with_delimiter(Some(&prefix)).await {
            Ok(listing) => Ok(listing
                .objects
                .into_iter()
                .filter_map(|o| o.location.filename().map(|n| (n.to_owned(), o.size)))
                .collect()),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(Error::from(e).context(format!("listing {}/{}", self.uri, relative))),
        }
    }

    /// Every object below `relative`, as `(path relative to this location, size)` pairs.
    pub async fn list_recursive(&self, relative: &str) -> Result<Vec<(String, u64)>> {
        use futures::TryStreamExt;
        let prefix = self.path(relative);
        let base = self.prefix.as_ref().len();
        let listed: std::result::Result<Vec<_>, _> =
            self.store.list(Some(&prefix)).try_collect().await;
        match listed {
            Ok(objects) => Ok(objects
                .into_iter()
                .map(|o| {
                    let full = o.location.as_ref();
                    let rel = if base == 0 { full } else { full.get(base..).unwrap_or("") };
                    (rel.trim_start_matches('/').to_owned(), o.size)
                })
                .collect()),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(Error::from(e).context(format!("listing {}/{}", self.uri, relative))),
        }
    }

    /// Creates an object only if none exists at `relative`: `Ok(false)` when one already does.
    /// This is the atomic step the timeline and the table lock rely on.
    pub async fn put_if_absent(&self, relative: &str, bytes: Bytes) -> Result<bool> {
        let path = self.path(relative);
        let options = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
        match self.store.put_opts(&path, bytes.into(), options).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(Error::from(e).context(format!("creating {}/{}", self.uri, relative))),
        }
    }

    /// Deletes an object; a missing one is not an error.
    pub async fn delete(&self, relative: &str) -> Result<()> {
        let path = self.path(relative);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::from(e).context(format!("deleting {}/{}", self.uri, relative))),
        }
    }

    /// Writes a whole object, replacing any previous one.
    pub async fn put(&self, relative: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(relative);
        self.store
            .put(&path, bytes.into())
            .await
            .map(|_| ())
            .context(|| format!("writing {}/{}", self.uri, relative))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_five_schemes_and_names_them_when_refusing() {
        for ok in ["file:///srv/lake", "s3://b/lake", "gs://b/x", "az://c/x", "memory:///t"] {
            StorageUri::parse(ok).unwrap();
        }
        let err = StorageUri::parse("ftp://host/x").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("unsupported scheme \"ftp\""), "{err}");
        assert!(err.to_string().contains("file://, s3://, gs://, az://, memory://"), "{err}");
        assert!(StorageUri::parse("/srv/lake").is_err(), "a bare path is not a URI");
        assert!(StorageUri::parse("s3:///nobucket").is_err());
        assert!(StorageUri::parse("file://otherhost/x").is_err());
    }

    #[test]
    fn resolve_joins_relative_paths_and_keeps_absolute_uris() {
        let base = StorageUri::parse("file:///srv/lake/").unwrap();
        assert_eq!(base.resolve("sales/orders").unwrap().as_str(), "file:///srv/lake/sales/orders");
        assert_eq!(base.resolve("s3://b/t").unwrap().as_str(), "s3://b/t");
        assert!(base.resolve("../etc").is_err());
    }

    #[test]
    fn is_within_compares_whole_components() {
        let root = StorageUri::parse("file:///srv/lake").unwrap();
        assert!(StorageUri::parse("file:///srv/lake/t").unwrap().is_within(&root));
        assert!(StorageUri::parse("file:///srv/lake").unwrap().is_within(&root));
        assert!(!StorageUri::parse("file:///srv/lake2/t").unwrap().is_within(&root));
        assert!(!StorageUri::parse("file:///srv").unwrap().is_within(&root));
        // URL parsing normalises dot segments, so they cannot escape a root.
        assert!(!StorageUri::parse("file:///srv/lake/../x").unwrap().is_within(&root));
    }

    #[test]
    fn credential_options_are_checked_per_scheme() {
        assert!(is_credential_option(Scheme::S3, "aws_secret_access_key"));
        assert!(is_credential_option(Scheme::S3, "AWS_REGION"));
        assert!(is_credential_option(Scheme::Gcs, "google_service_account_key"));
        assert!(!is_credential_option(Scheme::S3, "google_service_account_key"));
        assert!(!is_credential_option(Scheme::S3, "password"));
    }

    #[tokio::test]
    async fn put_if_absent_creates_once() {
        for uri in ["memory:///create-once", &format!("file://{}", tempfile::tempdir().unwrap().keep().display())] {
            let storage = Storage::open(&StorageUri::parse(uri).unwrap(), &BTreeMap::new()).unwrap();
            assert!(storage.put_if_absent("a/lock", Bytes::from_static(b"1")).await.unwrap(), "{uri}");
            assert!(!storage.put_if_absent("a/lock", Bytes::from_static(b"2")).await.unwrap(), "{uri}");
            assert_eq!(storage.get("a/lock").await.unwrap(), Bytes::from_static(b"1"));
            storage.delete("a/lock").await.unwrap();
            storage.delete("a/lock").await.unwrap();
            assert!(storage.put_if_absent("a/lock", Bytes::from_static(b"3")).await.unwrap());
        }
    }

    #[tokio::test]
    async fn memory_store_is_shared_across_opens() {
        let uri = StorageUri::parse("memory:///storage-test").unwrap();
        let a = Storage::open(&uri, &BTreeMap::new()).unwrap();
        a.put("x/y", Bytes::from_static(b"hello")).await.unwrap();
        let b = Storage::open(&uri, &BTreeMap::new()).unwrap();
        assert_eq!(b.get("x/y").await.unwrap(), Bytes::from_static(b"hello"));
        let missing = b.get("nope").await.unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert!(missing.to_string().contains("memory:///storage-test/nope"), "{missing}");
    }
}
