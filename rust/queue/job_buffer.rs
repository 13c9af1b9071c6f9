//! The dequeue broker's per-queue buffer of reserved jobs. Pure Rust; bodies are opaque (`B`).
//!
//! The broker (Python, `pinlater/broker.py`) reserves jobs in the store ahead of demand and keeps
//! them here until a worker's dequeue takes them. Invariants of a [`JobBuffer`]:
//! - it never holds more than `capacity` entries: a push beyond that hands the overflow back,
//!   and the caller releases those reservations; it counts the bytes of the bodies it holds
//!   (the broker refills it only while they are under its byte bound);
//! - [`JobBuffer::take`] returns entries in priority order (1 first), then first in, first out
//!   within a priority; an entry is returned by at most one call (take, `take_older_than` or
//!   drain) and then forgotten;
//! - lengths (total and per priority) and bytes always equal what a drain would return.
//!
//! A [`HandOut`] is what one worker's dequeue took: the fresh jobs it gets and the stale ones
//! (reserved too long ago to hand out) to release. A [`ClaimLedger`] gathers the claims of the
//! hand-outs of one turn of the server's loop, one [`ClaimBatch`] per (queue, shard): one store
//! call each, every job with its own worker's claim; until they are written, it answers whether
//! it holds a job (what an ack on this server waits for).
//!
//! Nothing here panics on any input; the Python binding still runs every call under
//! `catch_unwind` like the rest of the extension.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// A body whose length a buffer counts.
pub trait BodyLen {
    fn body_len(&self) -> usize;
}

impl BodyLen for Vec<u8> {
    fn body_len(&self) -> usize {
        self.len()
    }
}

/// One reserved job held for a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedJob<B> {
    /// The shard that holds the job (the descriptor's shard name).
    pub shard: String,
    pub priority: i64,
    pub local_id: i64,
    pub body: B,
    pub attempts_allowed: i64,
    pub attempts_remaining: i64,
    /// When the reservation was made (ms since the epoch): the age bound is measured from it.
    pub reserved_at_ms: i64,
}

/// A bounded buffer of reserved jobs, by priority then arrival order.
#[derive(Debug)]
pub struct JobBuffer<B> {
    capacity: usize,
    len: usize,
    /// The bodies' bytes held now.
    bytes: usize,
    by_priority: BTreeMap<i64, VecDeque<BufferedJob<B>>>,
}

impl<B: BodyLen> JobBuffer<B> {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            len: 0,
            bytes: 0,
            by_priority: BTreeMap::new(),
        }
    }

    /// The bytes of the bodies held now.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forget `out`'s entries, taken from the buffer, in the counts.
    fn taken(&mut self, out: &[BufferedJob<B>]) {
        self.len -= out.len();
        self.bytes -= out.iter().map(|j| j.body.body_len()).sum::<usize>();
    }

    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries held now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free places: how many jobs a refill may reserve.
    #[must_use]
    pub fn room(&self) -> usize {
        self.capacity.saturating_sub(self.len)
    }

    /// Entries held for one priority.
    #[must_use]
    pub fn len_priority(&self, priority: i64) -> usize {
        self.by_priority.get(&priority).map_or(0, VecDeque::len)
    }

    /// `(priority, entries)` for every priority that holds any, lowest number first.
    pub fn lengths(&self) -> impl Iterator<Item = (i64, usize)> + '_ {
        self.by_priority
            .iter()
            .filter(|(_, jobs)| !jobs.is_empty())
            .map(|(priority, jobs)| (*priority, jobs.len()))
    }

    /// Appends jobs (each to the back of its priority) while there is room; returns the ones
    /// that did not fit, in the order given.
    pub fn push(&mut self, jobs: impl IntoIterator<Item = BufferedJob<B>>) -> Vec<BufferedJob<B>> {
        let mut rejected = Vec::new();
        for job in jobs {
            if self.len >= self.capacity {
                rejected.push(job);
                continue;
            }
            self.bytes += job.body.body_len();
            self.by_priority
                .entry(job.priority)
                .or_default()
                .push_back(job);
            self.len += 1;
        }
        rejected
    }

    /// Up to `limit` entries: priority 1 first, then first in, first out.
    pub fn take(&mut self, limit: usize) -> Vec<BufferedJob<B>> {
        self.take_within(limit, u64::MAX)
    }

    /// Up to `limit` entries as `take` takes them, each while the bodies taken before it hold
    /// fewer than `max_bytes` bytes (the first always: `within_bytes`).
    pub fn take_within(&mut self, limit: usize, max_bytes: u64) -> Vec<BufferedJob<B>> {
        let mut out = Vec::with_capacity(limit.min(self.len));
        let mut spent: u64 = 0;
        'priorities: for jobs in self.by_priority.values_mut() {
            while out.len() < limit {
                if !out.is_empty() && spent >= max_bytes {
                    break 'priorities; // (as within_bytes takes them)
                }
                let Some(job) = jobs.pop_front() else {
                    break;
                };
                spent = spent.saturating_add(job.body.body_len() as u64);
                out.push(job);
            }
            if out.len() >= limit {
                break;
            }
        }
        self.taken(&out);
        out
    }

    /// Up to `limit` entries as [`JobBuffer::take_within`] takes them, split into those
    /// reserved at or after `fresh_after_ms` (to hand out) and older ones (to release), each in
    /// take order.
    pub fn hand_out(&mut self, limit: usize, max_bytes: u64, fresh_after_ms: i64) -> HandOut<B> {
        let (fresh, stale) = self
            .take_within(limit, max_bytes)
            .into_iter()
            .partition(|job| job.reserved_at_ms >= fresh_after_ms);
        HandOut { fresh, stale }
    }

    /// Every entry reserved before `cutoff_ms` (strictly), oldest first within a priority.
    pub fn take_older_than(&mut self, cutoff_ms: i64) -> Vec<BufferedJob<B>> {
        let mut out = Vec::new();
        for jobs in self.by_priority.values_mut() {
            if !jobs.iter().any(|job| job.reserved_at_ms < cutoff_ms) {
                continue;
            }
            let (old, young): (VecDeque<_>, VecDeque<_>) = std::mem::take(jobs)
                .into_iter()
                .partition(|job| job.reserved_at_ms < cutoff_ms);
            *jobs = young;
            out.extend(old);
        }
        self.taken(&out);
        out
    }

    /// The entries of the named jobs, `(shard, priority, local_id)` each (names of jobs the
    /// buffer does not hold are passed over), in take order; the others keep their order.
    pub fn take_named(&mut self, names: &HashSet<(&str, i64, i64)>) -> Vec<BufferedJob<B>> {
        let mut out = Vec::new();
        let priorities: HashSet<i64> = names.iter().map(|&(_, priority, _)| priority).collect();
        for (priority, jobs) in &mut self.by_priority {
            if !priorities.contains(priority) {
                continue;
            }
            let is_named = |job: &BufferedJob<B>| {
                names.contains(&(job.shard.as_str(), job.priority, job.local_id))
            };
            if !jobs.iter().any(is_named) {
                continue;
            }
            let (taken, kept): (VecDeque<_>, VecDeque<_>) =
                std::mem::take(jobs).into_iter().partition(is_named);
            *jobs = kept;
            out.extend(taken);
        }
        self.taken(&out);
        out
    }

    /// Every entry, by priority then arrival; the buffer is empty afterwards.
    pub fn drain(&mut self) -> Vec<BufferedJob<B>> {
        let mut out = Vec::with_capacity(self.len);
        for jobs in self.by_priority.values_mut() {
            out.extend(jobs.drain(..));
        }
        self.len = 0;
        self.bytes = 0;
        out
    }
}

/// What one dequeue took from a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOut<B> {
    /// The jobs for the worker, in take order.
    pub fresh: Vec<BufferedJob<B>>,
    /// Entries whose reservation may be about to lapse: released, never handed out.
    pub stale: Vec<BufferedJob<B>>,
}

/// Consecutive jobs of one (queue, shard) claimed for one worker's dequeue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRun {
    pub claim: String,
    /// `(priority, local_id)` of each job, in hand-out order.
    pub keys: Vec<(i64, i64)>,
}

/// The claims one store call writes: every handed-out job of one queue on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimBatch {
    pub queue: String,
    pub shard: String,
    pub runs: Vec<ClaimRun>,
}

impl ClaimBatch {
    /// How many jobs the batch claims.
    #[must_use]
    pub fn len(&self) -> usize {
        self.runs.iter().map(|r| r.keys.len()).sum()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The claims of hand-outs not yet written, by (queue, shard) in first-seen order.
#[derive(Debug, Default)]
pub struct ClaimLedger {
    batches: Vec<ClaimBatch>,
    /// queue -> shard -> index into `batches`.
    index: HashMap<String, HashMap<String, usize>>,
    /// `(batch index, priority, local_id)` of every job.
    keys: HashSet<(usize, i64, i64)>,
}

impl ClaimLedger {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Books the claims of `jobs`, handed out of `queue` under `claim`.
    pub fn add<B>(&mut self, queue: &str, claim: &str, jobs: &[BufferedJob<B>]) {
        if jobs.is_empty() {
            return;
        }
        let shards = self.index.entry(queue.to_owned()).or_default();
        for job in jobs {
            let at = if let Some(&at) = shards.get(job.shard.as_str()) {
                at
            } else {
                let at = self.batches.len();
                shards.insert(job.shard.clone(), at);
                self.batches.push(ClaimBatch {
                    queue: queue.to_owned(),
                    shard: job.shard.clone(),
                    runs: Vec::new(),
                });
                at
            };
            let runs = &mut self.batches[at].runs;
            match runs.last_mut() {
                Some(run) if run.claim == claim => run.keys.push((job.priority, job.local_id)),
                _ => runs.push(ClaimRun {
                    claim: claim.to_owned(),
                    keys: vec![(job.priority, job.local_id)],
                }),
            }
            self.keys.insert((at, job.priority, job.local_id));
        }
    }

    /// Jobs booked.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether the job is booked here.
    #[must_use]
    pub fn holds(&self, queue: &str, shard: &str, priority: i64, local_id: i64) -> bool {
        self.index
            .get(queue)
            .and_then(|shards| shards.get(shard))
            .is_some_and(|&at| self.keys.contains(&(at, priority, local_id)))
    }

    /// Whether any job of `queue` is booked here.
    #[must_use]
    pub fn holds_queue(&self, queue: &str) -> bool {
        self.index.contains_key(queue)
    }

    /// One batch per (queue, shard), in first-seen order.
    #[must_use]
    pub fn batches(&self) -> &[ClaimBatch] {
        &self.batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BodyLen for u32 {
        fn body_len(&self) -> usize {
            *self as usize
        }
    }

    fn job(priority: i64, local_id: i64, reserved_at_ms: i64) -> BufferedJob<u32> {
        BufferedJob {
            shard: "1".to_owned(),
            priority,
            local_id,
            body: 0,
            attempts_allowed: 2,
            attempts_remaining: 2,
            reserved_at_ms,
        }
    }

    fn on(shard: &str, priority: i64, local_id: i64, reserved_at_ms: i64) -> BufferedJob<u32> {
        BufferedJob {
            shard: shard.to_owned(),
            ..job(priority, local_id, reserved_at_ms)
        }
    }

    fn ids(jobs: &[BufferedJob<u32>]) -> Vec<(i64, i64)> {
        jobs.iter().map(|j| (j.priority, j.local_id)).collect()
    }

    #[test]
    fn take_is_priority_order_then_fifo() {
        let mut buffer = JobBuffer::new(10);
        assert!(buffer
            .push([job(2, 1, 0), job(1, 2, 0), job(3, 3, 0), job(1, 4, 0)])
            .is_empty());
        assert_eq!(buffer.len(), 4);
        assert_eq!(ids(&buffer.take(3)), vec![(1, 2), (1, 4), (2, 1)]);
        assert_eq!(buffer.len(), 1);
        assert_eq!(ids(&buffer.take(5)), vec![(3, 3)]);
        assert!(buffer.is_empty());
        assert!(buffer.take(5).is_empty());
    }

    #[test]
    fn push_is_bounded_and_hands_back_the_overflow() {
        let mut buffer = JobBuffer::new(2);
        let rejected = buffer.push([job(1, 1, 0), job(1, 2, 0), job(1, 3, 0), job(2, 4, 0)]);
        assert_eq!(ids(&rejected), vec![(1, 3), (2, 4)]);
        assert_eq!((buffer.len(), buffer.room()), (2, 0));
        buffer.take(1);
        assert_eq!(buffer.room(), 1);
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        let mut buffer = JobBuffer::new(0);
        assert_eq!(buffer.push([job(1, 1, 0)]).len(), 1);
        assert!(buffer.is_empty());
        assert!(buffer.take(0).is_empty());
    }

    #[test]
    fn take_older_than_keeps_the_young_in_order() {
        let mut buffer = JobBuffer::new(10);
        buffer.push([job(1, 1, 5), job(1, 2, 20), job(1, 3, 6), job(2, 4, 1)]);
        assert_eq!(
            ids(&buffer.take_older_than(10)),
            vec![(1, 1), (1, 3), (2, 4)]
        );
        assert_eq!(buffer.len(), 1);
        assert_eq!(buffer.len_priority(2), 0);
        assert!(buffer.take_older_than(10).is_empty());
        assert_eq!(ids(&buffer.take(10)), vec![(1, 2)]);
    }

    #[test]
    fn take_named_takes_only_those_named_and_keeps_the_rest_in_order() {
        let mut b = JobBuffer::new(10);
        let rejected = b.push([
            on("s1", 1, 1, 10),
            on("s1", 2, 2, 11),
            on("s2", 2, 3, 12),
            on("s1", 2, 4, 13),
        ]);
        assert!(rejected.is_empty());
        let names: HashSet<(&str, i64, i64)> =
            [("s1", 2, 4), ("s1", 2, 2), ("s1", 2, 3), ("s9", 1, 1)]
                .into_iter()
                .collect();
        let taken = b.take_named(&names);
        assert_eq!(taken.iter().map(|j| j.local_id).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(b.len(), 2);
        assert_eq!(
            b.take(10).iter().map(|j| j.local_id).collect::<Vec<_>>(),
            [1, 3]
        );
        assert!(b.take_named(&names).is_empty());
    }

    #[test]
    fn lengths_and_drain() {
        let mut buffer = JobBuffer::new(10);
        buffer.push([job(3, 1, 0), job(1, 2, 0), job(3, 3, 0)]);
        assert_eq!(buffer.lengths().collect::<Vec<_>>(), vec![(1, 1), (3, 2)]);
        assert_eq!(buffer.len_priority(3), 2);
        assert_eq!(ids(&buffer.drain()), vec![(1, 2), (3, 1), (3, 3)]);
        assert_eq!(buffer.len(), 0);
        assert_eq!(buffer.lengths().count(), 0);
    }

    #[test]
    fn odd_priorities_do_not_panic() {
        let mut buffer = JobBuffer::new(3);
        buffer.push([job(i64::MIN, 1, i64::MIN), job(i64::MAX, 2, i64::MAX)]);
        assert_eq!(buffer.take_older_than(i64::MIN).len(), 0);
        assert_eq!(
            ids(&buffer.take(usize::MAX)),
            vec![(i64::MIN, 1), (i64::MAX, 2)]
        );
    }

    #[test]
    fn hand_out_splits_fresh_from_stale_in_take_order() {
        let mut buffer = JobBuffer::new(10);
        buffer.push([job(2, 1, 100), job(1, 2, 10), job(1, 3, 100), job(3, 4, 5)]);
        let out = buffer.hand_out(3, u64::MAX, 50);
        assert_eq!(ids(&out.fresh), vec![(1, 3), (2, 1)]);
        assert_eq!(ids(&out.stale), vec![(1, 2)]);
        assert_eq!(buffer.len(), 1);
        let out = buffer.hand_out(0, u64::MAX, 0);
        assert!(out.fresh.is_empty() && out.stale.is_empty());
        assert_eq!(
            ids(&buffer.hand_out(5, u64::MAX, i64::MAX).stale),
            vec![(3, 4)]
        );
    }

    #[test]
    fn takes_stop_at_the_byte_budget_and_bytes_are_counted() {
        let sized = |priority, local_id, body| BufferedJob {
            body,
            ..job(priority, local_id, 0)
        };
        let mut buffer = JobBuffer::new(10);
        buffer.push([
            sized(2, 1, 4),
            sized(1, 2, 4),
            sized(1, 3, 4),
            sized(2, 4, 100),
        ]);
        assert_eq!(buffer.bytes(), 112);
        // 4, then 8 reached the budget: the third waits, across priorities too
        assert_eq!(ids(&buffer.take_within(10, 8)), vec![(1, 2), (1, 3)]);
        assert_eq!(buffer.bytes(), 104);
        // a body past the budget still goes, alone
        let out = buffer.hand_out(10, 2, 0);
        assert_eq!(ids(&out.fresh), vec![(2, 1)]);
        assert_eq!(ids(&buffer.hand_out(10, 2, 0).fresh), vec![(2, 4)]);
        assert_eq!((buffer.len(), buffer.bytes()), (0, 0));
        buffer.push([sized(1, 5, 7), sized(1, 6, 9)]);
        assert_eq!(buffer.take_older_than(1).len(), 2);
        assert_eq!(buffer.bytes(), 0);
        buffer.push([sized(1, 7, 7)]);
        assert_eq!((buffer.drain().len(), buffer.bytes()), (1, 0));
    }

    #[test]
    fn ledger_groups_claims_by_queue_and_shard_in_runs() {
        let mut ledger = ClaimLedger::new();
        assert!(ledger.is_empty() && !ledger.holds_queue("q"));
        ledger.add(
            "q",
            "a",
            &[on("1", 1, 1, 0), on("2", 1, 2, 0), on("1", 2, 3, 0)],
        );
        ledger.add("q", "b", &[on("1", 1, 4, 0)]);
        ledger.add("r", "c", &[on("1", 1, 1, 0)]);
        let run = |claim: &str, keys: &[(i64, i64)]| ClaimRun {
            claim: claim.to_owned(),
            keys: keys.to_vec(),
        };
        let batch = |queue: &str, shard: &str, runs: Vec<ClaimRun>| ClaimBatch {
            queue: queue.to_owned(),
            shard: shard.to_owned(),
            runs,
        };
        assert_eq!(
            ledger.batches(),
            &[
                batch(
                    "q",
                    "1",
                    vec![run("a", &[(1, 1), (2, 3)]), run("b", &[(1, 4)])]
                ),
                batch("q", "2", vec![run("a", &[(1, 2)])]),
                batch("r", "1", vec![run("c", &[(1, 1)])]),
            ]
        );
        assert_eq!(ledger.batches()[0].len(), 3);
        assert_eq!(ledger.len(), 5);
        assert!(ledger.holds("q", "1", 2, 3));
        assert!(ledger.holds("r", "1", 1, 1));
        assert!(
            !ledger.holds("q", "2", 2, 3),
            "same job key on another shard"
        );
        assert!(
            !ledger.holds("r", "2", 1, 2),
            "same job key in another queue"
        );
        assert!(!ledger.holds("s", "1", 1, 1));
        assert!(ledger.holds_queue("r") && !ledger.holds_queue("s"));
    }
}
