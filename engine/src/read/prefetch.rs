//! Reading ahead: while the caller consumes the rows of one file slice, the next slices are
//! decoded and merged on helper threads. The caller keeps all I/O: it fetches each slice
//! ([`crate::read::TableReader::fetch_slice`]) on its own runtime and hands the fetched bytes
//! over; a helper only runs [`SliceRead::run`], CPU work on memory it owns. Helpers block
//! every signal, so that a host's signal handlers (PostgreSQL's) only ever run on the host's
//! own thread.
//!
//! Memory: the slice being consumed plus up to `depth` slices in flight.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow::record_batch::RecordBatch;
use tokio::sync::oneshot;

use crate::error::{Error, ErrorKind, Result};
use crate::read::SliceRead;

type SliceRows = Result<Option<RecordBatch>>;

enum Pending {
    /// Not started: with no read-ahead, a slice runs on the caller's thread when asked for.
    Waiting(Box<SliceRead>),
    Running(oneshot::Receiver<SliceRows>),
}

/// Slices submitted in scan order and returned in the same order.
pub struct ReadAhead {
    depth: usize,
    pending: VecDeque<Pending>,
}

impl ReadAhead {
    /// Up to `depth` slices decoded ahead on helper threads, one thread each; with 0, each
    /// slice is decoded on the caller's thread when [`Self::next`] asks for it.
    pub fn new(depth: usize) -> ReadAhead {
        ReadAhead { depth, pending: VecDeque::new() }
    }

    /// Whether to fetch and [`Self::submit`] another slice before asking for the next rows.
    pub fn wants_more(&self) -> bool {
        self.pending.len() < self.depth.max(1)
    }

    /// Starts decoding and merging `read` (on a helper thread unless the depth is 0, or no
    /// thread can be started: then on the caller's thread, later).
    pub fn submit(&mut self, read: SliceRead) {
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

    /// The rows of the oldest submitted slice (`Ok(None)`: it has none); `None` when no slice
    /// is pending.
    pub async fn next(&mut self) -> Option<SliceRows> {
        Some(match self.pending.pop_front()? {
            Pending::Waiting(read) => read.run(),
            Pending::Running(receiver) => receiver
                .await
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a file slice's decoding thread ended without rows"))),
        })
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
