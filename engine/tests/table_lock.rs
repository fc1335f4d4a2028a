//! The table lock under contention: writers that take it, stall past their lease, break
//! expired leases at the same moment and release it, with delays between every storage step.
//! Never two holders acting at once, and never a time issued twice or out of order.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use engine::storage::{Bytes, Storage, StorageUri};
use engine::write::time::{LockOptions, TableLock};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult};
use rand::{Rng, SeedableRng};

/// An object store that yields to other tasks a random number of times before and after every
/// operation, so that contenders interleave between any two storage steps.
#[derive(Debug)]
struct Interleaving {
    inner: Arc<dyn ObjectStore>,
    seed: std::sync::atomic::AtomicU64,
}

impl Interleaving {
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

/// What the contenders did, in the order they did it.
#[derive(Default)]
struct Log {
    /// Contenders between a successful check of the lock and the end of their action.
    acting: Cell<usize>,
    most_acting: Cell<usize>,
    /// Every time issued, in the order issued.
    times: RefCell<Vec<String>>,
    lost: Cell<usize>,
    rounds: Cell<usize>,
}

#[tokio::test(flavor = "current_thread")]
async fn contenders_never_hold_the_lock_together_and_times_only_increase() {
    let seed: u64 = std::env::var("PG_HUDI_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    println!("seed {seed}");
    let memory = Storage::open(&StorageUri::parse("memory:///table-lock-stress").unwrap(), &Default::default()).unwrap();
    let storage = memory.layered(|inner| Arc::new(Interleaving { inner, seed: seed.into() }));
    let options = LockOptions { lease: Duration::from_millis(20), timeout: Duration::from_secs(60), ..Default::default() };
    let (contenders, rounds) = (8, 1_250);
    let log = Rc::new(Log::default());
    let local = tokio::task::LocalSet::new();
    for contender in 0..contenders {
        let (storage, options, log) = (storage.clone(), options.clone(), log.clone());
        local.spawn_local(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 100 + contender);
            for round in 0..rounds {
                let stall = rng.random_ratio(1, 200).then(|| Duration::from_millis(rng.random_range(25..40)));
                let times = rng.random_range(1..=2);
                let owner = format!("c{contender}-r{round}");
                let outcome = TableLock::hold(&storage, &owner, &options, async |lock| {
                    if let Some(stall) = stall {
                        tokio::time::sleep(stall).await; // past the lease: others may break it
                    }
                    for _ in 0..times {
                        let time = lock.next_time(&options).await?;
                        log.acting.set(log.acting.get() + 1);
                        log.most_acting.set(log.most_acting.get().max(log.acting.get()));
                        log.times.borrow_mut().push(time);
                        tokio::task::yield_now().await; // the action itself, with the lock checked
                        log.acting.set(log.acting.get() - 1);
                    }
                    Ok(())
                })
                .await;
                match outcome {
                    Ok(()) => {}
                    Err(e) if e.to_string().contains("lost the table lock") => log.lost.set(log.lost.get() + 1),
                    Err(e) => panic!("seed {seed}: {owner}: {e}"),
                }
                log.rounds.set(log.rounds.get() + 1);
            }
        });
    }
    local.await;
    let times = log.times.borrow();
    println!("seed {seed}: {} rounds, {} times, {} holders learned they lost the lock", log.rounds.get(), times.len(), log.lost.get());
    assert_eq!(log.rounds.get(), contenders as usize * rounds);
    assert_eq!(log.most_acting.get(), 1, "seed {seed}: two holders acted at once");
    if let Some(w) = times.windows(2).find(|w| w[0] >= w[1]) {
        panic!("seed {seed}: time {} issued after {}", w[1], w[0]);
    }
    assert!(log.lost.get() > 0, "seed {seed}: no stall outlived its lease, the test proves nothing");
    // Old epochs are cleaned up as the lock moves on.
    let left = memory.list_dir(".hoodie/.locks/epochs").await.unwrap();
    assert!(left.len() <= 6, "{left:?}");
}
