//! Python binding of `crate::store::sqlite_shard`: the embedded store's hot writes, awaited
//! from asyncio.
//!
//! A request is submitted with an asyncio future and its loop. After a group's `COMMIT` (with
//! `FULL`, after the sync that follows it) its answers go to a settler thread while the writer
//! goes on with the next group. For a loop that listens (`SqliteShard::listen`: the loop watches
//! an `AnswerSignal`), the settler only queues the answers for it and writes a byte to its
//! signal, without the GIL; the loop then takes them (`SqliteShard::drain`) and calls
//! `settle([(future, value, error), ...])`, where `settle` is the Python function given at open.
//! (A thread that takes the GIL waits for it while the loop's thread runs Python: behind a
//! lookup of 100,000 jobs, about 100 ms.) For any other loop the settler takes the GIL once for
//! every group waiting and calls `loop.call_soon_threadsafe(settle, [...])`. `value` is a
//! `LocalIds`, a `ClaimedJobs` or `None`; `error` is `None`, `(1, queue)` for a missing queue
//! or `(2, message)` for a connection problem.

use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::io::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::py::errors::guarded;
use crate::py::queue::jobs::{
    AckGroup, ClaimedJobs, KeyedJobBatch, KeyedPlacement, LocalIds, NewJobBatch,
};
use crate::queue::jobs::{self, JobKeys, NewJob};
use crate::store::sqlite_shard::{
    self as core, AckSource, Answer, JobSource, Op, Outcome, ShardError, ShardOptions, Statements,
};

/// `error[0]` of a missing queue.
const QUEUE_NOT_FOUND: u8 = 1;
/// `error[0]` of a connection problem.
const CONNECTION: u8 = 2;

/// The shard's in-process write lock, shared by Python's connection and the writer thread.
#[pyclass(frozen, name = "WriteGate", module = "pinlater._pinlater")]
pub struct WriteGate {
    inner: Arc<core::WriteGate>,
}

#[pymethods]
impl WriteGate {
    #[new]
    fn new() -> Self {
        Self {
            inner: Arc::new(core::WriteGate::default()),
        }
    }

    /// Waits (without the GIL) for the caller's turn to write the shard file.
    fn acquire(&self, py: Python<'_>) {
        py.detach(|| self.inner.acquire());
    }

    /// Ends the caller's turn; exactly once per `acquire`.
    fn release(&self) {
        self.inner.release();
    }
}

/// The version of the `SQLite` library the extension links: the same as `sqlite3.sqlite_version`,
/// since both use the system library.
#[pyfunction]
#[must_use]
pub fn sqlite_library_version() -> &'static str {
    core::sqlite_version()
}

/// A `KeyedJob` as Python holds it (a named tuple): `(job, dedup_key, window_ms, group,
/// expire_at_ms)`, `job` a `NewJob`: `(priority, body, run_after_ms, attempts_allowed,
/// custom_status)`.
type KeyedJobTuple<'py> = (
    (i64, Bound<'py, PyBytes>, i64, i64, String),
    Option<String>,
    i64,
    Option<String>,
    Option<i64>,
);

struct Token {
    future: Py<PyAny>,
    event_loop: Py<PyAny>,
}

struct Batch(Py<NewJobBatch>);

impl JobSource for Batch {
    fn jobs(&self) -> &[NewJob] {
        self.0.get().jobs()
    }
}

struct Keyed(Py<KeyedJobBatch>);

impl JobSource for Keyed {
    fn jobs(&self) -> &[NewJob] {
        self.0.get().jobs()
    }
}

struct Acks(Py<AckGroup>);

impl AckSource for Acks {
    fn group(&self) -> &jobs::AckGroup {
        self.0.get().group()
    }
}

/// A shard file's hot-path writer thread (see the module docs).
#[pyclass(frozen, name = "SqliteShard", module = "pinlater._pinlater")]
pub struct SqliteShard {
    inner: core::SqliteShard<Token>,
    settler: Mutex<Option<JoinHandle<()>>>,
    /// The loops that listen, each with its answers not taken yet.
    mailboxes: Arc<Mutex<Vec<Mailbox>>>,
    settle: Py<PyAny>,
}

/// A socket pair that tells a loop its answers are waiting: the settler writes a byte to one
/// end when the loop's answers go from none to some; the loop watches the other
/// (`loop.add_reader(signal.fileno(), ...)`), which stays open as long as this does.
#[pyclass(frozen, name = "AnswerSignal", module = "pinlater._pinlater")]
pub struct AnswerSignal {
    receive: UnixStream,
    send: UnixStream,
}

#[pymethods]
impl AnswerSignal {
    /// The file descriptor the loop watches for reading.
    fn fileno(&self) -> i32 {
        self.receive.as_raw_fd()
    }
}

/// One listening loop's answers, not taken yet.
struct Mailbox {
    event_loop: Py<PyAny>,
    signal: Py<AnswerSignal>,
    answers: Vec<(Token, Outcome)>,
}

/// Queues each answer for its loop if that loop listens (a byte to its signal when its answers
/// go from none to some); the others, returned, go the way that takes the GIL, and so does an
/// answer whose byte could not be written (it would wait unseen). Runs without the GIL: loops
/// are told apart by address (each listening loop is held, so none is reused).
fn post(mailboxes: &Mutex<Vec<Mailbox>>, group: Vec<(Token, Outcome)>) -> Vec<(Token, Outcome)> {
    let mut unheard = Vec::new();
    let mut boxes = mailboxes.lock().unwrap_or_else(PoisonError::into_inner);
    for (token, outcome) in group {
        let address = token.event_loop.as_ptr();
        let Some(mailbox) = boxes.iter_mut().find(|b| b.event_loop.as_ptr() == address) else {
            unheard.push((token, outcome));
            continue;
        };
        // The loop reads the bytes and takes the answers under this lock, so while answers
        // wait exactly one byte does (WouldBlock cannot happen: it would mean one is there).
        if mailbox.answers.is_empty() {
            let written = (&mailbox.signal.get().send).write(&[1]);
            if !matches!(written, Ok(1))
                && !matches!(&written, Err(e) if e.kind() == ErrorKind::WouldBlock)
            {
                unheard.push((token, outcome));
                continue;
            }
        }
        mailbox.answers.push((token, outcome));
    }
    unheard
}

fn answer(py: Python<'_>, token: Token, outcome: Outcome) -> PyResult<Bound<'_, PyAny>> {
    let (value, error): (Py<PyAny>, Option<(u8, String)>) = match outcome {
        Ok(Answer::Ids(ids)) => (Py::new(py, LocalIds::from_ids(ids))?.into_any(), None),
        Ok(Answer::Claimed(claimed)) => (
            Py::new(py, ClaimedJobs::from_jobs(claimed))?.into_any(),
            None,
        ),
        Ok(Answer::Acked) => (py.None(), None),
        Ok(Answer::Placed(placed)) => (
            Py::new(py, KeyedPlacement::from_placed(placed))?.into_any(),
            None,
        ),
        Err(ShardError::QueueNotFound(queue)) => (py.None(), Some((QUEUE_NOT_FOUND, queue))),
        Err(ShardError::Connection(message)) => (py.None(), Some((CONNECTION, message))),
    };
    (token.future, value, error)
        .into_pyobject(py)
        .map(Bound::into_any)
}

/// The settler thread: answers the groups the writer finished, so the writer never waits for
/// the GIL before its next group. Answers for listening loops are queued without the GIL
/// (`post`); for the rest it takes the GIL once for every group waiting.
fn settle_groups(
    settle: &Py<PyAny>,
    mailboxes: &Mutex<Vec<Mailbox>>,
    groups: &Receiver<Vec<(Token, Outcome)>>,
) {
    while let Ok(first) = groups.recv() {
        let mut unheard = post(mailboxes, first);
        while let Ok(next) = groups.try_recv() {
            unheard.extend(post(mailboxes, next));
        }
        if !unheard.is_empty() {
            Python::attach(|py| settle_all(py, settle, unheard));
        }
    }
}

/// One `call_soon_threadsafe` per event loop for a group's answers.
fn settle_all(py: Python<'_>, settle: &Py<PyAny>, answered: Vec<(Token, Outcome)>) {
    {
        let mut by_loop: Vec<(Py<PyAny>, Bound<'_, PyList>)> = Vec::new();
        for (token, outcome) in answered {
            let event_loop = token.event_loop.clone_ref(py);
            let item = match answer(py, token, outcome) {
                Ok(item) => item,
                Err(err) => {
                    err.write_unraisable(py, None);
                    continue;
                }
            };
            let list = if let Some((_, list)) = by_loop.iter().find(|(l, _)| l.is(&event_loop)) {
                list.clone()
            } else {
                let list = PyList::empty(py);
                by_loop.push((event_loop, list.clone()));
                list
            };
            if let Err(err) = list.append(item) {
                err.write_unraisable(py, None);
            }
        }
        for (event_loop, list) in by_loop {
            // A closed loop has no one left to answer (RuntimeError): nothing to do.
            let _ =
                event_loop.call_method1(py, "call_soon_threadsafe", (settle.clone_ref(py), list));
        }
    }
}

#[pymethods]
impl SqliteShard {
    /// Opens `path` (WAL, `synchronous`, busy timeout) and starts the writer thread.
    /// `statements` maps each `.sql` file's name to its text (see `Statements`).
    #[new]
    #[pyo3(signature = (path, synchronous, busy_timeout_ms, group_max_ops, custom_status_limit, reserved_prefix, statements, gate, settle, profile_path=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        synchronous: String,
        busy_timeout_ms: u64,
        group_max_ops: usize,
        custom_status_limit: usize,
        reserved_prefix: String,
        statements: std::collections::HashMap<String, String>,
        gate: &WriteGate,
        settle: Py<PyAny>,
        profile_path: Option<PathBuf>,
    ) -> PyResult<Self> {
        guarded("SqliteShard", || {
            let get = |name: &str| {
                statements.get(name).cloned().ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err(format!("statement {name} missing"))
                })
            };
            let options = ShardOptions {
                path,
                synchronous,
                busy_timeout_ms,
                group_max_ops,
                custom_status_limit,
                reserved_prefix,
                statements: Statements {
                    queue_get: get("queue_get")?,
                    enqueue_jobs: get("enqueue_jobs")?,
                    last_job_id: get("last_job_id")?,
                    dequeue_jobs_dry_run: get("dequeue_jobs_dry_run")?,
                    dequeue_rows: get("dequeue_rows")?,
                    dequeue_claim_rows: get("dequeue_claim_rows")?,
                    dequeue_claim_range: get("dequeue_claim_range")?,
                    ack_succeeded_many: get("ack_succeeded_many")?,
                    ack_succeeded_range: get("ack_succeeded_range")?,
                    ack_failed: get("ack_failed")?,
                    dedup_holders: get("dedup_holders")?,
                    dedup_records: get("dedup_records")?,
                    dedup_records_fresh: get("dedup_records_fresh")?,
                    next_job_id: get("next_job_id")?,
                    enqueue_keyed_jobs: get("enqueue_keyed_jobs")?,
                    groups_get: get("groups_get")?,
                    groups_put: get("groups_put")?,
                    groups_forget: get("groups_forget")?,
                    groups_unwait_oldest: get("groups_unwait_oldest")?,
                    groups_first_waiting: get("groups_first_waiting")?,
                    jobs_promote: get("jobs_promote")?,
                    group_jobs_record: get("group_jobs_record")?,
                    group_jobs_of: get("group_jobs_of")?,
                    count_in_progress: get("count_in_progress")?,
                    queue_has_groups: get("queue_has_groups")?,
                    ack_failed_grouped: get("ack_failed_grouped")?,
                    ack_failed_expire: get("ack_failed_expire")?,
                    expiries_touch: get("expiries_touch")?,
                    expiries_add: get("expiries_add")?,
                    expire_jobs: get("expire_jobs")?,
                    group_jobs_unwait: get("group_jobs_unwait")?,
                },
                profile_path,
            };
            let gate = Arc::clone(&gate.inner);
            let (done, groups) = channel();
            let mailboxes: Arc<Mutex<Vec<Mailbox>>> = Arc::new(Mutex::new(Vec::new()));
            let (settler_settle, settler_boxes) = (settle.clone_ref(py), Arc::clone(&mailboxes));
            let settler = std::thread::Builder::new()
                .name("pinlater-settle".into()) // Linux keeps 15 bytes of a name
                .spawn(move || settle_groups(&settler_settle, &settler_boxes, &groups))?;
            // The writer owns `done`: the settler ends once the writer has, after its last group.
            let complete = Box::new(move |answered| {
                let _ = done.send(answered);
            });
            let inner = py
                .detach(|| core::SqliteShard::open(options, gate, complete))
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
            Ok(Self {
                inner,
                settler: Mutex::new(Some(settler)),
                mailboxes,
                settle,
            })
        })
    }

    /// Queues an enqueue of keyed jobs (`KeyedJob`s, read as they are: no list of jobs and
    /// list of keys built in Python first); `future` gets a `KeyedPlacement`. False if the
    /// shard is closed.
    fn enqueue_keyed(
        &self,
        queue: String,
        jobs: Vec<KeyedJobTuple<'_>>,
        group_concurrency: i64,
        now_ms: i64,
        future: Py<PyAny>,
        event_loop: Py<PyAny>,
    ) -> bool {
        let mut new: Vec<NewJob> = Vec::with_capacity(jobs.len());
        let mut keys: Vec<JobKeys> = Vec::with_capacity(jobs.len());
        for (job, key, window_ms, group, expire_at_ms) in jobs {
            let (priority, body, run_after_ms, attempts_allowed, custom_status) = job;
            new.push(NewJob {
                priority,
                body: body.as_bytes().to_vec(),
                run_after_ms,
                attempts_allowed,
                custom_status,
            });
            keys.push(JobKeys {
                key,
                window_ms,
                group,
                expire_at_ms,
            });
        }
        let op = Op::EnqueueKeyed {
            queue,
            jobs: Box::new(new),
            keys,
            now_ms,
            group_concurrency,
        };
        self.submit(future, event_loop, op)
    }

    /// Queues an enqueue of a request's jobs with their keys, as `enqueue_keyed` (a key
    /// repeated in it answered with its first job's place); `future` gets a `KeyedPlacement`.
    /// False if the shard is closed.
    fn enqueue_keyed_batch(
        &self,
        queue: String,
        batch: Py<KeyedJobBatch>,
        group_concurrency: i64,
        now_ms: i64,
        future: Py<PyAny>,
        event_loop: Py<PyAny>,
    ) -> bool {
        let keys: Vec<JobKeys> = batch.get().job_keys().to_vec();
        let op = Op::EnqueueKeyed {
            queue,
            jobs: Box::new(Keyed(batch)),
            keys,
            now_ms,
            group_concurrency,
        };
        self.submit(future, event_loop, op)
    }

    /// Queues an enqueue; `future` gets a `LocalIds`. False if the shard is closed.
    fn enqueue(
        &self,
        queue: String,
        jobs: Py<NewJobBatch>,
        now_ms: i64,
        future: Py<PyAny>,
        event_loop: Py<PyAny>,
    ) -> bool {
        let op = Op::Enqueue {
            queue,
            jobs: Box::new(Batch(jobs)),
            now_ms,
        };
        self.submit(future, event_loop, op)
    }

    /// Queues a dequeue claiming no more than brings the queue's `IN_PROGRESS` jobs to
    /// `max_in_progress` (None: no cap; `group_concurrency`: the queue's, for the groups of jobs
    /// it expires), each job while the bodies before it hold fewer than `max_bytes` bytes
    /// (`within_bytes`); `future` gets a `ClaimedJobs`. False if the shard is closed.
    #[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
    fn dequeue(
        &self,
        queue: String,
        priority: i64,
        limit: i64,
        claim: String,
        now_ms: i64,
        dry_run: bool,
        max_in_progress: Option<i64>,
        group_concurrency: i64,
        max_bytes: i64,
        future: Py<PyAny>,
        event_loop: Py<PyAny>,
    ) -> bool {
        let op = Op::Dequeue {
            queue,
            priority,
            limit,
            claim,
            now_ms,
            dry_run,
            max_in_progress,
            group_concurrency,
            max_bytes,
        };
        self.submit(future, event_loop, op)
    }

    /// Queues an ack (`group_concurrency`: the queue's, for the groups acked jobs leave);
    /// `future` gets `None`. False if the shard is closed.
    fn ack(
        &self,
        queue: String,
        acks: Py<AckGroup>,
        now_ms: i64,
        group_concurrency: i64,
        future: Py<PyAny>,
        event_loop: Py<PyAny>,
    ) -> bool {
        let op = Op::Ack {
            queue,
            acks: Box::new(Acks(acks)),
            now_ms,
            group_concurrency,
        };
        self.submit(future, event_loop, op)
    }

    /// Has the answers of `event_loop`'s requests queued for it, without the GIL, from now on:
    /// the caller, on that loop, watches the returned signal and calls `drain(event_loop)` when
    /// it is readable. The same signal for a loop that listens already. Loops found closed here
    /// stop listening (their answers have no one left to go to). Python is called, and what is
    /// forgotten dropped, outside the lock the settler thread takes.
    fn listen(&self, py: Python<'_>, event_loop: Py<PyAny>) -> PyResult<Py<AnswerSignal>> {
        let listening: Vec<Py<PyAny>> = self
            .lock_mailboxes()
            .iter()
            .map(|b| b.event_loop.clone_ref(py))
            .collect();
        let closed: Vec<usize> = listening
            .iter()
            .filter(|l| {
                l.call_method0(py, "is_closed")
                    .and_then(|closed| closed.is_truthy(py))
                    .unwrap_or(false)
            })
            .map(|l| l.as_ptr() as usize)
            .collect();
        let (signal, forgotten) = {
            let mut boxes = self.lock_mailboxes();
            let (forgotten, kept): (Vec<Mailbox>, Vec<Mailbox>) = std::mem::take(&mut *boxes)
                .into_iter()
                .partition(|b| closed.contains(&(b.event_loop.as_ptr() as usize)));
            *boxes = kept;
            let signal = if let Some(mailbox) = boxes.iter().find(|b| b.event_loop.is(&event_loop))
            {
                mailbox.signal.clone_ref(py)
            } else {
                let (receive, send) = UnixStream::pair()?;
                receive.set_nonblocking(true)?;
                send.set_nonblocking(true)?;
                let signal = Py::new(py, AnswerSignal { receive, send })?;
                boxes.push(Mailbox {
                    event_loop,
                    signal: signal.clone_ref(py),
                    answers: Vec::new(),
                });
                signal
            };
            (signal, forgotten)
        };
        drop(forgotten);
        Ok(signal)
    }

    /// Settles the answers queued for `event_loop` (a listening loop; its signal's bytes read
    /// first): `settle` is called with them, on the caller's thread, the loop's.
    fn drain(&self, py: Python<'_>, event_loop: &Bound<'_, PyAny>) {
        let answers = {
            let mut boxes = self.lock_mailboxes();
            let Some(mailbox) = boxes.iter_mut().find(|b| b.event_loop.is(event_loop)) else {
                return;
            };
            let mut bytes = [0u8; 64];
            while matches!((&mailbox.signal.get().receive).read(&mut bytes), Ok(n) if n > 0) {}
            std::mem::take(&mut mailbox.answers)
        };
        if answers.is_empty() {
            return;
        }
        let list = PyList::empty(py);
        for (token, outcome) in answers {
            let appended = answer(py, token, outcome).and_then(|item| list.append(item));
            if let Err(err) = appended {
                err.write_unraisable(py, None);
            }
        }
        if let Err(err) = self.settle.call1(py, (list,)) {
            err.write_unraisable(py, None);
        }
    }

    /// Write transactions committed so far.
    #[getter]
    fn commits(&self) -> u64 {
        self.inner.commits()
    }

    /// Syncs of the WAL file tried so far, a failed one too, off the writer thread (`FULL`;
    /// none with `NORMAL`).
    #[getter]
    fn syncs(&self) -> u64 {
        self.inner.syncs()
    }

    /// Checkpoints of the shard file so far: `(copied, by_writer, fallbacks)`: those its
    /// checkpointer thread completed, those the writer ran itself (each the few pages that finish
    /// a copy, or a whole copy), and of those the ones it ran because the WAL passed the fallback
    /// mark with no copy finished (the checkpointer failed or fell behind).
    #[getter]
    fn checkpoints(&self) -> (u64, u64, u64) {
        self.inner.checkpoints()
    }

    /// Finishes the queued requests (answering them), then stops the thread and closes the
    /// connection; each listening loop then settles what waits for it and stops watching its
    /// signal (scheduled on the loop, in that order: a closed loop has nothing left to answer).
    /// Idempotent.
    fn close(slf: &Bound<'_, Self>) {
        let py = slf.py();
        let this = slf.get();
        py.detach(|| {
            this.inner.close();
            core::join_once(&this.settler); // every answer is queued: in a mailbox, or with its loop
        });
        let listening: Vec<(Py<PyAny>, i32)> = this
            .lock_mailboxes()
            .iter()
            .map(|b| (b.event_loop.clone_ref(py), b.signal.get().fileno()))
            .collect();
        let Ok(drain) = slf.getattr("drain") else {
            return;
        };
        for (event_loop, fd) in listening {
            let Ok(remove) = event_loop.getattr(py, "remove_reader") else {
                continue;
            };
            let drained = event_loop.call_method1(
                py,
                "call_soon_threadsafe",
                (drain.clone(), event_loop.clone_ref(py)),
            );
            if drained.is_ok() {
                let _ = event_loop.call_method1(py, "call_soon_threadsafe", (remove, fd));
            }
        }
    }
}

impl SqliteShard {
    fn lock_mailboxes(&self) -> std::sync::MutexGuard<'_, Vec<Mailbox>> {
        self.mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn submit(&self, future: Py<PyAny>, event_loop: Py<PyAny>, op: Op) -> bool {
        self.inner.submit(Token { future, event_loop }, op).is_ok()
    }
}
