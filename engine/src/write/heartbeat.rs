//! Writer heartbeats (`.hoodie/.heartbeat/<instant>`): an open write refreshes its file while
//! it works, and a [`HeartbeatKeeper`] refreshes it while the write is open at all (a
//! transaction may sit idle between statements longer than the expiry); a pending instant
//! whose heartbeat is older than the expiry belongs to a writer that died, and may be rolled
//! back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::error::Result;
use crate::storage::Storage;

pub const HEARTBEAT_DIR: &str = ".hoodie/.heartbeat";

fn path(instant: &str) -> String {
    format!("{HEARTBEAT_DIR}/{instant}")
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64
}

/// Records that the writer of `instant` is alive now.
pub async fn beat(storage: &Storage, instant: &str) -> Result<()> {
    storage.put(&path(instant), Bytes::from(now_ms().to_string())).await
}

/// Removes the heartbeat of a finished write.
pub async fn stop(storage: &Storage, instant: &str) -> Result<()> {
    storage.delete(&path(instant)).await
}

/// Whether the writer of `instant` has not been heard of for `expiry`: by its heartbeat, or
/// without one by the instant's own time.
pub async fn expired(storage: &Storage, instant: &str, expiry: Duration) -> Result<bool> {
    let last = storage.get_if_exists(&path(instant)).await?.and_then(|bytes| String::from_utf8_lossy(&bytes).trim().parse::<i64>().ok());
    let last = last.or_else(|| crate::write::time::parse_instant(instant)).unwrap_or(0);
    Ok(now_ms() - last > expiry.as_millis() as i64)
}

/// A thread of its own that keeps the heartbeats of open writes fresh, whatever the writers'
/// threads are doing. One per process is enough; writes come and go through [`Self::keep`].
#[derive(Clone)]
pub struct HeartbeatKeeper {
    shared: Arc<Kept>,
}

#[derive(Default)]
struct Kept {
    writes: Mutex<Vec<KeptWrite>>,
    changed: Condvar,
}

struct KeptWrite {
    storage: Storage,
    instant: String,
    every: Duration,
    due: Instant,
    open: Arc<AtomicBool>,
}

/// A write whose heartbeat a [`HeartbeatKeeper`] keeps while this lives.
pub struct KeptHeartbeat {
    open: Arc<AtomicBool>,
}

impl Drop for KeptHeartbeat {
    fn drop(&mut self) {
        self.open.store(false, Ordering::SeqCst);
    }
}

impl HeartbeatKeeper {
    /// Starts the keeper's thread (every signal blocked, its own runtime for the I/O);
    /// `None` when no thread can be started.
    pub fn start() -> Option<HeartbeatKeeper> {
        let shared = Arc::new(Kept::default());
        let in_thread = shared.clone();
        crate::threads::spawn_without_signals("hudi-heartbeat", move || keep_beating(&in_thread)).ok()?;
        Some(HeartbeatKeeper { shared })
    }

    /// Beats for the write `instant` every `every` until the returned value is dropped.
    pub fn keep(&self, storage: &Storage, instant: &str, every: Duration) -> KeptHeartbeat {
        let open = Arc::new(AtomicBool::new(true));
        let write = KeptWrite { storage: storage.clone(), instant: instant.to_owned(), every, due: Instant::now() + every, open: open.clone() };
        self.shared.writes.lock().unwrap_or_else(|p| p.into_inner()).push(write);
        self.shared.changed.notify_one();
        KeptHeartbeat { open }
    }
}

/// The keeper's loop: beat every write that is due, forget closed ones, sleep until the next
/// is due. A beat that raced with its write's end (which removes the heartbeat) is undone.
fn keep_beating(kept: &Kept) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let mut writes = kept.writes.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        writes.retain(|w| w.open.load(Ordering::SeqCst));
        let now = Instant::now();
        let due: Vec<(Storage, String, Arc<AtomicBool>)> = writes
            .iter_mut()
            .filter(|w| w.due <= now)
            .map(|w| {
                w.due = now + w.every;
                (w.storage.clone(), w.instant.clone(), w.open.clone())
            })
            .collect();
        if !due.is_empty() {
            drop(writes);
            for (storage, instant, open) in due {
                // A failed beat is retried at the next one; the expiry allows for several.
                let _ = runtime.block_on(beat(&storage, &instant));
                if !open.load(Ordering::SeqCst) {
                    let _ = runtime.block_on(stop(&storage, &instant));
                }
            }
            writes = kept.writes.lock().unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let next = writes.iter().map(|w| w.due).min();
        writes = match next {
            Some(next) => kept.changed.wait_timeout(writes, next.saturating_duration_since(now)).unwrap_or_else(|p| p.into_inner()).0,
            None => kept.changed.wait(writes).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    #[test]
    fn the_keeper_beats_for_open_writes_only() {
        let storage = Storage::open(&StorageUri::parse("memory:///keeper").unwrap(), &Default::default()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let read = |instant: &str| runtime.block_on(storage.get(&path(instant))).ok();
        let keeper = HeartbeatKeeper::start().unwrap();
        let kept = keeper.keep(&storage, "20260101000000001", Duration::from_millis(5));
        let _other = keeper.keep(&storage, "20260101000000002", Duration::from_millis(5));
        // The heartbeat is written, and written again later.
        let first = loop {
            if let Some(beat) = read("20260101000000001") {
                break beat;
            }
            std::thread::yield_now();
        };
        while read("20260101000000001") == Some(first.clone()) {
            std::thread::yield_now();
        }
        // A closed write is forgotten: once its heartbeat is removed (as commit and abort do), it
        // stays removed, while the other write's goes on.
        drop(kept);
        let before = read("20260101000000002");
        while read("20260101000000002") == before {
            std::thread::yield_now();
        }
        runtime.block_on(stop(&storage, "20260101000000001")).unwrap();
        let after = read("20260101000000002");
        while read("20260101000000002") == after {
            std::thread::yield_now();
        }
        assert_eq!(read("20260101000000001"), None);
    }
}

