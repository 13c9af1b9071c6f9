//! Python binding of `crate::store::redis_scripts`: the Redis store's hot scripts as whole
//! `EVALSHA` commands, packed from a batch held in Rust. Each takes the shard's `layout`
//! (`"original"`, the default, or `"compact"`), which names the keys.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::py::errors::guarded;
use crate::py::queue::job_buffer::ClaimItems;
use crate::py::queue::jobs::{AckGroup, KeyedJobBatch, KeyedPlacement, LocalIds, NewJobBatch};
use crate::queue::jobs::repeated_keys;
use crate::store::redis_scripts::{self, KeyedCall, Layout, QueueKeys, ScriptTail};

/// What a queue's rules add at the end of a hot script's `KEYS` and `ARGV`, held in Rust
/// (built once per rules change by `backends/redis/rules.py`, passed as is on every call).
#[pyclass(frozen, module = "pinlater._pinlater")]
pub struct RedisScriptTail {
    tail: ScriptTail,
}

#[pymethods]
impl RedisScriptTail {
    #[new]
    fn new(keys: Vec<String>, args: Vec<String>) -> Self {
        Self {
            tail: ScriptTail { keys, args },
        }
    }

    /// The keys appended, in order.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.tail.keys.clone()
    }

    /// The arguments appended, in order.
    #[getter]
    fn args(&self) -> Vec<String> {
        self.tail.args.clone()
    }
}

static NO_TAIL: ScriptTail = ScriptTail {
    keys: Vec::new(),
    args: Vec::new(),
};

fn tail_of<'a>(tail: Option<&'a Bound<'_, RedisScriptTail>>) -> &'a ScriptTail {
    tail.map_or(&NO_TAIL, |t| &t.get().tail)
}

/// The keys of `queue` on `shard` in the layout named `layout`, or a `ValueError`.
fn queue_keys<'a>(layout: &str, shard: &'a str, queue: &'a str) -> PyResult<QueueKeys<'a>> {
    let layout = Layout::named(layout).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown Redis layout {layout:?}: 'original' or 'compact'"
        ))
    })?;
    Ok(QueueKeys {
        layout,
        shard,
        queue,
    })
}

/// `EVALSHA` of `enqueue_jobs.lua` for the batch, as `RedisStore._enqueue_call` sends it.
#[pyfunction]
#[pyo3(signature = (sha, shard, queue, jobs, now_ms, layout = "original"))]
pub fn redis_enqueue_command<'py>(
    py: Python<'py>,
    sha: &str,
    shard: &str,
    queue: &str,
    jobs: &Bound<'py, NewJobBatch>,
    now_ms: i64,
    layout: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys = queue_keys(layout, shard, queue)?;
    guarded("redis_enqueue_command", || {
        let jobs = jobs.get().jobs();
        let command = redis_scripts::enqueue_command(sha, &keys, jobs, now_ms);
        Ok(PyBytes::new(py, &command))
    })
}

/// `EVALSHA` of `enqueue_keyed_jobs.lua` for a whole request (`dedup.enqueue_keyed_call`'s
/// arguments, packed from the batch held in Rust): `keys` the script's keys before the rules'
/// `tail` (`dedup.enqueue_keyed_keys`), the batch's jobs each with its 10 arguments, a dedup key
/// repeated in the request sent once (its first job's; `redis_keyed_placement` answers the
/// others); with `uniform`, a uniform call where the jobs allow it (`enqueue_keyed_jobs.lua`).
#[pyfunction]
#[pyo3(signature = (sha, keys, queue, jobs_arg, now_ms, priorities, per, held_forever_ms, batch, tail = None, uniform = false))]
#[allow(clippy::too_many_arguments)] // the script's own arguments, mirrored in the stub
pub fn redis_enqueue_keyed_command<'py>(
    py: Python<'py>,
    sha: &str,
    keys: Vec<String>,
    queue: &str,
    jobs_arg: &str,
    now_ms: i64,
    priorities: i64,
    per: i64,
    held_forever_ms: i64,
    batch: &Bound<'py, KeyedJobBatch>,
    tail: Option<&Bound<'py, RedisScriptTail>>,
    uniform: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let tail = tail_of(tail);
    guarded("redis_enqueue_keyed_command", || {
        let batch = batch.get();
        let call = KeyedCall {
            keys: &keys,
            queue,
            jobs_arg,
            now_ms,
            priorities,
            per,
            held_forever_ms,
            uniform,
        };
        let repeated = repeated_keys(batch.job_keys());
        let command = redis_scripts::enqueue_keyed_command(
            sha,
            &call,
            batch.jobs(),
            batch.job_keys(),
            &repeated,
            tail,
        );
        Ok(PyBytes::new(py, &command))
    })
}

/// Where `enqueue_keyed_jobs.lua` put each job of `batch`, from its reply's values (as
/// `redis_ids_reply` reads them) to `redis_enqueue_keyed_command`: `(placement, 0)`, or
/// `(None, priority)` when the first value is `beyond` (a record names a priority whose keys
/// were not passed: call again with that many).
///
/// # Errors
/// `ValueError` when the reply holds other than three values per job sent.
#[pyfunction]
pub fn redis_keyed_placement(
    batch: &Bound<'_, KeyedJobBatch>,
    values: &Bound<'_, LocalIds>,
    beyond: i64,
) -> PyResult<(Option<KeyedPlacement>, i64)> {
    let values = values.get().ids();
    if values.first() == Some(&beyond) {
        return Ok((None, values.get(1).copied().unwrap_or(0)));
    }
    let repeated = repeated_keys(batch.get().job_keys());
    redis_scripts::keyed_placement(values, &repeated)
        .map(|placed| (Some(KeyedPlacement::from_placed(placed)), 0))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "enqueue_keyed_jobs answered {} values for {} jobs",
                values.len(),
                repeated.iter().filter(|r| r.is_none()).count()
            ))
        })
}

/// `EVALSHA` of `dequeue_jobs.lua` (limit > 0), as `RedisStore._dequeue_call` sends it.
#[pyfunction]
#[pyo3(signature = (sha, shard, queue, priority, limit, claim, now_ms, dry_run, max_bytes, layout = "original", tail = None))]
#[allow(clippy::too_many_arguments)] // the script's own arguments, mirrored in the stub
pub fn redis_dequeue_command<'py>(
    py: Python<'py>,
    sha: &str,
    shard: &str,
    queue: &str,
    priority: i64,
    limit: i64,
    claim: &str,
    now_ms: i64,
    dry_run: bool,
    max_bytes: i64,
    layout: &str,
    tail: Option<&Bound<'py, RedisScriptTail>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys = queue_keys(layout, shard, queue)?;
    let tail = tail_of(tail);
    guarded("redis_dequeue_command", || {
        let command = redis_scripts::dequeue_command(
            sha, &keys, priority, limit, claim, now_ms, dry_run, max_bytes, tail,
        );
        Ok(PyBytes::new(py, &command))
    })
}

/// `EVALSHA` of `ack_jobs.lua` for the group, as `RedisStore._ack_call` sends it.
#[pyfunction]
#[pyo3(signature = (sha, shard, queue, acks, now_ms, layout = "original", tail = None))]
#[allow(clippy::too_many_arguments)] // the script's own arguments, mirrored in the stub
pub fn redis_ack_command<'py>(
    py: Python<'py>,
    sha: &str,
    shard: &str,
    queue: &str,
    acks: &Bound<'py, AckGroup>,
    now_ms: i64,
    layout: &str,
    tail: Option<&Bound<'py, RedisScriptTail>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys = queue_keys(layout, shard, queue)?;
    let tail = tail_of(tail);
    guarded("redis_ack_command", || {
        let command = redis_scripts::ack_command(sha, &keys, acks.get().group(), now_ms, tail);
        Ok(PyBytes::new(py, &command))
    })
}

/// `EVALSHA` of `count_jobs.lua` counting nothing: whether the queue exists.
#[pyfunction]
#[pyo3(signature = (sha, shard, queue, layout = "original"))]
pub fn redis_require_queue_command<'py>(
    py: Python<'py>,
    sha: &str,
    shard: &str,
    queue: &str,
    layout: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys = queue_keys(layout, shard, queue)?;
    guarded("redis_require_queue_command", || {
        let command = redis_scripts::require_queue_command(sha, &keys);
        Ok(PyBytes::new(py, &command))
    })
}

/// `EVALSHA` of `claim_reserved.lua` for the broker's claims of one queue on one shard, as
/// `reservations.claim_call` sends it; its reply (the numbers of the jobs claimed, or -1) reads
/// with `redis_ids_reply`.
#[pyfunction]
#[pyo3(signature = (sha, shard, queue, items, reservation, now_ms, layout = "original", tail = None))]
#[allow(clippy::too_many_arguments)] // the script's own arguments, mirrored in the stub
pub fn redis_claim_command<'py>(
    py: Python<'py>,
    sha: &str,
    shard: &str,
    queue: &str,
    items: &Bound<'py, ClaimItems>,
    reservation: &str,
    now_ms: i64,
    layout: &str,
    tail: Option<&Bound<'py, RedisScriptTail>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys = queue_keys(layout, shard, queue)?;
    let tail = tail_of(tail);
    guarded("redis_claim_command", || {
        let command = redis_scripts::claim_reserved_command(
            sha,
            &keys,
            items.get().runs(),
            reservation,
            now_ms,
            tail,
        );
        Ok(PyBytes::new(py, &command))
    })
}
