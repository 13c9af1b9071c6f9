//! The Redis store's hot scripts (`enqueue_jobs`, `dequeue_jobs`, `ack_jobs`, and `count_jobs`
//! as the cheap "does the queue exist" call of a dequeue of nothing) as whole `EVALSHA`
//! commands, packed straight from the jobs: no Python object per job.
//!
//! `KEYS` and `ARGV` are byte for byte what `backends/redis/store.py` sends (`_enqueue_call`,
//! `_dequeue_call`, `_ack_call`, `require_queue_call`), with the key names of `keys.py`
//! (`plq_{S}_{Q}.p{p}_s{state}`, `plh_{S}_{Q}.`, `plj_{S}_{Q}`, `pln_{S}`, `..._h`, `_x`, `_o`,
//! and the expiry index and count `pld_{S}_{Q}.e`, `.n` that dequeues and acks take)
//! and times as Python's `repr(ms / 1000.0)` (`keys.seconds_arg`). The Python tests pack
//! today's `ScriptCall` arguments with `redis_pack_command` and compare.

use crate::queue::job_buffer::ClaimRun;
use crate::queue::jobs::{AckGroup, JobKeys, NewJob, Placed};
use crate::store::redis_command::Command;

/// Characters of a custom status kept (`keys.CUSTOM_STATUS_LIMIT`).
pub const CUSTOM_STATUS_LIMIT: usize = 3000;

/// Largest group of equal scores a dequeue reorders by id (`store.MAX_TIES_REORDERED`).
pub const MAX_TIES_REORDERED: i64 = 10_000;

/// `JobState` values, as in key names.
const PENDING: u8 = 0;
const FAILED: u8 = 3;

/// A shard's Redis layout: the original's key names (`keys.py`) or the compact ones
/// (`keys_compact.py`). The scripts of both take the same `KEYS` positions and `ARGV`, and the
/// compact layout's `enqueue_jobs.lua` and `ack_jobs.lua` a uniform call too (one argument a job).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Original,
    Compact,
}

impl Layout {
    /// The layout of a shard config's `"layout"` value, or None for an unknown name.
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "original" => Some(Self::Original),
            "compact" => Some(Self::Compact),
            _ => None,
        }
    }
}

/// The key names of one queue on one shard (`keys.QueueKeys`, `keys_compact.CompactQueueKeys`).
pub struct QueueKeys<'a> {
    pub layout: Layout,
    pub shard: &'a str,
    pub queue: &'a str,
}

impl QueueKeys<'_> {
    /// `KEYS[1]` of every queue script: `pln_{S}`, or the compact records hash `plc:{S:Q}:j`
    /// (whose fields `c` and `id` are the queue's own).
    fn exists_key(&self) -> String {
        match self.layout {
            Layout::Original => format!("pln_{}", self.shard),
            Layout::Compact => self.jobs_arg(),
        }
    }

    /// The id counter: `plj_{S}_{Q}`, or the compact records hash (its field `id`).
    fn id_key(&self) -> String {
        match self.layout {
            Layout::Original => format!("plj_{}_{}", self.shard, self.queue),
            Layout::Compact => self.exists_key(),
        }
    }

    /// `ARGV[2]` of the scripts that read jobs: the job hash key prefix `plh_{S}_{Q}.`, or the
    /// compact records hash `plc:{S:Q}:j`.
    fn jobs_arg(&self) -> String {
        match self.layout {
            Layout::Original => format!("plh_{}_{}.", self.shard, self.queue),
            Layout::Compact => format!("plc:{{{}:{}}}:j", self.shard, self.queue),
        }
    }

    /// `plq_{S}_{Q}.p{priority}_{suffix}`, or `plc:{S:Q}:p{priority}:{suffix}`.
    fn priority_key(&self, priority: i64, suffix: &str) -> String {
        match self.layout {
            Layout::Original => format!("plq_{}_{}.p{priority}_{suffix}", self.shard, self.queue),
            Layout::Compact => {
                format!("plc:{{{}:{}}}:p{priority}:{suffix}", self.shard, self.queue)
            }
        }
    }

    fn set_key(&self, priority: i64, state: u8) -> String {
        self.priority_key(priority, &format!("s{state}"))
    }

    /// The queue's expiry index and expired count (`keys.py`'s `pld_{S}_{Q}.e` and `.n`, or
    /// `plc:{S:Q}:xe` and `:xn`).
    fn expiry_keys(&self) -> [String; 2] {
        match self.layout {
            Layout::Original => [
                format!("pld_{}_{}.e", self.shard, self.queue),
                format!("pld_{}_{}.n", self.shard, self.queue),
            ],
            Layout::Compact => [
                format!("plc:{{{}:{}}}:xe", self.shard, self.queue),
                format!("plc:{{{}:{}}}:xn", self.shard, self.queue),
            ],
        }
    }

    /// What a dequeue takes after its ready list to expire the jobs it meets
    /// (`keys_compact.ending_keys`): the FAILED set, the expiry index, the expired count, then
    /// `dedup_end_keys`.
    fn ending_keys(&self, priority: i64) -> Vec<String> {
        let [index, count] = self.expiry_keys();
        let mut keys = vec![self.set_key(priority, FAILED), index, count];
        keys.extend(self.dedup_end_keys());
        keys
    }

    /// What a compact script that ends jobs takes last before its rules tail
    /// (`keys_compact.dedup_end_keys`): the dedup records and runs, `plc:{S:Q}:dk` and `:dr`
    /// (a job's record keeps its dedup key, and the job forgets the key when it ends). None in
    /// the original layout, whose scripts' `KEYS` stay as they are.
    fn dedup_end_keys(&self) -> Vec<String> {
        match self.layout {
            Layout::Original => Vec::new(),
            Layout::Compact => vec![
                format!("plc:{{{}:{}}}:dk", self.shard, self.queue),
                format!("plc:{{{}:{}}}:dr", self.shard, self.queue),
            ],
        }
    }

    /// The priority's ready list, in the compact layout only (`keys_compact.ready_keys`): the
    /// scripts that take one get it after their other keys; the original's `KEYS` stay as they are.
    fn ready_keys(&self, priority: i64) -> Option<String> {
        match self.layout {
            Layout::Original => None,
            Layout::Compact => Some(self.priority_key(priority, "r")),
        }
    }
}

/// What a queue's rules add at the end of a script's `KEYS` and `ARGV` (the "tail" of
/// `lua_compact/lib/groups.lua` and `lua/lib/rules.lua`): built by the store when the rules
/// change (`backends/redis/rules.py`), appended as is. Empty for a queue whose rules ask the
/// script for nothing, so the plain hot path sends what it always sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptTail {
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

impl ScriptTail {
    fn push_args(&self, cmd: &mut Command) {
        for arg in &self.args {
            cmd.bulk(arg.as_bytes());
        }
    }
}

/// `repr(ms / 1000.0)` in Python: the shortest text that reads back as the same float, in
/// positional notation for exponents -4 to 15 (with `.0` when whole), else as `1.5e+16`.
#[must_use]
pub fn seconds_text(ms: impl Into<i128>) -> String {
    let ms = ms.into();
    if (0..DECIMAL_SECONDS_BELOW_MS).contains(&ms) {
        return decimal_seconds(ms);
    }
    #[allow(clippy::cast_precision_loss)] // as Python converts an int to float: round to nearest
    let value = ms as f64 / 1000.0;
    python_float_repr(value)
}

/// Below this many milliseconds (15 digits), `repr(ms / 1000.0)` is the decimal `ms / 1000` itself:
/// a decimal of at most 15 significant digits (`DBL_DIG`) is the only one of its length or
/// shorter that rounds to its double, so it is the shortest round-trip text, and the double is
/// below 1e16, so it prints positionally (exponent -3 to 11 here, "S.0" when whole).
const DECIMAL_SECONDS_BELOW_MS: i128 = 1_000_000_000_000_000;

/// `seconds_text` for `0 <= ms < DECIMAL_SECONDS_BELOW_MS`, without the float formatting: the
/// whole seconds, then the milliseconds with their trailing zeros dropped (".0" when none).
fn decimal_seconds(ms: i128) -> String {
    let whole = ms / 1000;
    let mut frac = ms % 1000;
    let mut out = String::with_capacity(20);
    out.push_str(&whole.to_string());
    out.push('.');
    if frac == 0 {
        out.push('0');
        return out;
    }
    let mut digits = 3;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    // frac < 10**digits: zero-padded to `digits`
    let text = frac.to_string();
    for _ in text.len()..digits {
        out.push('0');
    }
    out.push_str(&text);
    out
}

/// Python's `repr` of a finite float.
#[must_use]
pub fn python_float_repr(value: f64) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let (digits, exp) = shortest_digits(value.abs());
    let sign = if value < 0.0 { "-" } else { "" };
    let mut out = String::with_capacity(24);
    out.push_str(sign);
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let magnitude = exp.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        out.push_str(&magnitude.to_string());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = usize::try_from(exp).unwrap_or(0) + 1;
        if digits.len() > point {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push_str(".0");
        }
    }
    out
}

/// `value`'s (positive, finite) shortest round-trip digits and decimal exponent (`d.ddd × 10^exp`),
/// as Python picks them: where two candidates are equally near the exact value, the even one
/// (Rust's `{:e}` picks the upper). Exact for the times here (`ms / 1000.0`, at most ~60
/// significant digits, checked against 80).
fn shortest_digits(value: f64) -> (String, i32) {
    let split = |text: String| -> (String, i32) {
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let digits = mantissa.chars().filter(char::is_ascii_digit).collect();
        (digits, exp.parse().unwrap_or(0))
    };
    let (digits, exp) = split(format!("{value:e}"));
    let n = digits.len();
    let (exact, exact_exp) = split(format!("{value:.80e}"));
    let tie = exact_exp == exp
        && exact.len() > n
        && exact.as_bytes()[n] == b'5'
        && exact.as_bytes()[n + 1..].iter().all(|&b| b == b'0');
    if !tie {
        return (digits, exp);
    }
    let mut lower = exact.as_bytes()[..n].to_vec();
    if lower[n - 1] % 2 == 1 {
        // the upper candidate: lower + 1 in the last place, carried
        let mut at = n;
        loop {
            if at == 0 {
                lower.insert(0, b'1');
                return (trim_zeros(lower), exp + 1);
            }
            at -= 1;
            if lower[at] == b'9' {
                lower[at] = b'0';
            } else {
                lower[at] += 1;
                break;
            }
        }
    }
    (trim_zeros(lower), exp)
}

fn trim_zeros(mut digits: Vec<u8>) -> String {
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    String::from_utf8(digits).unwrap_or_default()
}

/// The first `limit` characters of `text` (Python's `text[:limit]`).
fn first_chars(text: &str, limit: usize) -> &str {
    match text.char_indices().nth(limit) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// `EVALSHA sha numkeys`, the start of every command here.
fn evalsha(sha: &str, keys: &[String], args: usize, capacity: usize) -> Command {
    let mut cmd = Command::new(3 + keys.len() + args, capacity);
    cmd.bulk(b"EVALSHA");
    cmd.bulk(sha.as_bytes());
    cmd.int(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    for key in keys {
        cmd.bulk(key.as_bytes());
    }
    cmd
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A new job's body, attempts, run after (seconds) and status, as both enqueue scripts take
/// them. `last` keeps the seconds of the previous job's run after: a batch mostly shares one.
fn push_job(cmd: &mut Command, job: &NewJob, last: &mut Option<(i64, String)>) {
    cmd.bulk(&job.body);
    cmd.int(job.attempts_allowed);
    match last {
        Some((ms, text)) if *ms == job.run_after_ms => cmd.bulk(text.as_bytes()),
        _ => {
            let text = seconds_text(job.run_after_ms);
            cmd.bulk(text.as_bytes());
            *last = Some((job.run_after_ms, text));
        }
    }
    cmd.bulk(first_chars(&job.custom_status, CUSTOM_STATUS_LIMIT).as_bytes());
}

/// The bytes of the jobs' bodies and statuses: most of an enqueue command.
fn text_bytes(jobs: &[NewJob]) -> usize {
    jobs.iter()
        .map(|j| j.body.len() + j.custom_status.len())
        .sum()
}

/// Whether `jobs` go to the compact layout's `enqueue_jobs.lua` as a uniform call (see its
/// header; `store._uniform_enqueue`): 1 to `UNIFORM_MAX_JOBS` jobs alike but for their bodies.
fn uniform_batch(keys: &QueueKeys, jobs: &[NewJob]) -> bool {
    let Some(first) = jobs.first() else {
        return false;
    };
    keys.layout == Layout::Compact
        && jobs.len() <= UNIFORM_MAX_JOBS
        && jobs.iter().all(|job| {
            job.priority == first.priority
                && job.attempts_allowed == first.attempts_allowed
                && job.run_after_ms == first.run_after_ms
                && job.custom_status == first.custom_status
        })
}

/// `enqueue_jobs.lua` for `jobs` (any mix of priorities), as `store._enqueue_call`: a uniform
/// call where the layout and the jobs allow it (`uniform_batch`), else five arguments a job.
#[must_use]
pub fn enqueue_command(sha: &str, keys: &QueueKeys, jobs: &[NewJob], now_ms: i64) -> Vec<u8> {
    let priorities = crate::queue::jobs::priorities(jobs);
    let mut key_list = vec![keys.exists_key(), keys.id_key()];
    key_list.extend(priorities.iter().map(|&p| keys.set_key(p, PENDING)));
    key_list.extend(priorities.iter().filter_map(|&p| keys.ready_keys(p)));
    if uniform_batch(keys, jobs) {
        let first = &jobs[0];
        let bodies: usize = jobs.iter().map(|j| j.body.len()).sum();
        let mut cmd = evalsha(
            sha,
            &key_list,
            8 + jobs.len(),
            bodies + 16 * jobs.len() + first.custom_status.len() + 256,
        );
        cmd.bulk(keys.queue.as_bytes());
        cmd.bulk(keys.jobs_arg().as_bytes());
        cmd.bulk(seconds_text(now_ms).as_bytes());
        cmd.bulk(format!("u{}", jobs.len()).as_bytes());
        cmd.int(3); // one priority: its PENDING set is KEYS[3]
        cmd.int(first.attempts_allowed);
        cmd.bulk(seconds_text(first.run_after_ms).as_bytes());
        cmd.bulk(first_chars(&first.custom_status, CUSTOM_STATUS_LIMIT).as_bytes());
        for job in jobs {
            cmd.bulk(&job.body);
        }
        return cmd.into_bytes();
    }
    let mut cmd = evalsha(
        sha,
        &key_list,
        4 + 5 * jobs.len(),
        text_bytes(jobs) + 64 * jobs.len() + 256,
    );
    cmd.bulk(keys.queue.as_bytes());
    cmd.bulk(keys.jobs_arg().as_bytes());
    cmd.bulk(seconds_text(now_ms).as_bytes());
    cmd.int(count(jobs.len()));
    let mut last: Option<(i64, String)> = None;
    for job in jobs {
        // KEYS is 1-based, and two keys come before the PENDING sets.
        let index = priorities.binary_search(&job.priority).unwrap_or(0) + 3;
        cmd.int(count(index));
        push_job(&mut cmd, job, &mut last);
    }
    cmd.into_bytes()
}

/// What `enqueue_keyed_jobs.lua` is called with besides the jobs (`dedup.enqueue_keyed_call`'s
/// first arguments): its keys before the tail's, and the fixed arguments.
pub struct KeyedCall<'a> {
    /// `KEYS` up to the rules' tail: the six fixed keys, then `per` keys for each of the
    /// priorities passed, then the dedup runs key (`dedup.enqueue_keyed_keys`).
    pub keys: &'a [String],
    pub queue: &'a str,
    pub jobs_arg: &'a str,
    pub now_ms: i64,
    /// How many priorities' keys `keys` passes.
    pub priorities: i64,
    /// Keys passed per priority.
    pub per: i64,
    /// The latest held-until a record holds (`dedup.HELD_FOREVER_MS`).
    pub held_forever_ms: i64,
    /// Whether the script takes a uniform call (the compact layout's, ready lists off:
    /// `dedup.enqueue_keyed_call`), sent when the jobs allow it.
    pub uniform: bool,
}

/// The most jobs of a uniform call (`dedup.UNIFORM_MAX_JOBS`).
const UNIFORM_MAX_JOBS: usize = 1000;

/// Whether `sent` (each job with its keys) can go as a uniform call of `enqueue_keyed_jobs.lua`
/// (`dedup._uniform_call`): at most `UNIFORM_MAX_JOBS`, none with an expiry, all alike but for
/// their body, dedup key and group, each with a key if the first has one, and a group likewise.
fn uniform_jobs(sent: &[(&NewJob, &JobKeys)]) -> bool {
    let Some(&(first, first_keys)) = sent.first() else {
        return false;
    };
    sent.len() <= UNIFORM_MAX_JOBS
        && sent.iter().all(|&(job, keys)| {
            keys.expire_at_ms.is_none()
                && job.priority == first.priority
                && job.attempts_allowed == first.attempts_allowed
                && job.run_after_ms == first.run_after_ms
                && job.custom_status == first.custom_status
                && keys.window_ms == first_keys.window_ms
                && keys.key.is_some() == first_keys.key.is_some()
                && keys.group.is_some() == first_keys.group.is_some()
        })
}

/// A job's flags argument: 'k' with a dedup key, 'g' with a group.
fn flags_of(keys: &JobKeys) -> &'static str {
    match (keys.key.is_some(), keys.group.is_some()) {
        (true, true) => "kg",
        (true, false) => "k",
        (false, true) => "g",
        (false, false) => "",
    }
}

/// Keys of `enqueue_keyed_jobs.lua` before the first priority's: the queue key, the counter,
/// the three dedup keys and the expiry index.
const KEYED_FIXED_KEYS: i64 = 6;

/// `enqueue_keyed_jobs.lua` for the jobs of a request that are not repeats of an earlier job's
/// dedup key (`repeated[i]` is `None`), in order, as `dedup.enqueue_keyed_call` sends them (10
/// arguments a job), the rules' `tail` last.
#[must_use]
pub fn enqueue_keyed_command(
    sha: &str,
    call: &KeyedCall<'_>,
    jobs: &[NewJob],
    job_keys: &[JobKeys],
    repeated: &[Option<usize>],
    tail: &ScriptTail,
) -> Vec<u8> {
    let sent = repeated.iter().filter(|r| r.is_none()).count();
    let mut key_list = call.keys.to_vec();
    key_list.extend(tail.keys.iter().cloned());
    let held_max = call.held_forever_ms.saturating_sub(call.now_ms);
    let to_send: Vec<(&NewJob, &JobKeys)> = jobs
        .iter()
        .zip(job_keys)
        .zip(repeated)
        .filter(|(_, r)| r.is_none())
        .map(|(pair, _)| pair)
        .collect();
    if call.uniform && uniform_jobs(&to_send) {
        return uniform_command(sha, call, &key_list, &to_send, held_max, tail);
    }
    let mut cmd = evalsha(
        sha,
        &key_list,
        6 + 10 * sent + tail.args.len(),
        text_bytes(jobs) + 96 * jobs.len() + 256,
    );
    cmd.bulk(call.queue.as_bytes());
    cmd.bulk(call.jobs_arg.as_bytes());
    cmd.bulk(seconds_text(call.now_ms).as_bytes());
    cmd.int(count(sent));
    cmd.int(call.now_ms);
    cmd.int(call.priorities);
    let mut last: Option<(i64, String)> = None;
    for &(job, keys) in &to_send {
        cmd.int(KEYED_FIXED_KEYS + 1 + call.per * (job.priority - 1));
        push_job(&mut cmd, job, &mut last);
        cmd.bulk(keys.key.as_deref().unwrap_or("").as_bytes());
        cmd.int(keys.window_ms.max(0).min(held_max));
        cmd.bulk(flags_of(keys).as_bytes());
        cmd.bulk(keys.group.as_deref().unwrap_or("").as_bytes());
        match keys.expire_at_ms {
            Some(at) => cmd.int(at),
            None => cmd.bulk(b""),
        }
    }
    tail.push_args(&mut cmd);
    cmd.into_bytes()
}

/// A uniform call of `enqueue_keyed_jobs.lua` (see its header): the ten values the jobs share
/// once, their bodies, dedup keys and groups '' there, then three a job.
fn uniform_command(
    sha: &str,
    call: &KeyedCall<'_>,
    key_list: &[String],
    sent: &[(&NewJob, &JobKeys)],
    held_max: i64,
    tail: &ScriptTail,
) -> Vec<u8> {
    let bytes: usize = sent
        .iter()
        .map(|(job, keys)| {
            job.body.len()
                + keys.key.as_ref().map_or(0, String::len)
                + keys.group.as_ref().map_or(0, String::len)
        })
        .sum();
    let mut cmd = evalsha(
        sha,
        key_list,
        16 + 3 * sent.len() + tail.args.len(),
        bytes + 16 * sent.len() + 512,
    );
    cmd.bulk(call.queue.as_bytes());
    cmd.bulk(call.jobs_arg.as_bytes());
    cmd.bulk(seconds_text(call.now_ms).as_bytes());
    cmd.bulk(format!("u{}", sent.len()).as_bytes());
    cmd.int(call.now_ms);
    cmd.int(call.priorities);
    let (first, first_keys) = sent[0];
    cmd.int(KEYED_FIXED_KEYS + 1 + call.per * (first.priority - 1));
    cmd.bulk(b"");
    cmd.int(first.attempts_allowed);
    cmd.bulk(seconds_text(first.run_after_ms).as_bytes());
    cmd.bulk(first_chars(&first.custom_status, CUSTOM_STATUS_LIMIT).as_bytes());
    cmd.bulk(b"");
    cmd.int(first_keys.window_ms.max(0).min(held_max));
    cmd.bulk(flags_of(first_keys).as_bytes());
    cmd.bulk(b"");
    cmd.bulk(b"");
    for &(job, keys) in sent {
        cmd.bulk(&job.body);
        cmd.bulk(keys.key.as_deref().unwrap_or("").as_bytes());
        cmd.bulk(keys.group.as_deref().unwrap_or("").as_bytes());
    }
    tail.push_args(&mut cmd);
    cmd.into_bytes()
}

/// The placement of every job of a request from `enqueue_keyed_jobs.lua`'s reply for the jobs
/// it was sent (`values`: `(priority, local_id, deduplicated 0 or 1)` per job sent, in order):
/// a repeat of an earlier job's key (`repeated[i]`) gets that job's place, deduplicated.
/// `None` when the reply does not hold three values per job sent.
#[must_use]
pub fn keyed_placement(values: &[i64], repeated: &[Option<usize>]) -> Option<Vec<Placed>> {
    let sent = repeated.iter().filter(|r| r.is_none()).count();
    if values.len() != 3 * sent {
        return None;
    }
    let mut answers = values.chunks_exact(3);
    let mut placed: Vec<Placed> = Vec::with_capacity(repeated.len());
    for &earlier in repeated {
        let place = match earlier {
            None => {
                let v = answers.next()?;
                (v[0], v[1], v[2] == 1)
            }
            Some(j) => (placed[j].0, placed[j].1, true),
        };
        placed.push(place);
    }
    Some(placed)
}

/// `dequeue_jobs.lua` for one priority, as `store._dequeue_call` with `limit > 0`.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn dequeue_command(
    sha: &str,
    keys: &QueueKeys,
    priority: i64,
    limit: i64,
    claim: &str,
    now_ms: i64,
    dry_run: bool,
    max_bytes: i64,
    tail: &ScriptTail,
) -> Vec<u8> {
    let mut key_list = vec![
        keys.exists_key(),
        keys.set_key(priority, PENDING),
        keys.set_key(priority, 1),
        keys.priority_key(priority, "h"),
        keys.priority_key(priority, "x"),
        keys.priority_key(priority, "o"),
    ];
    key_list.extend(keys.ready_keys(priority));
    key_list.extend(keys.ending_keys(priority));
    key_list.extend(tail.keys.iter().cloned());
    let mut cmd = evalsha(sha, &key_list, 8 + tail.args.len(), 660 + claim.len());
    cmd.bulk(keys.queue.as_bytes());
    cmd.bulk(keys.jobs_arg().as_bytes());
    cmd.bulk(seconds_text(now_ms).as_bytes());
    cmd.int(limit);
    cmd.bulk(claim.as_bytes());
    cmd.bulk(if dry_run { b"1" } else { b"0" });
    cmd.int(MAX_TIES_REORDERED);
    cmd.int(max_bytes);
    tail.push_args(&mut cmd);
    cmd.into_bytes()
}

/// `claim_reserved.lua` for the dequeue broker's claims of one queue on one shard, as
/// `reservations.claim_call`: runs of jobs sharing a priority and a claim go as one group.
#[must_use]
pub fn claim_reserved_command(
    sha: &str,
    keys: &QueueKeys,
    runs: &[ClaimRun],
    reservation: &str,
    now_ms: i64,
    tail: &ScriptTail,
) -> Vec<u8> {
    let mut priorities: Vec<i64> = runs
        .iter()
        .flat_map(|r| r.keys.iter().map(|&(p, _)| p))
        .collect();
    priorities.sort_unstable();
    priorities.dedup();
    let mut key_list = vec![keys.exists_key()];
    for &p in &priorities {
        key_list.extend([
            keys.set_key(p, PENDING),
            keys.set_key(p, 1),
            keys.priority_key(p, "h"),
            keys.priority_key(p, "x"),
            keys.priority_key(p, "o"),
        ]);
    }
    // Groups: consecutive jobs of one run with one priority.
    let mut groups: Vec<(i64, &str, Vec<i64>)> = Vec::new();
    for run in runs {
        let mut current: Option<(i64, Vec<i64>)> = None;
        for &(priority, local_id) in &run.keys {
            match &mut current {
                Some((p, ids)) if *p == priority => ids.push(local_id),
                _ => {
                    if let Some((p, ids)) = current.take() {
                        groups.push((p, &run.claim, ids));
                    }
                    current = Some((priority, vec![local_id]));
                }
            }
        }
        if let Some((p, ids)) = current {
            groups.push((p, &run.claim, ids));
        }
    }
    // Consecutive groups of one priority and claim (two runs of one claim) join, as in Python.
    let mut merged: Vec<(i64, &str, Vec<i64>)> = Vec::with_capacity(groups.len());
    for (p, claim, ids) in groups {
        match merged.last_mut() {
            Some((lp, lc, lids)) if *lp == p && *lc == claim => lids.extend(ids),
            _ => merged.push((p, claim, ids)),
        }
    }
    key_list.extend(tail.keys.iter().cloned());
    let jobs: usize = merged.iter().map(|(_, _, ids)| ids.len()).sum();
    let claims: usize = merged.iter().map(|(_, c, _)| c.len()).sum();
    let mut cmd = evalsha(
        sha,
        &key_list,
        5 + 3 * merged.len() + jobs + tail.args.len(),
        256 + claims + 24 * jobs,
    );
    cmd.bulk(keys.queue.as_bytes());
    cmd.bulk(keys.jobs_arg().as_bytes());
    cmd.bulk(seconds_text(now_ms).as_bytes());
    cmd.bulk(reservation.as_bytes());
    cmd.int(count(merged.len()));
    for (priority, claim, ids) in &merged {
        // KEYS is 1-based: the names key, then five per priority.
        let index = priorities.binary_search(priority).unwrap_or(0) * 5 + 2;
        cmd.int(count(index));
        cmd.bulk(claim.as_bytes());
        cmd.int(count(ids.len()));
        for &id in ids {
            cmd.int(id);
        }
    }
    tail.push_args(&mut cmd);
    cmd.into_bytes()
}

/// `count_jobs.lua` of priority 1's PENDING set, counting nothing: only whether the queue exists
/// (`ShardScripts.require_queue_call`, what a dequeue of at most 0 jobs sends).
#[must_use]
pub fn require_queue_command(sha: &str, keys: &QueueKeys) -> Vec<u8> {
    let key_list = [keys.exists_key(), keys.set_key(1, PENDING)];
    let mut cmd = evalsha(sha, &key_list, 3, 256);
    cmd.bulk(keys.queue.as_bytes());
    cmd.int(0);
    cmd.int(0);
    cmd.into_bytes()
}

/// Whether `group` goes to the compact layout's `ack_jobs.lua` as a uniform call (see its
/// header; `store._uniform_acks`): 1 to `UNIFORM_MAX_JOBS` successes of one priority that append no
/// status.
fn uniform_acks(keys: &QueueKeys, group: &AckGroup) -> bool {
    let Some((_, first)) = group.items().next() else {
        return false;
    };
    keys.layout == Layout::Compact
        && group.len() <= UNIFORM_MAX_JOBS
        && group.items().all(|(succeeded, item)| {
            succeeded && item.priority == first.priority && item.append_custom_status.is_empty()
        })
}

/// `ack_jobs.lua` for a group (successes first), as `store._ack_call`: a uniform call where the
/// layout and the acks allow it (`uniform_acks`), else five arguments an ack.
#[must_use]
pub fn ack_command(
    sha: &str,
    keys: &QueueKeys,
    group: &AckGroup,
    now_ms: i64,
    tail: &ScriptTail,
) -> Vec<u8> {
    let priorities = group.priorities();
    let mut key_list = vec![keys.exists_key()];
    key_list.extend(keys.expiry_keys());
    for &p in &priorities {
        key_list.extend((0..4).map(|state| keys.set_key(p, state)));
    }
    key_list.extend(keys.dedup_end_keys());
    key_list.extend(tail.keys.iter().cloned());
    if uniform_acks(keys, group) {
        let mut cmd = evalsha(
            sha,
            &key_list,
            6 + group.len() + tail.args.len(),
            24 * group.len() + 256,
        );
        cmd.bulk(keys.queue.as_bytes());
        cmd.bulk(keys.jobs_arg().as_bytes());
        cmd.int(count(CUSTOM_STATUS_LIMIT));
        cmd.bulk(seconds_text(now_ms).as_bytes());
        cmd.bulk(format!("u{}", group.len()).as_bytes());
        cmd.int(4); // one priority: its PENDING set is KEYS[4]
        for (_, item) in group.items() {
            cmd.int(item.local_id);
        }
        tail.push_args(&mut cmd);
        return cmd.into_bytes();
    }
    let statuses: usize = group
        .items()
        .map(|(_, a)| a.append_custom_status.len())
        .sum();
    let mut cmd = evalsha(
        sha,
        &key_list,
        5 + 5 * group.len() + tail.args.len(),
        statuses + 64 * group.len() + 256,
    );
    cmd.bulk(keys.queue.as_bytes());
    cmd.bulk(keys.jobs_arg().as_bytes());
    cmd.int(count(CUSTOM_STATUS_LIMIT));
    let now = seconds_text(now_ms);
    cmd.bulk(now.as_bytes());
    cmd.int(count(group.len()));
    let mut last: Option<(i128, String)> = None;
    for (succeeded, item) in group.items() {
        // KEYS[1] is the names key, KEYS[2..3] the expiry keys, then four sets per priority:
        // PENDING's 1-based index.
        let index = priorities.binary_search(&item.priority).unwrap_or(0) * 4 + 4;
        cmd.int(count(index));
        cmd.int(item.local_id);
        cmd.bulk(if succeeded { b"s" } else { b"f" });
        cmd.bulk(item.append_custom_status.as_bytes());
        // as Python adds them: past i64 too
        let retry_ms = i128::from(now_ms) + i128::from(item.retry_delay_ms);
        match &last {
            Some((ms, text)) if *ms == retry_ms => cmd.bulk(text.as_bytes()),
            _ => {
                let text = seconds_text(retry_ms);
                cmd.bulk(text.as_bytes());
                last = Some((retry_ms, text));
            }
        }
    }
    tail.push_args(&mut cmd);
    cmd.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::jobs::AckItem;

    fn original<'a>(shard: &'a str, queue: &'a str) -> QueueKeys<'a> {
        QueueKeys {
            layout: Layout::Original,
            shard,
            queue,
        }
    }

    #[test]
    fn compact_keys_share_the_queue_hash_tag() {
        let keys = QueueKeys {
            layout: Layout::Compact,
            shard: "s",
            queue: "q",
        };
        let cmd = dequeue_command(
            "sha",
            &keys,
            2,
            10,
            "c",
            1,
            false,
            64,
            &ScriptTail::default(),
        );
        assert_eq!(args(&cmd)[2], "12");
        assert_eq!(
            &args(&cmd)[3..17],
            [
                "plc:{s:q}:j",
                "plc:{s:q}:p2:s0",
                "plc:{s:q}:p2:s1",
                "plc:{s:q}:p2:h",
                "plc:{s:q}:p2:x",
                "plc:{s:q}:p2:o",
                "plc:{s:q}:p2:r",
                "plc:{s:q}:p2:s3",
                "plc:{s:q}:xe",
                "plc:{s:q}:xn",
                "plc:{s:q}:dk",
                "plc:{s:q}:dr",
                "q",
                "plc:{s:q}:j"
            ]
        );
        // an ack passes the dedup records and runs after its sets, before the tail
        let tail = ScriptTail {
            keys: vec!["plc:{s:q}:ga".into()],
            args: vec!["1".into()],
        };
        let group = AckGroup {
            succeeded: vec![AckItem {
                priority: 2,
                local_id: 7,
                append_custom_status: String::new(),
                retry_delay_ms: 0,
            }],
            failed: Vec::new(),
        };
        let cmd = ack_command("sha", &keys, &group, 1, &tail);
        assert_eq!(args(&cmd)[2], "10");
        assert_eq!(
            &args(&cmd)[7..13],
            [
                "plc:{s:q}:p2:s1",
                "plc:{s:q}:p2:s2",
                "plc:{s:q}:p2:s3",
                "plc:{s:q}:dk",
                "plc:{s:q}:dr",
                "plc:{s:q}:ga"
            ]
        );
        let job = NewJob {
            priority: 1,
            body: b"b".to_vec(),
            run_after_ms: 1000,
            attempts_allowed: 2,
            custom_status: String::new(),
        };
        let cmd = enqueue_command("sha", &keys, &[job], 2000);
        assert_eq!(args(&cmd)[2], "4");
        assert_eq!(
            &args(&cmd)[3..8],
            [
                "plc:{s:q}:j",
                "plc:{s:q}:j",
                "plc:{s:q}:p1:s0",
                "plc:{s:q}:p1:r",
                "q"
            ]
        );
        assert_eq!(Layout::named("compact"), Some(Layout::Compact));
        assert_eq!(Layout::named("Compact"), None);
    }

    #[test]
    fn a_tail_goes_after_the_keys_and_the_arguments() {
        let tail = ScriptTail {
            keys: vec!["plq_s_q.p1_s1".to_owned(), "plq_s_q.p2_s1".to_owned()],
            args: vec![
                "1".to_owned(),
                "5".to_owned(),
                "0".to_owned(),
                "2".to_owned(),
            ],
        };
        let cmd = dequeue_command("sha", &original("s", "q"), 2, 10, "c", 1, false, 64, &tail);
        let a = args(&cmd);
        assert_eq!(a[2], "11");
        assert_eq!(&a[12..14], ["plq_s_q.p1_s1", "plq_s_q.p2_s1"]);
        assert_eq!(&a[a.len() - 4..], ["1", "5", "0", "2"]);
        assert!(cmd.starts_with(b"*26\r\n"));
    }

    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (1_700_000_000.123, "1700000000.123"),
            (1_700_000_000.0, "1700000000.0"),
            (0.001, "0.001"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000_012_5, "1.25e-05"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123_456_789_012_345.6, "123456789012345.6"),
            (-9.223_372_036_854_776e15, "-9223372036854776.0"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            // ties between two shortest candidates go to the even one, as in Python
            (768_945_072_258_468_229.0 / 1000.0, "768945072258468.2"),
            (0.125, "0.125"),
        ];
        for (value, text) in cases {
            assert_eq!(python_float_repr(value), text, "{value}");
        }
        assert_eq!(seconds_text(1_700_000_000_123_i64), "1700000000.123");
        assert_eq!(seconds_text(i64::MIN), "-9223372036854776.0");
        assert_eq!(seconds_text(i64::MAX), "9223372036854776.0");
        assert_eq!(seconds_text(-1_i64), "-0.001");
        assert_eq!(
            seconds_text(i128::from(i64::MAX) * 2),
            "1.844674407370955e+16"
        );
    }

    #[test]
    fn decimal_seconds_match_the_float_repr() {
        let mut values: Vec<i128> = (0..20_000).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            // xorshift: spread over every magnitude below the fast path's bound
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = u32::try_from(x % 16).unwrap_or(0);
            values.push(i128::from(x >> 4) % 10_i128.pow(digits).max(1));
        }
        for k in 1..=15 {
            let p = 10_i128.pow(k);
            values.extend([p - 1, p, p + 1, p - 10, p + 10, p / 2, p - 999]);
        }
        values.push(1_700_000_000_123);
        for ms in values {
            if !(0..DECIMAL_SECONDS_BELOW_MS).contains(&ms) {
                continue;
            }
            #[allow(clippy::cast_precision_loss)]
            let slow = python_float_repr(ms as f64 / 1000.0);
            assert_eq!(decimal_seconds(ms), slow, "{ms}");
        }
        assert_eq!(seconds_text(DECIMAL_SECONDS_BELOW_MS), "1000000000000.0");
        assert_eq!(seconds_text(0_i64), "0.0");
        assert_eq!(seconds_text(10_i64), "0.01");
        assert_eq!(seconds_text(1_i64), "0.001");
    }

    #[test]
    fn statuses_are_cut_by_characters() {
        assert_eq!(first_chars("héllo", 2), "hé");
        assert_eq!(first_chars("hé", 5), "hé");
        assert_eq!(first_chars("", 0), "");
    }

    fn args(command: &[u8]) -> Vec<String> {
        // Every other line after the header is an argument (no CRLF inside these test values).
        let text = String::from_utf8(command.to_vec()).unwrap();
        text.split("\r\n")
            .skip(2)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_batch_of_one_kind_goes_as_a_uniform_call() {
        let job = |body: &[u8], priority| NewJob {
            priority,
            body: body.to_vec(),
            run_after_ms: 1500,
            attempts_allowed: 3,
            custom_status: String::new(),
        };
        let keyed = |key: &str, expire_at_ms| JobKeys {
            key: Some(key.to_owned()),
            window_ms: 0,
            group: Some("g".to_owned()),
            expire_at_ms,
        };
        let keys = vec!["k".to_owned()];
        let mut call = KeyedCall {
            keys: &keys,
            queue: "q",
            jobs_arg: "j",
            now_ms: 2000,
            priorities: 1,
            per: 4,
            held_forever_ms: i64::MAX,
            uniform: true,
        };
        let jobs = [job(b"a", 1), job(b"b", 1)];
        let both = [keyed("x", None), keyed("y", None)];
        let command = |call: &KeyedCall<'_>, job_keys: &[JobKeys]| {
            enqueue_keyed_command(
                "sha",
                call,
                &jobs,
                job_keys,
                &[None, None],
                &ScriptTail::default(),
            )
        };
        assert_eq!(
            args(&command(&call, &both))[2..],
            [
                "1", "k", "q", "j", "2.0", "u2", "2000", "1", "7", "", "3", "1.5", "", "", "0",
                "kg", "", "", "a", "x", "g", "b", "y", "g"
            ]
        );
        // an expiry, or a script that takes no uniform call: ten values a job
        let expiring = [keyed("x", None), keyed("y", Some(9000))];
        assert_eq!(args(&command(&call, &expiring))[7], "2");
        call.uniform = false;
        assert_eq!(args(&command(&call, &both))[7], "2");
    }

    #[test]
    fn compact_batches_and_successes_of_one_kind_go_as_uniform_calls() {
        let compact = QueueKeys {
            layout: Layout::Compact,
            shard: "s",
            queue: "q",
        };
        let job = |body: &[u8], attempts_allowed| NewJob {
            priority: 2,
            body: body.to_vec(),
            run_after_ms: 1500,
            attempts_allowed,
            custom_status: "st".to_owned(),
        };
        let alike = [job(b"a", 3), job(b"b", 3)];
        let a = args(&enqueue_command("sha", &compact, &alike, 2000));
        // KEYS: the meta hash twice, the PENDING set, the ready list
        assert_eq!(a[2], "4");
        assert_eq!(
            &a[7..],
            [
                "q",
                "plc:{s:q}:j",
                "2.0",
                "u2",
                "3",
                "3",
                "1.5",
                "st",
                "a",
                "b"
            ]
        );
        // jobs that differ in more than their bodies, or the original layout: five values a job
        let mixed = [job(b"a", 3), job(b"b", 4)];
        assert_eq!(
            args(&enqueue_command("sha", &compact, &mixed, 2000))[10],
            "2"
        );
        assert_eq!(
            args(&enqueue_command("sha", &original("s", "q"), &alike, 2000))[9],
            "2"
        );

        let item = |priority, local_id, status: &str| AckItem {
            priority,
            local_id,
            append_custom_status: status.to_owned(),
            retry_delay_ms: 0,
        };
        let acks = |succeeded, failed| AckGroup { succeeded, failed };
        let ack = |group: &AckGroup, keys: &QueueKeys<'_>| {
            args(&ack_command(
                "sha",
                keys,
                group,
                1000,
                &ScriptTail::default(),
            ))
        };
        let plain = acks(vec![item(2, 7, ""), item(2, 9, "")], vec![]);
        let a = ack(&plain, &compact);
        let at = a.iter().position(|v| v == "q").unwrap();
        assert_eq!(
            &a[at..],
            ["q", "plc:{s:q}:j", "3000", "1.0", "u2", "4", "7", "9"]
        );
        // a status, a failure, a second priority, or the original layout: five values an ack
        for group in [
            acks(vec![item(2, 7, ""), item(2, 9, "x")], vec![]),
            acks(vec![item(2, 7, "")], vec![item(2, 9, "")]),
            acks(vec![item(2, 7, ""), item(1, 9, "")], vec![]),
        ] {
            let a = ack(&group, &compact);
            let at = a.iter().position(|v| v == "q").unwrap();
            assert_eq!(a[at + 4], "2");
        }
        let a = ack(&plain, &original("s", "q"));
        assert_eq!(a[a.iter().position(|v| v == "q").unwrap() + 4], "2");
    }

    #[test]
    fn enqueue_keys_and_arguments() {
        let job = |priority, run_after_ms| NewJob {
            priority,
            body: b"b".to_vec(),
            run_after_ms,
            attempts_allowed: 2,
            custom_status: "st".to_owned(),
        };
        let cmd = enqueue_command(
            "sha",
            &original("s1", "q"),
            &[job(3, 1000), job(1, 1500)],
            2000,
        );
        assert!(cmd.starts_with(b"*21\r\n"));
        assert_eq!(
            args(&cmd),
            [
                "EVALSHA",
                "sha",
                "4",
                "pln_s1",
                "plj_s1_q",
                "plq_s1_q.p1_s0",
                "plq_s1_q.p3_s0",
                "q",
                "plh_s1_q.",
                "2.0",
                "2",
                "4",
                "b",
                "2",
                "1.0",
                "st",
                "3",
                "b",
                "2",
                "1.5",
                "st"
            ]
        );
    }

    #[test]
    fn dequeue_and_ack_keys_and_arguments() {
        let cmd = dequeue_command(
            "sha",
            &original("s", "q"),
            2,
            10,
            "c",
            1,
            true,
            4096,
            &ScriptTail::default(),
        );
        assert_eq!(
            args(&cmd),
            [
                "EVALSHA",
                "sha",
                "9",
                "pln_s",
                "plq_s_q.p2_s0",
                "plq_s_q.p2_s1",
                "plq_s_q.p2_h",
                "plq_s_q.p2_x",
                "plq_s_q.p2_o",
                "plq_s_q.p2_s3",
                "pld_s_q.e",
                "pld_s_q.n",
                "q",
                "plh_s_q.",
                "0.001",
                "10",
                "c",
                "1",
                "10000",
                "4096"
            ]
        );
        let item = |priority, local_id, retry_delay_ms| AckItem {
            priority,
            local_id,
            append_custom_status: "x".to_owned(),
            retry_delay_ms,
        };
        let group = AckGroup {
            succeeded: vec![item(2, 7, 0)],
            failed: vec![item(1, 8, 500)],
        };
        let cmd = ack_command(
            "sha",
            &original("s", "q"),
            &group,
            1000,
            &ScriptTail::default(),
        );
        let a = args(&cmd);
        assert_eq!(a[2], "11");
        assert_eq!(
            &a[3..7],
            ["pln_s", "pld_s_q.e", "pld_s_q.n", "plq_s_q.p1_s0"]
        );
        assert_eq!(a[13], "plq_s_q.p2_s3");
        assert_eq!(
            &a[14..],
            [
                "q", "plh_s_q.", "3000", "1.0", "2", "8", "7", "s", "x", "1.0", "4", "8", "f", "x",
                "1.5"
            ]
        );
        let cmd = require_queue_command("sha", &original("s", "q"));
        assert_eq!(
            args(&cmd),
            [
                "EVALSHA",
                "sha",
                "2",
                "pln_s",
                "plq_s_q.p1_s0",
                "q",
                "0",
                "0"
            ]
        );
    }
}
