//! Python binding of `crate::store::redis_reply`: where a reply ends in the socket's bytes, and
//! the hot scripts' replies read into the Rust values the wire encoder takes.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::py::errors::{guarded, RedisErrorReply};
use crate::py::queue::jobs::{ClaimedJobs, LocalIds};
use crate::store::redis_reply::{self, Scan, ScriptReply, Split};

/// Where the first whole reply of `buf[start:]` ends (an offset into `buf`), or, when it is
/// not whole yet, minus the length `buf` must reach before it can be.
#[pyfunction]
pub fn redis_reply_end(buf: &[u8], start: usize, max_bytes: usize) -> PyResult<i64> {
    guarded("redis_reply_end", || {
        let rest = rest_of(buf, start)?;
        Ok(scan_answer(start, redis_reply::reply_end(rest, max_bytes)?))
    })
}

/// `buf[start:]`, or the error for a start past it.
fn rest_of(buf: &[u8], start: usize) -> PyResult<&[u8]> {
    buf.get(start..)
        .ok_or_else(|| PyValueError::new_err("start is past the buffer"))
}

/// `start + n` as Python's offset into the buffer.
fn offset(start: usize, n: usize) -> i64 {
    i64::try_from(start.saturating_add(n)).unwrap_or(i64::MAX)
}

/// `redis_reply_end`'s answer for a scan of `buf[start:]`: where the reply ends, or minus the
/// length the buffer must reach.
fn scan_answer(start: usize, scan: Scan) -> i64 {
    match scan {
        Scan::Complete(end) => offset(start, end),
        Scan::Partial(need) => -offset(start, need),
    }
}

/// The value, `None` for a queue missing (-1), or `RedisErrorReply` with the server's text.
fn value<T>(reply: ScriptReply<T>) -> PyResult<Option<T>> {
    match reply {
        ScriptReply::Value(v) => Ok(Some(v)),
        ScriptReply::QueueMissing => Ok(None),
        ScriptReply::Error(text) => Err(RedisErrorReply::new_err(text)),
    }
}

/// `enqueue_jobs.lua`'s reply: the local ids in job order.
#[pyfunction]
pub fn redis_ids_reply(reply: &[u8]) -> PyResult<Option<LocalIds>> {
    guarded("redis_ids_reply", || {
        Ok(value(redis_reply::ids_reply(reply)?)?.map(LocalIds::from_ids))
    })
}

/// A dequeue reply's jobs (with its `cut`) and evicted count.
fn claimed_jobs(claimed: redis_reply::Claimed) -> (ClaimedJobs, i64) {
    (
        ClaimedJobs::from_cut_jobs(claimed.jobs, claimed.cut),
        claimed.evicted,
    )
}

/// `dequeue_jobs.lua`'s reply: the jobs in (run after, id) order (and whether the call stopped
/// at a budget: `ClaimedJobs.cut`), and the evicted count.
#[pyfunction]
pub fn redis_claimed_reply(py: Python<'_>, reply: &[u8]) -> PyResult<Option<(ClaimedJobs, i64)>> {
    guarded("redis_claimed_reply", || {
        let parsed = py.detach(|| redis_reply::claimed_reply(reply))?;
        Ok(value(parsed)?.map(claimed_jobs))
    })
}

/// Where the first reply of `buf[start:]` ends, read as `redis_claimed_reply` reads it when it
/// is a dequeue reply: `(end, its value)`, in one walk of its bytes. Else as `redis_reply_end`:
/// the end (an error reply, or one to read with `redis_claimed_reply` for its error), or minus
/// the length `buf` must reach.
#[pyfunction]
pub fn redis_claimed_split(
    py: Python<'_>,
    buf: &[u8],
    start: usize,
    max_bytes: usize,
) -> PyResult<Py<PyAny>> {
    guarded("redis_claimed_split", || {
        let rest = rest_of(buf, start)?;
        let scan = match py.detach(|| redis_reply::claimed_split(rest, max_bytes))? {
            Split::Read(end, reply) => {
                let value = value(reply)?.map(claimed_jobs);
                return Ok((offset(start, end), value)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind());
            }
            Split::Whole(end) => Scan::Complete(end),
            Split::Partial(need) => Scan::Partial(need),
        };
        Ok(scan_answer(start, scan)
            .into_pyobject(py)?
            .into_any()
            .unbind())
    })
}

/// `ack_jobs.lua`'s reply: the evicted count.
#[pyfunction]
pub fn redis_ack_reply(reply: &[u8]) -> PyResult<Option<i64>> {
    guarded("redis_ack_reply", || value(redis_reply::ack_reply(reply)?))
}

/// An integer reply (`count_jobs.lua`).
#[pyfunction]
pub fn redis_int_reply(reply: &[u8]) -> PyResult<Option<i64>> {
    guarded("redis_int_reply", || value(redis_reply::int_reply(reply)?))
}
