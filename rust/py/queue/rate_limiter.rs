//! Python binding of `crate::queue::rate_limiter`: one limiter shared by every thread of the server.
//!
//! The limiter sits behind a `std::sync::Mutex`, held only for a hash lookup and a few float
//! operations, never while calling into Python, so holding the interpreter while waiting for it
//! cannot deadlock and releasing the interpreter would cost more than the wait.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use pyo3::prelude::*;

use crate::py::errors::guarded;
use crate::queue::rate_limiter;

/// Dequeue rate limits per queue (token buckets). Thread-safe.
#[pyclass(frozen, name = "RateLimiter", module = "pinlater._pinlater")]
pub struct RateLimiter {
    inner: Mutex<rate_limiter::RateLimiter>,
}

impl RateLimiter {
    fn lock(&self) -> MutexGuard<'_, rate_limiter::RateLimiter> {
        // A panic while locked leaves only plain numbers behind: still a valid limiter.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl RateLimiter {
    #[new]
    #[pyo3(signature = (burst_seconds = 1.0))]
    fn new(burst_seconds: f64) -> PyResult<Self> {
        guarded("RateLimiter", || {
            let inner = rate_limiter::RateLimiter::new(burst_seconds)?;
            Ok(Self {
                inner: Mutex::new(inner),
            })
        })
    }

    #[getter]
    fn burst_seconds(&self) -> PyResult<f64> {
        guarded("RateLimiter.burst_seconds", || {
            Ok(self.lock().burst_seconds())
        })
    }

    fn set_rate(&self, queue: &str, jobs_per_second: f64) -> PyResult<()> {
        guarded("RateLimiter.set_rate", || {
            let now = Instant::now();
            Ok(self.lock().set_rate(queue, jobs_per_second, now)?)
        })
    }

    fn remove(&self, queue: &str) -> PyResult<()> {
        guarded("RateLimiter.remove", || {
            self.lock().remove(queue);
            Ok(())
        })
    }

    fn rates(&self) -> PyResult<HashMap<String, f64>> {
        guarded("RateLimiter.rates", || {
            // Snapshot under the lock; the dict is built after it is released.
            let rates: HashMap<String, f64> = self
                .lock()
                .rates()
                .map(|(queue, rate)| (queue.to_owned(), rate))
                .collect();
            Ok(rates)
        })
    }

    #[pyo3(signature = (queue, n = 1))]
    fn try_acquire(&self, queue: &str, n: u64) -> PyResult<bool> {
        guarded("RateLimiter.try_acquire", || {
            let now = Instant::now();
            Ok(self.lock().try_acquire(queue, n, now))
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        guarded("RateLimiter.__repr__", || {
            let limiter = self.lock();
            Ok(format!(
                "RateLimiter(burst_seconds={:?}, queues={})",
                limiter.burst_seconds(),
                limiter.rates().count()
            ))
        })
    }
}
