//! Threads the engine starts for itself (a bounded pool of helpers for read-ahead, the
//! heartbeat keeper): they block every signal, so that a host's signal handlers (PostgreSQL's)
//! only ever run on the host's own thread.

/// Runs `f` with every signal blocked on the calling thread, so that any thread a library
/// starts meanwhile inherits the mask: RocksDB starts its background and timer threads from
/// whichever thread opens a database or schedules a flush, and a host's signal handlers
/// (PostgreSQL's, pgrx's) must only ever run on the host's own thread. Signals that arrive
/// meanwhile stay pending and are handled when `f` returns (also when it panics).
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: restores the mask saved below, on the same thread.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: plain libc calls on stack-allocated, initialised signal sets.
    let _restore = unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut previous = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::sigemptyset(previous.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), previous.as_mut_ptr());
        Restore(previous.assume_init())
    };
    f()
}

/// Spawns `job` on a new thread that starts with every signal blocked (it inherits the mask
/// of [`with_signals_blocked`] before it runs at all). Gives the job back when no thread can
/// be started.
pub(crate) fn spawn_without_signals<F: FnOnce() + Send + 'static>(name: &str, job: F) -> std::result::Result<(), F> {
    // The job is moved into the thread only if the spawn succeeds.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
    let in_thread = slot.clone();
    let spawned = with_signals_blocked(|| {
        std::thread::Builder::new().name(name.into()).spawn(move || {
            let job = in_thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                job();
            }
        })
    });
    match spawned {
        Ok(_) => Ok(()),
        Err(_) => Err(slot.lock().unwrap_or_else(|p| p.into_inner()).take().expect("the job did not run")),
    }
}

/// A job for a helper thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A job that sends what `work` computes to `sender`, unless nobody waits for it any more by
/// the time a helper starts it (a scan that ended or was cancelled): then `work` never runs.
pub(crate) fn answer<T: Send + 'static>(sender: tokio::sync::oneshot::Sender<T>, work: impl FnOnce() -> T + Send + 'static) -> Job {
    Box::new(move || {
        if !sender.is_closed() {
            let _ = sender.send(work());
        }
    })
}

/// What a job on a helper thread computes, once it is done ([`on_helper`]).
pub(crate) struct Answer<T> {
    receiver: tokio::sync::oneshot::Receiver<crate::error::Result<T>>,
    what: &'static str,
}

impl<T> Answer<T> {
    /// Waits for the job's result.
    pub(crate) async fn get(self) -> crate::error::Result<T> {
        let what = self.what;
        self.receiver.await.unwrap_or_else(|_| {
            Err(crate::error::Error::new(crate::error::ErrorKind::Internal, format!("{what} ended without an answer")))
        })
    }
}

/// Runs `work` (`what`, for errors) on one of [`HELPERS`], or on the caller's thread when no
/// helper can be started; a panic becomes an internal error. Dropping the answer before a
/// helper starts the job skips it.
pub(crate) fn on_helper<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> Answer<T> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let job = answer(sender, move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
            Err(crate::error::Error::new(crate::error::ErrorKind::Internal, format!("{what} panicked")))
        })
    });
    if let Err(job) = HELPERS.submit(job) {
        // No thread to be had (resource limits): run it here instead.
        job();
    }
    Answer { receiver, what }
}

/// The process's helper threads for CPU work (decoding and merging file slices ahead of a
/// scan): at most one per core (at most 8), started as jobs arrive, each with every signal
/// blocked; jobs wait in a queue for a free one. However many scans a backend runs at once,
/// it has no more helpers than this.
pub(crate) static HELPERS: HelperPool = HelperPool::new();

/// See [`HELPERS`].
pub(crate) struct HelperPool {
    state: std::sync::Mutex<PoolState>,
    work: std::sync::Condvar,
}

struct PoolState {
    queue: std::collections::VecDeque<Job>,
    threads: usize,
    idle: usize,
}

impl HelperPool {
    const fn new() -> HelperPool {
        HelperPool {
            state: std::sync::Mutex::new(PoolState { queue: std::collections::VecDeque::new(), threads: 0, idle: 0 }),
            work: std::sync::Condvar::new(),
        }
    }

    fn limit() -> usize {
        std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8)
    }

    /// Queues `job` for a helper, starting one when none is idle and the limit allows; gives
    /// the job back when there is no helper at all and none can be started.
    pub(crate) fn submit(&'static self, job: Job) -> std::result::Result<(), Job> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.idle == 0 && state.threads < Self::limit() {
            match spawn_without_signals("hudi-helper", move || self.serve()) {
                Ok(()) => state.threads += 1,
                Err(_) if state.threads == 0 => return Err(job),
                Err(_) => {}
            }
        }
        state.queue.push_back(job);
        drop(state);
        self.work.notify_one();
        Ok(())
    }

    /// A helper's life: run queued jobs, in order, forever.
    fn serve(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match state.queue.pop_front() {
                Some(job) => {
                    drop(state);
                    job();
                    state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                }
                None => {
                    state.idle += 1;
                    state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.idle -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn the_helper_pool_is_bounded_and_runs_every_job() {
        let (running, most, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (sender, receiver) = std::sync::mpsc::channel();
        for _ in 0..64 {
            let (running, most, done, sender) = (running.clone(), most.clone(), done.clone(), sender.clone());
            let job: super::Job = Box::new(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                sender.send(()).unwrap();
            });
            assert!(super::HELPERS.submit(job).is_ok());
        }
        for _ in 0..64 {
            receiver.recv().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 64);
        let limit = super::HelperPool::limit();
        assert!(most.load(Ordering::SeqCst) <= limit, "{} helpers at once, limit {limit}", most.load(Ordering::SeqCst));
        assert!(super::HELPERS.state.lock().unwrap().threads <= limit);
    }

    #[test]
    fn jobs_nobody_waits_for_any_more_do_not_run() {
        // Keep every helper busy until the jobs below are queued and abandoned.
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let blocked = Arc::new(std::sync::Mutex::new(blocked));
        let (started, busy) = std::sync::mpsc::channel();
        let limit = super::HelperPool::limit();
        for _ in 0..limit {
            let (blocked, started) = (blocked.clone(), started.clone());
            assert!(super::HELPERS.submit(Box::new(move || {
                started.send(()).unwrap();
                let _ = blocked.lock().unwrap().recv();
            })).is_ok());
        }
        for _ in 0..limit {
            busy.recv().unwrap();
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let mut kept = Vec::new();
        for i in 0..10 {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            let ran = ran.clone();
            assert!(super::HELPERS.submit(super::answer(sender, move || ran.fetch_add(1, Ordering::SeqCst))).is_ok());
            if i == 9 {
                kept.push(receiver); // the one still wanted
            }
        }
        for _ in 0..limit {
            release.send(()).unwrap();
        }
        let answered = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(kept.pop().unwrap());
        assert!(answered.is_ok());
        assert_eq!(ran.load(Ordering::SeqCst), 1, "abandoned jobs ran");
    }

    #[test]
    fn helper_threads_start_with_every_signal_blocked() {
        let (sender, receiver) = std::sync::mpsc::channel();
        super::spawn_without_signals("hudi-test", move || {
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
