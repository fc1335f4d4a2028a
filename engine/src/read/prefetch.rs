//! Reading ahead: while the caller consumes the rows of one file slice, the next slices are
//! decoded and merged on helper threads. The caller keeps all I/O: [`SliceScan`] fetches each
//! slice ([`TableReader::fetch_slice`]) on the caller's runtime, while it waits for the oldest
//! slice in flight, and hands the fetched bytes over; a helper only runs [`SliceRead::run`],
//! CPU work on memory it owns. Helpers block every signal, so that a host's signal handlers
//! (PostgreSQL's) only ever run on the host's own thread.
//!
//! Memory: the slice being consumed plus up to `depth` slices in flight.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow::record_batch::RecordBatch;
use tokio::sync::oneshot;

use crate::error::{Error, ErrorKind, Result};
use crate::read::{ScanOptions, ScanStats, SliceQuery, SliceRead, TableReader};
use crate::view::FileSlice;

type SliceRows = Result<Option<RecordBatch>>;

enum Pending {
    /// Not started: with no read-ahead, a slice runs on the caller's thread when asked for.
    Waiting(Box<SliceRead>),
    Running(oneshot::Receiver<SliceRows>),
}

/// Slices submitted in scan order, decoded on helper threads.
struct ReadAhead {
    depth: usize,
    pending: VecDeque<Pending>,
}

impl ReadAhead {
    /// Up to `depth` slices decoded ahead on helper threads, one thread each; with 0, each
    /// slice is decoded on the caller's thread when its rows are asked for.
    fn new(depth: usize) -> ReadAhead {
        ReadAhead { depth, pending: VecDeque::new() }
    }

    /// Starts decoding and merging `read` (on a helper thread unless the depth is 0, or no
    /// thread can be started: then on the caller's thread, later).
    fn submit(&mut self, read: SliceRead) {
        if self.depth == 0 {
            self.pending.push_back(Pending::Waiting(Box::new(read)));
            return;
        }
        let (sender, receiver) = oneshot::channel();
        let job = move || {
            let rows = catch_unwind(AssertUnwindSafe(|| read.run()))
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "decoding a file slice panicked")));
            // The scan may have ended (cancelled); then nobody wants the rows.
            let _ = sender.send(rows);
        };
        match spawn_without_signals(job) {
            Ok(()) => self.pending.push_back(Pending::Running(receiver)),
            Err(job) => {
                // No thread to be had (resource limits): decode here instead.
                job();
                self.pending.push_back(Pending::Running(receiver));
            }
        }
    }

    /// The rows of a submitted slice, once decoded.
    async fn rows(pending: Pending) -> SliceRows {
        match pending {
            Pending::Waiting(read) => read.run(),
            Pending::Running(receiver) => receiver
                .await
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a file slice's decoding thread ended without rows"))),
        }
    }
}

/// A scan of file slices in order, fetching and merging up to `depth` slices ahead.
pub struct SliceScan {
    reader: TableReader,
    query: SliceQuery,
    options: ScanOptions,
    slices: Vec<FileSlice>,
    /// The next slice to fetch.
    next_slice: usize,
    depth: usize,
    ahead: ReadAhead,
    stats: ScanStats,
}

impl SliceScan {
    /// A scan of `slices` of `reader`'s table (`stats`: what pruning kept, to which the scan
    /// adds the row groups it reads).
    pub fn new(
        reader: TableReader,
        query: SliceQuery,
        options: ScanOptions,
        slices: Vec<FileSlice>,
        stats: ScanStats,
        depth: usize,
    ) -> SliceScan {
        SliceScan { reader, query, options, slices, next_slice: 0, depth, ahead: ReadAhead::new(depth), stats }
    }

    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }

    /// Starts over from the first slice; slices in flight are dropped.
    pub fn restart(&mut self) {
        self.next_slice = 0;
        self.ahead = ReadAhead::new(self.depth);
    }

    /// The rows of the next slice (`Ok(None)`: it has none); `None` after the last one.
    pub async fn next(&mut self) -> Option<Result<Option<RecordBatch>>> {
        if self.ahead.pending.is_empty() {
            if let Err(e) = self.fetch_ahead(1).await {
                return Some(Err(e));
            }
        }
        let oldest = self.ahead.pending.pop_front()?;
        // The next slices are fetched while the oldest one is decoded.
        let depth = self.depth;
        let (rows, fetched) = futures::join!(ReadAhead::rows(oldest), self.fetch_ahead(depth));
        Some(fetched.and(rows))
    }

    /// Fetches and submits slices until `in_flight` are pending or none is left.
    async fn fetch_ahead(&mut self, in_flight: usize) -> Result<()> {
        while self.ahead.pending.len() < in_flight && self.next_slice < self.slices.len() {
            let slice = &self.slices[self.next_slice];
            self.next_slice += 1;
            let read = self.reader.fetch_slice(slice, &self.query, &self.options, &mut self.stats).await?;
            self.ahead.submit(read);
        }
        Ok(())
    }
}

/// Spawns `job` on a new thread that starts with every signal blocked: the caller blocks them
/// around the spawn, so the thread inherits the mask before it runs at all. Gives the job back
/// when no thread can be started.
fn spawn_without_signals<F: FnOnce() + Send + 'static>(job: F) -> std::result::Result<(), F> {
    // The job is moved into the thread only if the spawn succeeds.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
    let in_thread = slot.clone();
    // SAFETY: plain libc calls on stack-allocated, initialised signal sets; the previous mask
    // is restored before returning.
    let spawned = unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut previous = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), previous.as_mut_ptr());
        let spawned = std::thread::Builder::new().name("hudi-slice".into()).spawn(move || {
            let job = in_thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                job();
            }
        });
        libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), std::ptr::null_mut());
        spawned
    };
    match spawned {
        Ok(_) => Ok(()),
        Err(_) => Err(slot.lock().unwrap_or_else(|p| p.into_inner()).take().expect("the job did not run")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn helper_threads_start_with_every_signal_blocked() {
        let (sender, receiver) = std::sync::mpsc::channel();
        super::spawn_without_signals(move || {
            // SAFETY: reads this thread's signal mask into an initialised set.
            let blocked = unsafe {
                let mut mask = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
                libc::sigemptyset(mask.as_mut_ptr());
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), mask.as_mut_ptr());
                [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGALRM]
                    .iter()
                    .all(|&s| libc::sigismember(mask.as_ptr(), s) == 1)
            };
            sender.send(blocked).unwrap();
        })
        .unwrap_or_else(|_| panic!("no thread"));
        assert!(receiver.recv().unwrap());
        // SAFETY: as above, for the calling thread, whose mask the spawn must have restored.
        let caller_blocked = unsafe {
            let mut mask = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(mask.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), mask.as_mut_ptr());
            libc::sigismember(mask.as_ptr(), libc::SIGUSR1) == 1
        };
        assert!(!caller_blocked);
    }
}
