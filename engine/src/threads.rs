//! Threads the engine starts for itself (read-ahead, heartbeats): they block every signal, so
//! that a host's signal handlers (PostgreSQL's) only ever run on the host's own thread.

/// Spawns `job` on a new thread that starts with every signal blocked: the caller blocks them
/// around the spawn, so the thread inherits the mask before it runs at all. Gives the job back
/// when no thread can be started.
pub(crate) fn spawn_without_signals<F: FnOnce() + Send + 'static>(name: &str, job: F) -> std::result::Result<(), F> {
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
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
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
