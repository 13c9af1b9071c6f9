//! Python binding of `crate::queue::job_buffer`: one `JobBuffer` per queue, shared by the
//! server's tasks, and the broker's per-dequeue values: a `HandOut` (what a dequeue took, written
//! into the reply by `encode_dequeue_handout`), a `ClaimFlush` (the claims of one turn of the
//! loop) and `ClaimItems` (one store call's claims).
//!
//! Jobs go in as a store call's `ClaimedJobs` and come out as a `HandOut`: no Python object is
//! made per job between the store's reply and the dequeue's reply. Only the rare paths (entries
//! to release, tests) build Python tuples. The buffer sits behind a `std::sync::Mutex` held only
//! for queue operations, never while calling into Python, so holding the interpreter while
//! waiting for it cannot deadlock.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::DescriptorError;
use crate::py::errors::guarded;
use crate::py::queue::jobs::ClaimedJobs;
use crate::queue::descriptor::{check_queue, check_shard, Encoder};
use crate::queue::job_buffer::{self, BufferedJob, ClaimLedger, ClaimRun};

type Job = BufferedJob<Vec<u8>>;
type Buffer = job_buffer::JobBuffer<Vec<u8>>;
/// `(shard, priority, local_id, body, attempts_allowed, attempts_remaining, reserved_at_ms)`.
type Entry<'py> = (String, i64, i64, Bound<'py, PyBytes>, i64, i64, i64);
/// `(descriptor, body, attempts_allowed, attempts_remaining)`.
type HandedJob<'py> = (String, Bound<'py, PyBytes>, i64, i64);

fn entries<'py>(py: Python<'py>, jobs: &[Job]) -> Vec<Entry<'py>> {
    jobs.iter()
        .map(|j| {
            (
                j.shard.clone(),
                j.priority,
                j.local_id,
                PyBytes::new(py, &j.body),
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

    /// The bytes of the bodies held now.
    #[getter]
    fn bytes(&self) -> PyResult<usize> {
        guarded("JobBuffer.bytes", || Ok(self.lock().bytes()))
    }

    fn __len__(&self) -> PyResult<usize> {
        guarded("JobBuffer.__len__", || Ok(self.lock().len()))
    }

    fn len_priority(&self, priority: i64) -> PyResult<usize> {
        guarded("JobBuffer.len_priority", || {
            Ok(self.lock().len_priority(priority))
        })
    }

    fn lengths(&self) -> PyResult<std::collections::BTreeMap<i64, usize>> {
        guarded("JobBuffer.lengths", || Ok(self.lock().lengths().collect()))
    }

    /// Appends the jobs of one reserve call (one shard and priority) while there is room;
    /// returns the local ids that did not fit.
    fn push(
        &self,
        shard: String,
        priority: i64,
        jobs: &Bound<'_, ClaimedJobs>,
        reserved_at_ms: i64,
    ) -> PyResult<Vec<i64>> {
        guarded("JobBuffer.push", || {
            let batch = jobs.get().jobs().iter().map(|job| BufferedJob {
                shard: shard.clone(),
                priority,
                local_id: job.local_id,
                body: job.body.clone(),
                attempts_allowed: job.attempts_allowed,
                attempts_remaining: job.attempts_remaining,
                reserved_at_ms,
            });
            let rejected = self.lock().push(batch);
            Ok(rejected.into_iter().map(|j| j.local_id).collect())
        })
    }

    fn take<'py>(&self, py: Python<'py>, limit: i64) -> PyResult<Vec<Entry<'py>>> {
        guarded("JobBuffer.take", || {
            let limit = usize::try_from(limit).unwrap_or(0);
            let taken = self.lock().take(limit);
            Ok(entries(py, &taken))
        })
    }

    /// Takes up to `limit` entries for a worker's dequeue of `queue`, as `take` does, each
    /// while the bodies taken before it hold fewer than `max_bytes` bytes (the first always),
    /// split into the fresh ones (reserved at or after `fresh_after_ms`) and the stale ones.
    fn hand_out(
        &self,
        queue: String,
        limit: i64,
        max_bytes: i64,
        fresh_after_ms: i64,
    ) -> PyResult<HandOut> {
        guarded("JobBuffer.hand_out", || {
            check_queue(&queue).map_err(DescriptorError::InvalidPart)?;
            let limit = usize::try_from(limit).unwrap_or(0);
            let max_bytes = u64::try_from(max_bytes).unwrap_or(0);
            let taken = self.lock().hand_out(limit, max_bytes, fresh_after_ms);
            for job in &taken.fresh {
                check_shard(&job.shard).map_err(DescriptorError::InvalidPart)?;
            }
            Ok(HandOut {
                queue,
                fresh: taken.fresh,
                stale: taken.stale,
            })
        })
    }

    fn take_older_than<'py>(&self, py: Python<'py>, cutoff_ms: i64) -> PyResult<Vec<Entry<'py>>> {
        guarded("JobBuffer.take_older_than", || {
            let taken = self.lock().take_older_than(cutoff_ms);
            Ok(entries(py, &taken))
        })
    }

    fn take_named<'py>(
        &self,
        py: Python<'py>,
        jobs: Vec<(String, i64, i64)>,
    ) -> PyResult<Vec<Entry<'py>>> {
        guarded("JobBuffer.take_named", || {
            let names: HashSet<(&str, i64, i64)> = jobs
                .iter()
                .map(|(shard, priority, local_id)| (shard.as_str(), *priority, *local_id))
                .collect();
            let taken = self.lock().take_named(&names);
            Ok(entries(py, &taken))
        })
    }

    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Vec<Entry<'py>>> {
        guarded("JobBuffer.drain", || {
            let taken = self.lock().drain();
            Ok(entries(py, &taken))
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

/// What one dequeue took from a queue's buffer: the jobs for the worker (`len()`), in order,
/// and apart the stale entries to release.
#[pyclass(frozen, name = "HandOut", module = "pinlater._pinlater")]
pub struct HandOut {
    queue: String,
    fresh: Vec<Job>,
    stale: Vec<Job>,
}

impl HandOut {
    #[must_use]
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The jobs for the worker, in order.
    #[must_use]
    pub fn jobs(&self) -> &[Job] {
        &self.fresh
    }
}

#[pymethods]
impl HandOut {
    fn __len__(&self) -> usize {
        self.fresh.len()
    }

    #[getter(queue)]
    fn py_queue(&self) -> &str {
        &self.queue
    }

    /// How many entries were too old to hand out.
    #[getter]
    fn stale_count(&self) -> usize {
        self.stale.len()
    }

    /// The hand-out without the jobs whose claims were not written: all on `shards` (their
    /// claim calls failed) and the `(shard, priority, local_id)` ones of `jobs` (a store that
    /// answered found them lapsed, taken or deleted), in the same order; the jobs left out are
    /// its entries to release (`stale`), in place of the stale ones (released already).
    fn withholding(&self, shards: HashSet<String>, jobs: HashSet<(String, i64, i64)>) -> Self {
        let (withheld, fresh) = self.fresh.iter().cloned().partition(|job| {
            shards.contains(&job.shard)
                || (!jobs.is_empty()
                    && jobs.contains(&(job.shard.clone(), job.priority, job.local_id)))
        });
        Self {
            queue: self.queue.clone(),
            fresh,
            stale: withheld,
        }
    }

    /// The entries too old to hand out, as `JobBuffer.take` returns entries.
    fn stale<'py>(&self, py: Python<'py>) -> Vec<Entry<'py>> {
        entries(py, &self.stale)
    }

    /// `(descriptor, body, attempts_allowed, attempts_remaining)` per job handed out, in order.
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Vec<HandedJob<'py>>> {
        guarded("HandOut.to_list", || {
            let mut out = Vec::with_capacity(self.fresh.len());
            for job in &self.fresh {
                let local_id = u64::try_from(job.local_id).map_err(|_| {
                    DescriptorError::InvalidPart(crate::error::Malformation::LocalId(
                        job.local_id.to_string(),
                    ))
                })?;
                let descriptor = Encoder::new(&self.queue, &job.shard)?
                    .encode(job.priority, local_id)?
                    .to_owned();
                out.push((
                    descriptor,
                    PyBytes::new(py, &job.body),
                    job.attempts_allowed,
                    job.attempts_remaining,
                ));
            }
            Ok(out)
        })
    }
}

/// The claims of the hand-outs of one turn of the loop, until they are written: one
/// `ClaimItems` per (queue, shard) for the store calls, and which jobs they name for `settle`.
#[pyclass(frozen, name = "ClaimFlush", module = "pinlater._pinlater")]
pub struct ClaimFlush {
    inner: Mutex<ClaimLedger>,
}

impl ClaimFlush {
    fn lock(&self) -> MutexGuard<'_, ClaimLedger> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl ClaimFlush {
    #[new]
    fn new() -> Self {
        Self {
            inner: Mutex::new(ClaimLedger::new()),
        }
    }

    /// Books the claims of a hand-out's jobs, each under `claim`.
    fn add(&self, claim: &str, hand_out: &Bound<'_, HandOut>) -> PyResult<()> {
        guarded("ClaimFlush.add", || {
            let hand_out = hand_out.get();
            self.lock().add(&hand_out.queue, claim, &hand_out.fresh);
            Ok(())
        })
    }

    /// Jobs booked.
    fn __len__(&self) -> PyResult<usize> {
        guarded("ClaimFlush.__len__", || Ok(self.lock().len()))
    }

    /// Whether any job of `queue` is booked.
    fn holds_queue(&self, queue: &str) -> PyResult<bool> {
        guarded("ClaimFlush.holds_queue", || {
            Ok(self.lock().holds_queue(queue))
        })
    }

    /// The positions in `flushes` of those that hold any of the `(queue, shard, priority,
    /// local_id)` jobs (decoded descriptors are such tuples: an id may be any u64, and one past
    /// i64, which no job has, is held by none).
    #[staticmethod]
    fn holding(
        flushes: Vec<Bound<'_, ClaimFlush>>,
        jobs: Vec<(String, String, i64, u64)>,
    ) -> PyResult<Vec<usize>> {
        guarded("ClaimFlush.holding", || {
            Ok(flushes
                .iter()
                .enumerate()
                .filter(|(_, flush)| {
                    let ledger = flush.get().lock();
                    jobs.iter().any(|(q, s, p, i)| {
                        i64::try_from(*i).is_ok_and(|id| ledger.holds(q, s, *p, id))
                    })
                })
                .map(|(at, _)| at)
                .collect())
        })
    }

    /// `(queue, shard, ClaimItems)`: one store call each, in first-seen order.
    fn batches(&self) -> PyResult<Vec<(String, String, ClaimItems)>> {
        guarded("ClaimFlush.batches", || {
            Ok(self
                .lock()
                .batches()
                .iter()
                .map(|b| {
                    (
                        b.queue.clone(),
                        b.shard.clone(),
                        ClaimItems {
                            runs: b.runs.clone(),
                        },
                    )
                })
                .collect())
        })
    }
}

/// The claims of handed-out jobs of one queue on one shard: what one `claim_reserved` call
/// writes, each job with its own worker's claim.
#[pyclass(frozen, name = "ClaimItems", module = "pinlater._pinlater")]
pub struct ClaimItems {
    runs: Vec<ClaimRun>,
}

impl ClaimItems {
    /// Runs of jobs sharing a claim, in hand-out order.
    #[must_use]
    pub fn runs(&self) -> &[ClaimRun] {
        &self.runs
    }
}

#[pymethods]
impl ClaimItems {
    /// From `(priority, local_id, claim)` items, for stores and tests.
    #[new]
    fn new(items: Vec<(i64, i64, String)>) -> Self {
        let mut runs: Vec<ClaimRun> = Vec::new();
        for (priority, local_id, claim) in items {
            match runs.last_mut() {
                Some(run) if run.claim == claim => run.keys.push((priority, local_id)),
                _ => runs.push(ClaimRun {
                    claim,
                    keys: vec![(priority, local_id)],
                }),
            }
        }
        Self { runs }
    }

    fn __len__(&self) -> usize {
        self.runs.iter().map(|r| r.keys.len()).sum()
    }

    /// One `(priority, local_id, claim)` per job, in order.
    fn to_list(&self) -> Vec<(i64, i64, String)> {
        self.runs
            .iter()
            .flat_map(|r| r.keys.iter().map(|&(p, i)| (p, i, r.claim.clone())))
            .collect()
    }
}
