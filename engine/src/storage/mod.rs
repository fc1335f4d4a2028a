//! Object-store wiring: which URIs name a table location, how credentials reach the store, and
//! the few operations the engine needs on top of `object_store`.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

pub mod access;
pub mod local;

pub use access::{RetrySettings, StoreSettings};
pub use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use url::Url;

use crate::error::{Error, ErrorKind, Result, ResultExt};

/// The storage systems a table may live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `file:///abs/path`: the local (or mounted) file system; no symbolic link below the
    /// location is followed ([`local::NoFollowLocalStore`]).
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
                    "invalid storage URI \"{}\": {why}; expected one of {}",
                    text.escape_debug(),
                    Scheme::ACCEPTED.iter().map(|s| format!("{s}://")).collect::<Vec<_>>().join(", ")
                ),
            )
        };
        // The URL parser drops tabs and line breaks wherever they are and encodes other
        // controls: the location parsed would not be the one written.
        if text.trim().contains(char::is_control) {
            return Err(invalid("it has a control character"));
        }
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
        // One spelling per location: what access checks compare is what storage opens. The
        // URL parser has already resolved dot segments (also `%2e%2e`, and `\` on file://);
        // a segment that decodes to a separator or a dot segment would be split or resolved
        // again by the store, so it is refused, and empty segments (`a//b`) are dropped.
        let mut segments = Vec::new();
        for segment in url.path_segments().into_iter().flatten().filter(|s| !s.is_empty()) {
            if !is_plain_segment(&decode_segment(segment)) {
                return Err(invalid(&format!("the path segment \"{segment}\" is not a plain name")));
            }
            segments.push(segment.to_owned());
        }
        let mut url = url;
        url.set_path(&format!("/{}", segments.join("/")));
        Ok(StorageUri { url, scheme })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn as_str(&self) -> &str {
        self.url.as_str().trim_end_matches('/')
    }

    /// Resolves a table `path` option against this base: an absolute URI stands alone, anything
    /// else is a relative path below the base. Either way the result must lie at or below the
    /// base ([`Self::is_within_resolved`]), whatever the spelling: a relative path's segments
    /// are percent-decoded before they are checked, so `%2e%2e`, `%2f` and `\` cannot climb.
    pub fn resolve(&self, path: &str) -> Result<StorageUri> {
        let resolved = if path.contains("://") {
            StorageUri::parse(path)?
        } else {
            let segments = relative_path_segments(path)?;
            if segments.is_empty() {
                self.clone()
            } else {
                StorageUri::parse(&format!("{}/{}", self.as_str(), segments.join("/")))?
            }
        };
        if !resolved.is_within_resolved(self) {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!("table path \"{path}\" resolves to {resolved}, outside the server's base_uri {self}"),
            ));
        }
        Ok(resolved)
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

    /// [`Self::is_within`], and on `file://` also after following symbolic links: a link below
    /// `root` that points elsewhere is not below it.
    pub fn is_within_resolved(&self, root: &StorageUri) -> bool {
        if !self.is_within(root) {
            return false;
        }
        match (self.local_path(), root.local_path()) {
            (Some(mine), Some(theirs)) => real_path(&mine).starts_with(real_path(&theirs)),
            _ => true,
        }
    }
}

/// The segments of a relative table path (empty ones, from `a//b`, dropped), each a plain name
/// also once percent-decoded: a relative path cannot climb above what it is relative to.
pub fn relative_path_segments(path: &str) -> Result<Vec<&str>> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.iter().any(|s| !is_plain_segment(&decode_segment(s))) {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "table path \"{path}\" must stay below the server's base_uri: a relative path takes plain names only (no \".\", \"..\", \"\\\" or encoded \"/\")"
            ),
        ));
    }
    Ok(segments)
}

/// A URL path segment with its percent-escapes decoded (invalid UTF-8 replaced, which only
/// makes it less plain).
fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned()
}

/// Whether a decoded path segment names one entry of its directory: not empty, not a dot
/// segment, no separator of any platform, no NUL.
fn is_plain_segment(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".." && !segment.contains(['/', '\\', '\0'])
}

/// `path` with symbolic links followed as far as it exists (the rest appended as written), so
/// that a location not created yet is judged by the directory it would be created in.
fn real_path(path: &std::path::Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
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
    store_option || access::is_client_option(&name)
}

/// The credential options people usually need, for error messages that list valid names.
pub const COMMON_CREDENTIAL_OPTIONS: &[&str] = &[
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "aws_region",
    "aws_endpoint",
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
    resends: Resends,
    /// A digest of the settings (credentials included) the store was opened with: what is
    /// kept of one store's reads answers only reads through the same ones.
    access: u64,
}

/// How often the engine sends again a request that the store's own retries gave up on after a
/// transient failure, where sending it again is safe (see [`Storage::put_if_absent`]): as the
/// store retries, at most `max_retries` more times and not after `retry_timeout` from the first
/// attempt, but at least [`Resends::LEAST`] times.
#[derive(Debug, Clone, Copy)]
struct Resends {
    attempts: usize,
    within: std::time::Duration,
}

impl Resends {
    const LEAST: usize = 3;

    fn of(retry: &access::RetrySettings) -> Resends {
        Resends { attempts: (retry.max_retries + 1).max(Self::LEAST), within: retry.retry_timeout }
    }

    /// Whether attempt number `attempt` (from 1), begun `started`, which failed with `error`,
    /// is sent again.
    fn again(&self, attempt: usize, started: std::time::Instant, error: &object_store::Error) -> bool {
        is_transient(error) && (attempt < Self::LEAST || (attempt < self.attempts && started.elapsed() < self.within))
    }
}

/// Whether a failed request may succeed if sent again: not a refusal or a missing object, but
/// what remains after the store's own retries (a server error, a timeout, a reset connection).
fn is_transient(error: &object_store::Error) -> bool {
    matches!(error, object_store::Error::Generic { .. })
}

fn process_memory_store() -> Arc<InMemory> {
    static STORE: OnceLock<Arc<InMemory>> = OnceLock::new();
    STORE.get_or_init(|| Arc::new(InMemory::new())).clone()
}

/// The version of an object as the store gives it (an ETag, a generation): what a
/// conditional overwrite names ([`Storage::put_versioned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    e_tag: Option<String>,
    version: Option<String>,
}

impl Storage {
    /// Opens the store for `uri` with `settings` (credentials, retries; see [`access`]).
    /// Opening does no I/O.
    pub fn open(uri: &StorageUri, settings: &StoreSettings) -> Result<Storage> {
        let invalid_path = |e: object_store::path::Error| {
            Error::new(ErrorKind::InvalidArgument, format!("invalid path in {uri}")).with_source(e)
        };
        let (store, prefix): (Arc<dyn ObjectStore>, ObjectPath) = match uri.scheme {
            Scheme::Memory => (process_memory_store(), ObjectPath::parse(uri.url.path()).map_err(invalid_path)?),
            // Rooted at the location itself, so that no symbolic link below it is followed
            // (see [`local`]); names as object_store's LocalFileSystem would take them, which
            // refuses a location that is not a valid object path.
            Scheme::File => {
                ObjectPath::from_url_path(uri.url.path()).map_err(invalid_path)?;
                let root = uri.local_path().ok_or_else(|| {
                    Error::new(ErrorKind::InvalidArgument, format!("{uri} does not name a local directory"))
                })?;
                (Arc::new(local::NoFollowLocalStore::new(root)), ObjectPath::default())
            }
            // The bucket or container is the URI's host, the prefix the whole of its path.
            Scheme::S3 | Scheme::Gcs | Scheme::Azure => {
                (access::cloud_store(uri, settings)?, ObjectPath::from_url_path(uri.url.path()).map_err(invalid_path)?)
            }
        };
        let access = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            settings.hash(&mut hasher);
            hasher.finish()
        };
        Ok(Storage { uri: uri.clone(), store, prefix, resends: Resends::of(&settings.retry), access })
    }

    pub fn uri(&self) -> &StorageUri {
        &self.uri
    }

    /// The digest of the settings (credentials included) the store was opened with.
    pub(crate) fn access(&self) -> u64 {
        self.access
    }

    /// The same location through `layer` wrapped around the store: for tests that inject
    /// delays or faults between the steps of what the engine does.
    pub fn layered(&self, layer: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>) -> Storage {
        Storage { store: layer(self.store.clone()), prefix: self.prefix.clone(), uri: self.uri.clone(), ..*self }
    }

    /// The location `relative` below this one, through the same store (a table's metadata
    /// table).
    pub fn child(&self, relative: &str) -> Result<Storage> {
        let uri = self.uri.resolve(relative)?;
        Ok(Storage { uri, store: self.store.clone(), prefix: self.path(relative), ..*self })
    }

    /// The full object path of `relative` (slash-separated, relative to this location). Names
    /// are taken as they are, as listings return them (`city=São Paulo`, `50%`), so that what
    /// is listed can be read and what is written is named as Spark names it; only `.`, `..` and
    /// control characters, which no store may take as a name, are escaped.
    pub fn path(&self, relative: &str) -> ObjectPath {
        relative.split('/').filter(|p| !p.is_empty()).fold(self.prefix.clone(), |path, part| {
            match object_store::path::PathPart::parse(part) {
                Ok(name) => path.child(name),
                Err(_) => path.child(part),
            }
        })
    }

    /// A Parquet reader of `relative` that fetches only the byte ranges it decodes: the
    /// footer, then the column chunks of the row groups asked for. `size` saves a request.
    pub fn parquet_reader(&self, relative: &str, size: Option<u64>) -> parquet::arrow::async_reader::ParquetObjectReader {
        // One request for the footer and its length (which the file's last 8 bytes give, a
        // request of their own without a hint): 64 KiB covers the metadata of a table's base
        // files, a large bloom filter aside.
        const FOOTER_HINT: usize = 64 * 1024;
        let reader = parquet::arrow::async_reader::ParquetObjectReader::new(self.store.clone(), self.path(relative))
            .with_footer_size_hint(FOOTER_HINT);
        match size {
            Some(size) if size > 0 => reader.with_file_size(size),
            _ => reader,
        }
    }

    /// The size of an object in bytes.
    pub async fn size(&self, relative: &str) -> Result<u64> {
        let path = self.path(relative);
        let head = async { self.store.head(&path).await };
        head.await.map(|meta| meta.size).context(|| format!("reading the size of {}/{}", self.uri, relative))
    }

    /// Reads a whole object.
    pub async fn get(&self, relative: &str) -> Result<Bytes> {
        let path = self.path(relative);
        let read = async { self.store.get(&path).await?.bytes().await };
        read.await.context(|| format!("reading {}/{}", self.uri, relative))
    }

    /// Reads a whole object, `None` when there is none.
    pub async fn get_if_exists(&self, relative: &str) -> Result<Option<Bytes>> {
        match self.get(relative).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Objects directly in the directory `relative` (not below it): `(name, size)` pairs. A
    /// missing directory is empty.
    pub async fn list_dir(&self, relative: &str) -> Result<Vec<(String, u64)>> {
        Ok(self.list_dir_and_subdirs(relative).await?.0)
    }

    /// [`Self::list_dir`], and the names of the directories in `relative` (on object stores,
    /// the prefixes that some object below it has).
    pub async fn list_dir_and_subdirs(&self, relative: &str) -> Result<(Vec<(String, u64)>, Vec<String>)> {
        let prefix = self.path(relative);
        match self.store.list_with_delimiter(Some(&prefix)).await {
            Ok(listing) => Ok((
                listing.objects.into_iter().filter_map(|o| o.location.filename().map(|n| (n.to_owned(), o.size))).collect(),
                listing.common_prefixes.into_iter().filter_map(|p| p.filename().map(str::to_owned)).collect(),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(Default::default()),
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
    ///
    /// A create is not idempotent, so neither object_store nor the network can be trusted to
    /// have sent it once: a retry after a 5xx or a timeout may meet the object its own first
    /// attempt made. An existing object with exactly `bytes` is therefore taken as this
    /// caller's — sound because every caller that reads the answer writes content that names
    /// it (an owner, an instant, metadata); empty content proves nothing and is never claimed.
    /// What no retry can rule out: when every attempt timed out, the first may still land later,
    /// after the caller gave up (and, for a completion, after its lock passed on).
    pub async fn put_if_absent(&self, relative: &str, bytes: Bytes) -> Result<bool> {
        let path = self.path(relative);
        let (mut attempt, started) = (1, std::time::Instant::now());
        loop {
            let options = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
            match self.store.put_opts(&path, bytes.clone().into(), options).await {
                Ok(_) => return Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => {
                    if bytes.is_empty() {
                        return Ok(false);
                    }
                    return match self.get(relative).await {
                        Ok(existing) => Ok(existing == bytes),
                        // Deleted since (a lock released and cleared): somebody else's.
                        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
                        Err(e) => Err(e),
                    };
                }
                Err(object_store::Error::NotImplemented) => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!("{} cannot create objects conditionally, which the Hudi timeline and the table lock need", self.uri),
                    )
                    .with_hint("Remove aws_conditional_put from the user mapping (or set it to 'etag'): S3 and compatible servers take If-None-Match."))
                }
                Err(e) if self.resends.again(attempt, started, &e) => attempt += 1,
                Err(e) => return Err(Error::from(e).context(format!("creating {}/{}", self.uri, relative))),
            }
        }
    }

    /// Reads a whole object and its version, `None` when there is none.
    pub async fn get_versioned(&self, relative: &str) -> Result<Option<(Bytes, Versioned)>> {
        let path = self.path(relative);
        let read = async {
            let result = self.store.get(&path).await?;
            let version = Versioned { e_tag: result.meta.e_tag.clone(), version: result.meta.version.clone() };
            Ok::<_, object_store::Error>((result.bytes().await?, version))
        };
        match read.await {
            Ok(read) => Ok(Some(read)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::from(e).context(format!("reading {}/{}", self.uri, relative))),
        }
    }

    /// Writes `bytes` at `relative` if the object is still at version `previous` (with
    /// `None`, if there is none): its new version, or `None` when another writer changed it
    /// first. A write that a retry may have sent twice is recognised by its bytes, as in
    /// [`Self::put_if_absent`].
    pub async fn put_versioned(&self, relative: &str, bytes: Bytes, previous: Option<&Versioned>) -> Result<Option<Versioned>> {
        let path = self.path(relative);
        let mode = match previous {
            None => object_store::PutMode::Create,
            Some(v) => object_store::PutMode::Update(object_store::UpdateVersion { e_tag: v.e_tag.clone(), version: v.version.clone() }),
        };
        let options = object_store::PutOptions { mode, ..Default::default() };
        match self.store.put_opts(&path, bytes.clone().into(), options).await {
            Ok(put) => Ok(Some(Versioned { e_tag: put.e_tag, version: put.version })),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => {
                match self.get_versioned(relative).await? {
                    Some((existing, version)) if existing == bytes => Ok(Some(version)),
                    _ => Ok(None),
                }
            }
            Err(object_store::Error::NotImplemented) => Err(Error::new(
                ErrorKind::Unsupported,
                format!("{} cannot overwrite objects conditionally, which Hudi's storage-based lock needs", self.uri),
            )),
            Err(e) => Err(Error::from(e).context(format!("writing {}/{}", self.uri, relative))),
        }
    }

    /// Deletes an object; a missing one is not an error. A delete is idempotent, but
    /// object_store does not retry one that timed out: it is sent again here.
    pub async fn delete(&self, relative: &str) -> Result<()> {
        let path = self.path(relative);
        let (mut attempt, started) = (1, std::time::Instant::now());
        loop {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return Ok(()),
                Err(e) if self.resends.again(attempt, started, &e) => attempt += 1,
                Err(e) => return Err(Error::from(e).context(format!("deleting {}/{}", self.uri, relative))),
            }
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
    use std::collections::BTreeMap;

    /// The URL parser drops tabs and line breaks and encodes other controls: a URI written with
    /// one would name another location than the text, so it is refused, as are relative paths
    /// with one; the message shows them escaped, on one line.
    #[test]
    fn control_characters_are_refused_not_dropped() {
        for text in ["file:///srv/la\nke", "s3://b/x\ty", "memory:///a\rb", "memory:///a\u{7f}b", "memory:///a\u{85}b"] {
            let err = StorageUri::parse(text).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{text:?}: {err}");
            assert!(!err.to_string().contains(['\n', '\r', '\t']), "{err:?}");
        }
        let base = StorageUri::parse("memory:///base").unwrap();
        assert_eq!(base.resolve("a\nb").unwrap_err().kind(), ErrorKind::InvalidArgument);
        // Surrounding whitespace is trimmed, as before.
        StorageUri::parse(" memory:///t\n").unwrap();
    }

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
        assert_eq!(base.resolve("file:///srv/lake/x/y").unwrap().as_str(), "file:///srv/lake/x/y");
        assert_eq!(base.resolve("sales//orders/").unwrap().as_str(), "file:///srv/lake/sales/orders");
        assert_eq!(base.resolve("").unwrap().as_str(), "file:///srv/lake");
        assert_eq!(base.resolve("my%20table").unwrap().as_str(), "file:///srv/lake/my%20table");
    }

    #[test]
    fn no_spelling_of_a_path_leaves_its_base() {
        let base = StorageUri::parse("file:///srv/lake").unwrap();
        for path in [
            "../etc",
            "a/../../etc",
            "%2e%2e/%2e%2e/secret",
            "%2E%2e/x",
            ".%2e/x",
            "%2e/x",
            "./x",
            "..%2f..%2fsecret",
            "..%2F..",
            "a%2f..%2f..%2f..",
            "..\\..\\secret",
            "%5c..%5c..",
            "a/%00/b",
            "file:///srv/lake/../secret",
            "file:///srv/lake/%2e%2e/secret",
            "file:///srv/lake2/t",
            "file:///srv",
            "s3://bucket/lake/t",
            "memory:///srv/lake/t",
        ] {
            let err = base.resolve(path).map(|u| u.to_string()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{path}: {err}");
        }
        let bucket = StorageUri::parse("s3://bucket/lake").unwrap();
        for path in ["..%2fother", "x\\..\\..", "s3://bucket/lake2", "s3://other/lake/t", "%2e%2e"] {
            assert_eq!(bucket.resolve(path).unwrap_err().kind(), ErrorKind::PermissionDenied, "{path}");
        }
        assert_eq!(bucket.resolve("s3://bucket/lake/t").unwrap().as_str(), "s3://bucket/lake/t");
    }

    #[test]
    fn uris_have_one_spelling() {
        assert_eq!(StorageUri::parse("file:///srv//lake/").unwrap().as_str(), "file:///srv/lake");
        assert_eq!(StorageUri::parse("file:///srv/a\\b").unwrap().as_str(), "file:///srv/a/b");
        for bad in ["file:///srv/a%2fb", "s3://b/a%2Fb", "s3://b/a\\b", "s3://b/%5c", "file:///x/%00"] {
            assert!(StorageUri::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn symbolic_links_do_not_lead_out_of_a_base() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, secret) = (dir.path().join("lake"), dir.path().join("secret"));
        std::fs::create_dir_all(lake.join("t")).unwrap();
        std::fs::create_dir_all(secret.join("t")).unwrap();
        std::os::unix::fs::symlink(&secret, lake.join("link")).unwrap();
        let base = StorageUri::parse(&format!("file://{}", lake.display())).unwrap();
        assert!(base.resolve("t").is_ok());
        assert!(base.resolve("not/yet/created").is_ok(), "judged by the directory it would be created in");
        for path in ["link", "link/t", "link/new/table"] {
            assert_eq!(base.resolve(path).unwrap_err().kind(), ErrorKind::PermissionDenied, "{path}");
        }
        // A base that is itself reached through a link is judged by where it leads.
        let via_link = StorageUri::parse(&format!("file://{}", lake.join("link").display())).unwrap();
        assert!(via_link.resolve("t").is_ok());
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
            let storage = Storage::open(&StorageUri::parse(uri).unwrap(), &StoreSettings::default()).unwrap();
            assert!(storage.put_if_absent("a/lock", Bytes::from_static(b"1")).await.unwrap(), "{uri}");
            assert!(!storage.put_if_absent("a/lock", Bytes::from_static(b"2")).await.unwrap(), "{uri}");
            // What a retried create meets when its first attempt landed: the same content is ours.
            assert!(storage.put_if_absent("a/lock", Bytes::from_static(b"1")).await.unwrap(), "{uri}");
            // Empty content names nobody.
            assert!(storage.put_if_absent("a/empty", Bytes::new()).await.unwrap());
            assert!(!storage.put_if_absent("a/empty", Bytes::new()).await.unwrap());
            assert_eq!(storage.get("a/lock").await.unwrap(), Bytes::from_static(b"1"));
            storage.delete("a/lock").await.unwrap();
            storage.delete("a/lock").await.unwrap();
            assert!(storage.put_if_absent("a/lock", Bytes::from_static(b"3")).await.unwrap());
        }
    }

    #[tokio::test]
    async fn names_are_stored_and_listed_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let names = ["city=São Paulo/a", "city=50%/b", "city=100%25/c", "city=a b/d", "city=x=y/e", "city=[1]~#{}/f"];
        for uri in [format!("file://{}", dir.path().display()), "memory:///names-as-they-are".to_owned()] {
            let storage = Storage::open(&StorageUri::parse(&uri).unwrap(), &StoreSettings::default()).unwrap();
            for name in names {
                storage.put(name, Bytes::from(name)).await.unwrap();
            }
            let mut listed: Vec<String> = storage.list_recursive("").await.unwrap().into_iter().map(|(p, _)| p).collect();
            listed.sort();
            let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            want.sort();
            assert_eq!(listed, want, "{uri}");
            for name in &listed {
                assert_eq!(storage.get(name).await.unwrap(), Bytes::from(name.clone()), "{uri}");
            }
        }
        // On disk, as Spark would name the directories.
        let mut on_disk: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        on_disk.sort();
        assert_eq!(on_disk, ["city=100%25", "city=50%", "city=São Paulo", "city=[1]~#{}", "city=a b", "city=x=y"]);
    }

    #[tokio::test]
    async fn memory_store_is_shared_across_opens() {
        let uri = StorageUri::parse("memory:///storage-test").unwrap();
        let a = Storage::open(&uri, &StoreSettings::default()).unwrap();
        a.put("x/y", Bytes::from_static(b"hello")).await.unwrap();
        let b = Storage::open(&uri, &StoreSettings::default()).unwrap();
        assert_eq!(b.get("x/y").await.unwrap(), Bytes::from_static(b"hello"));
        let missing = b.get("nope").await.unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert!(missing.to_string().contains("memory:///storage-test/nope"), "{missing}");
    }

    #[test]
    fn an_azure_location_keeps_all_of_its_path() {
        let options: BTreeMap<String, String> = [
            ("azure_storage_account_name".to_owned(), "account".to_owned()),
            ("azure_storage_account_key".to_owned(), "a2V5".to_owned()),
        ]
        .into();
        let settings = StoreSettings { options, ..Default::default() };
        let storage = Storage::open(&StorageUri::parse("az://lake/warehouse/t").unwrap(), &settings).unwrap();
        assert_eq!(storage.path(".hoodie/hoodie.properties").as_ref(), "warehouse/t/.hoodie/hoodie.properties");
        let anonymous = StoreSettings { credential_chain: true, ..Default::default() };
        let s3 = Storage::open(&StorageUri::parse("s3://lake/warehouse/t").unwrap(), &anonymous).unwrap();
        assert_eq!(s3.path("x").as_ref(), "warehouse/t/x");
    }
}