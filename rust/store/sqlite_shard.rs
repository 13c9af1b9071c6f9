//! `SqliteShard`: the embedded store's hot writes (enqueue, dequeue, ack) on a thread of their
//! own, with group commit; `WriteGate`: the shard's write lock, shared with Python's connection.
//!
//! * One connection per shard file, opened as Python's `connection.connect` opens it (WAL, the
//!   same `synchronous` level and busy timeout). The schema is Python's to create, before this
//!   opens. rusqlite links the system `SQLite`, the library Python's `sqlite3` uses: two copies of
//!   `SQLite` in one process lose each other's POSIX locks on the same file.
//! * A writer thread owns the connection. It takes every request queued (up to
//!   `group_max_ops`) and runs them as one group: `BEGIN IMMEDIATE`, a `SAVEPOINT` per request
//!   (a failing request is rolled back alone), `COMMIT`, then it answers each one. No request is
//!   answered before the `COMMIT` that holds its write completed. A lone request on an idle shard
//!   is a group of one: grouping never waits for company.
//! * `FULL` (power-safe) syncs off the writer thread: the connection runs `synchronous = NORMAL`
//!   (a `COMMIT` writes its WAL frames and returns; checkpoints still sync), and a syncer thread
//!   `fdatasync`s the WAL file after each `COMMIT`, then hands the group's answers on. So no
//!   request is answered before its write is on disk, as with `FULL`, while the writer runs the
//!   next group during the sync; groups committed during one sync share the next one. Reads on
//!   other connections (Python's) may see a commit before its sync, as with `NORMAL`; no write
//!   is answered before it. A sync that fails answers every request of its groups that had
//!   succeeded with an error (their writes are committed, and may or may not survive a power
//!   loss: a client's retry is safe, as delivery is at least once), and the shard's writer
//!   refuses every request after it until the shard is opened again (`run_syncer`). `NORMAL`
//!   answers at once, on the writer thread.
//! * Checkpoints (copying the WAL into the shard file so that the WAL can start over) leave the
//!   writer thread too. The writer's connection has no automatic checkpoint; a hook on it
//!   (`record_wal_pages`) tells the writer after each `COMMIT` how many pages the WAL holds. Past
//!   `WAL_CHECKPOINT_PAGES` it wakes the shard's checkpointer thread, which copies the WAL with a
//!   `PASSIVE` checkpoint on a connection of its own while the writer goes on committing, and
//!   copies again what was committed meanwhile until a pass meets no commit, so that `SQLite`
//!   syncs the shard file there (it syncs the file only after a copy that reached the WAL's end:
//!   `Checkpointer::copy`). After the writer's next `COMMIT`, still holding the `WriteGate`,
//!   the writer copies what was committed during that copy (a few pages, and a sync of the WAL
//!   and of the file), so its following transaction starts the WAL over, unless a reader
//!   (Python's connection) still holds an older snapshot. Should the checkpointer fail or fall
//!   behind, the writer checkpoints on its own thread once the WAL holds `WAL_FALLBACK_PAGES`.
//! * The statements are the Python store's `sql/*.sql` texts, handed over at open (one source
//!   of truth); parameters are bound by name, and a name a statement does not use is skipped.
//!   An enqueue runs `enqueue_jobs.sql` as multi-row INSERTs (`SqliteInserts`), bound by number
//!   (the request's queue and time once per statement).
//! * Python's own connection (monitor, admin, broker, reads) writes the same file. Both writers
//!   take the `WriteGate`, a FIFO ticket lock, around each write transaction, so neither can
//!   starve the other while `SQLite`'s busy handler polls (`SQLite`'s lock stays the last word, and
//!   the busy timeout still bounds a wait on another process).
//! * Ordered groups (#17): a keyed enqueue joins each grouped job to its group, and an ack whose
//!   job leaves its group promotes the group's oldest waiting jobs, as the Python store's
//!   `groups.py` does, but set-based: a statement per step for all the groups of a request
//!   (read their rows, find their oldest waiting jobs, promote them, write the rows back), and
//!   the new jobs, their `group_jobs` and `dedup_keys` rows in multi-row statements
//!   (`MultiRow`), so a request of 100 jobs in 100 groups runs about ten statements, not a few
//!   hundred. An ack first probes whether the queue has any group row (one probe per request):
//!   if not, it runs the plain statements, as before groups existed; either way its successes
//!   run one statement per run of one priority and status to append, not one per job, and on a
//!   queue with groups one `group_jobs_of` before it reads the groups of the jobs it will mark
//!   (a statement per job, or a RETURNING, cost several times more); its failures (rarer)
//!   return their group and new state. The group rows this connection wrote are kept in memory (`GroupCache`) and
//!   read from the file again only after another connection committed (`PRAGMA data_version`)
//!   or a write of this one was rolled back. A group that promotes one job (the usual case:
//!   one of its jobs left) finds it with `groups_first_waiting`, without the recursive walk.
//!   A keyed enqueue writes its keys' records before it knows whether they have any, and
//!   probes them only when one has (`Writer::enqueue_keyed`): most keys are new.
//!   The queue's rules come with each request (`group_concurrency`, `max_in_progress`), read
//!   from the Python store's current rules; a dequeue without a cap runs no statement more than
//!   before.
//! * Job control (#18): a keyed job's expiry goes into its row (`expire_at_ms`), and the queue gets
//!   its row of `expiries`; dequeues skip expired jobs in SQL. An ack of a queue with such a row
//!   (`queue_get` reads it with the queue) first expires, per failed job, a retry that would run
//!   past the expiry (`ack_failed_expire`), counting it; a cancelled job's failure ends it in
//!   `ack_failed` itself. A queue that never had an expiring job runs nothing more.
//! * `close` finishes every request already queued, then stops the thread and closes the
//!   connection; a request after that is refused.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use foldhash::{HashMapExt as _, HashSetExt as _};
use rusqlite::{Connection, OpenFlags, Statement, ToSql};

use crate::queue::jobs::{repeated_keys, AckGroup, ClaimedJob, JobKeys, NewJob, Placed};
use crate::store::sqlite_inserts::{Field, MultiRow, SqliteInserts};

/// A map or set of one request's work, keyed by what clients sent (dedup keys, groups, ids):
/// foldhash, seeded at random per map, hashes a short key in a fraction of `SipHash`'s
/// instructions (`SipHash` was 3% of a grouped job's on the embedded store), and each map lives
/// for one request of bounded size. The long-lived `GroupCache` keeps std's `SipHash`, which an
/// attacker cannot learn to collide by probing.
type RequestMap<K, V> = foldhash::HashMap<K, V>;
type RequestSet<T> = foldhash::HashSet<T>;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// The queue does not exist on this shard.
    #[error("queue not found: {0}")]
    QueueNotFound(String),
    /// `SQLite` failed (busy past the timeout, I/O, a damaged file) or the shard is closed.
    #[error("{0}")]
    Connection(String),
}

/// The statements of the hot path: the texts of the Python store's `.sql` files.
#[derive(Debug, Clone)]
pub struct Statements {
    pub queue_get: String,
    pub enqueue_jobs: String,
    pub last_job_id: String,
    pub dequeue_jobs_dry_run: String,
    /// A dequeue's jobs read (`dequeue_rows.sql`, in claim order), then claimed by id
    /// (`dequeue_claim_rows.sql`): `dequeue_jobs.sql` in two statements, without its RETURNING.
    pub dequeue_rows: String,
    pub dequeue_claim_rows: String,
    /// `dequeue_claim_rows.sql` for one range of ids the ids fill (`dequeue_claim_range.sql`).
    pub dequeue_claim_range: String,
    /// `ack_succeeded.sql` for many jobs of one priority and one status to append, by a JSON
    /// array of ids (`ack_succeeded_many.sql`): every success.
    pub ack_succeeded_many: String,
    /// `ack_succeeded_many.sql` for one range of ids the ids fill (`ack_succeeded_range.sql`).
    pub ack_succeeded_range: String,
    pub ack_failed: String,
    /// The records of a call's keys with their holders' states (`dedup_holders.sql`).
    pub dedup_holders: String,
    /// The keys taken by new jobs, in multi-row statements (`dedup_records.sql`).
    pub dedup_records: String,
    /// The same for keys that have no record, written before any probe: a key that has one
    /// after all fails it (`dedup_records_fresh.sql`, `Writer::enqueue_keyed`).
    pub dedup_records_fresh: String,
    /// The local id the next job inserted gets (`next_job_id.sql`).
    pub next_job_id: String,
    /// A keyed enqueue's jobs, each with its state, repeated into multi-row INSERTs as
    /// `enqueue_jobs` is (`enqueue_keyed_jobs.sql`).
    pub enqueue_keyed_jobs: String,
    /// Many groups' counts and buckets, read, written and forgotten in one statement each
    /// (`groups_get.sql`, `groups_put.sql`, `groups_forget.sql`).
    pub groups_get: String,
    pub groups_put: String,
    pub groups_forget: String,
    /// Many groups' oldest waiting jobs taken out of waiting (`groups_unwait_oldest.sql`; the
    /// groups that take one job each, read by `groups_first_waiting.sql` and taken out by
    /// `group_jobs_unwait.sql`), then made active (`jobs_promote.sql`).
    pub groups_unwait_oldest: String,
    pub groups_first_waiting: String,
    pub jobs_promote: String,
    /// New grouped jobs' groups (`group_jobs_record.sql`).
    pub group_jobs_record: String,
    /// The group of each job an `ack_succeeded_many` is about to mark, a row per grouped job
    /// (`group_jobs_of.sql`).
    pub group_jobs_of: String,
    /// A queue's `IN_PROGRESS` jobs, up to its cap (`count_in_progress.sql`).
    pub count_in_progress: String,
    /// Whether a queue has a group row (`queue_has_groups.sql`): if not, an ack runs the plain
    /// statements above and nothing else; else its successes are preceded by `group_jobs_of`,
    /// and its failures run this one, which returns each job's group and new state.
    pub queue_has_groups: String,
    pub ack_failed_grouped: String,
    /// A failure ack whose retry would run at or after the job's expiry, which expires it
    /// (`ack_failed_expire.sql`): run before the failure statements on a queue that ever had an
    /// expiring job (`queue_get` says so), with its group returned.
    pub ack_failed_expire: String,
    /// A queue's row of expired counts made (`expiries_touch.sql`) and added to (`expiries_add.sql`).
    pub expiries_touch: String,
    pub expiries_add: String,
    /// A queue's due jobs expired by a dequeue (`expire_jobs.sql`), and those that waited in
    /// their groups taken out of waiting (`group_jobs_unwait.sql`, which also unflags the jobs
    /// `groups_first_waiting.sql` read for promotion).
    pub expire_jobs: String,
    pub group_jobs_unwait: String,
}

/// How a shard is opened and run.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    pub path: PathBuf,
    /// `FULL` or `NORMAL` (checked by the caller).
    pub synchronous: String,
    pub busy_timeout_ms: u64,
    /// Most requests committed by one transaction.
    pub group_max_ops: usize,
    /// Characters of a custom status kept (longer ones are cut).
    pub custom_status_limit: usize,
    /// A live reservation's claim descriptor starts with this (the dequeue broker).
    pub reserved_prefix: String,
    pub statements: Statements,
    /// Where to write the statements' timings when the writer ends (`write_statement_times`);
    /// `None`: its statements are not timed.
    pub profile_path: Option<PathBuf>,
}

/// A request's jobs to enqueue, borrowed from wherever they live (a Python batch, a test's vec).
pub trait JobSource: Send {
    fn jobs(&self) -> &[NewJob];
}

impl JobSource for Vec<NewJob> {
    fn jobs(&self) -> &[NewJob] {
        self
    }
}

/// A request's acks, borrowed likewise.
pub trait AckSource: Send {
    fn group(&self) -> &AckGroup;
}

impl AckSource for AckGroup {
    fn group(&self) -> &AckGroup {
        self
    }
}

/// One hot-path request.
pub enum Op {
    Enqueue {
        queue: String,
        jobs: Box<dyn JobSource>,
        now_ms: i64,
    },
    Dequeue {
        queue: String,
        priority: i64,
        limit: i64,
        claim: String,
        now_ms: i64,
        dry_run: bool,
        /// The queue's `maxInProgress` share on this shard (`QueueRules.max_in_progress`):
        /// claim no more than brings its `IN_PROGRESS` jobs to it. None: no cap.
        max_in_progress: Option<i64>,
        /// The queue's `groupConcurrency`, for the groups of jobs the dequeue expires.
        group_concurrency: i64,
        /// Take each job while the bodies taken before it hold fewer bytes (`within_bytes`).
        max_bytes: i64,
    },
    Ack {
        queue: String,
        acks: Box<dyn AckSource>,
        now_ms: i64,
        /// The queue's `groupConcurrency`, for the groups the acked jobs leave.
        group_concurrency: i64,
    },
    /// An enqueue of keyed jobs: `keys[i]` is job `i`'s dedup key, group and expiry (any of
    /// them, or none: a plain job rides along). A key repeated in the request is answered with
    /// its first job's place, deduplicated (see `ShardStore.enqueue_keyed_jobs`).
    EnqueueKeyed {
        queue: String,
        jobs: Box<dyn JobSource>,
        keys: Vec<JobKeys>,
        now_ms: i64,
        /// The queue's `groupConcurrency`.
        group_concurrency: i64,
    },
}

/// The internal state of a job waiting behind its group's active jobs (PENDING to readers).
pub const WAITING: i64 = -1;

/// Most due jobs a dequeue of a queue with expiring jobs expires before it claims.
pub const EXPIRE_ON_DEQUEUE: i64 = 256;

/// Most waiting jobs of one group one request promotes (groups.py's `MAX_PROMOTED`, as
/// lib/groups.lua's): a concurrency raised past a million-job backlog fills its room a thousand
/// at a time, as the promoted jobs finish or jobs join the group, instead of in one transaction
/// that holds every other request of the shard for seconds.
pub const MAX_PROMOTED: i64 = 1000;

/// Keyed enqueues of a queue that probe their keys before writing them, after one met keys that
/// had records (`Writer::enqueue_keyed`).
const PROBES_AFTER_RECORDS: u8 = 8;

/// Most queues the writer remembers as owing probes; past it, it forgets them all.
const PROBE_QUEUES: usize = 1024;

/// What a request answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The new jobs' local ids, in job order.
    Ids(Vec<i64>),
    /// The jobs claimed (or seen, in a dry run), oldest run-after first.
    Claimed(Vec<ClaimedJob>),
    Acked,
    /// Per job of an `EnqueueKeyed`, in order: its place, the holder's when deduplicated.
    Placed(Vec<Placed>),
}

pub type Outcome = Result<Answer, ShardError>;

/// Called with the outcome of each request of a group, in request order, each beside the token
/// its caller submitted it with; after the group's `COMMIT` (with `FULL`, after the sync that
/// follows it, on the syncer thread; else on the writer thread).
pub type Complete<T> = Box<dyn FnMut(Vec<(T, Outcome)>) + Send>;

/// Makes every WAL frame written so far durable: `fdatasync` of the shard's WAL file (`FULL`).
type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// A group's answers, and whether its `COMMIT` wrote anything that wants a sync.
type Committed<T> = (Vec<(T, Outcome)>, bool);

/// Where the writer hands a group's answers after its `COMMIT`.
enum Delivery<T> {
    /// `NORMAL`: to `complete`, at once.
    Direct(Complete<T>),
    /// `FULL`: to the syncer thread (`run_syncer`).
    Synced(Sender<Committed<T>>),
}

/// The shard's write lock, in process: a FIFO ticket lock. Whoever runs a write transaction on
/// the shard file takes it just before `BEGIN IMMEDIATE` and gives it back after the `COMMIT`
/// (or rollback), so writers get the file in the order they asked for it.
#[derive(Debug, Default)]
pub struct WriteGate {
    tickets: Mutex<(u64, u64)>, // (next ticket, ticket being served)
    turn: Condvar,
}

impl WriteGate {
    /// Waits for the caller's turn; the caller must `release` exactly once after.
    pub fn acquire(&self) {
        let mut t = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = t.0;
        t.0 += 1;
        while t.1 != mine {
            t = self.turn.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Ends the caller's turn (the next ticket is served).
    pub fn release(&self) {
        let mut t = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        t.1 += 1;
        drop(t);
        self.turn.notify_all();
    }
}

enum Msg<T> {
    Op(T, Op),
    Close,
}

/// A shard's hot-path writer (see the module docs). `T` is the caller's token for a request,
/// handed back beside its outcome.
pub struct SqliteShard<T: Send + 'static> {
    sender: Mutex<Option<Sender<Msg<T>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The syncer thread, with `FULL`.
    syncer: Mutex<Option<JoinHandle<()>>>,
    /// The checkpointer thread (`run_checkpointer`).
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    commits: Arc<AtomicU64>,
    syncs: Arc<AtomicU64>,
    checkpoints: Arc<CheckpointCounts>,
    keyed: Arc<KeyedCounts>,
}

/// How keyed enqueues found their keys' records (`Writer::enqueue_keyed`).
#[derive(Debug, Default)]
struct KeyedCounts {
    /// Enqueues whose keys were written first, and kept: none had a record.
    written_first: AtomicU64,
    /// Enqueues whose keys were written first, and rolled back: one had a record.
    write_refused: AtomicU64,
    /// Enqueues whose keys were probed (after a refused write, or while the queue owed probes).
    probed: AtomicU64,
}

impl<T: Send + 'static> SqliteShard<T> {
    /// Opens the shard file and starts its writer thread (and, with `FULL`, its syncer thread).
    pub fn open(
        options: ShardOptions,
        gate: Arc<WriteGate>,
        complete: Complete<T>,
    ) -> Result<Self, ShardError> {
        let full = options.synchronous.eq_ignore_ascii_case("FULL");
        let sync = full.then_some(SyncSource::Wal);
        Self::start(options, gate, complete, sync, CheckpointAt::default())
    }

    /// `open`, with `sync` what a `FULL` shard syncs (a test's stand-in), or None for `NORMAL`,
    /// and `at` its WAL sizes that ask for checkpoints.
    fn start(
        options: ShardOptions,
        gate: Arc<WriteGate>,
        complete: Complete<T>,
        sync: Option<SyncSource>,
        at: CheckpointAt,
    ) -> Result<Self, ShardError> {
        let inserts =
            SqliteInserts::new(&options.statements.enqueue_jobs).map_err(ShardError::Connection)?;
        let keyed_inserts = SqliteInserts::new(&options.statements.enqueue_keyed_jobs)
            .map_err(ShardError::Connection)?;
        let rows = RowStatements::new(&options.statements).map_err(ShardError::Connection)?;
        let conn = open_connection(&options, sync.is_some()).map_err(|e| {
            ShardError::Connection(format!("cannot open {}: {e}", options.path.display()))
        })?;
        if options.profile_path.is_some() {
            conn.trace_v2(
                rusqlite::trace::TraceEventCodes::SQLITE_TRACE_PROFILE,
                Some(record_statement_time),
            );
        }
        let syncs = Arc::new(AtomicU64::new(0));
        let broken = Arc::new(OnceLock::new());
        let (deliver, syncer) = match sync {
            None => (Delivery::Direct(complete), None),
            Some(source) => {
                let sync = source.open(&conn)?;
                let (done, committed) = channel();
                let (count, failed) = (Arc::clone(&syncs), Arc::clone(&broken));
                let syncer = std::thread::Builder::new()
                    .name("pinlater-sync".into()) // Linux keeps 15 bytes of a name
                    .spawn(move || run_syncer(&committed, sync, complete, &count, &failed))
                    .map_err(|e| {
                        ShardError::Connection(format!("cannot start the syncer thread: {e}"))
                    })?;
                (Delivery::Synced(done), Some(syncer))
            }
        };
        let checkpoints = Arc::new(CheckpointCounts::default());
        let (wake, woken) = sync_channel(1);
        let checkpointer = match at.copier {
            Copier::Thread => {
                let copier = open_checkpointer(&options).map_err(|e| {
                    ShardError::Connection(format!("cannot open {}: {e}", options.path.display()))
                })?;
                Some(spawn_checkpointer(woken, &checkpoints, move || {
                    copier.copy()
                })?)
            }
            #[cfg(test)]
            Copier::Never => {
                // The receiver stays, so a wake is taken, and never answered.
                std::mem::forget(woken);
                None
            }
            #[cfg(test)]
            Copier::Failing => Some(spawn_checkpointer(woken, &checkpoints, || None)?),
        };
        let (sender, receiver) = channel();
        let commits = Arc::new(AtomicU64::new(0));
        let keyed = Arc::new(KeyedCounts::default());
        let writer = Writer {
            conn,
            options,
            inserts,
            keyed_inserts,
            rows,
            gate,
            deliver,
            broken,
            commits: Arc::clone(&commits),
            groups: RefCell::new(GroupCache::default()),
            probe_keys: RefCell::new(RequestMap::default()),
            keyed: Arc::clone(&keyed),
            checkpoint: CheckpointLink {
                wake,
                at,
                shared: Arc::clone(&checkpoints),
            },
        };
        // The writer owns the syncer's sender: the syncer ends after the writer's last group.
        let thread = std::thread::Builder::new()
            .name("pinlater-sqlite".into())
            .spawn(move || writer.run(&receiver))
            .map_err(|e| ShardError::Connection(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            syncer: Mutex::new(syncer),
            checkpointer: Mutex::new(checkpointer),
            commits,
            syncs,
            checkpoints,
            keyed,
        })
    }

    /// Keyed enqueues (those with a dedup key) so far: `(written_first, write_refused,
    /// probed)`, those whose keys were written before any probe and kept, those whose write met
    /// a key's record and was rolled back, and those that probed their keys (after a refused
    /// write, or first, while their queue owed probes).
    pub fn keyed_enqueues(&self) -> (u64, u64, u64) {
        let counts = &self.keyed;
        (
            counts.written_first.load(Ordering::Relaxed),
            counts.write_refused.load(Ordering::Relaxed),
            counts.probed.load(Ordering::Relaxed),
        )
    }

    /// Write transactions committed so far (each one `COMMIT`).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Syncs of the WAL file tried so far, a failed one too (`FULL`: one per `COMMIT` or fewer,
    /// as groups committed during a sync share the next one; `NORMAL`: none).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Checkpoints so far: `(copied, by_writer, fallbacks)`, those the checkpointer thread
    /// completed, those the writer ran on its own thread (the small ones that finish a copy, and
    /// any past `WAL_FALLBACK_PAGES`), and of those the ones past `WAL_FALLBACK_PAGES` with no
    /// copy finished (the checkpointer failed or fell behind).
    pub fn checkpoints(&self) -> (u64, u64, u64) {
        let counts = &self.checkpoints;
        (
            counts.copied.load(Ordering::Relaxed),
            counts.by_writer.load(Ordering::Relaxed),
            counts.fallbacks.load(Ordering::Relaxed),
        )
    }

    /// Queues a request; its outcome goes to `complete`. `Err` gives the token back when the
    /// shard is closed.
    pub fn submit(&self, token: T, op: Op) -> Result<(), T> {
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        match sender.as_ref() {
            Some(s) => s.send(Msg::Op(token, op)).map_err(|e| match e.0 {
                Msg::Op(token, _) => token,
                Msg::Close => unreachable!("only close sends Close"),
            }),
            None => Err(token),
        }
    }

    /// Finishes the requests already queued, stops the writer thread and closes the connection.
    /// Idempotent.
    pub fn close(&self) {
        if let Some(sender) = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = sender.send(Msg::Close);
        }
        join_once(&self.thread);
        join_once(&self.syncer); // every group answered, after its sync
        join_once(&self.checkpointer); // ends as the writer drops its wake
    }
}

/// Waits for the thread kept in `slot` to end, if it is still there (once: it is taken).
pub fn join_once(slot: &Mutex<Option<JoinHandle<()>>>) {
    let thread = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(thread) = thread {
        let _ = thread.join();
    }
}

/// What a `FULL` shard syncs after its commits.
enum SyncSource {
    /// The shard file's WAL (`{path}-wal`), opened as the shard opens: it stays while the
    /// writer's connection is open (`SQLite` deletes it only as the last connection to the shard
    /// file closes).
    Wal,
    /// A test's stand-in.
    #[cfg(test)]
    With(SyncWal),
}

impl SyncSource {
    /// The sync of the shard whose writer's connection is `conn`.
    fn open(self, conn: &Connection) -> Result<SyncWal, ShardError> {
        match self {
            Self::Wal => {
                // A read makes the connection open the WAL, creating the file if the shard file
                // had none yet (it was just switched to WAL mode).
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| {
                    row.get::<_, i64>(0)
                })
                .map_err(|e| connection_error(&e))?;
                // The file `SQLite` opened, symbolic links resolved, as its WAL's name is made.
                let Some(path) = conn.path() else {
                    return Err(ShardError::Connection("the shard file has no path".into()));
                };
                let mut wal = std::ffi::OsString::from(path);
                wal.push("-wal");
                let file = std::fs::File::open(&wal).map_err(|e| {
                    ShardError::Connection(format!(
                        "cannot open {} to sync it: {e}",
                        PathBuf::from(&wal).display()
                    ))
                })?;
                Ok(Box::new(move || file.sync_data()))
            }
            #[cfg(test)]
            Self::With(sync) => Ok(sync),
        }
    }
}

/// Every request of `batch` answered with `error`, none run.
fn refuse<T>(batch: &mut VecDeque<(T, Op)>, error: &ShardError) -> Vec<(T, Outcome)> {
    batch
        .drain(..)
        .map(|(token, _)| (token, Err(error.clone())))
        .collect()
}

/// The syncer thread of a `FULL` shard: takes every group the writer committed since it last
/// looked, syncs the WAL once for all of them (if any wrote), and answers them in order. Ends
/// when the writer is gone and every group is answered.
///
/// A failed sync breaks the shard for good (`broken`): each request of its groups and of every
/// later one that had succeeded is answered with an error instead, and the writer runs no more
/// requests. After a failed `fdatasync`, Linux may report the next one as done without the
/// pages the failed one lost; since recovery stops at the first WAL frame that does not check
/// out, a commit after them would be answered and still be lost with them.
fn run_syncer<T>(
    committed: &Receiver<Committed<T>>,
    mut sync: SyncWal,
    mut complete: Complete<T>,
    syncs: &AtomicU64,
    broken: &OnceLock<String>,
) {
    while let Ok(first) = committed.recv() {
        let mut groups = vec![first];
        while let Ok(more) = committed.try_recv() {
            groups.push(more);
        }
        if broken.get().is_none() && groups.iter().any(|(_, wrote)| *wrote) {
            let synced = sync();
            syncs.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = synced {
                let _ = broken.set(format!(
                    "a write was committed but syncing it to disk failed ({e}): this shard takes \
                     no more writes until it is opened again"
                ));
            }
        }
        if let Some(why) = broken.get() {
            for (answers, _) in &mut groups {
                for (_, outcome) in answers.iter_mut().filter(|(_, o)| o.is_ok()) {
                    *outcome = Err(ShardError::Connection(why.clone()));
                }
            }
        }
        for (answers, _) in groups {
            complete(answers);
        }
    }
}

impl<T: Send + 'static> Drop for SqliteShard<T> {
    fn drop(&mut self) {
        self.close();
    }
}

/// WAL pages (4 KiB each as a rule) past which the writer asks for a checkpoint: a WAL of about
/// 40 MiB per shard file, written over from its start after each checkpoint. A group commit
/// writes about 40 pages, mostly the same hot ones (the tails of the table and of its index)
/// again and again; a checkpoint copies each page once however often the WAL holds it, so
/// checkpointing a tenth as often as `SQLite`'s default (1,000) copies far fewer pages, with
/// fewer syncs of the file.
const WAL_CHECKPOINT_PAGES: i32 = 10_000;

/// WAL pages past which the writer checkpoints on its own thread: the checkpointer failed or
/// fell behind.
const WAL_FALLBACK_PAGES: i32 = 4 * WAL_CHECKPOINT_PAGES;

/// When a shard's writer asks for checkpoints, and who copies the WAL when it asks.
#[derive(Debug, Clone, Copy)]
struct CheckpointAt {
    /// WAL pages past which the writer wakes the checkpointer.
    pages: i32,
    /// WAL pages past which the writer checkpoints itself, whatever the checkpointer is doing.
    fallback: i32,
    copier: Copier,
}

/// Who answers the writer's wakes.
#[derive(Debug, Clone, Copy)]
enum Copier {
    /// The checkpointer thread (`run_checkpointer`, `Checkpointer::copy`).
    Thread,
    /// A test's checkpointer that never answers.
    #[cfg(test)]
    Never,
    /// A test's checkpointer whose every copy fails at once.
    #[cfg(test)]
    Failing,
}

impl Default for CheckpointAt {
    fn default() -> Self {
        Self {
            pages: WAL_CHECKPOINT_PAGES,
            fallback: WAL_FALLBACK_PAGES,
            copier: Copier::Thread,
        }
    }
}

/// The checkpointer is idle; it is copying the WAL (the writer woke it); it copied the WAL, and
/// the writer is to finish the checkpoint after its next `COMMIT`.
const CHECKPOINT_IDLE: u8 = 0;
const CHECKPOINT_COPYING: u8 = 1;
const CHECKPOINT_COPIED: u8 = 2;

/// What the writer, the checkpointer and the shard share.
#[derive(Debug, Default)]
struct CheckpointCounts {
    /// `CHECKPOINT_IDLE` (the default), `_COPYING` or `_COPIED`: the writer sets `_COPYING` as it
    /// wakes the checkpointer and `_IDLE` as it finishes a copy; the checkpointer sets `_COPIED`,
    /// or `_IDLE` when its copy failed.
    state: AtomicU8,
    /// Checkpoints the checkpointer thread completed.
    copied: AtomicU64,
    /// The WAL frames checkpointed after each of those (the WAL's, copied by this checkpoint or
    /// an earlier one), summed (`wal_checkpoint`'s third value).
    copied_frames: AtomicU64,
    /// Checkpoints the writer ran (not those another connection's kept from running).
    by_writer: AtomicU64,
    /// Of those, the ones it ran because the WAL passed `fallback` pages with no copy finished:
    /// the checkpointer failed or fell behind.
    fallbacks: AtomicU64,
}

/// The writer's side of the checkpointer.
struct CheckpointLink {
    wake: SyncSender<()>,
    at: CheckpointAt,
    shared: Arc<CheckpointCounts>,
}

thread_local! {
    /// The pages in the WAL after this thread's last `COMMIT` that wrote any (`record_wal_pages`);
    /// the writer takes it (leaving 0) after each `COMMIT`.
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// The writer connection's WAL hook: keeps the WAL's size for the writer to read after its
/// `COMMIT` (it runs inside it, on the writer thread). Never an error: the commit is done.
#[allow(clippy::unnecessary_wraps)] // the hook's signature
fn record_wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    Ok(())
}

/// A `PASSIVE` checkpoint on `conn`: `(log, checkpointed)`, the WAL's frames as it began and
/// those of them checkpointed, or None if it failed or did nothing as another connection was
/// checkpointing (the pragma answers that with a row whose `busy` is 1, not with an error).
fn checkpoint_passive(conn: &Connection) -> Option<(i64, i64)> {
    conn.prepare_cached("PRAGMA wal_checkpoint(PASSIVE)")
        .and_then(|mut s| {
            s.query_row([], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get(2)?))
            })
        })
        .ok()
        .filter(|&(busy, _, _)| busy == 0)
        .map(|(_, log, checkpointed)| (log, checkpointed))
}

/// Most `PASSIVE` checkpoints one copy of the checkpointer runs (`Checkpointer::copy`).
const COPY_PASSES: usize = 16;

/// The checkpointer thread: at each wake, `copy`, then the state the writer reads after its next
/// `COMMIT` (`Writer::after_commit`): copied, or idle again if the copy failed (the writer's
/// next commit past `CheckpointAt::pages` wakes it again). Ends when the writer is gone.
fn run_checkpointer(
    woken: &Receiver<()>,
    shared: &CheckpointCounts,
    mut copy: impl FnMut() -> Option<u64>,
) {
    while woken.recv().is_ok() {
        if let Some(frames) = copy() {
            shared.copied_frames.fetch_add(frames, Ordering::Relaxed);
            shared.copied.fetch_add(1, Ordering::Relaxed);
            shared.state.store(CHECKPOINT_COPIED, Ordering::Release);
        } else {
            shared.state.store(CHECKPOINT_IDLE, Ordering::Release);
        }
    }
}

fn spawn_checkpointer(
    woken: Receiver<()>,
    shared: &Arc<CheckpointCounts>,
    copy: impl FnMut() -> Option<u64> + Send + 'static,
) -> Result<JoinHandle<()>, ShardError> {
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("pinlater-ckpt".into()) // Linux keeps 15 bytes of a name
        .spawn(move || run_checkpointer(&woken, &shared, copy))
        .map_err(|e| ShardError::Connection(format!("cannot start the checkpointer thread: {e}")))
}

/// The checkpointer thread's connection.
struct Checkpointer {
    conn: Connection,
}

impl Checkpointer {
    /// `PASSIVE` checkpoints, each of which copies every frame committed as it began into the
    /// shard file (unless a reader still needs it) and waits for no lock: the writer commits on
    /// meanwhile. `SQLite` syncs the WAL before a copy, but the file after it only if no commit
    /// came during the copy (the copy reached the WAL's end as it is then; the pragma's answer
    /// does not tell). Else the file's sync, of every page copied (milliseconds), would fall to
    /// the writer's checkpoint that finishes this one, on its thread and holding the
    /// `WriteGate`. So it copies again, what was committed meanwhile (a few pages), until a pass
    /// finds the WAL as the pass before left it: no commit came during that one, which synced
    /// the file. At most `COPY_PASSES` (a busy writer may commit during every pass: the writer's
    /// checkpoint then syncs the file), and none more once a pass copied nothing new: a reader
    /// (Python's connection) holds an older snapshot, which keeps the rest from being copied.
    /// The frames checkpointed, or None if a pass failed.
    fn copy(&self) -> Option<u64> {
        copy_passes(|| checkpoint_passive(&self.conn)).map(|(frames, _)| frames)
    }
}

/// `Checkpointer::copy`'s passes, each `pass` one `PASSIVE` checkpoint's `(log, checkpointed)`:
/// the frames checkpointed after the last and the passes run, or None if a pass failed.
fn copy_passes(mut pass: impl FnMut() -> Option<(i64, i64)>) -> Option<(u64, usize)> {
    let mut last: Option<(i64, i64)> = None;
    let mut passes = 0;
    while passes < COPY_PASSES {
        let (log, checkpointed) = pass()?;
        passes += 1;
        let done = last.is_some_and(|(log_before, checkpointed_before)| {
            log == log_before || checkpointed == checkpointed_before
        });
        last = Some((log, checkpointed));
        if done {
            break;
        }
    }
    last.map(|(_, checkpointed)| (u64::try_from(checkpointed).unwrap_or(0), passes))
}

/// The checkpointer's connection, at the writer's level (`FULL` or `NORMAL`: either syncs the
/// WAL before a checkpoint, and the file after one that reached the WAL's end).
fn open_checkpointer(options: &ShardOptions) -> Result<Checkpointer, String> {
    let conn = open_file(options, synchronous(options, false)?)?;
    Ok(Checkpointer { conn })
}

/// The `synchronous` level of a connection of the shard; `synced_apart`: `FULL` by the syncer
/// thread, so the connection itself runs `NORMAL`.
fn synchronous(options: &ShardOptions, synced_apart: bool) -> Result<&'static str, String> {
    match options.synchronous.to_ascii_uppercase().as_str() {
        "FULL" if synced_apart => Ok("NORMAL"),
        "FULL" => Ok("FULL"),
        "NORMAL" => Ok("NORMAL"),
        other => Err(format!("synchronous must be FULL or NORMAL, not {other}")),
    }
}

/// A connection to the shard file in WAL mode, with the shard's busy timeout and `sync` its
/// level.
fn open_file(options: &ShardOptions, sync: &str) -> Result<Connection, String> {
    let conn = Connection::open_with_flags(
        &options.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_millis(options.busy_timeout_ms))
        .map_err(|e| e.to_string())?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| e.to_string())?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!(
            "WAL journal mode is not available here (got {mode})"
        ));
    }
    conn.execute_batch(&format!("PRAGMA synchronous = {sync}"))
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// The writer's connection; `synced_apart`: `FULL` by the syncer thread, so the connection
/// itself runs `NORMAL`.
fn open_connection(options: &ShardOptions, synced_apart: bool) -> Result<Connection, String> {
    let conn = open_file(options, synchronous(options, synced_apart)?)?;
    // temp_store MEMORY: each request's SAVEPOINT keeps the original of every page it changes
    // in a sub-journal, which SQLite spills to a temporary file past 64 KiB (a file opened,
    // written and unlinked per group, more writes than the WAL's): kept in memory instead.
    conn.execute_batch("PRAGMA temp_store = MEMORY")
        .map_err(|e| e.to_string())?;
    // No automatic checkpoint (the hook replaces it): the writer asks the checkpointer.
    conn.wal_hook(Some(record_wal_pages));
    // Every statement the writer runs stays prepared: its own, and the multi-row ones, one per
    // entry of CHUNKS for each of six statements (about a hundred and ten in all).
    conn.set_prepared_statement_cache_capacity(160);
    Ok(conn)
}

struct Writer<T> {
    conn: Connection,
    options: ShardOptions,
    inserts: SqliteInserts,
    /// `enqueue_keyed_jobs.sql`'s: each row with its state.
    keyed_inserts: SqliteInserts,
    /// The multi-row statements of a keyed enqueue and an ack.
    rows: RowStatements,
    gate: Arc<WriteGate>,
    deliver: Delivery<T>,
    /// Set by the syncer when a sync failed (`run_syncer`): no request runs after it.
    broken: Arc<OnceLock<String>>,
    commits: Arc<AtomicU64>,
    /// The `groups` rows this connection last read or wrote (see `GroupCache`).
    groups: RefCell<GroupCache>,
    /// Per queue whose keyed enqueues met keys that had records: how many more of them probe
    /// their keys first (see `Writer::enqueue_keyed`). A queue missing: none.
    probe_keys: RefCell<RequestMap<String, u8>>,
    keyed: Arc<KeyedCounts>,
    checkpoint: CheckpointLink,
}

/// The rows of `groups` as this connection last read or wrote them, so that a request reads
/// from the file (`groups_get.sql`, a probe per group) only the groups it has not seen. It is
/// the file's truth as long as no other connection wrote the file and every write of this one
/// was kept, so it is emptied:
/// * in each transaction, before its first use, if `PRAGMA data_version` moved since it was
///   last read: another connection (Python's, another process's) committed in between (this
///   one's own commits never move it). `BEGIN IMMEDIATE` holds the write lock to the `COMMIT`,
///   so nobody else writes meanwhile. A transaction that touches no group (an ungrouped queue's)
///   reads nothing;
/// * when a request fails (its savepoint rolled back) or a transaction is lost or its
///   `COMMIT` fails: what it wrote is gone from the file;
/// * past `GROUP_CACHE_ROWS` rows (many groups: the file is read as before).
#[derive(Debug, Default)]
struct GroupCache {
    /// `PRAGMA data_version` when last read.
    version: Option<i64>,
    /// Whether it was read in the current transaction.
    checked: bool,
    /// Per queue, per group: its row (one of zeros when it has none, as `groups_settle` reads it).
    queues: HashMap<String, HashMap<String, GroupRow>>,
    len: usize,
}

/// Most rows `GroupCache` keeps.
const GROUP_CACHE_ROWS: usize = 1 << 16;

impl GroupCache {
    fn clear(&mut self) {
        self.queues.clear();
        self.len = 0;
    }

    /// The queue's known rows, by group (a group missing: not known).
    fn queue(&self, queue: &str) -> Option<&HashMap<String, GroupRow>> {
        self.queues.get(queue)
    }

    /// Keeps `rows` (group, row) of `queue`: the queue looked up once, not once per group.
    fn put<'a>(&mut self, queue: &str, rows: impl ExactSizeIterator<Item = (&'a str, GroupRow)>) {
        if self.len + rows.len() > GROUP_CACHE_ROWS {
            self.clear();
        }
        let groups = match self.queues.get_mut(queue) {
            Some(groups) => groups,
            None => self.queues.entry(queue.to_owned()).or_default(),
        };
        for (group, row) in rows {
            if let Some(slot) = groups.get_mut(group) {
                *slot = row;
            } else {
                groups.insert(group.to_owned(), row);
                self.len += 1;
            }
        }
    }
}

/// The statements run over many rows at once (`MultiRow`), each with the names of its values
/// in the order `Writer::execute_rows`' callers bind them.
struct RowStatements {
    dedup_records: MultiRow,
    dedup_records_fresh: MultiRow,
    group_jobs_record: MultiRow,
    groups_put: MultiRow,
}

impl RowStatements {
    fn new(statements: &Statements) -> Result<Self, String> {
        const DEDUP_RECORD: [&str; 5] = [
            "queue",
            "dedup_key",
            "priority",
            "local_id",
            "held_until_ms",
        ];
        let named = |name: &str, text: &str, names: &[&str]| {
            MultiRow::new(text, names).map_err(|e| format!("{name}: {e}"))
        };
        Ok(Self {
            dedup_records: named("dedup_records", &statements.dedup_records, &DEDUP_RECORD)?,
            dedup_records_fresh: named(
                "dedup_records_fresh",
                &statements.dedup_records_fresh,
                &DEDUP_RECORD,
            )?,
            group_jobs_record: named(
                "group_jobs_record",
                &statements.group_jobs_record,
                &["local_id", "queue", "group_key", "waiting"],
            )?,
            groups_put: named(
                "groups_put",
                &statements.groups_put,
                &[
                    "queue",
                    "group_key",
                    "active",
                    "waiting",
                    "tokens",
                    "refilled_at_ms",
                ],
            )?,
        })
    }
}

/// A request that could not run because its transaction was lost under it.
enum Interrupted {
    /// `SQLite` rolled back the whole transaction: what ran before in it is gone.
    Transaction(String),
}

impl<T: Send> Writer<T> {
    fn run(mut self, receiver: &Receiver<Msg<T>>) {
        let mut closing = false;
        while !closing {
            let mut batch: VecDeque<(T, Op)> = VecDeque::new();
            match receiver.recv() {
                Ok(Msg::Op(token, op)) => batch.push_back((token, op)),
                Ok(Msg::Close) | Err(_) => break,
            }
            while batch.len() < self.options.group_max_ops.max(1) {
                match receiver.try_recv() {
                    Ok(Msg::Op(token, op)) => batch.push_back((token, op)),
                    Ok(Msg::Close) => {
                        closing = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            while !batch.is_empty() {
                let (answered, wrote) = if let Some(why) = self.broken.get() {
                    (
                        refuse(&mut batch, &ShardError::Connection(why.clone())),
                        false,
                    )
                } else {
                    self.group(&mut batch)
                };
                match &mut self.deliver {
                    Delivery::Direct(complete) => complete(answered),
                    // The syncer ends only after this sender is dropped. If it is gone (it
                    // panicked), nobody can be answered: stop, so that `submit` refuses.
                    Delivery::Synced(syncer) => {
                        if syncer.send((answered, wrote)).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        // Requests queued after Close cannot exist (close takes the sender first); the
        // connection closes as the writer drops. The checkpointer's closes after it, and
        // checkpoints the WAL if it is the last one.
        if let Some(path) = &self.options.profile_path {
            write_statement_times(path);
        }
    }

    /// Runs requests from the front of `batch` as one transaction and answers them: all of
    /// them, unless `SQLite` lost the transaction half-way, when the rest stay for a new group.
    /// Also whether the transaction was committed.
    fn group(&mut self, batch: &mut VecDeque<(T, Op)>) -> (Vec<(T, Outcome)>, bool) {
        self.gate.acquire();
        let mut done: Vec<(T, Outcome)> = Vec::with_capacity(batch.len());
        if let Err(e) = self.control("BEGIN IMMEDIATE") {
            self.gate.release();
            return (refuse(batch, &connection_error(&e)), false);
        }
        self.groups.borrow_mut().checked = false;
        let mut lost: Option<String> = None;
        while let Some((token, op)) = batch.pop_front() {
            match self.one(&op) {
                Ok(outcome) => done.push((token, outcome)),
                Err(Interrupted::Transaction(why)) => {
                    lost = Some(why.clone());
                    // Answered below with the others; the rest of the batch forms a new group.
                    done.push((token, Err(ShardError::Connection(why))));
                    break;
                }
            }
        }
        let interrupted = lost.as_ref().map(|_| done.len() - 1);
        let failure = match lost {
            Some(why) => Some(format!("the write transaction failed: {why}")),
            None => match self.control("COMMIT") {
                Ok(()) => {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    self.after_commit();
                    None
                }
                Err(e) => Some(format!("commit failed: {e}")),
            },
        };
        if failure.is_some() {
            self.groups.borrow_mut().clear();
            if !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
        }
        self.gate.release();
        let committed = failure.is_none();
        if let Some(why) = failure {
            // Nothing of the group was committed: every request fails, the one that found
            // the transaction lost with its own error.
            for (index, (_, outcome)) in done.iter_mut().enumerate() {
                if Some(index) != interrupted {
                    *outcome = Err(ShardError::Connection(why.clone()));
                }
            }
        }
        (done, committed)
    }

    /// After a `COMMIT`, holding the `WriteGate` (`SQLite`'s write lock is already released):
    /// finishes a checkpoint the checkpointer copied (what was committed since, so that the next
    /// transaction starts the WAL over), or checkpoints here past `CheckpointAt::fallback`, or
    /// wakes the checkpointer when the WAL has grown past `CheckpointAt::pages`. The fallback
    /// comes before the wake: a checkpointer that fails at once is idle again by the next
    /// commit, and woken at each one it would never let the fallback run. A failed checkpoint
    /// changes nothing committed: the next commit tries again.
    fn after_commit(&self) {
        let link = &self.checkpoint;
        let shared = &link.shared;
        let pages = WAL_PAGES.replace(0); // a commit that writes nothing leaves it 0
        let state = shared.state.load(Ordering::Acquire);
        if state == CHECKPOINT_COPIED {
            shared.state.store(CHECKPOINT_IDLE, Ordering::Release);
        }
        let checkpoint_here = state == CHECKPOINT_COPIED || pages >= link.at.fallback;
        if !checkpoint_here && state == CHECKPOINT_IDLE && pages >= link.at.pages {
            shared.state.store(CHECKPOINT_COPYING, Ordering::Release);
            // Full or gone (a test's, or closing): no copy is coming, so the fallback applies.
            let _ = link.wake.try_send(());
        }
        if checkpoint_here && checkpoint_passive(&self.conn).is_some() {
            shared.by_writer.fetch_add(1, Ordering::Relaxed);
            if state != CHECKPOINT_COPIED {
                shared.fallbacks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// One request inside its savepoint.
    fn one(&mut self, op: &Op) -> Result<Outcome, Interrupted> {
        if let Err(e) = self.control("SAVEPOINT pinlater_op") {
            return Err(Interrupted::Transaction(e.to_string()));
        }
        let result = self.run_op(op);
        let undo = result.is_err();
        if undo {
            self.groups.borrow_mut().clear(); // its writes are undone below
        }
        if undo && self.conn.is_autocommit() {
            // SQLite rolled back the whole transaction (I/O error, disk full...).
            let why = match &result {
                Err(ShardError::Connection(why) | ShardError::QueueNotFound(why)) => why.clone(),
                Ok(_) => unreachable!(),
            };
            return Err(Interrupted::Transaction(why));
        }
        let end = if undo {
            self.control("ROLLBACK TO pinlater_op")
                .and_then(|()| self.control("RELEASE pinlater_op"))
        } else {
            self.control("RELEASE pinlater_op")
        };
        if let Err(e) = end {
            return Err(Interrupted::Transaction(e.to_string()));
        }
        Ok(result)
    }

    /// Empties the group cache if another connection committed since `PRAGMA data_version` was
    /// last read (or if that cannot be told); once per transaction, before the cache is used.
    fn check_group_cache(&self) {
        if self.groups.borrow().checked {
            return;
        }
        let version: Option<i64> = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |row| row.get(0)))
            .ok();
        let mut cache = self.groups.borrow_mut();
        if version.is_none() || version != cache.version {
            cache.clear();
        }
        cache.version = version;
        cache.checked = true;
    }

    /// Runs a transaction control statement, prepared once (not parsed again per group).
    fn control(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.raw_execute().map(|_| ())
    }

    fn run_op(&self, op: &Op) -> Outcome {
        match op {
            Op::Enqueue {
                queue,
                jobs,
                now_ms,
            } => self.enqueue(queue, jobs.jobs(), *now_ms).map(Answer::Ids),
            Op::Dequeue {
                queue,
                priority,
                limit,
                claim,
                now_ms,
                dry_run,
                max_in_progress,
                group_concurrency,
                max_bytes,
            } => self
                .dequeue(
                    queue,
                    *priority,
                    *limit,
                    claim,
                    *now_ms,
                    (*dry_run, *max_in_progress, *group_concurrency, *max_bytes),
                )
                .map(Answer::Claimed),
            Op::Ack {
                queue,
                acks,
                now_ms,
                group_concurrency,
            } => self
                .ack(queue, acks.group(), *now_ms, *group_concurrency)
                .map(|()| Answer::Acked),
            Op::EnqueueKeyed {
                queue,
                jobs,
                keys,
                now_ms,
                group_concurrency,
            } => self
                .enqueue_keyed(queue, jobs.jobs(), keys, *now_ms, *group_concurrency)
                .map(Answer::Placed),
        }
    }

    /// The queue's number of priorities, or `QueueNotFound`.
    fn require_queue(&self, queue: &str) -> Result<i64, ShardError> {
        self.queue_info(queue).map(|(priorities, _)| priorities)
    }

    /// The queue's number of priorities and whether it ever had an expiring job, or
    /// `QueueNotFound`.
    fn queue_info(&self, queue: &str) -> Result<(i64, bool), ShardError> {
        let mut stmt = self.prepare(&self.options.statements.queue_get)?;
        bind(&mut stmt, &[(":queue", &queue)])?;
        let mut rows = stmt.raw_query();
        match rows.next().map_err(|e| connection_error(&e))? {
            Some(row) => (|| Ok::<_, rusqlite::Error>((row.get(0)?, row.get(1)?)))()
                .map_err(|e| connection_error(&e)),
            None => Err(ShardError::QueueNotFound(queue.to_owned())),
        }
    }

    fn prepare(&self, sql: &str) -> Result<rusqlite::CachedStatement<'_>, ShardError> {
        self.conn
            .prepare_cached(sql)
            .map_err(|e| connection_error(&e))
    }

    /// An ack statement with the request's values bound once (bindings outlive each run's
    /// reset), and where each job's values go (`bind_ack_item`), found once, not per job.
    fn prepare_ack(
        &self,
        sql: &str,
        queue: &str,
        limit: i64,
        now_ms: i64,
    ) -> Result<(rusqlite::CachedStatement<'_>, AckPositions), ShardError> {
        let mut stmt = self.prepare(sql)?;
        bind(
            &mut stmt,
            &[
                (":queue", &queue),
                (":status_limit", &limit),
                (":now_ms", &now_ms),
            ],
        )?;
        let at = positions(
            &stmt,
            [":priority", ":local_id", ":append", ":retry_delay_ms"],
        )?;
        Ok((stmt, at))
    }

    fn enqueue(&self, queue: &str, jobs: &[NewJob], now_ms: i64) -> Result<Vec<i64>, ShardError> {
        self.require_queue(queue)?;
        self.insert(queue, jobs, now_ms)
    }

    /// Each job inserted unless a job holds its dedup key: a key's record names a job that is
    /// `PENDING` (or waiting in its group) or `IN_PROGRESS`, or whose window has not passed; the
    /// jobs that take their keys are recorded as the keys' holders. A job with a group joins it:
    /// active when its group has room and nothing waits, else waiting (after the group's waiting
    /// jobs were promoted into any room, so a raised concurrency applies). A statement per step
    /// for the whole call, none per job.
    ///
    /// Most keys of most enqueues have no record yet. So the call first writes its keys as new
    /// records, naming the ids their jobs are about to get, without probing them
    /// (`dedup_records_fresh.sql`); a key that has a record after all fails that write, which
    /// is rolled back, and the call probes its keys (`dedup_holders.sql`) and goes on as that
    /// finds. A queue whose keys had records probes first for its next `PROBES_AFTER_RECORDS`
    /// keyed enqueues, and again each time a probe finds one, so a queue whose clients keep
    /// sending keys that are taken pays for no failed write but the first.
    fn enqueue_keyed(
        &self,
        queue: &str,
        jobs: &[NewJob],
        keys: &[JobKeys],
        now_ms: i64,
        group_concurrency: i64,
    ) -> Result<Vec<Placed>, ShardError> {
        self.require_queue(queue)?;
        if jobs.len() != keys.len() {
            return Err(ShardError::Connection(format!(
                "{} jobs but {} keys",
                jobs.len(),
                keys.len()
            )));
        }
        let keyed = keys.iter().any(|k| k.key.is_some());
        if keyed && self.write_keys_first(queue) {
            let placed = self.place_keyed(queue, jobs, keys, None, now_ms, group_concurrency)?;
            if let Some(out) = placed {
                self.keyed.written_first.fetch_add(1, Ordering::Relaxed);
                return Ok(out);
            }
            self.keyed.write_refused.fetch_add(1, Ordering::Relaxed);
            self.probe_keys_next(queue);
        }
        let mut holders: RequestMap<String, (i64, i64)> = RequestMap::new();
        if keyed {
            self.keyed.probed.fetch_add(1, Ordering::Relaxed);
            if self.dedup_holders(queue, keys, now_ms, &mut holders)? {
                self.probe_keys_next(queue);
            }
        }
        let placed =
            self.place_keyed(queue, jobs, keys, Some(&holders), now_ms, group_concurrency)?;
        placed.ok_or_else(|| ShardError::Connection("probed keys placed as unprobed".into()))
    }

    /// Whether a keyed enqueue of `queue` writes its keys before probing them (see
    /// `enqueue_keyed`); if not, counts one of the probes owed.
    fn write_keys_first(&self, queue: &str) -> bool {
        let mut owed = self.probe_keys.borrow_mut();
        let Some(left) = owed.get_mut(queue) else {
            return true;
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            owed.remove(queue);
        }
        false
    }

    /// Makes the next `PROBES_AFTER_RECORDS` keyed enqueues of `queue` probe their keys first.
    fn probe_keys_next(&self, queue: &str) {
        let mut owed = self.probe_keys.borrow_mut();
        if owed.len() >= PROBE_QUEUES && !owed.contains_key(queue) {
            owed.clear(); // many queues reuse keys: they each fail one write again
        }
        owed.insert(queue.to_owned(), PROBES_AFTER_RECORDS);
    }

    /// Puts in `holders` each of `keys` whose record names a job that holds it (its priority and
    /// local id); whether any of them had a record, holding or not.
    fn dedup_holders(
        &self,
        queue: &str,
        keys: &[JobKeys],
        now_ms: i64,
        holders: &mut RequestMap<String, (i64, i64)>,
    ) -> Result<bool, ShardError> {
        const HOLDING_STATES: [i64; 2] = [0, 1]; // PENDING (WAITING reads as it), IN_PROGRESS
        let mut stmt = self.prepare(&self.options.statements.dedup_holders)?;
        let json = json_strings(keys.iter().filter_map(|k| k.key.as_deref()));
        bind(&mut stmt, &[(":queue", &queue), (":keys", &json)])?;
        let mut rows = stmt.raw_query();
        let mut any = false;
        while let Some(row) = rows.next().map_err(|e| connection_error(&e))? {
            any = true;
            let read = || -> rusqlite::Result<_> {
                let key: String = row.get(0)?;
                let held_until: i64 = row.get(3)?;
                let state: Option<i64> = row.get(4)?;
                Ok((key, row.get(1)?, row.get(2)?, held_until, state))
            };
            let (key, priority, local_id, held_until, state) =
                read().map_err(|e| connection_error(&e))?;
            let held = now_ms < held_until || state.is_some_and(|s| HOLDING_STATES.contains(&s));
            if held {
                holders.insert(key, (priority, local_id));
            }
        }
        Ok(any)
    }

    /// Places the jobs as `enqueue_keyed` says, with the keys' `holders` as a probe found them;
    /// `None` for unprobed keys: their records are written first, and if any key has one
    /// already, nothing is kept and the answer is `None` (never with `holders`).
    fn place_keyed(
        &self,
        queue: &str,
        jobs: &[NewJob],
        keys: &[JobKeys],
        holders: Option<&RequestMap<String, (i64, i64)>>,
        now_ms: i64,
        group_concurrency: i64,
    ) -> Result<Option<Vec<Placed>>, ShardError> {
        let unprobed = RequestMap::new();
        let known = holders.unwrap_or(&unprobed);
        let mut out: Vec<Placed> = Vec::with_capacity(jobs.len());
        let mut takers: Vec<usize> = Vec::new();
        // A key that is not held, repeated in the request: its first job takes it, the others
        // are answered with that job's place once it has one.
        let mut repeats: Vec<(usize, usize)> = Vec::new();
        for (i, (keys, earlier)) in keys.iter().zip(repeated_keys(keys)).enumerate() {
            if let Some(&(priority, local_id)) = keys.key.as_ref().and_then(|k| known.get(k)) {
                out.push((priority, local_id, true));
            } else if let Some(j) = earlier {
                out.push((jobs[j].priority, 0, true));
                repeats.push((i, j));
            } else {
                out.push((jobs[i].priority, 0, false));
                takers.push(i);
            }
        }
        if takers.is_empty() {
            return Ok(Some(out));
        }
        // A key without a window stores 0: out of the GC walk's index, it goes with its job
        // (schema.sql: dedup_keys_windowed; dedup_keys.py: held_until). A window's end is
        // above 0 whatever the clock (at 0 it would be neither walked nor go with its job).
        let records = |ids: &mut dyn Iterator<Item = i64>| -> Vec<(&str, i64, i64, i64)> {
            let mut records = Vec::with_capacity(takers.len());
            for (&i, id) in takers.iter().zip(ids) {
                let Some(key) = keys[i].key.as_deref() else {
                    continue;
                };
                let held_until = if keys[i].window_ms > 0 {
                    now_ms.saturating_add(keys[i].window_ms).max(1)
                } else {
                    0
                };
                records.push((key, jobs[i].priority, id, held_until));
            }
            records
        };
        // Unprobed: the records name the ids the takers get next (their inserts below follow
        // in this transaction, which holds the write lock).
        let first_id = if holders.is_some() {
            None
        } else {
            let first = self.next_job_id()?;
            if !self.record_fresh_keys(queue, &records(&mut (first..)))? {
                return Ok(None);
            }
            Some(first)
        };
        let expiring = takers.iter().any(|&i| keys[i].expire_at_ms.is_some());
        if expiring {
            let mut stmt = self.prepare(&self.options.statements.expiries_touch)?;
            bind(&mut stmt, &[(":queue", &queue)])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        let ids = if takers.iter().all(|&i| keys[i].group.is_none()) {
            if expiring {
                let new: Vec<(&NewJob, i64, Option<i64>)> = takers
                    .iter()
                    .map(|&i| (&jobs[i], 0, keys[i].expire_at_ms))
                    .collect();
                self.insert_rows(&self.keyed_inserts, queue, &new, |&row| row, now_ms)?
            } else if takers.len() == jobs.len() {
                self.insert(queue, jobs, now_ms)?
            } else {
                let new: Vec<&NewJob> = takers.iter().map(|&i| &jobs[i]).collect();
                self.insert_rows(&self.inserts, queue, &new, |job| (job, 0, None), now_ms)?
            }
        } else {
            self.insert_grouped(queue, jobs, keys, &takers, now_ms, group_concurrency)?
        };
        if let Some(first) = first_id {
            if ids.first() != Some(&first) {
                return Err(ShardError::Connection(format!(
                    "the jobs got local ids from {:?}, not from {first} as their keys' records say",
                    ids.first()
                )));
            }
        }
        for (&i, &id) in takers.iter().zip(&ids) {
            out[i].1 = id;
        }
        for &(i, j) in &repeats {
            out[i] = (out[j].0, out[j].1, true);
        }
        if first_id.is_none() {
            let records = records(&mut ids.into_iter());
            self.execute_rows(&self.rows.dedup_records, &records, bind_dedup_record(queue))?;
        }
        Ok(Some(out))
    }

    /// The local id the next job inserted in this transaction gets (`next_job_id.sql`).
    fn next_job_id(&self) -> Result<i64, ShardError> {
        self.prepare(&self.options.statements.next_job_id)?
            .query_row([], |row| row.get(0))
            .map_err(|e| connection_error(&e))
    }

    /// Writes `records` (key, priority, local id, held until) as keys that have none
    /// (`dedup_records_fresh.sql`), inside a savepoint of their own; false, with nothing
    /// written, if any of them has one.
    fn record_fresh_keys(
        &self,
        queue: &str,
        records: &[(&str, i64, i64, i64)],
    ) -> Result<bool, ShardError> {
        if records.is_empty() {
            return Ok(true);
        }
        self.control("SAVEPOINT pinlater_keys")
            .map_err(|e| connection_error(&e))?;
        let written = self.execute_rows_raw(
            &self.rows.dedup_records_fresh,
            records,
            bind_dedup_record(queue),
        );
        let end = match &written {
            Ok(()) => self.control("RELEASE pinlater_keys"),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
            {
                self.control("ROLLBACK TO pinlater_keys")
                    .and_then(|()| self.control("RELEASE pinlater_keys"))
            }
            // Any other failure fails the request, whose savepoint undoes this one's too.
            Err(e) => return Err(connection_error(e)),
        };
        end.map_err(|e| connection_error(&e))?;
        Ok(written.is_ok())
    }

    /// Inserts the takers (`jobs[takers[..]]`), each grouped one joining its group in order;
    /// their local ids, in order.
    fn insert_grouped(
        &self,
        queue: &str,
        jobs: &[NewJob],
        keys: &[JobKeys],
        takers: &[usize],
        now_ms: i64,
        group_concurrency: i64,
    ) -> Result<Vec<i64>, ShardError> {
        let mut joining: Vec<(&str, i64, i64)> = Vec::new(); // distinct groups, no deltas
        let mut at: RequestMap<&str, usize> = RequestMap::with_capacity(takers.len()); // where each is in joining
        for &i in takers {
            if let Some(group) = keys[i].group.as_deref() {
                at.entry(group).or_insert_with(|| {
                    joining.push((group, 0, 0));
                    joining.len() - 1
                });
            }
        }
        let mut rows = self.groups_settle(queue, group_concurrency, &joining)?;
        let mut new: Vec<(&NewJob, i64, Option<i64>)> = Vec::with_capacity(takers.len());
        for &i in takers {
            let state = match keys[i].group.as_deref() {
                None => 0,
                Some(group) => {
                    let row = &mut rows[at[group]].1; // settled in joining's order
                    if row.active < group_concurrency && row.waiting == 0 {
                        row.active += 1;
                        0
                    } else {
                        row.waiting = row.waiting.max(WAITING_SOME);
                        WAITING
                    }
                }
            };
            new.push((&jobs[i], state, keys[i].expire_at_ms));
        }
        let ids = self.insert_rows(&self.keyed_inserts, queue, &new, |&row| row, now_ms)?;
        let mut records: Vec<(i64, &str, i64)> = Vec::with_capacity(takers.len());
        for ((&i, &(_, state, _)), &id) in takers.iter().zip(&new).zip(&ids) {
            if let Some(group) = keys[i].group.as_deref() {
                records.push((id, group, i64::from(state == WAITING)));
            }
        }
        self.execute_rows(
            &self.rows.group_jobs_record,
            &records,
            |stmt, at, row, value| match value {
                0 => stmt.raw_bind_parameter(at, row.0),
                1 => stmt.raw_bind_parameter(at, queue),
                2 => stmt.raw_bind_parameter(at, row.1),
                _ => stmt.raw_bind_parameter(at, row.2),
            },
        )?;
        self.groups_write(queue, &rows)?;
        Ok(ids)
    }

    /// The rows of `changes`' groups (distinct: `(group, active delta, waiting delta)`) after
    /// the deltas and the promotions they allow: each group's oldest waiting jobs made active
    /// while it has room. Not written yet (`groups_write`). One statement for the groups of the
    /// call the cache does not know (`groups_read`), and two or three more when any of them
    /// promotes.
    fn groups_settle<'g>(
        &self,
        queue: &str,
        concurrency: i64,
        changes: &[(&'g str, i64, i64)],
    ) -> Result<Vec<Settled<'g>>, ShardError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let at: RequestMap<&str, usize> = changes
            .iter()
            .enumerate()
            .map(|(i, &(g, _, _))| (g, i))
            .collect();
        let mut rows: Vec<Settled<'g>> = self
            .groups_read(queue, changes, &at)?
            .into_iter()
            .map(|(group, row)| (group, row, row))
            .collect();
        let mut rooms: Vec<i64> = Vec::with_capacity(rows.len());
        let mut wanted = String::from("["); // [group, room] of those with room > 1
        let mut firsts = String::from("["); // those with room 1
        for ((_, row, _), &(group, active_delta, waiting_delta)) in rows.iter_mut().zip(changes) {
            row.active = (row.active + active_delta).max(0);
            row.waiting = (row.waiting + waiting_delta).max(0);
            // `waiting` is never below the jobs waiting (see `WAITING_SOME`): while it is above
            // zero, every free place is offered to them.
            let room = if row.waiting > 0 {
                (concurrency - row.active).clamp(0, MAX_PROMOTED)
            } else {
                0
            };
            rooms.push(room);
            if room == 1 {
                if firsts.len() > 1 {
                    firsts.push(',');
                }
                json_string(&mut firsts, group);
            } else if room > 1 {
                if wanted.len() > 1 {
                    wanted.push(',');
                }
                wanted.push('[');
                json_string(&mut wanted, group);
                let _ = write!(wanted, ",{room}]");
            }
        }
        wanted.push(']');
        firsts.push(']');
        if wanted.len() == 2 && firsts.len() == 2 {
            return Ok(rows);
        }
        let promoted = self.groups_unwait(queue, &firsts, &wanted, &at)?;
        for (((_, row, _), room), promoted) in rows.iter_mut().zip(rooms).zip(promoted) {
            if room == 0 {
                continue;
            }
            row.active += promoted;
            // Fewer promoted than there was room for: nothing else waits. As many: more may
            // wait, and `waiting` stays as it was (the next promotion finds out).
            row.waiting = if promoted == room { row.waiting } else { 0 };
        }
        Ok(rows)
    }

    /// The rows of `changes`' groups as they are (`at`: where each group is in `changes`): from
    /// the cache, and those it does not know read in one statement (and kept in it).
    fn groups_read<'g>(
        &self,
        queue: &str,
        changes: &[(&'g str, i64, i64)],
        at: &RequestMap<&str, usize>,
    ) -> Result<Vec<(&'g str, GroupRow)>, ShardError> {
        self.check_group_cache();
        let mut rows: Vec<(&'g str, GroupRow)> = Vec::with_capacity(changes.len());
        let mut misses: Vec<&str> = Vec::new();
        {
            let cache = self.groups.borrow();
            let known = cache.queue(queue);
            for &(group, _, _) in changes {
                let row = known.and_then(|groups| groups.get(group));
                if row.is_none() {
                    misses.push(group);
                }
                rows.push((group, row.copied().unwrap_or_default()));
            }
        }
        if misses.is_empty() {
            return Ok(rows);
        }
        let mut stmt = self.prepare(&self.options.statements.groups_get)?;
        let json = json_strings(misses.iter().copied());
        bind(&mut stmt, &[(":queue", &queue), (":groups", &json)])?;
        let mut found = stmt.raw_query();
        while let Some(r) = found.next().map_err(|e| connection_error(&e))? {
            let (group, row) = (|| {
                Ok::<_, rusqlite::Error>((
                    r.get_ref(0)?.as_str().ok().and_then(|g| at.get(g).copied()),
                    GroupRow {
                        active: r.get(1)?,
                        waiting: r.get(2)?,
                        tokens: r.get(3)?,
                        refilled_at_ms: r.get(4)?,
                    },
                ))
            })()
            .map_err(|e| connection_error(&e))?;
            if let Some(i) = group {
                rows[i].1 = row;
            }
        }
        let read = misses.into_iter().map(|group| (group, rows[at[group]].1));
        self.groups.borrow_mut().put(queue, read);
        Ok(rows)
    }

    /// Takes the oldest waiting job of each group of `firsts` (a JSON array of keys) and the
    /// oldest ones of each group of `wanted` (a JSON array of `[key, count]`) out of waiting
    /// and makes them active; how many each group of `at` promoted. The groups of `firsts` (the
    /// usual promotion) have their jobs read (`groups_first_waiting.sql`), then unflagged by id
    /// (`group_jobs_unwait.sql`): cheaper than one UPDATE with RETURNING.
    fn groups_unwait(
        &self,
        queue: &str,
        firsts: &str,
        wanted: &str,
        at: &RequestMap<&str, usize>,
    ) -> Result<Vec<i64>, ShardError> {
        let mut promoted: Vec<i64> = vec![0; at.len()];
        let mut ids = String::from("[");
        let statements = &self.options.statements;
        for (read_only, sql, groups) in [
            (true, &statements.groups_first_waiting, firsts),
            (false, &statements.groups_unwait_oldest, wanted),
        ] {
            if groups.len() == 2 {
                continue;
            }
            let mut stmt = self.prepare(sql)?;
            bind(&mut stmt, &[(":queue", &queue), (":groups", &groups)])?;
            let mut found = stmt.raw_query();
            while let Some(r) = found.next().map_err(|e| connection_error(&e))? {
                let id: Option<i64> = r.get(1).map_err(|e| connection_error(&e))?;
                let Some(id) = id else { continue };
                let group = r.get_ref(0).and_then(|v| Ok(at.get(v.as_str()?).copied()));
                let group = group.map_err(|e| connection_error(&e))?;
                if let Some(i) = group {
                    promoted[i] += 1;
                }
                push_json_int(&mut ids, id);
            }
            if read_only && ids.len() > 1 {
                // the jobs read above, the only ones in `ids` yet (`firsts` go first)
                let mut stmt = self.prepare(&statements.group_jobs_unwait)?;
                let read = format!("{ids}]");
                bind(&mut stmt, &[(":ids", &read.as_str())])?;
                stmt.raw_execute().map_err(|e| connection_error(&e))?;
            }
        }
        ids.push(']');
        if ids.len() > 2 {
            let mut stmt = self.prepare(&statements.jobs_promote)?;
            bind(&mut stmt, &[(":ids", &ids)])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        Ok(promoted)
    }

    /// Writes the groups' rows that changed: one statement for those kept, one for those
    /// forgotten (no unfinished job and a full bucket). A group that stays busy usually keeps
    /// its row as it was (a job joining its waiting ones, or one promoted for each that left:
    /// see `WAITING_SOME`), and is not written.
    fn groups_write(&self, queue: &str, rows: &[Settled<'_>]) -> Result<(), ShardError> {
        let forget =
            |row: &GroupRow| row.active == 0 && row.waiting == 0 && row.refilled_at_ms.is_none();
        let stored = |row: &GroupRow| {
            if forget(row) {
                GroupRow::default()
            } else {
                *row
            }
        };
        let rows: Vec<(&str, GroupRow)> = rows
            .iter()
            .filter(|(_, row, was)| stored(row) != *was)
            .map(|&(group, row, _)| (group, row))
            .collect();
        let kept: Vec<&(&str, GroupRow)> = rows.iter().filter(|(_, row)| !forget(row)).collect();
        self.execute_rows(
            &self.rows.groups_put,
            &kept,
            |stmt, at, (group, row), value| match value {
                0 => stmt.raw_bind_parameter(at, queue),
                1 => stmt.raw_bind_parameter(at, group),
                2 => stmt.raw_bind_parameter(at, row.active),
                3 => stmt.raw_bind_parameter(at, row.waiting),
                4 => stmt.raw_bind_parameter(at, row.tokens),
                _ => stmt.raw_bind_parameter(at, row.refilled_at_ms),
            },
        )?;
        if rows.iter().any(|(_, row)| forget(row)) {
            let json = json_strings(rows.iter().filter(|(_, r)| forget(r)).map(|(g, _)| *g));
            let mut stmt = self.prepare(&self.options.statements.groups_forget)?;
            bind(&mut stmt, &[(":queue", &queue), (":groups", &json)])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        self.check_group_cache(); // done already by the groups_settle before (a no-op)
        let written = rows.iter().map(|&(group, row)| (group, stored(&row)));
        self.groups.borrow_mut().put(queue, written);
        Ok(())
    }

    /// Runs `statement` over `rows` in as few multi-row statements as `CHUNKS` make; `bind`
    /// binds value `value` (an index of the names `statement` was made with) of a row at `?`
    /// number `at`. The statement's shared values (the request's queue: `SHARED`) are bound
    /// once, from its first row: `bind` gives every row the same value there.
    fn execute_rows<R>(
        &self,
        statement: &MultiRow,
        rows: &[R],
        bind: impl Fn(&mut Statement<'_>, usize, &R, usize) -> rusqlite::Result<()>,
    ) -> Result<(), ShardError> {
        self.execute_rows_raw(statement, rows, bind)
            .map_err(|e| connection_error(&e))
    }

    /// `execute_rows` with `SQLite`'s own error, for a caller that tells them apart.
    fn execute_rows_raw<R>(
        &self,
        statement: &MultiRow,
        rows: &[R],
        bind: impl Fn(&mut Statement<'_>, usize, &R, usize) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        let order = statement.order();
        for (sql, part) in statement.split(rows) {
            let mut stmt = self.conn.prepare_cached(sql)?;
            let mut at = 0;
            if let Some(first) = part.first() {
                for &value in statement.shared() {
                    at += 1;
                    bind(&mut stmt, at, first, value)?;
                }
            }
            for row in part {
                for &value in order {
                    at += 1;
                    bind(&mut stmt, at, row, value)?;
                }
            }
            stmt.raw_execute()?;
        }
        Ok(())
    }

    /// Inserts `jobs` into the open transaction; their local ids, in order.
    fn insert(&self, queue: &str, jobs: &[NewJob], now_ms: i64) -> Result<Vec<i64>, ShardError> {
        self.insert_rows(&self.inserts, queue, jobs, |job| (job, 0, None), now_ms)
    }

    /// Inserts a row per entry of `rows` (`row` gives its job, state and expiry, bound where the
    /// statement has `:state` and `:expire_at_ms`) with `inserts`' statements; their local ids,
    /// in order.
    fn insert_rows<R>(
        &self,
        inserts: &SqliteInserts,
        queue: &str,
        rows: &[R],
        row: impl Fn(&R) -> (&NewJob, i64, Option<i64>),
        now_ms: i64,
    ) -> Result<Vec<i64>, ShardError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let limit = self.options.custom_status_limit;
        let (shared, fields) = (inserts.shared(), inserts.fields());
        for (sql, chunk) in inserts.split(rows) {
            let mut stmt = self.prepare(sql)?;
            let mut index = 0;
            // The shared fields (the queue, the time: the request's) once, from the first row.
            let bound_once = chunk.first().map(|first| (first, shared));
            let each = chunk.iter().map(|entry| (entry, fields));
            for (entry, fields) in bound_once.into_iter().chain(each) {
                let (job, state, expire_at_ms) = row(entry);
                for field in fields {
                    index += 1;
                    let bound = match field {
                        Field::Queue => stmt.raw_bind_parameter(index, queue),
                        Field::Priority => stmt.raw_bind_parameter(index, job.priority),
                        Field::State => stmt.raw_bind_parameter(index, state),
                        Field::Attempts => stmt.raw_bind_parameter(index, job.attempts_allowed),
                        Field::CustomStatus => stmt
                            .raw_bind_parameter(index, truncate_chars(&job.custom_status, limit)),
                        Field::NowMs => stmt.raw_bind_parameter(index, now_ms),
                        Field::RunAfterMs => stmt.raw_bind_parameter(index, job.run_after_ms),
                        Field::Body => stmt.raw_bind_parameter(index, job.body.as_slice()),
                        Field::ExpireAtMs => stmt.raw_bind_parameter(index, expire_at_ms),
                    };
                    bound.map_err(|e| connection_error(&e))?;
                }
            }
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        // AUTOINCREMENT gives each row the highest id ever used plus one, and this transaction
        // holds the write lock, so the batch got consecutive ids ending here.
        let last: i64 = self
            .conn
            .prepare_cached(&self.options.statements.last_job_id)
            .and_then(|mut s| s.query_row([], |row| row.get(0)))
            .map_err(|e| connection_error(&e))?;
        let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        Ok((last - count + 1..=last).collect())
    }

    /// Claims (or, in a dry run, looks at) the oldest ready jobs; `rules` are `(dry_run,
    /// max_in_progress, group_concurrency)`. On a queue that ever had an expiring job, a claim
    /// first expires up to `EXPIRE_ON_DEQUEUE` of its due jobs (one probe of `jobs_by_expiry`
    /// when none is due), so expired jobs do not pile up at the front of the queue between the
    /// monitor's sweeps; expired jobs are never claimed either way (`dequeue_rows.sql`).
    fn dequeue(
        &self,
        queue: &str,
        priority: i64,
        limit: i64,
        claim: &str,
        now_ms: i64,
        rules: (bool, Option<i64>, i64, i64),
    ) -> Result<Vec<ClaimedJob>, ShardError> {
        let (dry_run, max_in_progress, group_concurrency, max_bytes) = rules;
        let max_bytes = u64::try_from(max_bytes).unwrap_or(0);
        let (num_priorities, expiring) = self.queue_info(queue)?;
        if expiring && !dry_run {
            self.expire_due(queue, now_ms, group_concurrency)?;
        }
        let statements = &self.options.statements;
        let sql = if dry_run {
            &statements.dequeue_jobs_dry_run
        } else {
            &statements.dequeue_rows
        };
        let mut limit = limit.max(0); // SQLite reads a negative LIMIT as "no limit"
        if let (Some(cap), false) = (max_in_progress, dry_run) {
            if limit > 0 {
                limit = limit.min(cap - self.count_in_progress(queue, num_priorities, cap)?);
                limit = limit.max(0);
            }
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let prefix = self.options.reserved_prefix.as_str();
        let params: [(&str, &dyn ToSql); 5] = [
            (":queue", &queue),
            (":priority", &priority),
            (":limit", &limit),
            (":now_ms", &now_ms),
            (":reserved_prefix", &prefix),
        ];
        let mut stmt = self.prepare(sql)?;
        bind(&mut stmt, &params)?;
        let mut rows = stmt.raw_query();
        let mut claimed: Vec<ClaimedJob> = Vec::new();
        let mut spent: u64 = 0; // body bytes read (max_bytes: the rows after are left as they are)
        while claimed.is_empty() || spent < max_bytes {
            let Some(row) = rows.next().map_err(|e| connection_error(&e))? else {
                break;
            };
            let job = (|| {
                Ok::<_, rusqlite::Error>(ClaimedJob {
                    local_id: row.get(0)?,
                    body: row.get(1)?,
                    attempts_allowed: row.get(2)?,
                    attempts_remaining: row.get(3)?,
                    created_at_ms: row.get(4)?,
                    updated_at_ms: row.get(5)?,
                })
            })()
            .map_err(|e| connection_error(&e))?;
            spent = spent.saturating_add(job.body.len() as u64);
            claimed.push(job);
        }
        drop(rows);
        drop(stmt);
        if dry_run || claimed.is_empty() {
            return Ok(claimed);
        }
        let common: [(&str, &dyn ToSql); 4] = [
            (":queue", &queue),
            (":priority", &priority),
            (":claim", &claim),
            (":now_ms", &now_ms),
        ];
        // (the ids read are distinct: rows of one SELECT)
        let changed = if let Some(runs) = id_runs(claimed.iter().map(|j| j.local_id)) {
            let mut stmt = self.prepare(&statements.dequeue_claim_range)?;
            bind(&mut stmt, &common)?;
            let mut changed = 0;
            for (first, last) in runs {
                bind(&mut stmt, &[(":first", &first), (":last", &last)])?;
                changed += stmt.raw_execute().map_err(|e| connection_error(&e))?;
            }
            changed
        } else {
            let mut ids = String::from("[");
            for job in &claimed {
                push_json_int(&mut ids, job.local_id);
            }
            ids.push(']');
            let mut stmt = self.prepare(&statements.dequeue_claim_rows)?;
            bind(&mut stmt, &common)?;
            bind(&mut stmt, &[(":ids", &ids.as_str())])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?
        };
        if changed != claimed.len() {
            // Cannot happen: the write lock is held since the read. Never answer a job unclaimed.
            return Err(ShardError::Connection(format!(
                "claimed {changed} of the {} jobs read",
                claimed.len()
            )));
        }
        Ok(claimed)
    }

    /// The queue's `IN_PROGRESS` jobs on the shard, counted up to `cap`.
    fn count_in_progress(
        &self,
        queue: &str,
        num_priorities: i64,
        cap: i64,
    ) -> Result<i64, ShardError> {
        let mut stmt = self.prepare(&self.options.statements.count_in_progress)?;
        bind(
            &mut stmt,
            &[
                (":queue", &queue),
                (":num_priorities", &num_priorities),
                (":cap", &cap),
            ],
        )?;
        let mut rows = stmt.raw_query();
        match rows.next().map_err(|e| connection_error(&e))? {
            Some(row) => row.get(0).map_err(|e| connection_error(&e)),
            None => Ok(0),
        }
    }

    /// Applies the acks; a grouped job that ended for good (SUCCEEDED, or FAILED with no attempt
    /// left) leaves its group, which promotes. The successes run `ack_succeeded_many`, which on
    /// a queue with groups counts those leaving them; the failures (rarer) run a statement per
    /// job, which on such a queue returns the job's group and new state.
    fn ack(
        &self,
        queue: &str,
        acks: &AckGroup,
        now_ms: i64,
        group_concurrency: i64,
    ) -> Result<(), ShardError> {
        const FAILED: i64 = 3;
        let (_, expiring) = self.queue_info(queue)?;
        let statements = &self.options.statements;
        let grouped = self.queue_has_groups(queue)?;
        let limit = i64::try_from(self.options.custom_status_limit).unwrap_or(i64::MAX);
        let mut left: RequestMap<String, i64> = RequestMap::new(); // jobs that left each group
        if expiring && !acks.failed.is_empty() {
            self.expire_failed(queue, &acks.failed, now_ms, limit, &mut left)?;
        }
        if !acks.succeeded.is_empty() {
            let groups = if grouped { Some(&mut left) } else { None };
            self.ack_succeeded_many(queue, &acks.succeeded, limit, now_ms, groups)?;
        }
        if !acks.failed.is_empty() {
            let failed_sql = if grouped {
                &statements.ack_failed_grouped
            } else {
                &statements.ack_failed
            };
            let (mut stmt, at) = self.prepare_ack(failed_sql, queue, limit, now_ms)?;
            for item in &acks.failed {
                bind_ack_item(&mut stmt, &at, item)?;
                if !grouped {
                    stmt.raw_execute().map_err(|e| connection_error(&e))?;
                    continue;
                }
                // RETURNING group_key and state: a row when the job was acked.
                let mut rows = stmt.raw_query();
                let Some(row) = rows.next().map_err(|e| connection_error(&e))? else {
                    continue;
                };
                let group: Option<String> = row.get(0).map_err(|e| connection_error(&e))?;
                let Some(group) = group else { continue };
                let state: i64 = row.get(1).map_err(|e| connection_error(&e))?;
                if state == FAILED {
                    add_left(&mut left, group, 1);
                }
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        let changes: Vec<(&str, i64, i64)> = left
            .iter()
            .map(|(g, count)| (g.as_str(), -count, 0))
            .collect();
        let rows = self.groups_settle(queue, group_concurrency, &changes)?;
        self.groups_write(queue, &rows)
    }

    /// Marks the jobs of `items` SUCCEEDED: a statement per run of consecutive items of one
    /// priority and one status to append (`ack_succeeded_many.sql`, or `ack_succeeded_range.sql`
    /// per range where the run's ids make a few ranges), usually one per request, not one per
    /// job. The runs go in the request's order, so a job acked twice ends as the first of its
    /// acks left it, as with a statement per job. On a queue with groups (`groups`), each run
    /// first reads the groups of its jobs that the statement will mark (`group_jobs_of.sql`:
    /// those `IN_PROGRESS`, of the run's priority) and counts them as having left their groups;
    /// a run's repeated ids are sent once, so each counts once.
    fn ack_succeeded_many(
        &self,
        queue: &str,
        items: &[crate::queue::jobs::AckItem],
        limit: i64,
        now_ms: i64,
        mut groups: Option<&mut RequestMap<String, i64>>,
    ) -> Result<(), ShardError> {
        let statements = &self.options.statements;
        let request: [(&str, &dyn ToSql); 3] = [
            (":queue", &queue),
            (":status_limit", &limit),
            (":now_ms", &now_ms),
        ];
        let mut ids = String::new();
        let mut seen: RequestSet<i64> = RequestSet::with_capacity(items.len());
        for run in items.chunk_by(|a, b| {
            a.priority == b.priority && a.append_custom_status == b.append_custom_status
        }) {
            let first = &run[0];
            let shared: [(&str, &dyn ToSql); 2] = [
                (":priority", &first.priority),
                (":append", &first.append_custom_status.as_str()),
            ];
            let ranges = id_runs(run.iter().map(|item| item.local_id));
            if groups.is_some() || ranges.is_none() {
                ids.clear();
                ids.push('[');
                seen.clear();
                for item in run {
                    if groups.is_some() && !seen.insert(item.local_id) {
                        continue;
                    }
                    push_json_int(&mut ids, item.local_id);
                }
                ids.push(']');
            }
            if let Some(left) = groups.as_deref_mut() {
                self.count_leaving(queue, first.priority, &ids, left)?;
            }
            if let Some(ranges) = ranges {
                let mut stmt = self.prepare(&statements.ack_succeeded_range)?;
                bind(&mut stmt, &request)?;
                bind(&mut stmt, &shared)?;
                for (low, high) in ranges {
                    bind(&mut stmt, &[(":first", &low), (":last", &high)])?;
                    stmt.raw_execute().map_err(|e| connection_error(&e))?;
                }
                continue;
            }
            let mut stmt = self.prepare(&statements.ack_succeeded_many)?;
            bind(&mut stmt, &request)?;
            bind(&mut stmt, &shared)?;
            bind(&mut stmt, &[(":ids", &ids.as_str())])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        Ok(())
    }

    /// Counts in `left`, per group, the grouped jobs among `ids` (a JSON array of distinct
    /// local ids) that are `IN_PROGRESS` at `priority`: those an ack is about to mark
    /// SUCCEEDED, which leave their groups (`group_jobs_of.sql`).
    fn count_leaving(
        &self,
        queue: &str,
        priority: i64,
        ids: &str,
        left: &mut RequestMap<String, i64>,
    ) -> Result<(), ShardError> {
        let mut stmt = self.prepare(&self.options.statements.group_jobs_of)?;
        bind(
            &mut stmt,
            &[(":queue", &queue), (":priority", &priority), (":ids", &ids)],
        )?;
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next().map_err(|e| connection_error(&e))? {
            let group = row.get_ref(0).and_then(|v| Ok(v.as_str()?));
            let group = group.map_err(|e| connection_error(&e))?;
            match left.get_mut(group) {
                Some(count) => *count += 1,
                None => add_left(left, group.to_owned(), 1),
            }
        }
        Ok(())
    }

    /// Expires the failed jobs whose retry would run at or after their expiry
    /// (`ack_failed_expire.sql`), counting them in the queue's row of `expiries`; the grouped
    /// ones left their groups (`left`). The failure statements then find them no longer
    /// `IN_PROGRESS`.
    fn expire_failed(
        &self,
        queue: &str,
        failed: &[crate::queue::jobs::AckItem],
        now_ms: i64,
        limit: i64,
        left: &mut RequestMap<String, i64>,
    ) -> Result<(), ShardError> {
        let statements = &self.options.statements;
        let mut expired: i64 = 0;
        {
            let (mut stmt, at) =
                self.prepare_ack(&statements.ack_failed_expire, queue, limit, now_ms)?;
            for item in failed {
                bind_ack_item(&mut stmt, &at, item)?;
                let mut rows = stmt.raw_query();
                let Some(row) = rows.next().map_err(|e| connection_error(&e))? else {
                    continue;
                };
                expired += 1;
                let group: Option<String> = row.get(0).map_err(|e| connection_error(&e))?;
                if let Some(group) = group {
                    add_left(left, group, 1);
                }
            }
        }
        if expired > 0 {
            let mut stmt = self.prepare(&statements.expiries_add)?;
            bind(&mut stmt, &[(":queue", &queue), (":count", &expired)])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        Ok(())
    }

    /// Expires up to `EXPIRE_ON_DEQUEUE` of the queue's due jobs (`expire_jobs.sql`), counting
    /// them; the grouped ones leave their groups (a waiting one waits no more), which promote.
    fn expire_due(&self, queue: &str, now_ms: i64, concurrency: i64) -> Result<(), ShardError> {
        let statements = &self.options.statements;
        let status_limit = i64::try_from(self.options.custom_status_limit).unwrap_or(i64::MAX);
        let mut expired: i64 = 0;
        let mut waited = String::from("[");
        let mut changes: RequestMap<String, (i64, i64)> = RequestMap::new(); // (left, waiting gone)
        {
            let mut stmt = self.prepare(&statements.expire_jobs)?;
            bind(
                &mut stmt,
                &[
                    (":queue", &queue),
                    (":now_ms", &now_ms),
                    (":limit", &EXPIRE_ON_DEQUEUE),
                    (":status_limit", &status_limit),
                ],
            )?;
            let mut rows = stmt.raw_query();
            while let Some(row) = rows.next().map_err(|e| connection_error(&e))? {
                let read = || -> rusqlite::Result<(i64, Option<String>, Option<i64>)> {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                };
                let (id, group, waiting) = read().map_err(|e| connection_error(&e))?;
                expired += 1;
                let Some(group) = group else { continue };
                let change = changes.entry(group).or_insert((0, 0));
                if waiting == Some(1) {
                    change.1 += 1;
                    push_json_int(&mut waited, id);
                } else {
                    change.0 += 1;
                }
            }
        }
        if expired == 0 {
            return Ok(());
        }
        let mut stmt = self.prepare(&statements.expiries_add)?;
        bind(&mut stmt, &[(":queue", &queue), (":count", &expired)])?;
        stmt.raw_execute().map_err(|e| connection_error(&e))?;
        if waited.len() > 1 {
            waited.push(']');
            let mut stmt = self.prepare(&statements.group_jobs_unwait)?;
            bind(&mut stmt, &[(":ids", &waited)])?;
            stmt.raw_execute().map_err(|e| connection_error(&e))?;
        }
        if changes.is_empty() {
            return Ok(());
        }
        let deltas: Vec<(&str, i64, i64)> = changes
            .iter()
            .map(|(g, &(left, gone))| (g.as_str(), -left, -gone))
            .collect();
        let rows = self.groups_settle(queue, concurrency, &deltas)?;
        self.groups_write(queue, &rows)
    }

    /// Whether the queue has a row in `groups` (`queue_has_groups.sql`).
    fn queue_has_groups(&self, queue: &str) -> Result<bool, ShardError> {
        let mut stmt = self.prepare(&self.options.statements.queue_has_groups)?;
        bind(&mut stmt, &[(":queue", &queue)])?;
        let mut rows = stmt.raw_query();
        Ok(rows.next().map_err(|e| connection_error(&e))?.is_some())
    }
}

/// What a group's `waiting` is set to when a job starts waiting in it: "some jobs may wait".
/// `waiting` is a bound, never below the group's waiting jobs (0: none waits), not a count: a
/// count changed, and its row was written, at every job that joined a busy group and at every
/// promotion; this value lets a group that stays busy keep its row unwritten. A file's
/// `group_jobs_waiting` index answers how many really wait (`group_counts.sql`). Files of
/// earlier builds hold exact counts, which are bounds too; and an earlier build reading this
/// value subtracts its promotions from it and still never reads zero while a job waits.
const WAITING_SOME: i64 = 1 << 40;

/// A row of `groups` (see `group_get.sql`); all zeros and None for a group without one.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct GroupRow {
    active: i64,
    waiting: i64,
    tokens: Option<f64>,
    refilled_at_ms: Option<i64>,
}

/// A group's row after a change (`Writer::groups_settle`), and as the file holds it.
type Settled<'g> = (&'g str, GroupRow, GroupRow);

/// Where each named parameter is bound in the statement; None for a name it does not use.
/// Where an ack statement takes one job's values (`Writer::prepare_ack`).
type AckPositions = [Option<usize>; 4];

/// Bind one acked job's values at the positions `prepare_ack` found.
fn bind_ack_item(
    stmt: &mut Statement<'_>,
    at: &AckPositions,
    item: &crate::queue::jobs::AckItem,
) -> Result<(), ShardError> {
    let values: [&dyn ToSql; 4] = [
        &item.priority,
        &item.local_id,
        &item.append_custom_status.as_str(),
        &item.retry_delay_ms,
    ];
    for (index, value) in at.iter().zip(values) {
        if let Some(index) = *index {
            stmt.raw_bind_parameter(index, value)
                .map_err(|e| connection_error(&e))?;
        }
    }
    Ok(())
}

fn positions<const N: usize>(
    stmt: &Statement<'_>,
    names: [&str; N],
) -> Result<[Option<usize>; N], ShardError> {
    let mut at = [None; N];
    for (slot, name) in at.iter_mut().zip(names) {
        *slot = stmt
            .parameter_index(name)
            .map_err(|e| connection_error(&e))?;
    }
    Ok(at)
}

/// Binds each named parameter the statement uses; names it does not use are skipped (as
/// Python's `sqlite3` does with a dict of parameters).
fn bind(stmt: &mut Statement<'_>, params: &[(&str, &dyn ToSql)]) -> Result<(), ShardError> {
    for (name, value) in params {
        if let Some(index) = stmt
            .parameter_index(name)
            .map_err(|e| connection_error(&e))?
        {
            stmt.raw_bind_parameter(index, value)
                .map_err(|e| connection_error(&e))?;
        }
    }
    Ok(())
}

/// `count` more jobs of `group` left it.
fn add_left(left: &mut RequestMap<String, i64>, group: String, count: i64) {
    *left.entry(group).or_insert(0) += count;
}

/// Most ranges a claim or an ack goes in by range (`id_runs`), not by its list of ids.
const MAX_ID_RUNS: usize = 4;
/// Fewest ids per range, on average, for more than one range: a statement run per range costs
/// about what reaching a few ids by the list does.
const MIN_IDS_PER_RUN: usize = 4;

/// `ids` (repeats allowed) as the ranges `(first, last)` of consecutive ids they make, ascending,
/// when they are one range, or at most `MAX_ID_RUNS` of `MIN_IDS_PER_RUN` ids or more on average:
/// each range holds only ids of `ids`, so statements over those ranges of local ids reach them
/// and no other job. `None` otherwise, or for no id. A dequeue usually takes the jobs of one
/// enqueue or two (ids one statement made consecutive).
fn id_runs(ids: impl ExactSizeIterator<Item = i64>) -> Option<Vec<(i64, i64)>> {
    let mut sorted: Vec<i64> = ids.collect();
    sorted.sort_unstable();
    sorted.dedup();
    let distinct = sorted.len();
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for id in sorted {
        if let Some((_, last)) = runs.last_mut() {
            if last.checked_add(1) == Some(id) {
                *last = id;
                continue;
            }
        }
        if runs.len() == MAX_ID_RUNS {
            return None;
        }
        runs.push((id, id));
    }
    let few = runs.len() == 1 || distinct >= MIN_IDS_PER_RUN * runs.len();
    (!runs.is_empty() && few).then_some(runs)
}

/// Appends `value` to a JSON array of integers still open (`[` and what came before).
fn push_json_int(list: &mut String, value: i64) {
    if list.len() > 1 {
        list.push(',');
    }
    let _ = write!(list, "{value}");
}

/// Binds value `value` of a dedup key's record (key, priority, local id, held until) of `queue`,
/// in `RowStatements`' order of `dedup_records` and `dedup_records_fresh`.
fn bind_dedup_record(
    queue: &str,
) -> impl Fn(&mut Statement<'_>, usize, &(&str, i64, i64, i64), usize) -> rusqlite::Result<()> + '_
{
    move |stmt, at, row, value| match value {
        0 => stmt.raw_bind_parameter(at, queue),
        1 => stmt.raw_bind_parameter(at, row.0),
        2 => stmt.raw_bind_parameter(at, row.1),
        3 => stmt.raw_bind_parameter(at, row.2),
        _ => stmt.raw_bind_parameter(at, row.3),
    }
}

/// `strings` as a JSON array of strings (for `json_each`): quotes, backslashes and control
/// characters escaped, everything else as it is (JSON text is UTF-8).
fn json_strings<'a>(strings: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (n, s) in strings.enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_string(&mut out, s);
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string: quotes, backslashes and control characters escaped,
/// everything else as it is (JSON text is UTF-8).
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The statements timed by the writers that time theirs (`ShardOptions::profile_path`), by
/// text, over the whole process: how often each ran and its nanoseconds in all, as `SQLite`'s
/// profile events measure them (from its first step to its reset). A bench's instrument
/// (`benches/sqlite_statement_time.py`), not the server's: a writer that times its statements
/// takes this lock once per statement.
static STATEMENT_TIMES: Mutex<Option<HashMap<String, (u64, u64)>>> = Mutex::new(None);

fn record_statement_time(event: rusqlite::trace::TraceEvent<'_>) {
    let rusqlite::trace::TraceEvent::Profile(stmt, took) = event else {
        return;
    };
    let sql = stmt.sql();
    let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    let mut times = STATEMENT_TIMES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let times = times.get_or_insert_with(HashMap::new);
    if let Some((runs, total)) = times.get_mut(sql.as_ref()) {
        *runs += 1;
        *total = total.saturating_add(ns);
    } else {
        times.insert(sql.into_owned(), (1, ns));
    }
}

/// Writes every statement timed so far in this process to `path`, as a JSON array of
/// `{"sql": text, "runs": n, "ns": total}` (each writer that ends writes them all, so the last
/// one's file holds every shard's). A failed write is reported on stderr and changes nothing else.
fn write_statement_times(path: &std::path::Path) {
    let mut out = String::from("[");
    {
        let times = STATEMENT_TIMES
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (sql, (runs, ns)) in times.iter().flatten() {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str("\n{\"sql\": ");
            json_string(&mut out, sql);
            let _ = write!(out, ", \"runs\": {runs}, \"ns\": {ns}}}");
        }
    }
    out.push_str("\n]\n");
    if let Err(e) = std::fs::write(path, out) {
        eprintln!(
            "pinlater: cannot write the statement times to {}: {e}",
            path.display()
        );
    }
}

/// The version of the `SQLite` library linked (the system one: see the module docs).
#[must_use]
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}

fn connection_error(e: &rusqlite::Error) -> ShardError {
    ShardError::Connection(e.to_string())
}

/// The first `limit` characters of `s` (Python's `s[:limit]`).
fn truncate_chars(s: &str, limit: usize) -> &str {
    match s.char_indices().nth(limit) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_runs_hold_the_ids_and_no_other() {
        let runs = |ids: &[i64]| id_runs(ids.iter().copied());
        assert_eq!(runs(&[]), None);
        assert_eq!(runs(&[7]), Some(vec![(7, 7)]));
        assert_eq!(runs(&[3, 1, 2]), Some(vec![(1, 3)]));
        assert_eq!(runs(&[2, 1, 2, 1]), Some(vec![(1, 2)]), "repeats allowed");
        assert_eq!(
            runs(&[1, 3]),
            None,
            "ranges of fewer than MIN_IDS_PER_RUN ids"
        );
        let two: Vec<i64> = (1..=4).chain(6..=9).collect();
        assert_eq!(runs(&two), Some(vec![(1, 4), (6, 9)]));
        let four: Vec<i64> = (0..16).map(|i| i + 2 * (i / 4)).collect();
        assert_eq!(runs(&four), Some(vec![(0, 3), (6, 9), (12, 15), (18, 21)]));
        let five: Vec<i64> = (0..20).map(|i| i + 2 * (i / 4)).collect();
        assert_eq!(runs(&five), None, "more than MAX_ID_RUNS");
        let ends: Vec<i64> = (0..4)
            .map(|i| i64::MIN + i)
            .chain((0..4).map(|i| i64::MAX - i))
            .collect();
        assert_eq!(
            runs(&ends),
            Some(vec![(i64::MIN, i64::MIN + 3), (i64::MAX - 3, i64::MAX)])
        );
        // every id of every run is one of the ids, and every id is in a run
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..2000 {
            let ids: Vec<i64> = (0..(x % 30))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    i64::try_from(x % 24).unwrap()
                })
                .collect();
            if let Some(found) = runs(&ids) {
                let covered: Vec<i64> = found.iter().flat_map(|&(a, b)| a..=b).collect();
                let mut want = ids.clone();
                want.sort_unstable();
                want.dedup();
                assert_eq!(covered, want, "{ids:?}");
                assert!(
                    found.len() == 1
                        || (found.len() <= MAX_ID_RUNS
                            && want.len() >= MIN_IDS_PER_RUN * found.len())
                );
            }
        }
    }

    #[test]
    fn json_strings_escape_what_json_needs() {
        let keys = [
            "a",
            "q\"uote",
            "back\\slash",
            "nl\n\u{1}",
            "\u{e9}\u{2603}",
            "",
        ];
        let json = json_strings(keys.iter().copied());
        assert_eq!(
            json,
            "[\"a\",\"q\\\"uote\",\"back\\\\slash\",\"nl\\u000a\\u0001\",\"\u{e9}\u{2603}\",\"\"]"
        );
        let conn = Connection::open_in_memory().unwrap();
        let mut stmt = conn.prepare("SELECT value FROM json_each(?1)").unwrap();
        let back: Vec<String> = stmt
            .query_map([&json], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, keys);
    }

    #[test]
    fn truncates_by_characters() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("abc", 5), "abc");
        assert_eq!(truncate_chars("", 0), "");
    }

    fn sql(name: &str) -> String {
        let path = format!(
            "{}/python/pinlater/backends/embedded/sql/{name}.sql",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    fn options(path: &std::path::Path) -> ShardOptions {
        ShardOptions {
            path: path.to_path_buf(),
            synchronous: "NORMAL".into(),
            busy_timeout_ms: 1000,
            group_max_ops: 64,
            custom_status_limit: 3,
            reserved_prefix: "~r|".into(),
            statements: Statements {
                queue_get: sql("queue_get"),
                enqueue_jobs: sql("enqueue_jobs"),
                last_job_id: sql("last_job_id"),
                dequeue_jobs_dry_run: sql("dequeue_jobs_dry_run"),
                dequeue_rows: sql("dequeue_rows"),
                dequeue_claim_rows: sql("dequeue_claim_rows"),
                dequeue_claim_range: sql("dequeue_claim_range"),
                ack_succeeded_many: sql("ack_succeeded_many"),
                ack_succeeded_range: sql("ack_succeeded_range"),
                ack_failed: sql("ack_failed"),
                dedup_holders: sql("dedup_holders"),
                dedup_records: sql("dedup_records"),
                dedup_records_fresh: sql("dedup_records_fresh"),
                next_job_id: sql("next_job_id"),
                enqueue_keyed_jobs: sql("enqueue_keyed_jobs"),
                groups_get: sql("groups_get"),
                groups_put: sql("groups_put"),
                groups_forget: sql("groups_forget"),
                groups_unwait_oldest: sql("groups_unwait_oldest"),
                groups_first_waiting: sql("groups_first_waiting"),
                jobs_promote: sql("jobs_promote"),
                group_jobs_record: sql("group_jobs_record"),
                group_jobs_of: sql("group_jobs_of"),
                count_in_progress: sql("count_in_progress"),
                queue_has_groups: sql("queue_has_groups"),
                ack_failed_grouped: sql("ack_failed_grouped"),
                ack_failed_expire: sql("ack_failed_expire"),
                expiries_touch: sql("expiries_touch"),
                expiries_add: sql("expiries_add"),
                expire_jobs: sql("expire_jobs"),
                group_jobs_unwait: sql("group_jobs_unwait"),
            },
            profile_path: None,
        }
    }

    /// A fresh shard file in the temp directory (`name` and the process id), with the schema
    /// and queue `q` of `priorities` priorities, and a connection to it for the test's reads.
    fn fresh_file(name: &str, priorities: i64) -> (std::path::PathBuf, Connection) {
        let path =
            std::env::temp_dir().join(format!("pinlater-{name}-{}.sqlite3", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let setup = Connection::open(&path).unwrap();
        setup.execute_batch(&sql("schema")).unwrap();
        setup
            .execute(
                "INSERT INTO queues VALUES ('q', ?1, 0)",
                rusqlite::params![priorities],
            )
            .unwrap();
        (path, setup)
    }

    /// `op` run by `shard`, whose completions come down `rx`: its answer.
    fn answer(shard: &SqliteShard<()>, rx: &Receiver<Vec<((), Outcome)>>, op: Op) -> Answer {
        shard.submit((), op).unwrap();
        rx.recv().unwrap().pop().unwrap().1.unwrap()
    }

    /// The shard on `path`, its completions sent down the channel returned.
    fn open_shard<T: Send + 'static>(
        path: &std::path::Path,
        gate: Arc<WriteGate>,
    ) -> (SqliteShard<T>, Receiver<Vec<(T, Outcome)>>) {
        let (tx, rx) = channel();
        let shard = SqliteShard::open(
            options(path),
            gate,
            Box::new(move |done| tx.send(done).unwrap()),
        )
        .unwrap();
        (shard, rx)
    }

    /// A `NORMAL` shard on `path` whose writer asks for checkpoints `at`.
    fn open_checkpointing(
        path: &std::path::Path,
        at: CheckpointAt,
    ) -> (SqliteShard<i32>, Receiver<Vec<(i32, Outcome)>>) {
        let (tx, rx) = channel();
        let complete: Complete<i32> = Box::new(move |done| tx.send(done).unwrap());
        let gate = Arc::new(WriteGate::default());
        let shard = SqliteShard::start(options(path), gate, complete, None, at).unwrap();
        (shard, rx)
    }

    /// Enqueues a job of 2 KiB (its own commit) and waits for the answer.
    fn commit_one(shard: &SqliteShard<i32>, rx: &Receiver<Vec<(i32, Outcome)>>) {
        shard.submit(0, one_job(&[7; 2048])).unwrap();
        let done = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(matches!(done[0].1, Ok(Answer::Ids(_))), "{:?}", done[0].1);
    }

    fn wal_bytes(path: &std::path::Path) -> u64 {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(wal).unwrap().len()
    }

    /// Commits until `done` holds, or fails after 30 s.
    fn commit_until(
        shard: &SqliteShard<i32>,
        rx: &Receiver<Vec<(i32, Outcome)>>,
        what: &str,
        done: impl Fn(&SqliteShard<i32>) -> bool,
    ) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done(shard) {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            commit_one(shard, rx);
        }
    }

    #[test]
    fn the_checkpointer_copies_the_wal_and_the_writer_starts_it_over() {
        let (path, setup) = fresh_file("ckpt", 1);
        let at = CheckpointAt {
            pages: 60,
            fallback: i32::MAX,
            copier: Copier::Thread,
        };
        let (shard, rx) = open_checkpointing(&path, at);
        commit_until(&shard, &rx, "a copy", |s| s.checkpoints().0 >= 1);
        let frames = shard.checkpoints.copied_frames.load(Ordering::Relaxed);
        assert!(frames >= 60, "the checkpointer copied {frames} frames");
        // The commit after the copy finishes it; the one after that starts the WAL over.
        commit_until(&shard, &rx, "a finish", |s| s.checkpoints().1 >= 1);
        assert_eq!(
            shard.checkpoints().2,
            0,
            "no fallback: the finish is no fallback"
        );
        commit_one(&shard, &rx);
        let size = wal_bytes(&path);
        assert!(size >= 60 * 4096, "the WAL held the pages copied: {size}");
        for _ in 0..5 {
            commit_one(&shard, &rx); // about 4 pages each, written over the WAL's first ones
        }
        assert_eq!(
            wal_bytes(&path),
            size,
            "the WAL grew: it did not start over"
        );
        shard.close();
        assert_eq!(
            jobs_in(&setup),
            int(&setup, "SELECT max(local_id) FROM jobs")
        );
    }

    /// `copy_passes` over scripted passes: the frames and the passes it ran.
    fn scripted(passes: &[Option<(i64, i64)>]) -> Option<(u64, usize)> {
        let mut script = passes.iter().copied();
        copy_passes(|| script.next().expect("a pass beyond the script"))
    }

    #[test]
    fn copy_passes_stop_when_the_wal_or_the_copy_stands_still() {
        // No commit during the second pass: it synced the file.
        assert_eq!(scripted(&[Some((90, 90)), Some((90, 90))]), Some((90, 2)));
        // A commit during each of the first passes, none during the third.
        let settling = [
            Some((90, 90)),
            Some((94, 94)),
            Some((97, 97)),
            Some((97, 97)),
        ];
        assert_eq!(scripted(&settling), Some((97, 4)));
        // Commits go on, but a reader's snapshot holds the copy at 40 frames: one pass more
        // would copy nothing again.
        let held = [Some((90, 40)), Some((94, 40)), Some((99, 40))];
        assert_eq!(scripted(&held), Some((40, 2)));
        // A writer that commits during every pass: at most COPY_PASSES.
        let busy: Vec<_> = (0..COPY_PASSES)
            .map(|i| {
                let log = 100 + i64::try_from(i).unwrap();
                Some((log, log))
            })
            .collect();
        assert_eq!(scripted(&busy), Some((115, COPY_PASSES)));
        // A failed pass fails the copy.
        assert_eq!(scripted(&[Some((90, 90)), None]), None);
    }

    #[test]
    fn a_readers_snapshot_holds_the_copy_back_and_the_passes_stop() {
        let (path, setup) = fresh_file("ckpt-reader", 1);
        let at = CheckpointAt {
            pages: i32::MAX, // never woken: the test copies
            fallback: i32::MAX,
            copier: Copier::Thread,
        };
        let (shard, rx) = open_checkpointing(&path, at);
        commit_one(&shard, &rx);
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let seen: i64 = reader
            .query_row("SELECT count(*) FROM jobs", [], |row| row.get(0))
            .unwrap();
        for _ in 0..5 {
            commit_one(&shard, &rx);
        }
        let checkpointer = open_checkpointer(&options(&path)).unwrap();
        let held = checkpoint_passive(&checkpointer.conn).unwrap();
        let mut logs = Vec::new();
        let copied = copy_passes(|| {
            commit_one(&shard, &rx); // a commit during every pass
            let pass = checkpoint_passive(&checkpointer.conn);
            logs.extend(pass.map(|(log, _)| log));
            pass
        });
        let (frames, passes) = copied.unwrap();
        assert_eq!(passes, 2, "passes after the copy stood still at the reader");
        assert!(
            logs[1] > logs[0],
            "the WAL grew during the passes: {logs:?}"
        );
        assert_eq!(
            i64::try_from(frames).unwrap(),
            held.1,
            "no frame past the reader's snapshot copied"
        );
        assert!(held.1 < held.0, "the reader held frames back: {held:?}");
        reader.execute_batch("COMMIT").unwrap();
        assert_eq!(seen, 1);
        shard.close();
        assert_eq!(jobs_in(&setup), 8); // 1 + 5 + one per pass
    }

    /// After 150 commits with no copy ever made: the writer checkpointed past the fallback mark
    /// on its own, so the WAL stayed small, and every job is in the file.
    fn the_writer_checkpointed_alone(
        shard: &SqliteShard<i32>,
        path: &std::path::Path,
        setup: &Connection,
    ) {
        let (copied, by_writer, fallbacks) = shard.checkpoints();
        assert_eq!(copied, 0);
        assert!(by_writer >= 2, "the writer checkpointed {by_writer} times");
        assert_eq!(fallbacks, by_writer, "each one past the fallback mark");
        let size = wal_bytes(path);
        assert!(size < 100 * 4120, "the WAL grew to {size} bytes");
        shard.close();
        assert_eq!(jobs_in(setup), 150);
    }

    #[test]
    fn the_writer_checkpoints_itself_when_no_copy_comes() {
        let (path, setup) = fresh_file("ckpt-fallback", 1);
        let at = CheckpointAt {
            pages: 20,
            fallback: 60,
            copier: Copier::Never, // woken once, never copies
        };
        let (shard, rx) = open_checkpointing(&path, at);
        for _ in 0..150 {
            commit_one(&shard, &rx); // about 600 pages in all
        }
        the_writer_checkpointed_alone(&shard, &path, &setup);
    }

    #[test]
    fn the_writer_checkpoints_itself_when_every_copy_fails() {
        let (path, setup) = fresh_file("ckpt-failing", 1);
        let at = CheckpointAt {
            pages: 20,
            fallback: 60,
            copier: Copier::Failing,
        };
        let (shard, rx) = open_checkpointing(&path, at);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for _ in 0..150 {
            // About 4 pages each, 600 in all; each wake answered (failed) before the next
            // commit, however loaded the machine.
            commit_one(&shard, &rx);
            while shard.checkpoints.state.load(Ordering::Acquire) == CHECKPOINT_COPYING {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a wake never answered"
                );
                std::thread::yield_now();
            }
        }
        the_writer_checkpointed_alone(&shard, &path, &setup);
    }

    fn one_job(body: &[u8]) -> Op {
        Op::Enqueue {
            queue: "q".into(),
            jobs: Box::new(vec![NewJob {
                priority: 1,
                body: body.to_vec(),
                run_after_ms: 0,
                attempts_allowed: 1,
                custom_status: String::new(),
            }]),
            now_ms: 10,
        }
    }

    /// A `FULL` shard on `path` whose syncs are `sync`, its completions sent down the channel.
    fn open_synced(
        path: &std::path::Path,
        gate: Arc<WriteGate>,
        sync: SyncWal,
    ) -> (SqliteShard<i32>, Receiver<Vec<(i32, Outcome)>>) {
        let (tx, rx) = channel();
        let mut full = options(path);
        full.synchronous = "FULL".into();
        let complete: Complete<i32> = Box::new(move |done| tx.send(done).unwrap());
        let shard = SqliteShard::start(
            full,
            gate,
            complete,
            Some(SyncSource::With(sync)),
            CheckpointAt::default(),
        )
        .unwrap();
        (shard, rx)
    }

    /// The one integer `sql` reads.
    fn int(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |row| row.get(0)).unwrap()
    }

    fn jobs_in(conn: &Connection) -> i64 {
        int(conn, "SELECT count(*) FROM jobs")
    }

    #[test]
    fn full_answers_after_the_sync_and_commits_on_meanwhile() {
        let (path, setup) = fresh_file("synced", 1);
        let (started_tx, started) = channel::<()>();
        let (release, release_rx) = channel::<()>();
        let sync: SyncWal = Box::new(move || {
            started_tx.send(()).unwrap();
            // a failing assertion drops the shard (closing it) before `release`: not forever
            release_rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| std::io::Error::other("the test gave up"))
        });
        let (shard, rx) = open_synced(&path, Arc::new(WriteGate::default()), sync);
        shard.submit(1, one_job(b"a")).unwrap();
        started.recv().unwrap(); // the first group's sync is running
        shard.submit(2, one_job(b"b")).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while shard.commits() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer waited for the sync"
            );
            std::thread::yield_now();
        }
        assert_eq!(jobs_in(&setup), 2, "both groups committed");
        assert!(rx.try_recv().is_err(), "answered before its sync");
        release.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), vec![(1, Ok(Answer::Ids(vec![1])))]);
        started.recv().unwrap(); // the second group's own sync: it committed after the first began
        assert!(rx.try_recv().is_err(), "answered before its sync");
        release.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), vec![(2, Ok(Answer::Ids(vec![2])))]);
        assert_eq!(shard.syncs(), 2);
        shard.close();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_failed_sync_answers_its_successes_with_an_error() {
        let (path, setup) = fresh_file("sync-fails", 1);
        let mut calls = 0;
        let sync: SyncWal = Box::new(move || {
            calls += 1;
            if calls == 1 {
                Err(std::io::Error::other("disk gone"))
            } else {
                Ok(())
            }
        });
        let gate = Arc::new(WriteGate::default());
        gate.acquire(); // both requests in one group
        let (shard, rx) = open_synced(&path, Arc::clone(&gate), sync);
        shard.submit(1, one_job(b"a")).unwrap();
        let missing = Op::Enqueue {
            queue: "nope".into(),
            jobs: Box::new(Vec::<NewJob>::new()),
            now_ms: 10,
        };
        shard.submit(2, missing).unwrap();
        gate.release();
        let mut answered = Vec::new();
        while answered.len() < 2 {
            answered.extend(rx.recv().unwrap());
        }
        let (token, Err(ShardError::Connection(why))) = &answered[0] else {
            panic!("{answered:?}");
        };
        assert_eq!(*token, 1);
        assert!(
            why.contains("committed but syncing it to disk failed (disk gone)"),
            "{why}"
        );
        assert_eq!(
            answered[1],
            (2, Err(ShardError::QueueNotFound("nope".into()))),
            "its own error kept"
        );
        assert_eq!(jobs_in(&setup), 1, "the write stays committed");
        // a later sync may report done without what the failed one lost: no more writes
        shard.submit(3, one_job(b"b")).unwrap();
        let later = rx.recv().unwrap();
        let [(3, Err(ShardError::Connection(again)))] = &later[..] else {
            panic!("{later:?}");
        };
        assert_eq!(again, why);
        assert_eq!(jobs_in(&setup), 1, "nothing more written");
        assert_eq!(shard.syncs(), 1, "nothing more synced");
        shard.close();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn full_syncs_the_wal_of_the_file_a_link_names() {
        let (real, setup) = fresh_file("sync-linked", 1);
        let link = real.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let (tx, rx) = channel();
        let mut opts = options(&link);
        opts.synchronous = "FULL".into();
        let complete: Complete<i32> = Box::new(move |done| tx.send(done).unwrap());
        let shard = SqliteShard::open(opts, Arc::new(WriteGate::default()), complete).unwrap();
        shard.submit(1, one_job(b"x")).unwrap();
        assert_eq!(rx.recv().unwrap(), vec![(1, Ok(Answer::Ids(vec![1])))]);
        assert_eq!(shard.syncs(), 1);
        assert_eq!(jobs_in(&setup), 1);
        let mut beside_link = link.clone().into_os_string();
        beside_link.push("-wal");
        assert!(
            !std::path::Path::new(&beside_link).exists(),
            "SQLite keeps the WAL beside the file the link names"
        );
        shard.close();
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_file(&real);
    }

    #[test]
    fn full_syncs_the_wal_and_normal_never_does() {
        for level in ["FULL", "NORMAL"] {
            let (path, setup) = fresh_file(&format!("sync-{level}"), 1);
            let (tx, rx) = channel();
            let mut opts = options(&path);
            opts.synchronous = level.into();
            let complete: Complete<i32> = Box::new(move |done| tx.send(done).unwrap());
            let shard = SqliteShard::open(opts, Arc::new(WriteGate::default()), complete).unwrap();
            for token in 0..20 {
                shard.submit(token, one_job(b"x")).unwrap();
            }
            shard.close(); // answers every queued request first
            let answered: Vec<(i32, Outcome)> = rx.iter().flatten().collect();
            assert_eq!(answered.len(), 20, "{level}");
            assert!(
                answered.iter().all(|(_, o)| o.is_ok()),
                "{level}: {answered:?}"
            );
            assert_eq!(jobs_in(&setup), 20);
            if level == "FULL" {
                assert!(shard.syncs() >= 1, "{level}");
                assert!(shard.syncs() <= shard.commits(), "{level}");
            } else {
                assert_eq!(shard.syncs(), 0, "{level}");
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn runs_queued_requests_as_one_group_and_answers_each() {
        let (path, setup) = fresh_file("shard", 3);
        let gate = Arc::new(WriteGate::default());
        gate.acquire(); // hold the writer back until every request is queued
        let (shard, rx) = open_shard(&path, Arc::clone(&gate));
        let job = |body: &[u8]| NewJob {
            priority: 1,
            body: body.to_vec(),
            run_after_ms: 0,
            attempts_allowed: 2,
            custom_status: "long status".into(),
        };
        let enqueue = |queue: &str, jobs: Vec<NewJob>| Op::Enqueue {
            queue: queue.into(),
            jobs: Box::new(jobs),
            now_ms: 10,
        };
        shard
            .submit(1, enqueue("q", vec![job(b"a"), job(b"b")]))
            .unwrap();
        shard.submit(2, enqueue("nope", vec![job(b"c")])).unwrap();
        shard.submit(3, enqueue("q", vec![job(b"d")])).unwrap();
        gate.release();
        let mut answered = Vec::new();
        while answered.len() < 3 {
            answered.extend(rx.recv().unwrap());
        }
        assert!(shard.commits() <= 2, "queued requests share a commit");
        assert_eq!(answered[0], (1, Ok(Answer::Ids(vec![1, 2]))));
        assert_eq!(
            answered[1],
            (2, Err(ShardError::QueueNotFound("nope".into())))
        );
        assert_eq!(
            answered[2],
            (3, Ok(Answer::Ids(vec![3]))),
            "the failed request was undone alone"
        );
        shard
            .submit(
                4,
                Op::Dequeue {
                    queue: "q".into(),
                    priority: 1,
                    limit: 2,
                    claim: "c".into(),
                    now_ms: 20,
                    dry_run: false,
                    max_in_progress: None,
                    group_concurrency: 1,
                    max_bytes: i64::MAX,
                },
            )
            .unwrap();
        shard.close();
        let (token, outcome) = rx.recv().unwrap().pop().unwrap();
        assert_eq!(token, 4, "close answers what was queued");
        let Ok(Answer::Claimed(claimed)) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            claimed.iter().map(|j| j.local_id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        let status: String = setup
            .query_row(
                "SELECT custom_status FROM jobs WHERE local_id = 3",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(status, "lon", "custom status cut to the limit");
        assert!(shard.submit(5, enqueue("q", vec![])).is_err(), "closed");
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_request_stopped_half_way_through_a_statement_leaves_nothing() {
        // The hot statements run OR FAIL (no statement journal): the request's savepoint is
        // what takes back the rows a statement wrote before it stopped.
        let (path, setup) = fresh_file("half-way", 1);
        setup
            .execute_batch(
                "CREATE TRIGGER stop_at_b BEFORE INSERT ON jobs WHEN NEW.body = x'62' \
                 BEGIN SELECT RAISE(FAIL, 'no b'); END",
            )
            .unwrap();
        let gate = Arc::new(WriteGate::default());
        gate.acquire(); // both requests in one group
        let (shard, rx) = open_shard(&path, Arc::clone(&gate));
        let enqueue = |bodies: &[&[u8]]| Op::Enqueue {
            queue: "q".into(),
            jobs: Box::new(
                bodies
                    .iter()
                    .map(|body| NewJob {
                        priority: 1,
                        body: body.to_vec(),
                        run_after_ms: 0,
                        attempts_allowed: 1,
                        custom_status: String::new(),
                    })
                    .collect::<Vec<_>>(),
            ),
            now_ms: 10,
        };
        shard.submit(1, enqueue(&[b"a", b"b", b"c"])).unwrap(); // one statement of 2, then 1
        shard.submit(2, enqueue(&[b"d"])).unwrap();
        gate.release();
        let mut answered = Vec::new();
        while answered.len() < 2 {
            answered.extend(rx.recv().unwrap());
        }
        assert!(
            matches!(&answered[0], (1, Err(ShardError::Connection(why))) if why.contains("no b")),
            "{:?}",
            answered[0]
        );
        assert!(
            matches!(answered[1], (2, Ok(Answer::Ids(_)))),
            "{:?}",
            answered[1]
        );
        assert_eq!(shard.commits(), 1, "one group");
        shard.close();
        let bodies: Vec<Vec<u8>> = setup
            .prepare("SELECT body FROM jobs ORDER BY local_id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            bodies,
            [b"d".to_vec()],
            "a, written before b stopped, is gone"
        );
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_success_keeps_or_appends_to_the_status_within_the_limit() {
        // The limit here is 3 (`options`). A success with no status and nothing to append
        // skips the cut; any other status is cut as before, even with nothing to append: one
        // longer than the limit or holding a NUL (written by another build, say) is shortened.
        let (path, setup) = fresh_file("ack-status", 1);
        let (shard, rx) = open_shard(&path, Arc::new(WriteGate::default()));
        let call = |op: Op| answer(&shard, &rx, op);
        let job = |status: &str| NewJob {
            priority: 1,
            body: b"x".to_vec(),
            run_after_ms: 0,
            attempts_allowed: 1,
            custom_status: status.into(),
        };
        let enqueued = call(Op::Enqueue {
            queue: "q".into(),
            jobs: Box::new(vec![job("ab"), job("ab"), job("ab"), job(""), job("")]),
            now_ms: 10,
        });
        assert_eq!(enqueued, Answer::Ids(vec![1, 2, 3, 4, 5]));
        setup
            .execute_batch(
                "UPDATE jobs SET custom_status = 'toolong' WHERE local_id = 2; \
                 UPDATE jobs SET custom_status = 'a' || char(0) || 'b' WHERE local_id = 5",
            )
            .unwrap();
        let claimed = call(Op::Dequeue {
            queue: "q".into(),
            priority: 1,
            limit: 5,
            claim: "c".into(),
            now_ms: 20,
            dry_run: false,
            max_in_progress: None,
            group_concurrency: 1,
            max_bytes: i64::MAX,
        });
        assert!(
            matches!(&claimed, Answer::Claimed(jobs) if jobs.len() == 5),
            "{claimed:?}"
        );
        let item = |local_id: i64, append: &str| crate::queue::jobs::AckItem {
            priority: 1,
            local_id,
            append_custom_status: append.into(),
            retry_delay_ms: 0,
        };
        let acks = AckGroup {
            succeeded: vec![
                item(1, ""),
                item(2, ""),
                item(3, "cd"),
                item(4, ""),
                item(5, ""),
            ],
            failed: vec![],
        };
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(acks),
            now_ms: 30,
            group_concurrency: 1,
        });
        assert_eq!(acked, Answer::Acked);
        shard.close();
        let statuses: Vec<(String, i64)> = setup
            .prepare("SELECT custom_status, state FROM jobs ORDER BY local_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let succeeded = |status: &str| (status.to_owned(), 2);
        assert_eq!(
            statuses,
            [
                succeeded("ab"),
                succeeded("too"),
                succeeded("abc"),
                succeeded(""),
                succeeded("a"), // cut at its NUL, as substr cuts it
            ]
        );
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_group_hands_out_one_job_at_a_time_and_an_ack_promotes_the_next() {
        let (path, setup) = fresh_file("groups", 3);
        let (shard, rx) = open_shard(&path, Arc::new(WriteGate::default()));
        let call = |op: Op| answer(&shard, &rx, op);
        let job = |priority: i64| NewJob {
            priority,
            body: b"b".to_vec(),
            run_after_ms: 0,
            attempts_allowed: 1,
            custom_status: String::new(),
        };
        let keys = |group: Option<&str>| JobKeys {
            key: None,
            window_ms: 0,
            group: group.map(str::to_owned),
            expire_at_ms: None,
        };
        let placed = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job(2), job(1), job(1)]),
            keys: vec![keys(Some("g")), keys(Some("g")), keys(None)],
            now_ms: 10,
            group_concurrency: 1,
        });
        assert_eq!(
            placed,
            Answer::Placed(vec![(2, 1, false), (1, 2, false), (1, 3, false)])
        );
        let dequeue = |priority: i64, cap: Option<i64>| Op::Dequeue {
            queue: "q".into(),
            priority,
            limit: 10,
            claim: "c".into(),
            now_ms: 40,
            dry_run: false,
            max_in_progress: cap,
            group_concurrency: 1,
            max_bytes: i64::MAX,
        };
        let ids = |answer: Answer| match answer {
            Answer::Claimed(jobs) => jobs.iter().map(|j| j.local_id).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            ids(call(dequeue(1, None))),
            vec![3],
            "job 2 waits behind job 1"
        );
        assert_eq!(ids(call(dequeue(2, None))), vec![1]);
        let acks = AckGroup {
            succeeded: vec![],
            failed: vec![crate::queue::jobs::AckItem {
                priority: 2,
                local_id: 1,
                append_custom_status: String::new(),
                retry_delay_ms: 0,
            }],
        };
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(acks),
            now_ms: 30,
            group_concurrency: 1,
        });
        assert_eq!(acked, Answer::Acked);
        assert_eq!(
            ids(call(dequeue(1, None))),
            vec![2],
            "a final failure promotes the next"
        );
        let more = call(Op::Enqueue {
            queue: "q".into(),
            jobs: Box::new(vec![job(1)]),
            now_ms: 40,
        });
        assert_eq!(more, Answer::Ids(vec![4]));
        assert!(
            ids(call(dequeue(1, Some(2)))).is_empty(),
            "two in progress: at the cap"
        );
        assert_eq!(ids(call(dequeue(1, Some(3)))), vec![4], "room for one");
        shard.close();
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    #[allow(clippy::too_many_lines)] // one scenario, step by step
    fn keys_written_before_a_probe_give_way_to_a_probe_when_one_has_a_record() {
        let (path, setup) = fresh_file("keys-first", 1);
        let (shard, rx) = open_shard(&path, Arc::new(WriteGate::default()));
        let call = |op: Op| answer(&shard, &rx, op);
        let enqueue = |keys: &[Option<&str>], now_ms: i64| {
            let job = NewJob {
                priority: 1,
                body: b"b".to_vec(),
                run_after_ms: 0,
                attempts_allowed: 1,
                custom_status: String::new(),
            };
            let keys = keys.iter().map(|key| JobKeys {
                key: key.map(str::to_owned),
                window_ms: 0,
                group: None,
                expire_at_ms: None,
            });
            call(Op::EnqueueKeyed {
                queue: "q".into(),
                jobs: Box::new(vec![job; keys.len()]),
                keys: keys.collect(),
                now_ms,
                group_concurrency: 1,
            })
        };
        let records = || {
            let mut stmt = setup
                .prepare("SELECT dedup_key, local_id FROM dedup_keys ORDER BY dedup_key")
                .unwrap();
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)));
            rows.unwrap()
                .map(Result::unwrap)
                .collect::<Vec<(String, i64)>>()
        };
        // New keys, an unkeyed job between them and a key repeated: written first, each record
        // naming the id its job got.
        let placed = enqueue(&[Some("a"), None, Some("b"), Some("a")], 10);
        assert_eq!(
            placed,
            Answer::Placed(vec![
                (1, 1, false),
                (1, 2, false),
                (1, 3, false),
                (1, 1, true)
            ])
        );
        assert_eq!(records(), [("a".into(), 1), ("b".into(), 3)]);
        // A new key before a held one: the write stops at "a" and is undone, and the probe
        // places both.
        let placed = enqueue(&[Some("c"), Some("a"), None], 20);
        assert_eq!(
            placed,
            Answer::Placed(vec![(1, 4, false), (1, 1, true), (1, 5, false)])
        );
        assert_eq!(
            records(),
            [("a".into(), 1), ("b".into(), 3), ("c".into(), 4)]
        );
        // Job 1 ends: its key is free again and goes to the next job that asks for it.
        let claimed = call(Op::Dequeue {
            queue: "q".into(),
            priority: 1,
            limit: 1,
            claim: "c".into(),
            now_ms: 30,
            dry_run: false,
            max_in_progress: None,
            group_concurrency: 1,
            max_bytes: i64::MAX,
        });
        assert!(
            matches!(&claimed, Answer::Claimed(jobs) if jobs[0].local_id == 1),
            "{claimed:?}"
        );
        let acks = AckGroup {
            succeeded: vec![crate::queue::jobs::AckItem {
                priority: 1,
                local_id: 1,
                append_custom_status: String::new(),
                retry_delay_ms: 0,
            }],
            failed: vec![],
        };
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(acks),
            now_ms: 40,
            group_concurrency: 1,
        });
        assert_eq!(acked, Answer::Acked);
        // The queue's keys had records: its next enqueues probe first, each placed as the
        // records say; once that many found none, it writes first again.
        assert_eq!(shard.keyed_enqueues(), (1, 1, 1));
        let mut id = 5;
        for round in 0..PROBES_AFTER_RECORDS {
            id += 1;
            let key = format!("new-{round}");
            let placed = enqueue(&[Some(&key), Some(&key)], 50);
            assert_eq!(placed, Answer::Placed(vec![(1, id, false), (1, id, true)]));
        }
        assert_eq!(shard.keyed_enqueues(), (1, 1, 9), "each probed");
        let placed = enqueue(&[Some("new-0"), Some("a")], 60);
        assert_eq!(
            placed,
            Answer::Placed(vec![(1, 6, true), (1, id + 1, false)]),
            "a key whose job ended is taken again"
        );
        assert_eq!(shard.keyed_enqueues(), (1, 2, 10), "written first, refused");
        let placed = enqueue(&[Some("a")], 70);
        assert_eq!(placed, Answer::Placed(vec![(1, id + 1, true)]));
        assert_eq!(shard.keyed_enqueues(), (1, 2, 11), "probed first");
        assert_eq!(
            records().last(),
            Some(&("new-7".into(), id)),
            "the probed keys' records"
        );
        assert!(records().contains(&("a".into(), id + 1)));
        shard.close();
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    #[allow(clippy::too_many_lines)] // one scenario, step by step
    fn one_call_joins_and_releases_many_groups_at_once() {
        let (path, setup) = fresh_file("many-groups", 1);
        let (shard, rx) = open_shard(&path, Arc::new(WriteGate::default()));
        let call = |op: Op| answer(&shard, &rx, op);
        let job = || NewJob {
            priority: 1,
            body: b"b".to_vec(),
            run_after_ms: 0,
            attempts_allowed: 1,
            custom_status: String::new(),
        };
        // 3 jobs in "a", 3 in "b \"q\"", one in "c", 2 ungrouped, each with its dedup key (every
        // other one with a window): ids 1..=9 in this order.
        let groups = ["a", "b \"q\"", "a", "c", "b \"q\"", "a", "", "b \"q\"", ""];
        let keys: Vec<JobKeys> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| JobKeys {
                key: Some(format!("k{i}")),
                window_ms: if i % 2 == 0 { 1000 } else { 0 },
                group: (!g.is_empty()).then(|| (*g).to_owned()),
                expire_at_ms: None,
            })
            .collect();
        let placed = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job(); groups.len()]),
            keys: keys.clone(),
            now_ms: 10,
            group_concurrency: 2,
        });
        let expected: Vec<(i64, i64, bool)> = (1..=9).map(|id| (1, id, false)).collect();
        assert_eq!(placed, Answer::Placed(expected));
        let states = || {
            let mut stmt = setup
                .prepare("SELECT local_id, state FROM jobs ORDER BY local_id")
                .unwrap();
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            rows.map(Result::unwrap).collect::<Vec<(i64, i64)>>()
        };
        // (group, active jobs, its bound of waiting ones above zero: see WAITING_SOME)
        let counts = || {
            let mut stmt = setup
                .prepare("SELECT group_key, active, waiting > 0 FROM groups ORDER BY group_key")
                .unwrap();
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap();
            rows.map(Result::unwrap)
                .collect::<Vec<(String, i64, bool)>>()
        };
        // Two of each group active, the third waiting (state -1).
        let w = WAITING;
        assert_eq!(
            states(),
            [
                (1, 0),
                (2, 0),
                (3, 0),
                (4, 0),
                (5, 0),
                (6, w),
                (7, 0),
                (8, w),
                (9, 0)
            ]
        );
        assert_eq!(
            counts(),
            [
                ("a".into(), 2, true),
                ("b \"q\"".into(), 2, true),
                ("c".into(), 1, false)
            ]
        );
        // Held until the window's end, or 0 without a window (schema.sql: dedup_keys_windowed).
        let recorded: Vec<(i64, i64)> = setup
            .prepare("SELECT held_until_ms, count(*) FROM dedup_keys GROUP BY 1 ORDER BY 1")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(recorded, [(0, 4), (1010, 5)]);
        // The same keys again: every job is deduplicated onto its holder, nothing moves.
        let again = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job(); groups.len()]),
            keys,
            now_ms: 20,
            group_concurrency: 2,
        });
        let expected: Vec<(i64, i64, bool)> = (1..=9).map(|id| (1, id, true)).collect();
        assert_eq!(again, Answer::Placed(expected));
        let claimed = call(Op::Dequeue {
            queue: "q".into(),
            priority: 1,
            limit: 100,
            claim: "c".into(),
            now_ms: 30,
            dry_run: false,
            max_in_progress: None,
            group_concurrency: 1,
            max_bytes: i64::MAX,
        });
        let Answer::Claimed(claimed) = claimed else {
            panic!("{claimed:?}")
        };
        let ids: Vec<i64> = claimed.iter().map(|j| j.local_id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 7, 9]);
        // One ack: a's 1 and 3, b's 2, c's 4 and ungrouped 7 succeed; each group promotes its
        // oldest waiting job into the room made, c (empty) is forgotten.
        let item = |local_id: i64| crate::queue::jobs::AckItem {
            priority: 1,
            local_id,
            append_custom_status: String::new(),
            retry_delay_ms: 0,
        };
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(AckGroup {
                succeeded: vec![item(1), item(3), item(2), item(4), item(7)],
                failed: vec![],
            }),
            now_ms: 40,
            group_concurrency: 2,
        });
        assert_eq!(acked, Answer::Acked);
        assert_eq!(
            states(),
            [
                (1, 2),
                (2, 2),
                (3, 2),
                (4, 2),
                (5, 1),
                (6, 0),
                (7, 2),
                (8, 0),
                (9, 1)
            ]
        );
        // a had room for two and promoted its one waiting job: none waits. b had room for one
        // and promoted one: more may wait, and its row was not written (its bound stays).
        assert_eq!(
            counts(),
            [("a".into(), 1, false), ("b \"q\"".into(), 2, true)]
        );
        let waiting = int(&setup, "SELECT count(*) FROM group_jobs WHERE waiting = 1");
        assert_eq!(waiting, 0);
        // b's next ack finds no job to promote and clears the bound; a job joining b then is
        // active at once, not held behind the bound.
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(AckGroup {
                succeeded: vec![item(5)],
                failed: vec![],
            }),
            now_ms: 50,
            group_concurrency: 2,
        });
        assert_eq!(acked, Answer::Acked);
        assert_eq!(
            counts(),
            [("a".into(), 1, false), ("b \"q\"".into(), 1, false)]
        );
        let one = |group: &str| JobKeys {
            key: None,
            window_ms: 0,
            group: Some(group.to_owned()),
            expire_at_ms: None,
        };
        let placed = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job(), job()]),
            keys: vec![one("b \"q\""), one("b \"q\"")],
            now_ms: 60,
            group_concurrency: 2,
        });
        assert_eq!(placed, Answer::Placed(vec![(1, 10, false), (1, 11, false)]));
        assert_eq!(states()[9..], [(10, 0), (11, w)]);
        assert_eq!(
            counts(),
            [("a".into(), 1, false), ("b \"q\"".into(), 2, true)]
        );
        // A window that ends at or before the epoch (a clock gone wrong) still ends above 0,
        // where the GC walks it.
        let early = JobKeys {
            key: Some("early".into()),
            window_ms: 5,
            group: None,
            expire_at_ms: None,
        };
        let placed = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job()]),
            keys: vec![early],
            now_ms: -10,
            group_concurrency: 2,
        });
        assert_eq!(placed, Answer::Placed(vec![(1, 12, false)]));
        let held = int(
            &setup,
            "SELECT held_until_ms FROM dedup_keys WHERE dedup_key = 'early'",
        );
        assert_eq!(held, 1);
        shard.close();
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn expiring_jobs_are_never_claimed_and_a_retry_past_the_expiry_expires() {
        let (path, setup) = fresh_file("expiry", 1);
        let (shard, rx) = open_shard(&path, Arc::new(WriteGate::default()));
        let call = |op: Op| answer(&shard, &rx, op);
        let job = || NewJob {
            priority: 1,
            body: b"b".to_vec(),
            run_after_ms: 0,
            attempts_allowed: 3,
            custom_status: String::new(),
        };
        let expiring = |at: i64| JobKeys {
            key: None,
            window_ms: 0,
            group: None,
            expire_at_ms: Some(at),
        };
        let placed = call(Op::EnqueueKeyed {
            queue: "q".into(),
            jobs: Box::new(vec![job(), job()]),
            keys: vec![expiring(100), expiring(1_000)],
            now_ms: 10,
            group_concurrency: 1,
        });
        assert_eq!(placed, Answer::Placed(vec![(1, 1, false), (1, 2, false)]));
        let Answer::Claimed(claimed) = call(Op::Dequeue {
            queue: "q".into(),
            priority: 1,
            limit: 10,
            claim: "c".into(),
            now_ms: 100,
            dry_run: false,
            max_in_progress: None,
            group_concurrency: 1,
            max_bytes: i64::MAX,
        }) else {
            panic!("not claimed")
        };
        assert_eq!(claimed.iter().map(|j| j.local_id).collect::<Vec<_>>(), [2]);
        let failed = crate::queue::jobs::AckItem {
            priority: 1,
            local_id: 2,
            append_custom_status: String::new(),
            retry_delay_ms: 900, // runs again at 1000: the expiry
        };
        let acked = call(Op::Ack {
            queue: "q".into(),
            acks: Box::new(AckGroup {
                succeeded: vec![],
                failed: vec![failed],
            }),
            now_ms: 100,
            group_concurrency: 1,
        });
        assert_eq!(acked, Answer::Acked);
        let rows: Vec<(i64, i64, String)> = setup
            .prepare("SELECT state, attempts_remaining, custom_status FROM jobs ORDER BY local_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expired = (3, 0, "expired".to_owned());
        assert_eq!(
            rows,
            [expired.clone(), expired],
            "one by the dequeue, one by the ack"
        );
        let count: i64 = setup
            .query_row("SELECT expired FROM expiries WHERE queue = 'q'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(count, 2);
        shard.close();
        drop(setup);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn gate_serves_in_order() {
        let gate = Arc::new(WriteGate::default());
        gate.acquire();
        let other = Arc::clone(&gate);
        let waiter = std::thread::spawn(move || {
            other.acquire();
            other.release();
        });
        gate.release();
        waiter.join().unwrap();
        gate.acquire(); // the third ticket is served after the waiter's
        gate.release();
    }
}
