//! The table lock under contention: writers that take it, stall past their lease, break
//! expired leases at the same moment and release it, with delays between every storage step.
//! Never two holders acting at once, and never a time issued twice or out of order.

mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use common::interleaving::Interleaving;
use engine::storage::{Storage, StorageUri};
use engine::write::time::{LockOptions, TableLock};
use rand::{Rng, SeedableRng};

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
