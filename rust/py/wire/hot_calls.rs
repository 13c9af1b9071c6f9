//! Python binding of `crate::wire::hot_calls`: a hot call as one object, its jobs left in Rust.
//!
//! Each call object keeps the frame's `bytes` alive: bodies, descriptors and statuses are read
//! from it only when a batch or an ack group is built, straight into the Rust job values.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::py::errors::guarded;
use crate::py::queue::jobs::{AckGroup, KeyedJobBatch, NewJobBatch, DETACH_JOBS};
use crate::py::wire::struct_end::DETACH_BYTES;
use crate::queue::jobs::JobKeys;
use crate::wire::hot_calls::{self, DecodeError, HotCall, JobRejected};

/// An `enqueueJobs` call.
#[pyclass(frozen, name = "EnqueueCall", module = "pinlater._pinlater")]
pub struct EnqueueCall {
    payload: Py<PyBytes>,
    call: hot_calls::EnqueueCall,
}

impl EnqueueCall {
    /// The decoded call; its spans point into [`EnqueueCall::payload`].
    #[must_use]
    pub fn call(&self) -> &hot_calls::EnqueueCall {
        &self.call
    }

    #[must_use]
    pub fn payload(&self) -> &Py<PyBytes> {
        &self.payload
    }
}

#[pymethods]
impl EnqueueCall {
    #[getter]
    fn source(&self) -> Option<&str> {
        self.call.context.source.as_deref()
    }

    #[getter]
    fn request_id(&self) -> &str {
        &self.call.context.request_id
    }

    #[getter]
    fn queue(&self) -> Option<&str> {
        self.call.queue.as_deref()
    }

    /// How many jobs the call declared (past `MAX_ENQUEUE_JOBS`, none of them was decoded).
    fn __len__(&self) -> usize {
        self.call.declared
    }

    /// Whether any job asks for a pinlater extension (`keyed` builds a batch only then).
    #[getter]
    fn extended(&self) -> bool {
        self.call.has_extensions()
    }

    /// The jobs to insert, defaults resolved (`now_ms` for an absent run-after); raises
    /// `JobRejected` for the first job the handler refuses.
    fn batch(&self, py: Python<'_>, num_priorities: i64, now_ms: i64) -> PyResult<NewJobBatch> {
        guarded("EnqueueCall.batch", || {
            let payload = self.payload.bind(py).as_bytes();
            let jobs = self.call.new_jobs(payload, num_priorities, now_ms)?;
            Ok(NewJobBatch::from_jobs(jobs))
        })
    }

    /// The jobs as `batch` makes them, each with its `(dedupKey, dedupWindowMillis, groupKey,
    /// expireAtTimestampMillis)`, checked; or `None` when no job asks for an extension (the
    /// common case: then `batch`). Raises `JobRejected` for the first job the handler refuses
    /// (a bad job first, as `batch` does, then a bad key or window). The GIL is released for a
    /// call of `DETACH_JOBS` jobs or more.
    fn keyed(
        &self,
        py: Python<'_>,
        num_priorities: i64,
        now_ms: i64,
    ) -> PyResult<Option<KeyedJobBatch>> {
        guarded("EnqueueCall.keyed", || {
            if !self.call.has_extensions() {
                return Ok(None);
            }
            // `bytes` is immutable, and `self.payload` keeps it alive for the call.
            let payload = self.payload.bind(py).as_bytes();
            let build = || -> Result<KeyedJobBatch, JobRejected> {
                let jobs = self.call.new_jobs(payload, num_priorities, now_ms)?;
                let keys = self
                    .call
                    .keys(payload)?
                    .into_iter()
                    .map(|(key, window_ms, group, expire_at_ms)| JobKeys {
                        key: key.map(str::to_owned),
                        window_ms,
                        group: group.map(str::to_owned),
                        expire_at_ms,
                    })
                    .collect();
                Ok(KeyedJobBatch::from_parts(jobs, keys))
            };
            let batch = if self.call.jobs.len() >= DETACH_JOBS {
                py.detach(build)
            } else {
                build()
            };
            Ok(Some(batch?))
        })
    }
}

/// A `dequeueJobs` call; its piggy-backed acks are an [`AckCall`].
#[pyclass(frozen, name = "DequeueCall", module = "pinlater._pinlater")]
pub struct DequeueCall {
    /// The call without its acks (`ack` is always `None` here).
    call: hot_calls::DequeueCall,
    ack: Option<Py<AckCall>>,
}

impl DequeueCall {
    /// The decoded call, without its acks (see [`DequeueCall::ack_call`]).
    #[must_use]
    pub fn call(&self) -> &hot_calls::DequeueCall {
        &self.call
    }

    #[must_use]
    pub fn ack_call(&self) -> Option<&Py<AckCall>> {
        self.ack.as_ref()
    }
}

#[pymethods]
impl DequeueCall {
    #[getter]
    fn source(&self) -> Option<&str> {
        self.call.context.source.as_deref()
    }

    #[getter]
    fn request_id(&self) -> &str {
        &self.call.context.request_id
    }

    #[getter]
    fn queue(&self) -> Option<&str> {
        self.call.queue.as_deref()
    }

    #[getter]
    fn limit(&self) -> i32 {
        self.call.limit
    }

    #[getter]
    fn dry_run(&self) -> bool {
        self.call.dry_run
    }

    #[getter]
    fn coverage(&self) -> f64 {
        self.call.coverage
    }

    #[getter]
    fn wait_millis(&self) -> Option<i32> {
        self.call.wait_millis
    }

    #[getter]
    fn ack(&self, py: Python<'_>) -> Option<Py<AckCall>> {
        self.ack.as_ref().map(|a| a.clone_ref(py))
    }
}

/// A `PinLaterJobAckRequest`: an `ackDequeuedJobs` call, or the acks of a dequeue.
#[pyclass(frozen, name = "AckCall", module = "pinlater._pinlater")]
pub struct AckCall {
    payload: Py<PyBytes>,
    call: hot_calls::AckCall,
}

impl AckCall {
    /// The decoded acks; their spans point into [`AckCall::payload`].
    #[must_use]
    pub fn call(&self) -> &hot_calls::AckCall {
        &self.call
    }

    #[must_use]
    pub fn payload(&self) -> &Py<PyBytes> {
        &self.payload
    }
}

#[pymethods]
impl AckCall {
    #[getter]
    fn queue(&self) -> Option<&str> {
        self.call.queue.as_deref()
    }

    /// How many jobs succeeded.
    #[getter]
    fn succeeded(&self) -> usize {
        self.call.succeeded.len()
    }

    /// How many jobs failed.
    #[getter]
    fn failed(&self) -> usize {
        self.call.failed.len()
    }

    /// `(shard, AckGroup)` per shard named, in first-seen order (successes first).
    fn groups(&self, py: Python<'_>) -> PyResult<Vec<(String, AckGroup)>> {
        guarded("AckCall.groups", || {
            let payload = self.payload.bind(py).as_bytes();
            Ok(self
                .call
                .groups(payload)?
                .into_iter()
                .map(|(shard, group)| (shard, AckGroup::from_group(group)))
                .collect())
        })
    }

    /// `(shard, priority, retry_delay_ms)` per failed job, in request order.
    fn retried(&self, py: Python<'_>) -> PyResult<Vec<(String, i64, i64)>> {
        guarded("AckCall.retried", || {
            Ok(self.call.retried(self.payload.bind(py).as_bytes())?)
        })
    }

    /// `(queue, shard, priority, local_id)` per job, successes first: `decode_descriptors` of
    /// the descriptors.
    fn keys(&self, py: Python<'_>) -> PyResult<Vec<(String, String, u8, u64)>> {
        guarded("AckCall.keys", || {
            let payload = self.payload.bind(py).as_bytes();
            Ok(self
                .call
                .keys(payload)?
                .into_iter()
                .map(|d| {
                    (
                        d.queue.to_owned(),
                        d.shard.to_owned(),
                        d.priority,
                        d.local_id,
                    )
                })
                .collect())
        })
    }
}

/// Decodes the arguments of a hot call (`method` one of `enqueueJobs`, `dequeueJobs`,
/// `ackDequeuedJobs`) at `offset` in `payload`, just past the message header.
#[pyfunction]
pub fn decode_hot_call(
    py: Python<'_>,
    method: &str,
    payload: &Bound<'_, PyBytes>,
    offset: usize,
) -> PyResult<Py<PyAny>> {
    guarded("decode_hot_call", || {
        let decoded = decode_args(py, method, payload.as_bytes(), offset)?;
        call_object(py, payload, decoded)
    })
}

/// `hot_calls::decode`, with the GIL released for a payload of `DETACH_BYTES` or more (`bytes`
/// is immutable, and the caller's `payload` keeps it alive for the call).
fn decode_args(
    py: Python<'_>,
    method: &str,
    bytes: &[u8],
    offset: usize,
) -> Result<HotCall, DecodeError> {
    if bytes.len() >= DETACH_BYTES {
        py.detach(|| hot_calls::decode(method, bytes, offset))
    } else {
        hot_calls::decode(method, bytes, offset)
    }
}

/// A whole message that is a well-formed hot call, decoded: `(method, seqid, call)`; `None`
/// for any other message, or one whose header or arguments do not decode (the caller's general
/// path reads it again and answers why). One crossing for the header and the arguments.
#[pyfunction]
pub fn decode_hot_frame(
    py: Python<'_>,
    payload: &Bound<'_, PyBytes>,
) -> PyResult<Option<(&'static str, i32, Py<PyAny>)>> {
    guarded("decode_hot_frame", || {
        let bytes = payload.as_bytes();
        let Some((method, seqid, offset)) = hot_calls::hot_header(bytes) else {
            return Ok(None);
        };
        match decode_args(py, method, bytes, offset) {
            Ok(decoded) => Ok(Some((method, seqid, call_object(py, payload, decoded)?))),
            Err(_) => Ok(None),
        }
    })
}

/// The Python object of a decoded call, keeping `payload` (which its spans point into) alive.
fn call_object(
    py: Python<'_>,
    payload: &Bound<'_, PyBytes>,
    decoded: HotCall,
) -> PyResult<Py<PyAny>> {
    let owner = payload.clone().unbind();
    Ok(match decoded {
        HotCall::Enqueue(call) => Py::new(
            py,
            EnqueueCall {
                payload: owner,
                call,
            },
        )?
        .into_any(),
        HotCall::Dequeue(mut call) => {
            let ack = call
                .ack
                .take()
                .map(|call| {
                    Py::new(
                        py,
                        AckCall {
                            payload: owner,
                            call,
                        },
                    )
                })
                .transpose()?;
            Py::new(py, DequeueCall { call, ack })?.into_any()
        }
        HotCall::Ack(call) => Py::new(
            py,
            AckCall {
                payload: owner,
                call,
            },
        )?
        .into_any(),
    })
}
