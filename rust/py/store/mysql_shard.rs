//! Python binding of `crate::store::mysql_shard`: one `MySQL` shard's hot path on Rust threads.
//!
//! `MySQLShard` owns up to `pool_size` worker threads, each with one connection (a `Session`),
//! started as calls need them and fed from one queue. A call returns at once with the caller's
//! asyncio future; a worker runs the transaction without the GIL and never takes it: it files
//! the answer in a completion list and, when that list was empty, writes one byte to a socket
//! pair. The event loop watches the other end (`loop.add_reader(wake_fd(), drain)`); `drain`,
//! on the loop's thread, completes every answered future through `settle(future, value,
//! error)`, the Python function given at construction (it maps `error`, a tuple `(kind, detail, code,
//! maybe_applied)`, to the store's exceptions). No Python object is made per job: the jobs
//! cross as `NewJobBatch`/`AckGroup` in and `LocalIds`/`ClaimedJobs` out.
//!
//! A request that waited longer than the socket timeout for a free connection fails as the
//! Python pool's does (`no free connection within ...`).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::py::errors::guarded;
use crate::py::queue::jobs::{AckGroup, ClaimedJobs, LocalIds, NewJobBatch};
use crate::queue::jobs::ClaimedJob;
use crate::store::mysql_shard::{IdStrategy, Session, Settings, Shared, SqlTexts, StoreError};

enum Call {
    Enqueue {
        jobs: Py<NewJobBatch>,
    },
    Dequeue {
        priority: i64,
        limit: i64,
        claim: String,
        dry_run: bool,
        /// The queue's cap on `IN_PROGRESS` jobs on this shard, if any.
        max_in_progress: Option<i64>,
        /// The byte budget (`within_bytes`).
        max_bytes: i64,
    },
    Ack {
        acks: Py<AckGroup>,
    },
    /// `Ack`, then `Dequeue` (not dry), on one worker.
    AckDequeue {
        acks: Py<AckGroup>,
        priority: i64,
        limit: i64,
        claim: String,
        max_in_progress: Option<i64>,
        max_bytes: i64,
    },
}

struct Request {
    call: Call,
    queue: String,
    database: String,
    now_ms: i64,
    queued: Instant,
    future: Py<PyAny>,
}

enum Answer {
    Ids(Vec<i64>),
    /// The jobs, and whether the place may hold more than the limit suggests (`cut`).
    Jobs(Vec<ClaimedJob>, bool),
    Done,
}

/// The calls waiting for a worker.
#[derive(Default)]
struct Work {
    requests: VecDeque<Request>,
    /// Workers waiting for a call.
    idle: usize,
    closed: bool,
}

type Answered = (Request, Result<Answer, StoreError>);

/// What the workers of one shard share.
struct Pool {
    shared: Arc<Shared>,
    work: Mutex<Work>,
    ready: Condvar,
    /// Answers not yet handed to their futures; a byte is in the pipe whenever this is not empty.
    done: Mutex<Vec<Answered>>,
    wake: UnixStream,
}

impl Pool {
    fn answer(&self, answered: Answered) {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        if done.is_empty() {
            // Nobody left to read it (the shard is gone) is nobody left to tell.
            let _ = (&self.wake).write_all(b"!");
        }
        done.push(answered);
    }
}

/// The hot path (enqueue, dequeue, ack) of one `MySQL` shard, on Rust threads.
#[pyclass(frozen, name = "MySQLShard", module = "pinlater._pinlater")]
pub struct MySQLShard {
    pool: Arc<Pool>,
    size: usize,
    wake: UnixStream,
    settle: Py<PyAny>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// The sessions of `call_blocking`.
    sessions: Mutex<Vec<Session>>,
}

fn sql_text(sql: &HashMap<String, String>, name: &str) -> PyResult<String> {
    sql.get(name)
        .cloned()
        .ok_or_else(|| PyValueError::new_err(format!("sql lacks {name}")))
}

#[pymethods]
impl MySQLShard {
    #[new]
    #[pyo3(signature = (
        shard, host, port, user, password, *, pool_size, socket_timeout, num_auto_retries,
        insert_id_strategy, reservation_prefix, custom_status_limit, cancelled_word,
        expired_word, sql, settle
    ))]
    #[allow(clippy::too_many_arguments)] // keyword-only options of one call, mirrored in the stub
    fn new(
        shard: String,
        host: String,
        port: u16,
        user: String,
        password: String,
        pool_size: usize,
        socket_timeout: f64,
        num_auto_retries: u32,
        insert_id_strategy: Option<&str>,
        reservation_prefix: String,
        custom_status_limit: usize,
        cancelled_word: String,
        expired_word: String,
        sql: HashMap<String, String>,
        settle: Py<PyAny>,
    ) -> PyResult<Self> {
        guarded("MySQLShard", || {
            let insert_id_strategy = match insert_id_strategy {
                None => None,
                Some(name) => Some(IdStrategy::parse(name).ok_or_else(|| {
                    PyValueError::new_err(format!("unknown insert_id_strategy {name:?}"))
                })?),
            };
            if !(socket_timeout.is_finite() && socket_timeout > 0.0) {
                return Err(PyValueError::new_err("socket_timeout must be positive"));
            }
            let sql = SqlTexts {
                session_setup: sql_text(&sql, "session_setup")?,
                server_info: sql_text(&sql, "server_info")?,
                enqueue_jobs: sql_text(&sql, "enqueue_jobs")?,
                enqueue_jobs_returning: sql_text(&sql, "enqueue_jobs_returning")?,
                dequeue_jobs: sql_text(&sql, "dequeue_jobs")?,
                select_claimed_jobs: sql_text(&sql, "select_claimed_jobs")?,
                peek_jobs: sql_text(&sql, "peek_jobs")?,
                ack_succeeded_jobs: sql_text(&sql, "ack_succeeded_jobs")?,
                ack_failed_jobs: sql_text(&sql, "ack_failed_jobs")?,
                lock_claims: sql_text(&sql, "lock_claims")?,
                create_claim_lock_table: sql_text(&sql, "create_claim_lock_table")?,
                list_jobs_tables: sql_text(&sql, "list_jobs_tables")?,
                count_in_progress_table: sql_text(&sql, "count_in_progress_table")?,
                ack_expire_jobs: sql_text(&sql, "ack_expire_jobs")?,
                expiring_readd: sql_text(&sql, "expiring_readd")?,
                expired_count_reset: sql_text(&sql, "expired_count_reset")?,
                expired_count_tally: sql_text(&sql, "expired_count_tally")?,
                expired_count_add_tallied: sql_text(&sql, "expired_count_add_tallied")?,
            };
            let settings = Settings {
                shard,
                host,
                port,
                user,
                password,
                timeout: Duration::from_secs_f64(socket_timeout),
                num_auto_retries,
                insert_id_strategy,
                reservation_prefix,
                custom_status_limit,
                cancelled_word,
                expired_word,
                sql,
            };
            let (reader, writer) = UnixStream::pair()
                .and_then(|(reader, writer)| {
                    // `drain` must never block the event loop, whatever happened to a byte.
                    reader.set_nonblocking(true)?;
                    Ok((reader, writer))
                })
                .map_err(|err| {
                    PyValueError::new_err(format!("cannot make a socket pair: {err}"))
                })?;
            Ok(Self {
                pool: Arc::new(Pool {
                    shared: Shared::new(settings),
                    work: Mutex::new(Work::default()),
                    ready: Condvar::new(),
                    done: Mutex::new(Vec::new()),
                    wake: writer,
                }),
                size: pool_size.max(1),
                wake: reader,
                settle,
                workers: Mutex::new(Vec::new()),
                sessions: Mutex::new(Vec::new()),
            })
        })
    }

    /// Insert `jobs` into `queue` (its database `database`); the future gets their `LocalIds`.
    fn enqueue_jobs(
        &self,
        queue: String,
        database: String,
        jobs: Py<NewJobBatch>,
        now_ms: i64,
        future: Py<PyAny>,
    ) -> PyResult<()> {
        guarded("MySQLShard.enqueue_jobs", || {
            self.submit(Call::Enqueue { jobs }, queue, database, now_ms, future)
        })
    }

    /// Claim (or, dry, peek at) up to `limit` jobs of `priority`, no more than leaves the
    /// queue's `IN_PROGRESS` jobs at `max_in_progress` when given; the future gets `ClaimedJobs`.
    #[allow(clippy::too_many_arguments)]
    fn dequeue_jobs(
        &self,
        queue: String,
        database: String,
        priority: i64,
        limit: i64,
        claim: String,
        now_ms: i64,
        dry_run: bool,
        max_in_progress: Option<i64>,
        max_bytes: i64,
        future: Py<PyAny>,
    ) -> PyResult<()> {
        guarded("MySQLShard.dequeue_jobs", || {
            let call = Call::Dequeue {
                priority,
                limit,
                claim,
                dry_run,
                max_in_progress,
                max_bytes,
            };
            self.submit(call, queue, database, now_ms, future)
        })
    }

    /// Settle `acks`; the future gets None.
    fn ack_jobs(
        &self,
        queue: String,
        database: String,
        acks: Py<AckGroup>,
        now_ms: i64,
        future: Py<PyAny>,
    ) -> PyResult<()> {
        guarded("MySQLShard.ack_jobs", || {
            self.submit(Call::Ack { acks }, queue, database, now_ms, future)
        })
    }

    /// `ack_jobs`, then `dequeue_jobs` (not dry), on one worker, the acks' statements sent
    /// with the claim's (`Session::ack_and_dequeue_jobs`); the future gets `ClaimedJobs`.
    #[allow(clippy::too_many_arguments)]
    fn ack_and_dequeue_jobs(
        &self,
        queue: String,
        database: String,
        acks: Py<AckGroup>,
        priority: i64,
        limit: i64,
        claim: String,
        now_ms: i64,
        max_in_progress: Option<i64>,
        max_bytes: i64,
        future: Py<PyAny>,
    ) -> PyResult<()> {
        guarded("MySQLShard.ack_and_dequeue_jobs", || {
            let call = Call::AckDequeue {
                acks,
                priority,
                limit,
                claim,
                max_in_progress,
                max_bytes,
            };
            self.submit(call, queue, database, now_ms, future)
        })
    }

    /// The same three calls run on the calling thread with the GIL released, answering
    /// `(value, error)` as `settle` takes them: the alternative to the workers, for the
    /// benchmark that compares the two (`benches/mysql_native_hot.py`); sessions are pooled.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        method, queue, database, now_ms, *, jobs=None, acks=None, priority=0, limit=0, claim=None,
        dry_run=false, max_in_progress=None, max_bytes=i64::MAX
    ))]
    fn call_blocking(
        &self,
        py: Python<'_>,
        method: &str,
        queue: &str,
        database: String,
        now_ms: i64,
        jobs: Option<Py<NewJobBatch>>,
        acks: Option<Py<AckGroup>>,
        priority: i64,
        limit: i64,
        claim: Option<String>,
        dry_run: bool,
        max_in_progress: Option<i64>,
        max_bytes: i64,
    ) -> PyResult<(Py<PyAny>, Option<ErrorTuple>)> {
        guarded("MySQLShard.call_blocking", || {
            let call = match (method, jobs, acks) {
                ("enqueue_jobs", Some(jobs), _) => Call::Enqueue { jobs },
                ("ack_jobs", _, Some(acks)) => Call::Ack { acks },
                ("dequeue_jobs", _, _) => Call::Dequeue {
                    priority,
                    limit,
                    claim: claim.unwrap_or_default(),
                    dry_run,
                    max_in_progress,
                    max_bytes,
                },
                _ => return Err(PyValueError::new_err(format!("bad call {method:?}"))),
            };
            let result = py.detach(|| {
                let taken = self
                    .sessions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop();
                let mut session =
                    taken.unwrap_or_else(|| Session::new(Arc::clone(&self.pool.shared)));
                let result = run_call(&mut session, &call, &database, now_ms);
                self.sessions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(session);
                result
            });
            answer_value(py, result, queue)
        })
    }

    /// `(index, priority, body)` of each job whose body is longer than `longer_than` bytes (the
    /// few the body-limit check looks at).
    #[staticmethod]
    fn long_bodies<'py>(
        py: Python<'py>,
        jobs: &Bound<'py, NewJobBatch>,
        longer_than: usize,
    ) -> Vec<(usize, i64, Bound<'py, PyBytes>)> {
        jobs.get()
            .jobs()
            .iter()
            .enumerate()
            .filter(|(_, job)| job.body.len() > longer_than)
            .map(|(index, job)| (index, job.priority, PyBytes::new(py, &job.body)))
            .collect()
    }

    /// The server's `max_allowed_packet`, once a connection has read it.
    fn max_allowed_packet(&self) -> Option<u64> {
        self.pool
            .shared
            .server_info()
            .map(|info| info.max_allowed_packet)
    }

    /// The pipe the event loop watches: readable when answers wait for `drain`.
    fn wake_fd(&self) -> i32 {
        self.wake.as_raw_fd()
    }

    /// Complete the futures of every answered call (`settle`, on the loop's thread); how many.
    fn drain(&self, py: Python<'_>) -> PyResult<usize> {
        guarded("MySQLShard.drain", || {
            let answered = {
                let mut done = self
                    .pool
                    .done
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if done.is_empty() {
                    return Ok(0);
                }
                let mut byte = [0_u8; 1];
                let _ = (&self.wake).read(&mut byte); // the one byte written since the last drain
                std::mem::take(&mut *done)
            };
            let count = answered.len();
            let mut failure = None;
            for (request, result) in answered {
                let settled =
                    answer_value(py, result, &request.queue).and_then(|(value, error)| {
                        self.settle.call1(py, (&request.future, value, error))
                    });
                if let Err(err) = settled {
                    failure.get_or_insert(err); // the other futures still get their answers
                }
            }
            failure.map_or(Ok(count), Err)
        })
    }

    /// Worker threads started so far (at most `pool_size`).
    fn worker_count(&self) -> usize {
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Stop taking calls, let the workers finish those taken, and wait for them. Idempotent.
    fn close(&self, py: Python<'_>) {
        self.stop();
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let workers: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        py.detach(|| {
            for worker in workers {
                let _ = worker.join();
            }
        });
    }
}

impl MySQLShard {
    fn submit(
        &self,
        call: Call,
        queue: String,
        database: String,
        now_ms: i64,
        future: Py<PyAny>,
    ) -> PyResult<()> {
        let request = Request {
            call,
            queue,
            database,
            now_ms,
            queued: Instant::now(),
            future,
        };
        let spawn = {
            let mut work = self
                .pool
                .work
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if work.closed {
                return Err(PyValueError::new_err("the MySQL shard is closed"));
            }
            work.requests.push_back(request);
            work.requests.len() > work.idle
        };
        self.pool.ready.notify_one();
        if spawn {
            let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
            if workers.len() < self.size {
                let pool = Arc::clone(&self.pool);
                let name = format!("mysql-{}-{}", pool.shared.settings.shard, workers.len());
                let handle = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || work(&pool))
                    .map_err(|err| {
                        PyValueError::new_err(format!("cannot start a MySQL worker: {err}"))
                    })?;
                workers.push(handle);
            }
        }
        Ok(())
    }

    /// Take no more calls; the workers end once the queue is empty.
    fn stop(&self) {
        self.pool
            .work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.pool.ready.notify_all();
    }
}

impl Drop for MySQLShard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A worker: one session, taking calls until the shard closes and the queue is empty.
fn work(pool: &Pool) {
    let mut session = Session::new(Arc::clone(&pool.shared));
    let timeout = pool.shared.settings.timeout;
    loop {
        let request = {
            let mut work = pool.work.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(request) = work.requests.pop_front() {
                    break request;
                }
                if work.closed {
                    return;
                }
                work.idle += 1;
                work = pool
                    .ready
                    .wait(work)
                    .unwrap_or_else(PoisonError::into_inner);
                work.idle -= 1;
            }
        };
        let result = if request.queued.elapsed() > timeout {
            Err(StoreError::Connection {
                detail: format!("no free connection within {:?}s", timeout.as_secs_f64()),
                maybe_applied: false,
            })
        } else {
            // A panic must not leave the caller's future waiting forever: it is answered as an
            // internal error, and the connection, in an unknown state, is dropped.
            catch_unwind(AssertUnwindSafe(|| run(&mut session, &request))).unwrap_or_else(|_| {
                session = Session::new(Arc::clone(&pool.shared));
                Err(StoreError::Internal("a panic in the MySQL hot path".into()))
            })
        };
        pool.answer((request, result));
    }
}

fn run(session: &mut Session, request: &Request) -> Result<Answer, StoreError> {
    run_call(session, &request.call, &request.database, request.now_ms)
}

fn run_call(
    session: &mut Session,
    call: &Call,
    database: &str,
    now_ms: i64,
) -> Result<Answer, StoreError> {
    match call {
        Call::Enqueue { jobs } => session
            .enqueue_jobs(database, jobs.get().jobs(), now_ms)
            .map(Answer::Ids),
        Call::Dequeue {
            priority,
            limit,
            claim,
            dry_run,
            max_in_progress,
            max_bytes,
        } => session
            .dequeue_jobs(
                database,
                *priority,
                *limit,
                claim,
                now_ms,
                *dry_run,
                *max_in_progress,
                *max_bytes,
            )
            .map(|(jobs, cut)| Answer::Jobs(jobs, cut)),
        Call::Ack { acks } => session
            .ack_jobs(database, acks.get().group(), now_ms)
            .map(|()| Answer::Done),
        Call::AckDequeue {
            acks,
            priority,
            limit,
            claim,
            max_in_progress,
            max_bytes,
        } => session
            .ack_and_dequeue_jobs(
                database,
                acks.get().group(),
                *priority,
                *limit,
                claim,
                now_ms,
                *max_in_progress,
                *max_bytes,
            )
            .map(|(jobs, cut)| Answer::Jobs(jobs, cut)),
    }
}

/// A result as `settle` takes it: `(value, error)`.
fn answer_value(
    py: Python<'_>,
    result: Result<Answer, StoreError>,
    queue: &str,
) -> PyResult<(Py<PyAny>, Option<ErrorTuple>)> {
    Ok(match result {
        Ok(Answer::Ids(ids)) => (Py::new(py, LocalIds::from_ids(ids))?.into_any(), None),
        Ok(Answer::Jobs(jobs, cut)) => (
            Py::new(py, ClaimedJobs::from_cut_jobs(jobs, cut))?.into_any(),
            None,
        ),
        Ok(Answer::Done) => (py.None(), None),
        Err(err) => (py.None(), Some(error_tuple(&err, queue))),
    })
}

type ErrorTuple = (&'static str, String, i64, bool);

/// `(kind, detail, code, maybe_applied)` for the Python `settle`: kind `queue_not_found` (detail
/// the queue), `connection`, `contention` (deadlocks or lock waits past the retries), `server`
/// (code the `MySQL` error number), `priority`, `internal`.
fn error_tuple(err: &StoreError, queue: &str) -> ErrorTuple {
    match err {
        StoreError::QueueNotFound => ("queue_not_found", queue.to_owned(), 0, false),
        StoreError::Connection {
            detail,
            maybe_applied,
        } => ("connection", detail.clone(), 0, *maybe_applied),
        StoreError::Contention(detail) => ("contention", detail.clone(), 0, false),
        StoreError::Server { code, message } => {
            ("server", message.clone(), i64::from(*code), false)
        }
        StoreError::Priority(priority) => ("priority", priority.to_string(), 0, false),
        StoreError::Internal(message) => ("internal", message.clone(), 0, false),
    }
}
