//! An object store that interleaves concurrent tasks between any two storage steps.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult};

/// An object store that yields to other tasks a random number of times before and after every
/// operation, so that contenders interleave between any two storage steps.
#[derive(Debug)]
pub struct Interleaving {
    pub inner: Arc<dyn ObjectStore>,
    pub seed: std::sync::atomic::AtomicU64,
}

impl Interleaving {
    /// `inner`, with yields drawn from `seed`.
    pub fn new(inner: Arc<dyn ObjectStore>, seed: u64) -> Interleaving {
        Interleaving { inner, seed: seed.into() }
    }

    async fn shuffle(&self) {
        let n = self.seed.fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..(n >> 60) {
            tokio::task::yield_now().await;
        }
    }
}

impl fmt::Display for Interleaving {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interleaving {}", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Interleaving {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        self.shuffle().await;
        let result = self.inner.put_opts(location, payload, opts).await;
        self.shuffle().await;
        result
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.shuffle().await;
        let result = self.inner.get_opts(location, options).await;
        self.shuffle().await;
        result
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> object_store::Result<Bytes> {
        self.inner.get_range(location, range).await
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        self.shuffle().await;
        let result = self.inner.delete(location).await;
        self.shuffle().await;
        result
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.shuffle().await;
        let result = self.inner.list_with_delimiter(prefix).await;
        self.shuffle().await;
        result
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}
