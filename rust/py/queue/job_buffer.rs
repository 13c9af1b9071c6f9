//! Python binding of `crate::queue::job_buffer`: one `JobBuffer` per queue, shared by the server's tasks.
//!
//! Bodies stay Python `bytes` objects (`Py<PyBytes>`): they go in and come out without a copy.
//! The buffer sits behind a `std::sync::Mutex` held only for queue operations, never while
//! calling into Python, so holding the interpreter while waiting for it cannot deadlock.

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::{DescriptorError, Malformation};
use crate::py::errors::guarded;
use crate::queue::descriptor::Encoder;
use crate::queue::job_buffer::{self, BufferedJob};

type Buffer = job_buffer::JobBuffer<Py<PyBytes>>;
/// `(shard, priority, local_id, body, attempts_allowed, attempts_remaining, reserved_at_ms)`.
type Entry = (String, i64, i64, Py<PyBytes>, i64, i64, i64);

/// `(descriptor, shard, priority, local_id, body, attempts_allowed, attempts_remaining)`.
type HandOut = (String, String, i64, i64, Py<PyBytes>, i64, i64);

fn entries(jobs: Vec<BufferedJob<Py<PyBytes>>>) -> Vec<Entry> {
    jobs.into_iter()
        .map(|j| {
            (
                j.shard,
                j.priority,
                j.local_id,
                j.body,
                j.attempts_allowed,
                j.attempts_remaining,
                j.reserved_at_ms,
            )
        })
        .collect()
}

/// A bounded buffer of reserved jobs for one queue, priority 1 first then FIFO. Thread-safe.
#[pyclass(frozen, name = "JobBuffer", module = "pinlater._pinlater")]
pub struct JobBuffer {
    inner: Mutex<Buffer>,
}

impl JobBuffer {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        // Every operation leaves the buffer consistent before it can panic (none does).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl JobBuffer {
    #[new]
    fn new(capacity: i64) -> PyResult<Self> {
        guarded("JobBuffer", || {
            let capacity = usize::try_from(capacity).map_err(|_| {
                PyValueError::new_err(format!("capacity must be >= 0, not {capacity}"))
            })?;
            Ok(Self {
                inner: Mutex::new(Buffer::new(capacity)),
            })
        })
    }

    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        guarded("JobBuffer.capacity", || Ok(self.lock().capacity()))
    }

    #[getter]
    fn room(&self) -> PyResult<usize> {
        guarded("JobBuffer.room", || Ok(self.lock().room()))
    }

    fn __len__(&self) -> PyResult<usize> {
        guarded("JobBuffer.__len__", || Ok(self.lock().len()))
    }

    fn len_priority(&self, priority: i64) -> PyResult<usize> {
        guarded("JobBuffer.len_priority", || {
            Ok(self.lock().len_priority(priority))
        })
    }

    fn lengths(&self) -> PyResult<BTreeMap<i64, usize>> {
        guarded("JobBuffer.lengths", || Ok(self.lock().lengths().collect()))
    }

    fn push(
        &self,
        shard: String,
        priority: i64,
        jobs: Vec<(i64, Py<PyBytes>, i64, i64)>,
        reserved_at_ms: i64,
    ) -> PyResult<Vec<i64>> {
        guarded("JobBuffer.push", || {
            let batch =
                jobs.into_iter()
                    .map(
                        |(local_id, body, attempts_allowed, attempts_remaining)| BufferedJob {
                            shard: shard.clone(),
                            priority,
                            local_id,
                            body,
                            attempts_allowed,
                            attempts_remaining,
                            reserved_at_ms,
                        },
                    );
            let rejected = self.lock().push(batch);
            Ok(rejected.into_iter().map(|j| j.local_id).collect())
        })
    }

    fn take(&self, limit: i64) -> PyResult<Vec<Entry>> {
        guarded("JobBuffer.take", || {
            let limit = usize::try_from(limit).unwrap_or(0);
            let taken = self.lock().take(limit);
            Ok(entries(taken))
        })
    }

    /// Takes up to `limit` entries for a worker, as `take` does, and splits them: those
    /// reserved at or after `fresh_after_ms` come back with their job descriptors for `queue`;
    /// older ones, whose reservation may be about to lapse, come back apart as entries (to be
    /// released, not handed out).
    fn hand_out(
        &self,
        queue: &str,
        limit: i64,
        fresh_after_ms: i64,
    ) -> PyResult<(Vec<HandOut>, Vec<Entry>)> {
        guarded("JobBuffer.hand_out", || {
            let limit = usize::try_from(limit).unwrap_or(0);
            let taken = self.lock().take(limit);
            let mut fresh = Vec::with_capacity(taken.len());
            let mut stale = Vec::new();
            let mut encoders: HashMap<String, Encoder> = HashMap::new();
            for job in taken {
                if job.reserved_at_ms < fresh_after_ms {
                    stale.push(job);
                    continue;
                }
                let encoder = match encoders.entry(job.shard.clone()) {
                    Slot::Occupied(slot) => slot.into_mut(),
                    Slot::Vacant(slot) => slot.insert(Encoder::new(queue, &job.shard)?),
                };
                let local_id = u64::try_from(job.local_id).map_err(|_| {
                    DescriptorError::InvalidPart(Malformation::LocalId(job.local_id.to_string()))
                })?;
                let descriptor = encoder.encode(job.priority, local_id)?.to_owned();
                fresh.push((
                    descriptor,
                    job.shard,
                    job.priority,
                    job.local_id,
                    job.body,
                    job.attempts_allowed,
                    job.attempts_remaining,
                ));
            }
            Ok((fresh, entries(stale)))
        })
    }

    fn take_older_than(&self, cutoff_ms: i64) -> PyResult<Vec<Entry>> {
        guarded("JobBuffer.take_older_than", || {
            let taken = self.lock().take_older_than(cutoff_ms);
            Ok(entries(taken))
        })
    }

    fn drain(&self) -> PyResult<Vec<Entry>> {
        guarded("JobBuffer.drain", || {
            let taken = self.lock().drain();
            Ok(entries(taken))
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        guarded("JobBuffer.__repr__", || {
            let buffer = self.lock();
            Ok(format!(
                "JobBuffer(capacity={}, len={})",
                buffer.capacity(),
                buffer.len()
            ))
        })
    }
}
