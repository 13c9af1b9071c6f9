//! The process-wide tokio runtime that native background work (the dequeue broker) runs on.
//!
//! Invariants:
//! - at most one runtime per process, built on first use and never shut down (it lives as long as
//!   the interpreter; its threads die with the process);
//! - [`WORKER_THREADS`] workers named [`THREAD_NAME`], so they are easy to spot in `top -H`;
//! - no tokio type leaves the crate: Python only ever sees plain values and snapshots.
//!
//! A forked child inherits the `OnceLock` but not the threads; nothing here may be used after
//! `fork()` without `exec()`. Fork before the first use (as pre-fork servers do) or use spawn.

use std::sync::{Mutex, OnceLock, PoisonError};

use tokio::runtime::{Builder, Runtime};

use crate::error::RuntimeStartError;

/// Worker threads of the runtime; the target machines have few cores and Python keeps one busy.
pub const WORKER_THREADS: usize = 2;
/// Name of every runtime thread.
pub const THREAD_NAME: &str = "pinlater-rt";

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
/// Serialises the first build, so a race never builds (and then drops) a second runtime.
static BUILD: Mutex<()> = Mutex::new(());

/// The runtime, built on first call.
pub fn runtime() -> Result<&'static Runtime, RuntimeStartError> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let _guard = BUILD.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// Number of worker threads of the runtime (building it if needed).
pub fn worker_count() -> Result<usize, RuntimeStartError> {
    Ok(runtime()?.metrics().num_workers())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawned_task_runs_on_a_named_worker() {
        let rt = runtime().unwrap();
        let handle = rt.spawn(async {
            tokio::task::yield_now().await;
            std::thread::current().name().map(str::to_owned)
        });
        let name = rt.block_on(handle).unwrap();
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
    }

    #[test]
    fn one_runtime_with_two_workers() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| std::ptr::from_ref(runtime().unwrap()) as usize))
            .collect();
        let addresses: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(addresses.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(worker_count().unwrap(), WORKER_THREADS);
    }

    #[test]
    fn timers_work() {
        let rt = runtime().unwrap();
        let slept = rt.block_on(async {
            let start = tokio::time::Instant::now();
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            start.elapsed()
        });
        assert!(slept >= std::time::Duration::from_millis(5));
    }
}
