//! Hudi's storage-based lock under contention: eight contenders taking it 200 times each, with
//! every storage step interleaved with the others' (a store that yields at random before and
//! after each request), never hold it at once; made with unconditional writes, they do.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use engine::storage::{Storage, StorageUri};
use engine::write::storage_lock::{StorageLock, StorageLockSettings};

#[tokio::test]
async fn contenders_never_hold_it_together() {
    let seed = common::seed();
    let uri = StorageUri::parse(&format!("memory:///storage-lock-contention/{seed}")).unwrap();
    let storage = Storage::open(&uri, &Default::default())
        .unwrap()
        .layered(|inner| Arc::new(common::interleaving::Interleaving::new(inner, seed)));
    let counters = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)]);
    let [holders, rounds, overlaps] = [0, 1, 2];
    let contenders: Vec<_> = (0..8)
        .map(|_| {
            let (storage, counters) = (storage.clone(), counters.clone());
            tokio::spawn(async move {
                for _ in 0..200 {
                    let lock = loop {
                        match StorageLock::try_acquire(&storage, StorageLockSettings::default(), true).await.unwrap().held() {
                            Some(lock) => break lock,
                            None => tokio::task::yield_now().await,
                        }
                    };
                    if counters[holders].fetch_add(1, Ordering::SeqCst) > 0 {
                        counters[overlaps].fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    counters[holders].fetch_sub(1, Ordering::SeqCst);
                    counters[rounds].fetch_add(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            })
        })
        .collect();
    for contender in contenders {
        contender.await.unwrap();
    }
    assert_eq!(counters[overlaps].load(Ordering::SeqCst), 0, "two holders at once (seed {seed})");
    assert_eq!(counters[rounds].load(Ordering::SeqCst), 1_600);
}
