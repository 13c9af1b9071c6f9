//! The `MySQL` store's hot path in Rust: enqueue, dequeue and ack of one shard, over the `mysql`
//! crate's blocking client, each statement and transaction as `backends/mysql/store.py` runs it.
//!
//! The SQL is the store's own files (`sql/*.sql`), handed over as text by Python (`queries.py`
//! strips their comments), with `{table}`/`{ids}`/`{rows}` filled and every `%s` replaced by a
//! literal written as `PyMySQL` writes the same parameter (`mysql_inserts.rs`): the server sees
//! the same bytes through the text protocol, in the same order; some go together in one round
//! trip (a multi-statement query): a claim's UPDATE with its SELECT, and an ack's UPDATEs with
//! their COMMIT (an ack may be repeated, so a COMMIT whose answer is lost is no worse than
//! before). An enqueue's COMMIT still goes alone, after its INSERTs answered: a connection lost
//! before then is known not to have committed. Sessions are set up as the Python pool sets them up
//! (TLS whenever the server offers it, `session_setup.sql`, autocommit off, `CLIENT_FOUND_ROWS`),
//! and `server_info.sql` is read on every new connection (id strategy, `max_allowed_packet`).
//!
//! Errors and retries follow `transactions.py`: a missing database or table is
//! `QueueNotFound`; deadlocks, lock wait timeouts and lost connections are retried
//! `num_auto_retries` times (deadlocks `DEADLOCK_RETRIES` more), then `Connection`; a failure to
//! connect is `Connection` after the
//! same retries. A connection that fails before COMMIT on its first use since it was last
//! pooled (a stale one, after a server restart) is replaced and the transaction run again once,
//! free; a connection lost during COMMIT of a transaction that must not be repeated (an
//! enqueue) is `Connection` with `maybe_applied`. Any connection failure makes every other
//! session drop its connection before next use (the pool's `discard_idle`).
//!
//! Job control (#18) as `expiry.py` keeps it: a dequeue skips jobs past their `expire_at` (a
//! predicate on the row its index walk reads anyway); a failure ack first expires the jobs whose
//! retry would come at or after their expiry, tallies them in a session variable and adds the
//! tally to the queue's expired count, fails the others (a cancelled job, attempts_remaining 0,
//! ends FAILED with the cancel word), and indexes the retried jobs that have an expiry again, all
//! in the ack's one round trip. A table without `expire_at` answers MySQL error 1054, which the
//! Python side turns into the queue's migration and the call again (`native_hot.py`).
//!
//! A queue's `maxInProgress` (the cap `dequeue_jobs` is handed per call) is kept as
//! `claim_cap.py` keeps it: the queue's claim lock row first, then a count of its `IN_PROGRESS`
//! jobs over every priority, then a claim of at most the room left, in one transaction; an
//! uncapped dequeue sends what it always sent.
//!
//! A `Session` is one connection and is used by one thread at a time; `Shared` is what the
//! sessions of one shard share. The threads and the Python side are in `py/store/mysql_shard.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql::consts::CapabilityFlags;
use mysql::prelude::Queryable;
use mysql::{Conn, DriverError, OptsBuilder, QueryResult, SslOpts, Text, Value};

use crate::queue::jobs::{within_bytes, AckGroup, ClaimedJob, NewJob};
use crate::store::decimal::push_int;
use crate::store::mysql_inserts::{push_datetime, push_quoted, Format, Row, Statements};

/// The server went away or the link broke (`pool.py`'s `LOST_CONNECTION_ERRORS`).
const LOST_CONNECTION_ERRORS: [u16; 6] = [2006, 2013, 2055, 1053, 1927, 4031];
/// Could not connect at all (`CONNECT_ERRORS`).
const CONNECT_ERRORS: [u16; 8] = [2002, 2003, 2005, 1040, 1044, 1045, 1129, 1130];
/// Rolled back, connection fine: deadlock, lock wait timeout.
const TRANSIENT_ERRORS: [u16; 2] = [DEADLOCK_ERROR, 1205];
/// `InnoDB` rolled the transaction back to break a deadlock.
const DEADLOCK_ERROR: u16 = 1213;
/// Times a transaction rolled back by a deadlock is run again beyond `num_auto_retries`
/// (`dedup_keys.py`'s `DEADLOCK_RETRIES`): a deadlock costs `InnoDB` nothing to detect and the
/// victim nothing to undo (no lock wait timeout was waited out), and under concurrent keyed
/// enqueues and dequeues on one shard they come often enough that the original's one retry let
/// some through to clients. A lock wait timeout gets none: each one waited a whole timeout.
const DEADLOCK_RETRIES: u32 = 3;
/// Unknown table.
const NO_TABLE_ERROR: u16 = 1146;
/// Unknown database, unknown table.
const NO_QUEUE_ERRORS: [u16; 2] = [1049, NO_TABLE_ERROR];
/// The LIKE pattern of the jobs tables' names (`names.JOBS_TABLE_PATTERN`).
const JOBS_TABLE_PATTERN: &str = "jobs\\_p%";
/// The code a connection failure without a server error number is reported with.
const LOST_CONNECTION: u16 = 2013;
/// `CR_CONN_HOST_ERROR`: the server could not be reached.
const CANT_CONNECT: u16 = 2003;
/// The most bytes one INSERT takes when the server's `max_allowed_packet` is not known yet.
const DEFAULT_MAX_ALLOWED_PACKET: u64 = 16 * 1024 * 1024;

/// The runs left to one transaction: `num_auto_retries` for any failure worth another attempt,
/// and `DEADLOCK_RETRIES` more for deadlocks alone.
struct Retries {
    left: u32,
    deadlocks: u32,
}

impl Retries {
    /// Takes a run for any failure, if one is left.
    fn spend(&mut self) -> bool {
        let some = self.left > 0;
        self.left -= u32::from(some);
        some
    }

    /// Takes a run for a failure with `MySQL` error `code`, a deadlock's from its own budget once
    /// the common one is spent.
    fn spend_on(&mut self, code: u16) -> bool {
        if self.spend() {
            return true;
        }
        let deadlock = code == DEADLOCK_ERROR && self.deadlocks > 0;
        self.deadlocks -= u32::from(deadlock);
        deadlock
    }
}

/// Worth another attempt (`RETRYABLE_ERRORS`).
fn retryable(code: u16) -> bool {
    LOST_CONNECTION_ERRORS.contains(&code)
        || TRANSIENT_ERRORS.contains(&code)
        || matches!(code, 2002 | 2003 | 1040)
}

/// The connection (or the server) is unusable (`is_connection_failure`).
fn connection_failure_code(code: u16) -> bool {
    LOST_CONNECTION_ERRORS.contains(&code)
        || CONNECT_ERRORS.contains(&code)
        || (2000..2100).contains(&code)
}

/// What a hot-path call fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The queue's database or table is missing.
    #[error("queue not found")]
    QueueNotFound,
    /// The shard could not be reached, or stopped answering, past the retries.
    #[error("{detail}")]
    Connection { detail: String, maybe_applied: bool },
    /// Deadlocks or lock wait timeouts past the retries: the shard answers, but other
    /// transactions held the rows (nothing was applied). Not a reason to take it for down.
    #[error("{0}")]
    Contention(String),
    /// A server error the store does not map (`PyMySQL` would raise it as it is).
    #[error("MySQL error {code}: {message}")]
    Server { code: u16, message: String },
    /// A priority no jobs table can have (1 to 127).
    #[error("priority {0} is not supported")]
    Priority(i64),
    /// A statement did not do what it must (a bug, or a server misreporting).
    #[error("{0}")]
    Internal(String),
}

/// How the ids of a multi-row INSERT are recovered (`inserts.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdStrategy {
    LastInsertId,
    Returning,
    PerRow,
}

impl IdStrategy {
    /// `last_insert_id`, `returning` or `per_row`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "last_insert_id" => Some(Self::LastInsertId),
            "returning" => Some(Self::Returning),
            "per_row" => Some(Self::PerRow),
            _ => None,
        }
    }
}

/// The store's SQL files, comments stripped (`queries.py`'s `Sql.text`).
#[derive(Debug, Clone, Default)]
pub struct SqlTexts {
    pub session_setup: String,
    pub server_info: String,
    pub enqueue_jobs: String,
    pub enqueue_jobs_returning: String,
    pub dequeue_jobs: String,
    pub select_claimed_jobs: String,
    pub peek_jobs: String,
    pub ack_succeeded_jobs: String,
    pub ack_failed_jobs: String,
    pub lock_claims: String,
    pub create_claim_lock_table: String,
    pub list_jobs_tables: String,
    pub count_in_progress_table: String,
    pub ack_expire_jobs: String,
    pub expiring_readd: String,
    pub expired_count_reset: String,
    pub expired_count_tally: String,
    pub expired_count_add_tallied: String,
}

/// One shard's connection settings and the store's options.
#[derive(Debug, Clone)]
pub struct Settings {
    pub shard: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// Connect, read and write timeout of the socket.
    pub timeout: Duration,
    pub num_auto_retries: u32,
    /// None: from the server's settings, as `default_insert_id_strategy` picks.
    pub insert_id_strategy: Option<IdStrategy>,
    /// `RESERVATION_PREFIX` of `backends/base.py`: jobs under a live reservation are skipped.
    pub reservation_prefix: String,
    pub custom_status_limit: usize,
    /// `CANCELLED` and `EXPIRED` of `backends/base.py`: the words `ended_status` appends.
    pub cancelled_word: String,
    pub expired_word: String,
    pub sql: SqlTexts,
}

/// What the store needs to know about the server (`server_info.sql`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub version: String,
    pub autoinc_lock_mode: i64,
    pub auto_increment_increment: i64,
    pub max_allowed_packet: u64,
}

impl ServerInfo {
    fn consecutive_insert_ids(&self) -> bool {
        matches!(self.autoinc_lock_mode, 0 | 1)
    }

    fn supports_insert_returning(&self) -> bool {
        if !self.version.to_lowercase().contains("mariadb") {
            return false;
        }
        let numbers = self.version.split('-').next().unwrap_or("");
        let mut parts = numbers.split('.').map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= (10, 5),
            _ => false,
        }
    }

    fn default_strategy(&self) -> IdStrategy {
        if self.consecutive_insert_ids() {
            IdStrategy::LastInsertId
        } else if self.supports_insert_returning() {
            IdStrategy::Returning
        } else {
            IdStrategy::PerRow
        }
    }
}

/// What the sessions of one shard share.
#[derive(Debug)]
pub struct Shared {
    pub settings: Settings,
    server_info: Mutex<Option<ServerInfo>>,
    /// Bumped on every connection failure: a session whose connection is older drops it.
    epoch: AtomicU64,
}

impl Shared {
    #[must_use]
    pub fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            server_info: Mutex::new(None),
            epoch: AtomicU64::new(0),
        })
    }

    /// The server's settings, as read on the last new connection.
    #[must_use]
    pub fn server_info(&self) -> Option<ServerInfo> {
        self.server_info
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn discard_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// A failure inside a transaction's body.
enum OpError {
    Sql(mysql::Error),
    Internal(String),
}

impl From<mysql::Error> for OpError {
    fn from(err: mysql::Error) -> Self {
        Self::Sql(err)
    }
}

/// What the body of a transaction decided: commit, or roll back (and still answer); or that
/// it sent its COMMIT itself, behind its last statement in the same round trip (only a
/// repeatable transaction does: a connection lost then may have lost the COMMIT's answer only,
/// and such a transaction is run again whatever it was lost during).
enum Outcome<T> {
    Commit(T),
    Rollback(T),
    Committed(T),
}

type OpResult<T> = Result<Outcome<T>, OpError>;

/// The server's error number, if a server error.
fn server_code(err: &mysql::Error) -> Option<u16> {
    match err {
        mysql::Error::MySqlError(e) => Some(e.code),
        _ => None,
    }
}

fn is_connection_failure(err: &mysql::Error) -> bool {
    err.is_connectivity_error() || server_code(err).is_some_and(connection_failure_code)
}

/// A read or write that waited out the socket timeout: the server may be alive but stalled (a
/// stopped process, a partition), so the failure is not taken for a stale pooled connection's,
/// which fails at once (`Session::run`): repeated for free, each such call cost one more timeout.
fn timed_out(err: &mysql::Error) -> bool {
    let io = match err {
        mysql::Error::IoError(e) => Some(e),
        // the packet codec's reads (a query's answer) wrap the socket's error
        mysql::Error::CodecError(e) => {
            std::error::Error::source(e).and_then(|e| e.downcast_ref::<std::io::Error>())
        }
        _ => None,
    };
    io.is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}

fn describe(err: &mysql::Error) -> (u16, String) {
    match err {
        mysql::Error::MySqlError(e) => (e.code, e.message.clone()),
        other => (LOST_CONNECTION, other.to_string()),
    }
}

/// `PyMySQL`'s default "preferred" TLS, as the Python pool uses it (`pool.py`'s
/// `_opportunistic_tls_context`): encrypted when the server offers TLS, with neither the
/// certificate nor the host name verified; plain when the server does not offer it.
///
/// The crate's TLS is rustls with ring (`Cargo.toml`): nothing to link at run time, and a
/// connection costs no system CA store load (`OpenSSL` through `native-tls` loads it twice per
/// connection, some 50 ms, for a store that goes unused when nothing is verified).
///
/// The crate asks for TLS whenever `ssl_opts` are set and fails with `TlsNotSupported`, before
/// sending anything after reading the server's greeting, when the greeting lacks `CLIENT_SSL`:
/// only then is the connection made again without TLS. Any other failure (a failed TLS
/// handshake with a server that offers TLS) is returned as it is, never retried in clear text:
/// that would be a downgrade `PyMySQL` does not make either.
fn connect_preferring_tls(opts: OptsBuilder) -> Result<Conn, mysql::Error> {
    let tls = SslOpts::default()
        .with_danger_accept_invalid_certs(true)
        .with_danger_skip_domain_validation(true);
    match Conn::new(opts.clone().ssl_opts(Some(tls))) {
        Err(mysql::Error::DriverError(DriverError::TlsNotSupported)) => Conn::new(opts),
        connected => connected,
    }
}

/// One connection of a shard, made on first use and replaced when it fails.
pub struct Session {
    shared: Arc<Shared>,
    conn: Option<(Conn, u64)>,
}

impl Session {
    #[must_use]
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared, conn: None }
    }

    #[must_use]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn connect(&self) -> Result<Conn, mysql::Error> {
        let s = &self.shared.settings;
        let opts = OptsBuilder::new()
            .ip_or_hostname(Some(s.host.clone()))
            .tcp_port(s.port)
            .user(Some(s.user.clone()))
            .pass(Some(s.password.clone()))
            .prefer_socket(false)
            .tcp_connect_timeout(Some(s.timeout))
            .read_timeout(Some(s.timeout))
            .write_timeout(Some(s.timeout))
            .stmt_cache_size(0)
            // Affected rows = rows matched, not only rows whose values changed.
            .additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS)
            .init(vec![
                s.sql.session_setup.clone(),
                "SET AUTOCOMMIT = 0".to_owned(),
            ]);
        let mut conn = connect_preferring_tls(opts)?;
        let row: Option<(String, i64, i64, u64)> = conn.query_first(&s.sql.server_info)?;
        conn.query_drop("COMMIT")?;
        if let Some((version, autoinc_lock_mode, auto_increment_increment, max_allowed_packet)) =
            row
        {
            let info = ServerInfo {
                version,
                autoinc_lock_mode,
                auto_increment_increment,
                max_allowed_packet,
            };
            *self
                .shared
                .server_info
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(info);
        }
        Ok(conn)
    }

    /// The error number and message of a failure to connect, as `PyMySQL` reports it.
    fn connect_failure(&self, err: &mysql::Error) -> (u16, String) {
        match err {
            mysql::Error::MySqlError(e) => (e.code, e.message.clone()),
            other => (
                CANT_CONNECT,
                format!(
                    "Can't connect to MySQL server on '{}' ({other})",
                    self.shared.settings.host
                ),
            ),
        }
    }

    /// Runs `op` in a transaction with `transactions.py`'s retries and error mapping.
    /// `repeatable` false: not run again once its COMMIT may have been applied.
    fn run<T>(
        &mut self,
        repeatable: bool,
        mut op: impl FnMut(&mut Conn, &Shared) -> OpResult<T>,
    ) -> Result<T, StoreError> {
        let mut budget = Retries {
            left: self.shared.settings.num_auto_retries,
            deadlocks: DEADLOCK_RETRIES,
        };
        let mut replaced_stale = false;
        loop {
            let epoch = self.shared.epoch.load(Ordering::SeqCst);
            if self.conn.as_ref().is_some_and(|(_, e)| *e != epoch) {
                self.conn = None; // another session saw the server go: this one is suspect
            }
            let reused = self.conn.is_some();
            if !reused {
                match self.connect() {
                    Ok(conn) => self.conn = Some((conn, epoch)),
                    Err(err) => {
                        let (code, message) = self.connect_failure(&err);
                        if (retryable(code) || err.is_connectivity_error()) && budget.spend() {
                            continue;
                        }
                        let detail = format!("MySQL error {code}: {message}");
                        return Err(connection_error(detail, false));
                    }
                }
            }
            let Some((conn, _)) = self.conn.as_mut() else {
                continue;
            };
            let shared = Arc::clone(&self.shared);
            let result = op(conn, &shared);
            let (err, at_commit) = match result {
                Ok(Outcome::Commit(value)) => match conn.query_drop("COMMIT") {
                    Ok(()) => return Ok(value),
                    Err(err) => (OpError::Sql(err), true),
                },
                Ok(Outcome::Rollback(value)) => match conn.query_drop("ROLLBACK") {
                    Ok(()) => return Ok(value),
                    Err(err) => (OpError::Sql(err), false),
                },
                Ok(Outcome::Committed(value)) => return Ok(value),
                Err(err) => (err, false),
            };
            let err = match err {
                OpError::Internal(message) => {
                    self.rollback();
                    return Err(StoreError::Internal(message));
                }
                OpError::Sql(err) => err,
            };
            let (code, message) = describe(&err);
            if is_connection_failure(&err) {
                self.conn = None;
                self.shared.discard_all();
                if at_commit {
                    if !repeatable {
                        let detail = format!(
                            "connection lost during COMMIT, which may have been applied: not repeated ({message})"
                        );
                        return Err(connection_error(detail, true));
                    }
                } else if reused && !replaced_stale && !timed_out(&err) {
                    // A stale pooled connection: nothing was committed, so again at once, free.
                    replaced_stale = true;
                    continue;
                }
                if budget.spend() {
                    continue;
                }
                return Err(connection_error(
                    format!("MySQL error {code}: {message}"),
                    false,
                ));
            }
            if !self.rollback() {
                // The connection died on us after all: as a lost connection.
                if budget.spend() {
                    continue;
                }
                return Err(connection_error(
                    format!("MySQL error {LOST_CONNECTION}: rollback failed after {message}"),
                    false,
                ));
            }
            if NO_QUEUE_ERRORS.contains(&code) {
                return Err(StoreError::QueueNotFound);
            }
            if retryable(code) {
                if budget.spend_on(code) {
                    continue;
                }
                let detail = format!("MySQL error {code}: {message}");
                if TRANSIENT_ERRORS.contains(&code) {
                    return Err(StoreError::Contention(detail));
                }
                return Err(connection_error(detail, false));
            }
            return Err(StoreError::Server { code, message });
        }
    }

    /// Rolls back the open transaction; false (and the connection dropped) if that failed.
    fn rollback(&mut self) -> bool {
        let Some((conn, _)) = self.conn.as_mut() else {
            return true;
        };
        if conn.query_drop("ROLLBACK").is_ok() {
            return true;
        }
        self.conn = None;
        self.shared.discard_all();
        false
    }

    // -- the hot path -------------------------------------------------------------------------

    /// `MySQLStore.enqueue_jobs`: one multi-row INSERT per priority (first-seen order), in one
    /// transaction never repeated once its COMMIT may have been applied; the ids in job order.
    pub fn enqueue_jobs(
        &mut self,
        database: &str,
        jobs: &[NewJob],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut groups: Vec<(i64, Vec<usize>)> = Vec::new();
        for (index, job) in jobs.iter().enumerate() {
            if let Some((_, members)) = groups.iter_mut().find(|(p, _)| *p == job.priority) {
                members.push(index);
            } else {
                check_priority(job.priority)?;
                groups.push((job.priority, vec![index]));
            }
        }
        let strategy = self.shared.settings.insert_id_strategy;
        self.run(false, |conn, shared| {
            let info = shared.server_info();
            let strategy = strategy.unwrap_or_else(|| {
                info.as_ref()
                    .map_or(IdStrategy::LastInsertId, ServerInfo::default_strategy)
            });
            let step = info.as_ref().map_or(1, |i| i.auto_increment_increment);
            let packet = info
                .as_ref()
                .map_or(DEFAULT_MAX_ALLOWED_PACKET, |i| i.max_allowed_packet);
            let sql = &shared.settings.sql;
            let template = if strategy == IdStrategy::Returning {
                &sql.enqueue_jobs_returning
            } else {
                &sql.enqueue_jobs
            };
            let mut ids = vec![0_i64; jobs.len()];
            for (priority, members) in &groups {
                let filled = template.replace("{table}", &table(database, *priority));
                let Some((head, tail)) = filled.split_once("{rows}") else {
                    return Err(OpError::Internal("enqueue_jobs.sql has no {rows}".into()));
                };
                let format = Format {
                    head,
                    tail,
                    budget: if strategy == IdStrategy::PerRow {
                        0
                    } else {
                        usize::try_from(packet / 2).unwrap_or(usize::MAX)
                    },
                    custom_status_limit: shared.settings.custom_status_limit,
                    no_backslash_escapes: conn.no_backslash_escape(),
                };
                let mut statements = Statements::new(format, now_ms);
                for &index in members {
                    let job = &jobs[index];
                    statements.push(&Row {
                        attempts_allowed: job.attempts_allowed,
                        custom_status: &job.custom_status,
                        run_after_ms: job.run_after_ms,
                        body: &job.body,
                    });
                }
                let mut next = members.iter();
                for (rows, statement) in statements.finish() {
                    let statement = String::from_utf8(statement)
                        .map_err(|_| OpError::Internal("INSERT is not UTF-8".into()))?;
                    let new_ids = insert(conn, &statement, strategy, step)?;
                    if new_ids.len() != rows {
                        return Err(OpError::Internal(format!(
                            "inserted {rows} jobs into {} but recovered {} ids",
                            table(database, *priority),
                            new_ids.len()
                        )));
                    }
                    for id in new_ids {
                        if let Some(&index) = next.next() {
                            ids[index] = id;
                        }
                    }
                }
            }
            Ok(Outcome::Commit(ids))
        })
    }

    /// `MySQLStore.dequeue_jobs` (limit > 0, claim checked by the caller): a dry run peeks; else
    /// one UPDATE stamping `claim` and one SELECT by it (one round trip), or, if the claim was
    /// not unique (the SELECT found more rows than the UPDATE claimed), that rolled back and
    /// redone telling our rows from the others. With `max_in_progress` (the queue's cap on this
    /// shard), each of those transactions first takes the queue's claim lock and claims at most
    /// the room left (`room`). Under `max_bytes` (`within_bytes`): a claim whose first jobs'
    /// bodies reach it is rolled back and made again for those jobs (which this transaction
    /// had locked, so as a rule the same ones), and no SELECT keeps much more than it in memory
    /// (`claimed_within`). With the jobs, whether the claim was made again for fewer (the
    /// rollback released the rows, so other jobs may have come first, and the place may hold
    /// more than this call took: `ClaimedJobs.cut`).
    #[allow(clippy::too_many_arguments)] // the store method's arguments, the cap and the budget
    pub fn dequeue_jobs(
        &mut self,
        database: &str,
        priority: i64,
        limit: i64,
        claim: &str,
        now_ms: i64,
        dry_run: bool,
        max_in_progress: Option<i64>,
        max_bytes: i64,
    ) -> Result<(Vec<ClaimedJob>, bool), StoreError> {
        check_priority(priority)?;
        let table = table(database, priority);
        let prefix = self.shared.settings.reservation_prefix.clone();
        let max_bytes = u64::try_from(max_bytes).unwrap_or(0);
        if dry_run {
            return self.run(true, |conn, shared| {
                let sql = render(
                    &shared.settings.sql.peek_jobs,
                    &table,
                    None,
                    &[Arg::Time(now_ms), Arg::Int(now_ms), Arg::Int(limit)],
                    conn.no_backslash_escape(),
                )?;
                // (peek_jobs.sql answers in claim order: the bodies kept are those that fit)
                let mut within =
                    claimed_within(&mut conn.query_iter(sql)?, None, false, max_bytes)?;
                within.jobs.truncate(within.fit);
                Ok(Outcome::Commit((within.jobs, false)))
            });
        }
        let mut limit = limit;
        let mut lowered = false;
        let mut unique = true;
        loop {
            let claimed = if unique {
                self.run(true, |conn, shared| {
                    let nbe = conn.no_backslash_escape();
                    let sql = &shared.settings.sql;
                    let n = allowed(conn, sql, database, limit, max_in_progress)?;
                    if n <= 0 {
                        return Ok(Outcome::Commit(Claimed::Jobs(Vec::new())));
                    }
                    let update_args = dequeue_args(claim, &prefix, now_ms, n);
                    let mut batch = String::new();
                    push_claim(&mut batch, sql, &table, &update_args, claim, nbe)?;
                    let claimed = claim_result(&mut conn.query_iter(batch)?, max_bytes)?;
                    claimed.outcome(|| {
                        let select = select_claimed(sql, &table, claim, nbe)?;
                        claimed_rows(conn, &select, None, true)
                    })
                })?
            } else {
                self.run(true, |conn, shared| {
                    let nbe = conn.no_backslash_escape();
                    let sql = &shared.settings.sql;
                    let n = allowed(conn, sql, database, limit, max_in_progress)?;
                    if n <= 0 {
                        return Ok(Outcome::Commit(Claimed::Jobs(Vec::new())));
                    }
                    let update_args = dequeue_args(claim, &prefix, now_ms, n);
                    let select = select_claimed(sql, &table, claim, nbe)?;
                    // (the ids only: a budget of 0 keeps no body but the first)
                    let before: Vec<i64> =
                        claimed_within(&mut conn.query_iter(&select)?, None, false, 0)?
                            .jobs
                            .into_iter()
                            .map(|j| j.local_id)
                            .collect();
                    let update = render(&sql.dequeue_jobs, &table, None, &update_args, nbe)?;
                    conn.query_drop(update)?;
                    let read = claimed_within(
                        &mut conn.query_iter(&select)?,
                        Some(&before),
                        true,
                        max_bytes,
                    )?;
                    Claimed::of(read).outcome(|| claimed_rows(conn, &select, Some(&before), true))
                })?
            };
            match claimed {
                Claimed::Jobs(jobs) => return Ok((jobs, lowered)),
                Claimed::NotUnique => unique = false,
                Claimed::Fewer(n) => (limit, lowered) = (n, true),
                Claimed::Reread => {
                    return Err(StoreError::Internal("a claim left to read again".into()));
                }
            }
        }
    }

    /// `MySQLStore.ack_jobs`: one UPDATE per (priority, appended status) of the successes and per
    /// (priority, appended status, retry delay) of the failures, groups and ids sorted, sent
    /// with the COMMIT in one round trip. Each failure group is three statements (the expiry of
    /// retries past it, the failure, the index of retried jobs by expiry), and failures add the
    /// tally of expiries to the queue's expired count; successes alone send what they always sent.
    pub fn ack_jobs(
        &mut self,
        database: &str,
        acks: &AckGroup,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if acks.is_empty() {
            return Ok(());
        }
        let plan = AckPlan::new(acks)?;
        self.run(true, |conn, shared| {
            // Every UPDATE and the COMMIT in one round trip: the server runs them in order and
            // stops at the first that fails, so a failure leaves the transaction to roll back.
            let mut batch = String::new();
            plan.push_statements(
                &mut batch,
                shared,
                database,
                now_ms,
                conn.no_backslash_escape(),
            )?;
            batch.push_str("COMMIT");
            drop_all(conn, &batch)?;
            Ok(Outcome::Committed(()))
        })
    }

    /// `ack_jobs`, then `dequeue_jobs` (not dry), on this session: the acks' statements and
    /// their COMMIT go in the round trip of the claim's UPDATE and SELECT, so the server runs
    /// them first and, should one fail, runs nothing after it (nothing is claimed). The claim's
    /// COMMIT follows, as a dequeue's does; a claim that is not unique rolls back and is redone
    /// alone. A retry of the whole (a deadlock, a lost connection) repeats the acks, which is
    /// harmless for successes only: with failures (this claim could take a failed job again,
    /// and a repeat would fail it twice) or `max_in_progress` (the claim first takes the
    /// queue's claim lock), the two run in turn.
    #[allow(clippy::too_many_arguments)] // the two store methods' arguments
    pub fn ack_and_dequeue_jobs(
        &mut self,
        database: &str,
        acks: &AckGroup,
        priority: i64,
        limit: i64,
        claim: &str,
        now_ms: i64,
        max_in_progress: Option<i64>,
        max_bytes: i64,
    ) -> Result<(Vec<ClaimedJob>, bool), StoreError> {
        if acks.is_empty() || !acks.failed.is_empty() || max_in_progress.is_some() || limit <= 0 {
            self.ack_jobs(database, acks, now_ms)?;
            return self.dequeue_jobs(
                database,
                priority,
                limit,
                claim,
                now_ms,
                false,
                max_in_progress,
                max_bytes,
            );
        }
        let budget = u64::try_from(max_bytes).unwrap_or(0);
        check_priority(priority)?;
        let plan = AckPlan::new(acks)?;
        let table = table(database, priority);
        let prefix = self.shared.settings.reservation_prefix.clone();
        let first = self.run(true, |conn, shared| {
            let nbe = conn.no_backslash_escape();
            let sql = &shared.settings.sql;
            let mut batch = String::new();
            let acking = plan.push_statements(&mut batch, shared, database, now_ms, nbe)?;
            batch.push_str("COMMIT;\n");
            let update_args = dequeue_args(claim, &prefix, now_ms, limit);
            push_claim(&mut batch, sql, &table, &update_args, claim, nbe)?;
            let mut result = conn.query_iter(batch)?;
            for _ in 0..=acking {
                if let Some(set) = result.iter() {
                    for row in set {
                        row?; // an ack statement's error (or the COMMIT's): nothing after it ran
                    }
                }
            }
            let claimed = claim_result(&mut result, budget)?;
            drop(result);
            claimed.outcome(|| {
                let select = select_claimed(sql, &table, claim, nbe)?;
                claimed_rows(conn, &select, None, true)
            })
        })?;
        // The acks are in (their COMMIT went before the claim); a claim rolled back is redone
        // alone: one that was not unique, or one past the byte budget, for fewer jobs.
        match first {
            Claimed::Jobs(jobs) => Ok((jobs, false)),
            Claimed::Fewer(n) => self
                .dequeue_jobs(database, priority, n, claim, now_ms, false, None, max_bytes)
                .map(|(jobs, _)| (jobs, true)),
            _ => self.dequeue_jobs(
                database, priority, limit, claim, now_ms, false, None, max_bytes,
            ),
        }
    }
}

/// A call's acks grouped as their statements take them: the successes by (priority, appended
/// status), the failures by (priority, appended status, retry delay), ids sorted.
struct AckPlan<'a> {
    successes: BTreeMap<(i64, &'a str), Vec<i64>>,
    failures: BTreeMap<(i64, &'a str, i64), Vec<i64>>,
}

impl<'a> AckPlan<'a> {
    fn new(acks: &'a AckGroup) -> Result<Self, StoreError> {
        let mut successes: BTreeMap<(i64, &str), Vec<i64>> = BTreeMap::new();
        for item in &acks.succeeded {
            check_priority(item.priority)?;
            successes
                .entry((item.priority, &item.append_custom_status))
                .or_default()
                .push(item.local_id);
        }
        let mut failures: BTreeMap<(i64, &str, i64), Vec<i64>> = BTreeMap::new();
        for item in &acks.failed {
            check_priority(item.priority)?;
            failures
                .entry((
                    item.priority,
                    &item.append_custom_status,
                    item.retry_delay_ms,
                ))
                .or_default()
                .push(item.local_id);
        }
        for ids in successes.values_mut().chain(failures.values_mut()) {
            ids.sort_unstable();
        }
        Ok(Self {
            successes,
            failures,
        })
    }

    /// The statements, each followed by `;`: one UPDATE per success group; for failures, the
    /// reset of the expiry tally, each group's statements (`FailureGroup`) and the tally added
    /// to the queue's expired count (successes alone send what they always sent). Answers how
    /// many statements it wrote.
    fn push_statements(
        &self,
        batch: &mut String,
        shared: &Shared,
        database: &str,
        now_ms: i64,
        nbe: bool,
    ) -> Result<usize, OpError> {
        let settings = &shared.settings;
        let sql = &settings.sql;
        #[allow(clippy::cast_possible_wrap)]
        let limit = settings.custom_status_limit as i64;
        let mut count = 0;
        for ((priority, status), ids) in &self.successes {
            let args = [Arg::Str(status), Arg::Int(limit), Arg::Time(now_ms)];
            let statement = render(
                &sql.ack_succeeded_jobs,
                &table(database, *priority),
                Some(ids),
                &args,
                nbe,
            )?;
            batch.push_str(&statement);
            batch.push_str(";\n");
            count += 1;
        }
        if self.failures.is_empty() {
            return Ok(count);
        }
        let words = (
            settings.cancelled_word.as_str(),
            settings.expired_word.as_str(),
        );
        batch.push_str(&sql.expired_count_reset);
        batch.push_str(";\n");
        for ((priority, status, delay), ids) in &self.failures {
            let group = FailureGroup {
                database,
                priority: *priority,
                status,
                ids,
                now_ms,
                retry_ms: now_ms.saturating_add(*delay),
            };
            group.push_statements(batch, sql, words, limit, nbe)?;
            count += FailureGroup::STATEMENTS;
        }
        let tallied = sql
            .expired_count_add_tallied
            .replace("{table}", &expired_count_table(database));
        batch.push_str(&tallied);
        batch.push_str(";\n");
        Ok(count + 2)
    }
}

/// One (priority, appended status, retry delay) group of a failure ack.
struct FailureGroup<'a> {
    database: &'a str,
    priority: i64,
    status: &'a str,
    ids: &'a [i64],
    now_ms: i64,
    retry_ms: i64,
}

impl FailureGroup<'_> {
    /// How many statements `push_statements` writes.
    const STATEMENTS: usize = 4;

    /// The group's statements, each followed by `;`: the expiry of the retries at or after
    /// their job's expiry (`ack_expire_jobs.sql`) and its tally, the failure
    /// (`ack_failed_jobs.sql`), the index of the retried jobs by expiry (`expiring_readd.sql`).
    fn push_statements(
        &self,
        batch: &mut String,
        sql: &SqlTexts,
        (cancelled, expired): (&str, &str),
        limit: i64,
        nbe: bool,
    ) -> Result<(), OpError> {
        let jobs = table(self.database, self.priority);
        let (status, ids) = (self.status, Some(self.ids));
        let expire = [
            Arg::Str(status),
            Arg::Str(expired),
            Arg::Str(status),
            Arg::Int(ended_cut(limit, expired)),
            Arg::Str(expired),
            Arg::Time(self.now_ms),
            Arg::Int(self.retry_ms),
        ];
        batch.push_str(&render(&sql.ack_expire_jobs, &jobs, ids, &expire, nbe)?);
        batch.push_str(";\n");
        batch.push_str(&sql.expired_count_tally);
        batch.push_str(";\n");
        let fail = [
            Arg::Time(self.retry_ms),
            Arg::Str(status),
            Arg::Int(limit),
            Arg::Str(status),
            Arg::Str(cancelled),
            Arg::Str(status),
            Arg::Int(ended_cut(limit, cancelled)),
            Arg::Str(cancelled),
            Arg::Time(self.now_ms),
        ];
        batch.push_str(&render(&sql.ack_failed_jobs, &jobs, ids, &fail, nbe)?);
        batch.push_str(";\n");
        let readd = sql
            .expiring_readd
            .replace("{side}", &expiring_table(self.database));
        batch.push_str(&render(
            &readd,
            &jobs,
            ids,
            &[Arg::Int(self.priority)],
            nbe,
        )?);
        batch.push_str(";\n");
        Ok(())
    }
}

/// The claim's UPDATE and the SELECT of what it claimed, for one round trip (the SELECT finds
/// nothing of ours when the UPDATE claimed nothing); `claim_result` reads their answers.
fn push_claim(
    batch: &mut String,
    sql: &SqlTexts,
    table: &str,
    update_args: &[Arg<'_>],
    claim: &str,
    nbe: bool,
) -> Result<(), OpError> {
    batch.push_str(&render(&sql.dequeue_jobs, table, None, update_args, nbe)?);
    batch.push_str(";\n");
    batch.push_str(&select_claimed(sql, table, claim, nbe)?);
    Ok(())
}

/// `select_claimed_jobs.sql` for `claim` on `table`: the jobs a claim just stamped.
fn select_claimed(sql: &SqlTexts, table: &str, claim: &str, nbe: bool) -> Result<String, OpError> {
    render(
        &sql.select_claimed_jobs,
        table,
        None,
        &[Arg::Str(claim)],
        nbe,
    )
}

/// What one claim transaction came to.
enum Claimed {
    /// The jobs claimed, in claim order: committed.
    Jobs(Vec<ClaimedJob>),
    /// The SELECT found more rows than the UPDATE claimed (a claim that is not unique): rolled
    /// back, to be redone telling our rows from the others.
    NotUnique,
    /// The bodies of the first jobs reached the byte budget: rolled back, to be redone for
    /// this many.
    Fewer(i64),
    /// The budget takes every job claimed, but bodies read out of claim order were not kept:
    /// the claimed rows are read again (bounded, as those jobs are), then committed.
    Reread,
}

impl Claimed {
    /// A claim's rows under the byte budget (`claimed_within`).
    fn of(within: Within) -> Self {
        if within.fit < within.jobs.len() {
            Self::Fewer(i64::try_from(within.fit).unwrap_or(i64::MAX))
        } else if within.complete {
            Self::Jobs(within.jobs)
        } else {
            Self::Reread
        }
    }

    /// Commit or roll back; `reread` reads the claimed rows again for `Reread`.
    fn outcome(
        self,
        reread: impl FnOnce() -> Result<Vec<ClaimedJob>, OpError>,
    ) -> OpResult<Claimed> {
        Ok(match self {
            Self::Jobs(jobs) => Outcome::Commit(Self::Jobs(jobs)),
            Self::Reread => Outcome::Commit(Self::Jobs(reread()?)),
            other => Outcome::Rollback(other),
        })
    }
}

/// The answers of `push_claim`'s statements, under a byte budget of `max_bytes`.
fn claim_result(
    result: &mut QueryResult<'_, '_, '_, Text>,
    max_bytes: u64,
) -> Result<Claimed, OpError> {
    let claimed = match result.iter() {
        Some(set) => {
            let claimed = set.affected_rows();
            for row in set {
                row?; // the UPDATE's error
            }
            claimed
        }
        None => 0,
    };
    let within = claimed_within(result, None, true, max_bytes)?;
    if claimed == 0 {
        return Ok(Claimed::Jobs(Vec::new()));
    }
    if within.jobs.len() as u64 != claimed {
        return Ok(Claimed::NotUnique);
    }
    Ok(Claimed::of(within))
}

/// The parameters of `dequeue_jobs.sql`: claim `limit` jobs.
fn dequeue_args<'a>(claim: &'a str, prefix: &'a str, now_ms: i64, limit: i64) -> [Arg<'a>; 8] {
    [
        Arg::Str(claim),
        Arg::Time(now_ms),
        Arg::Time(now_ms),
        Arg::Int(now_ms),
        Arg::Time(now_ms),
        Arg::Str(prefix),
        Arg::Str(prefix),
        Arg::Int(limit),
    ]
}

/// How many jobs a claim may take: `limit`, or under a cap the room left (`room`: the claim
/// lock held from here on).
fn allowed(
    conn: &mut Conn,
    sql: &SqlTexts,
    database: &str,
    limit: i64,
    max_in_progress: Option<i64>,
) -> Result<i64, OpError> {
    match max_in_progress {
        None => Ok(limit),
        Some(cap) => Ok(limit.min(room(conn, sql, database, cap)?)),
    }
}

/// `claim_cap.room` with the lock: the queue's claim lock row locked first (the table made if
/// missing: the DDL commits a transaction that is still empty), then how many more jobs may be
/// `IN_PROGRESS`: `cap` less those that are in every jobs table of `database`, each counted up
/// to the cap; 0 at or past it.
fn room(conn: &mut Conn, sql: &SqlTexts, database: &str, cap: i64) -> Result<i64, OpError> {
    let nbe = conn.no_backslash_escape();
    let lock_table = claim_lock_table(database);
    let lock = sql.lock_claims.replace("{table}", &lock_table);
    if let Err(err) = conn.query_drop(&lock) {
        if server_code(&err) != Some(NO_TABLE_ERROR) {
            return Err(err.into());
        }
        conn.query_drop(sql.create_claim_lock_table.replace("{table}", &lock_table))?;
        conn.query_drop(&lock)?;
    }
    let list = render(
        &sql.list_jobs_tables,
        "",
        None,
        &[Arg::Str(database), Arg::Str(JOBS_TABLE_PATTERN)],
        nbe,
    )?;
    let names: Vec<String> = conn.query(list)?;
    let mut priorities: Vec<i64> = names
        .iter()
        .filter_map(|n| priority_from_table(n))
        .collect();
    priorities.sort_unstable();
    if priorities.is_empty() || cap <= 0 {
        return Ok(cap.max(0)); // no jobs table: the claim that follows finds the queue missing
    }
    let mut count = String::new();
    for (k, priority) in priorities.iter().enumerate() {
        if k > 0 {
            count.push_str("\nUNION ALL\n");
        }
        let part = render(
            &sql.count_in_progress_table,
            &table(database, *priority),
            None,
            &[Arg::Int(cap)],
            nbe,
        )?;
        count.push_str(&part);
    }
    let in_progress: Vec<i64> = conn.query(count)?;
    Ok(cap.saturating_sub(in_progress.iter().sum()).max(0))
}

/// The priority a jobs table holds (`jobs_p2` -> 2), if a supported one (`names.priority_from_table`).
fn priority_from_table(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("jobs_p")?;
    if digits.starts_with('0') || !(1..=3).contains(&digits.len()) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|p| (1..=127).contains(p))
}

fn connection_error(detail: String, maybe_applied: bool) -> StoreError {
    StoreError::Connection {
        detail,
        maybe_applied,
    }
}

fn check_priority(priority: i64) -> Result<(), StoreError> {
    if (1..=127).contains(&priority) {
        Ok(())
    } else {
        Err(StoreError::Priority(priority))
    }
}

/// The jobs table of one priority in `database` (a name `names.py` checked), quoted.
#[must_use]
pub fn table(database: &str, priority: i64) -> String {
    format!("`{database}`.`jobs_p{priority}`")
}

/// The characters of a status kept before `" " + word` (`base.ended_status`, `expiry.ended_cut`).
fn ended_cut(limit: i64, word: &str) -> i64 {
    #[allow(clippy::cast_possible_wrap)] // a word of a few characters
    let word = word.chars().count() as i64;
    (limit - 1 - word).max(0)
}

/// The expiry index table of `database` (`names.quoted_expiring_table`), quoted.
fn expiring_table(database: &str) -> String {
    format!("`{database}`.`expiring`")
}

/// The expired count table of `database` (`expiry.count_table`), quoted.
fn expired_count_table(database: &str) -> String {
    format!("`{database}`.`expired_count`")
}

/// The claim lock table of `database` (`names.quoted_claim_lock_table`), quoted.
fn claim_lock_table(database: &str) -> String {
    format!("`{database}`.`claim_lock`")
}

/// Runs the statements of `batch` (separated by `;`, sent in one round trip) and reads every
/// result; the first statement that failed is the error (the server runs none after it).
fn drop_all(conn: &mut Conn, batch: &str) -> Result<(), OpError> {
    let mut result = conn.query_iter(batch)?;
    while let Some(set) = result.iter() {
        for row in set {
            row?;
        }
    }
    Ok(())
}

/// One INSERT's new ids, in row order.
fn insert(
    conn: &mut Conn,
    statement: &str,
    strategy: IdStrategy,
    step: i64,
) -> Result<Vec<i64>, OpError> {
    let mut result = conn.query_iter(statement)?;
    if strategy == IdStrategy::Returning {
        let mut ids = Vec::new();
        for row in result.by_ref() {
            let values = row?.unwrap();
            ids.push(values.first().and_then(int).ok_or_else(|| {
                OpError::Internal("INSERT ... RETURNING gave no local_id".into())
            })?);
        }
        return Ok(ids);
    }
    let rows = result.affected_rows();
    let first = result
        .last_insert_id()
        .ok_or_else(|| OpError::Internal("INSERT gave no LAST_INSERT_ID()".into()))?;
    drop(result);
    let first = i64::try_from(first).map_err(|_| OpError::Internal("id past i64".into()))?;
    let rows = i64::try_from(rows).map_err(|_| OpError::Internal("rows past i64".into()))?;
    Ok((0..rows).map(|k| first + step * k).collect())
}

/// The rows of a SELECT of `local_id, body, attempts_allowed, attempts_remaining, created_at,
/// updated_at` (then `run_after`, if `sort`: the rows are put in its order, then `local_id`'s),
/// leaving out the ids in `skip`.
fn claimed_rows(
    conn: &mut Conn,
    sql: &str,
    skip: Option<&[i64]>,
    sort: bool,
) -> Result<Vec<ClaimedJob>, OpError> {
    claimed_jobs(&mut conn.query_iter(sql)?, skip, sort)
}

/// `claimed_rows` of the current result set of `result`.
fn claimed_jobs(
    result: &mut QueryResult<'_, '_, '_, Text>,
    skip: Option<&[i64]>,
    sort: bool,
) -> Result<Vec<ClaimedJob>, OpError> {
    Ok(claimed_within(result, skip, sort, u64::MAX)?.jobs)
}

/// A claim's (or peek's) rows read under a byte budget (`claimed_within`).
struct Within {
    /// Every row, in claim order if sorted; a body is kept only while the bodies of the rows
    /// read before it (in the order read) hold fewer than the budget's bytes, so the bodies
    /// held pass it by less than one body.
    jobs: Vec<ClaimedJob>,
    /// How many of `jobs`, from the first, the budget takes (`within_bytes` of their lengths).
    fit: usize,
    /// Whether every body was kept.
    complete: bool,
}

/// The current result set of `result` as `claimed_jobs` reads it, under `max_bytes`: a body
/// past the budget (in the order read) is not kept, so one SELECT of a thousand large bodies
/// holds about the budget, not all of them.
fn claimed_within(
    result: &mut QueryResult<'_, '_, '_, Text>,
    skip: Option<&[i64]>,
    sort: bool,
    max_bytes: u64,
) -> Result<Within, OpError> {
    let mut jobs: Vec<(i64, usize, ClaimedJob)> = Vec::new();
    let mut read: u64 = 0;
    let mut complete = true;
    let Some(set) = result.iter() else {
        return Ok(Within {
            jobs: Vec::new(),
            fit: 0,
            complete,
        });
    };
    for row in set {
        let mut values = row?.unwrap().into_iter();
        let mut next = || values.next().unwrap_or(Value::NULL);
        let local_id = int(&next())
            .ok_or_else(|| OpError::Internal("a claimed row has no local_id".into()))?;
        let body = match next() {
            Value::Bytes(bytes) => bytes,
            _ => Vec::new(),
        };
        let job = ClaimedJob {
            local_id,
            body,
            attempts_allowed: int(&next()).unwrap_or(0),
            attempts_remaining: int(&next()).unwrap_or(0),
            created_at_ms: time_ms(&next()),
            updated_at_ms: time_ms(&next()),
        };
        let run_after = time_ms(&next());
        if skip.is_some_and(|ids| ids.contains(&job.local_id)) {
            continue;
        }
        let mut job = job;
        let length = job.body.len();
        if read >= max_bytes && !jobs.is_empty() {
            job.body = Vec::new();
            complete = false;
        }
        read = read.saturating_add(length as u64);
        jobs.push((run_after, length, job));
    }
    if sort {
        // In claim order, by (run_after, local_id): select_claimed_jobs.sql leaves it to us.
        jobs.sort_unstable_by_key(|(run_after, _, job)| (*run_after, job.local_id));
    }
    let fit = within_bytes(jobs.iter().map(|(_, length, _)| *length), max_bytes);
    Ok(Within {
        jobs: jobs.into_iter().map(|(_, _, job)| job).collect(),
        fit,
        complete,
    })
}

/// An integer column (text protocol: decimal ASCII); None for NULL.
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(v) => Some(*v),
        Value::UInt(v) => i64::try_from(*v).ok(),
        Value::Bytes(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

/// A TIMESTAMP column as ms since the epoch (`db_time.from_db_time`): `YYYY-MM-DD hh:mm:ss[.f]`
/// read as UTC, milliseconds floored; NULL and zero dates are 0.
#[must_use]
pub fn time_ms(value: &Value) -> i64 {
    match value {
        Value::Bytes(bytes) => parse_datetime(bytes).unwrap_or(0),
        _ => 0,
    }
}

fn parse_datetime(text: &[u8]) -> Option<i64> {
    let number = |from: usize, to: usize| -> Option<i64> {
        let part = text.get(from..to)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if text.len() < 19 {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if month == 0 || day == 0 {
        return None;
    }
    let mut millis = 0;
    if text.len() > 20 && text[19] == b'.' {
        for k in 0..3 {
            let digit = text.get(20 + k).filter(|d| d.is_ascii_digit());
            millis = millis * 10 + digit.map_or(0, |d| i64::from(d - b'0'));
        }
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A parameter, written as `PyMySQL` writes it.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Int(i64),
    Str(&'a str),
    /// ms since the epoch, as `to_db_time` converts it (clamped, naive UTC).
    Time(i64),
}

/// `template` with `{table}` and `{ids}` filled and each `%s` replaced by the next of `args`,
/// as `Sql.render` then `cursor.execute(sql, args)` would send it (ids are ints, written as
/// their own `%s` would be).
fn render(
    template: &str,
    table: &str,
    ids: Option<&[i64]>,
    args: &[Arg<'_>],
    no_backslash_escapes: bool,
) -> Result<String, OpError> {
    let mut text = template.replace("{table}", table);
    if let Some(ids) = ids {
        let mut list = String::with_capacity(ids.len() * 8);
        for (k, id) in ids.iter().enumerate() {
            if k > 0 {
                list.push_str(", ");
            }
            let _ = write!(list, "{id}");
        }
        text = text.replace("{ids}", &list);
    }
    let mut out: Vec<u8> = Vec::with_capacity(text.len() + 64);
    let mut pieces = text.split("%s");
    out.extend_from_slice(pieces.next().unwrap_or("").as_bytes());
    let mut used = 0;
    for piece in pieces {
        let Some(arg) = args.get(used) else {
            return Err(OpError::Internal(format!(
                "a statement takes more than the {} parameters given",
                args.len()
            )));
        };
        used += 1;
        match *arg {
            Arg::Int(v) => push_int(&mut out, v),
            Arg::Str(s) => push_quoted(&mut out, s, no_backslash_escapes),
            Arg::Time(ms) => push_datetime(&mut out, ms),
        }
        out.extend_from_slice(piece.as_bytes());
    }
    if used != args.len() {
        return Err(OpError::Internal(format!(
            "a statement takes {used} parameters, not {}",
            args.len()
        )));
    }
    String::from_utf8(out).map_err(|_| OpError::Internal("statement is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlocks_get_runs_of_their_own_past_the_common_ones() {
        let mut budget = Retries {
            left: 1,
            deadlocks: DEADLOCK_RETRIES,
        };
        assert!(
            budget.spend_on(1205),
            "a lock wait timeout takes the common run"
        );
        assert!(!budget.spend_on(1205), "and has no other");
        assert!(!budget.spend(), "nor has any other failure");
        let deadlocks = (0..10)
            .take_while(|_| budget.spend_on(DEADLOCK_ERROR))
            .count();
        assert_eq!(deadlocks, 3);
        let mut none = Retries {
            left: 0,
            deadlocks: 0,
        };
        assert!(!none.spend_on(DEADLOCK_ERROR));
    }

    #[test]
    fn render_fills_tokens_and_parameters() {
        let Ok(sql) = render(
            "UPDATE {table} SET a = %s, b = %s WHERE c = %s AND id IN ({ids})",
            "`plq_1_q`.`jobs_p1`",
            Some(&[3, 1]),
            &[Arg::Str("it's"), Arg::Int(-5), Arg::Time(1_000)],
            false,
        ) else {
            panic!("render failed");
        };
        assert_eq!(
            sql,
            "UPDATE `plq_1_q`.`jobs_p1` SET a = 'it\\'s', b = -5 WHERE c = \
             '1970-01-01 00:00:01.000000' AND id IN (3, 1)"
        );
        assert!(render("%s %s", "t", None, &[Arg::Int(1)], false).is_err());
        assert!(render("%s", "t", None, &[Arg::Int(1), Arg::Int(2)], false).is_err());
    }

    #[test]
    fn datetimes_read_back_as_written() {
        for ms in [1_000, 1_700_000_000_123, 2_147_483_647_000, 951_782_400_000] {
            let mut text = Vec::new();
            push_datetime(&mut text, ms);
            let inner = &text[1..text.len() - 1];
            assert_eq!(time_ms(&Value::Bytes(inner.to_vec())), ms);
        }
        assert_eq!(
            time_ms(&Value::Bytes(b"2026-11-23 17:56:33.5".to_vec())),
            1_795_456_593_500
        );
        assert_eq!(
            time_ms(&Value::Bytes(b"2026-11-23 17:56:33".to_vec())),
            1_795_456_593_000
        );
        assert_eq!(time_ms(&Value::Bytes(b"0000-00-00 00:00:00".to_vec())), 0);
        assert_eq!(time_ms(&Value::NULL), 0);
    }

    #[test]
    fn server_info_picks_the_id_strategy() {
        let info = |version: &str, mode| ServerInfo {
            version: version.into(),
            autoinc_lock_mode: mode,
            auto_increment_increment: 1,
            max_allowed_packet: 1,
        };
        assert_eq!(
            info("10.11.6-MariaDB", 1).default_strategy(),
            IdStrategy::LastInsertId
        );
        assert_eq!(
            info("10.11.6-MariaDB", 2).default_strategy(),
            IdStrategy::Returning
        );
        assert_eq!(
            info("10.4.1-MariaDB", 2).default_strategy(),
            IdStrategy::PerRow
        );
        assert_eq!(info("8.0.36", 2).default_strategy(), IdStrategy::PerRow);
    }

    #[test]
    fn jobs_tables_name_their_priority() {
        assert_eq!(priority_from_table("jobs_p1"), Some(1));
        assert_eq!(priority_from_table("jobs_p127"), Some(127));
        for name in [
            "jobs_p0",
            "jobs_p01",
            "jobs_p128",
            "jobs_p1000",
            "jobs_p",
            "jobs_px",
            "dedup_keys",
        ] {
            assert_eq!(priority_from_table(name), None, "{name}");
        }
    }

    #[test]
    fn error_classes() {
        assert!(retryable(1213) && retryable(2013) && retryable(2003) && !retryable(1146));
        assert!(connection_failure_code(1045) && connection_failure_code(2099));
        assert!(!connection_failure_code(1406));
    }
}
