//! Python bindings of `crate::wire::replies`: the hot calls' replies written without thriftpy2
//! objects, from the Rust job values (`NewJobBatch`, `LocalIds`, `ClaimedJobs`).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::py::errors::guarded;
use crate::py::queue::job_buffer::HandOut;
use crate::py::queue::jobs::{ClaimedJobs, KeyedPlacement, LocalIds, NewJobBatch, SplitPlacement};
use crate::wire::replies::{self, Batch, PlacedJob, ReplyJob};

fn attempts(job: &Bound<'_, PyTuple>, index: usize, what: &str) -> PyResult<i32> {
    let value: i64 = job.get_item(index)?.extract()?;
    i32::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("{what} {value} does not fit a Thrift i32")))
}

/// The `dequeueJobs` REPLY message for `seqid`: `jobs` are `DequeuedJob`s (`(descriptor,
/// ClaimedJob)` tuples; the body and attempts are read from the `ClaimedJob`).
#[pyfunction]
pub fn encode_dequeue_reply<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    jobs: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_dequeue_reply", || {
        // Borrowed views into the Python objects, which `jobs` keeps alive for this call.
        let mut items: Vec<(Bound<'py, PyString>, Bound<'py, PyBytes>, i32, i32)> =
            Vec::with_capacity(jobs.len());
        for item in jobs.iter() {
            let item = item
                .cast_into::<PyTuple>()
                .ok()
                .filter(|t| t.len() >= 2)
                .ok_or_else(|| PyTypeError::new_err("a job is not a DequeuedJob tuple"))?;
            let descriptor = item
                .get_item(0)?
                .cast_into::<PyString>()
                .map_err(|_| PyTypeError::new_err("a job descriptor is not a str"))?;
            let job = item
                .get_item(1)?
                .cast_into::<PyTuple>()
                .ok()
                .filter(|t| t.len() >= 4)
                .ok_or_else(|| PyTypeError::new_err("a job is not a ClaimedJob tuple"))?;
            let body = job
                .get_item(1)?
                .cast_into::<PyBytes>()
                .map_err(|_| PyTypeError::new_err("a job body is not bytes"))?;
            let allowed = attempts(&job, 2, "attempts_allowed")?;
            let remaining = attempts(&job, 3, "attempts_remaining")?;
            items.push((descriptor, body, allowed, remaining));
        }
        let mut reply_jobs = Vec::with_capacity(items.len());
        for (descriptor, body, allowed, remaining) in &items {
            reply_jobs.push(ReplyJob {
                descriptor: descriptor.to_str()?,
                body: body.as_bytes(),
                attempts_allowed: *allowed,
                attempts_remaining: *remaining,
            });
        }
        let reply = replies::dequeue_reply(method, seqid, &reply_jobs)?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `enqueueJobs` REPLY message for `seqid`: a descriptor per job of `batch`, with the local
/// ids a store gave them on `shard` of `queue`.
#[pyfunction]
pub fn encode_enqueue_reply<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    queue: &str,
    shard: &str,
    batch: &Bound<'py, NewJobBatch>,
    ids: &Bound<'py, LocalIds>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_enqueue_reply", || {
        let reply = replies::enqueue_reply(
            method,
            seqid,
            queue,
            shard,
            batch.get().jobs(),
            ids.get().ids(),
        )?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `enqueueJobs` REPLY message for `seqid` of jobs placed one by one: `descriptors` in job
/// order, with `deduplicated` (parallel) as the response's field 2 when given.
#[pyfunction]
#[pyo3(signature = (method, seqid, descriptors, deduplicated=None))]
pub fn encode_enqueue_descriptors<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    descriptors: Vec<String>,
    deduplicated: Option<Vec<bool>>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_enqueue_descriptors", || {
        let views: Vec<&str> = descriptors.iter().map(String::as_str).collect();
        let reply =
            replies::enqueue_descriptors_reply(method, seqid, &views, deduplicated.as_deref())?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `enqueueJobs` REPLY message for `seqid` of a keyed enqueue on one shard: a descriptor
/// per job of `placement` in `queue` on `shard`, with `deduplicated` when some job was.
#[pyfunction]
pub fn encode_keyed_enqueue_reply<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    queue: &str,
    shard: &str,
    placement: &Bound<'py, KeyedPlacement>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_keyed_enqueue_reply", || {
        let placed = placement.get().placed();
        let reply = replies::keyed_enqueue_reply(method, seqid, queue, shard, placed)?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `enqueueJobs` REPLY message for `seqid` of a keyed enqueue spread over shards: a
/// descriptor per job of `placement` in `queue`, each on its own shard, with `deduplicated` when
/// some job was.
#[pyfunction]
pub fn encode_split_enqueue_reply<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    queue: &str,
    placement: &Bound<'py, SplitPlacement>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_split_enqueue_reply", || {
        let (shards, placed) = placement.get().parts();
        let names: Vec<&str> = shards.iter().map(String::as_str).collect();
        let reply =
            replies::sharded_enqueue_reply(method, seqid, queue, &names, placed.len(), |i| {
                placed[i]
            })?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `dequeueJobs` REPLY message for `seqid`: the jobs of `batches` (`(shard, priority,
/// ClaimedJobs)`, one per store call) of `queue`, in order.
#[pyfunction]
pub fn encode_dequeue_batches<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    queue: &str,
    batches: Vec<(String, i64, Bound<'py, ClaimedJobs>)>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_dequeue_batches", || {
        let views: Vec<Batch<'_>> = batches
            .iter()
            .map(|(shard, priority, jobs)| (shard.as_str(), *priority, jobs.get().jobs()))
            .collect();
        let reply = replies::dequeue_batches_reply(method, seqid, queue, &views)?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The `dequeueJobs` REPLY message for `seqid`: the jobs of the broker's `hand_out`, in order,
/// with their descriptors for its queue.
#[pyfunction]
pub fn encode_dequeue_handout<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
    hand_out: &Bound<'py, HandOut>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_dequeue_handout", || {
        let hand_out = hand_out.get();
        let placed: Vec<PlacedJob<'_>> = hand_out
            .jobs()
            .iter()
            .map(|job| PlacedJob {
                shard: &job.shard,
                priority: job.priority,
                local_id: job.local_id,
                body: &job.body,
                attempts_allowed: job.attempts_allowed,
                attempts_remaining: job.attempts_remaining,
            })
            .collect();
        let reply = replies::dequeue_placed_reply(method, seqid, hand_out.queue(), &placed)?;
        Ok(PyBytes::new(py, &reply))
    })
}

/// The REPLY message of a void method (`ackDequeuedJobs`) for `seqid`.
#[pyfunction]
pub fn encode_void_reply<'py>(
    py: Python<'py>,
    method: &str,
    seqid: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("encode_void_reply", || {
        Ok(PyBytes::new(py, &replies::void_reply(method, seqid)?))
    })
}
