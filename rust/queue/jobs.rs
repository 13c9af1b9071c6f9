//! The jobs of the hot path as Rust values: what an enqueue inserts, what a dequeue claims, what an
//! ack settles. A request's jobs are decoded from its frame into these, handed to a store as one
//! batch, and written into the reply from them: no Python object is made per job on the way.
//!
//! Times are milliseconds since the epoch; every default (priority, attempts, run after) is
//! resolved before a job is made, so a store never guesses one.

/// A job to insert as PENDING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub priority: i64,
    pub body: Vec<u8>,
    pub run_after_ms: i64,
    pub attempts_allowed: i64,
    pub custom_status: String,
}

/// A job's pinlater extensions (`KeyedJob` in Python, less the job): its dedup key, ordered
/// group and expiry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobKeys {
    /// The dedup key, if any.
    pub key: Option<String>,
    /// How long the key stays held after the enqueue (ms).
    pub window_ms: i64,
    /// The ordered group, if any.
    pub group: Option<String>,
    /// When the job expires if still PENDING (ms), if ever.
    pub expire_at_ms: Option<i64>,
}

/// Where a keyed enqueue put a job: `(priority, local_id, deduplicated)`, the place of the job
/// holding its dedup key when deduplicated (nothing was written for it then).
pub type Placed = (i64, i64, bool);

/// For each job of a request, the earlier job whose dedup key it repeats (it is answered with
/// that job's place), or `None`: the first job of each key, and jobs without one.
#[must_use]
pub fn repeated_keys(keys: &[JobKeys]) -> Vec<Option<usize>> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let key = k.key.as_deref()?;
            match first.entry(key) {
                std::collections::hash_map::Entry::Occupied(seen) => Some(*seen.get()),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(i);
                    None
                }
            }
        })
        .collect()
}

/// A job a dequeue claimed (or only looked at, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    pub local_id: i64,
    pub body: Vec<u8>,
    pub attempts_allowed: i64,
    pub attempts_remaining: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One job to acknowledge. `retry_delay_ms` matters only for a failure with attempts left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckItem {
    pub priority: i64,
    pub local_id: i64,
    pub append_custom_status: String,
    pub retry_delay_ms: i64,
}

/// The acks of one queue on one shard: one store call settles them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckGroup {
    pub succeeded: Vec<AckItem>,
    pub failed: Vec<AckItem>,
}

impl AckGroup {
    /// How many jobs the group acknowledges.
    #[must_use]
    pub fn len(&self) -> usize {
        self.succeeded.len() + self.failed.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every item, the successes first, each with whether it succeeded.
    pub fn items(&self) -> impl Iterator<Item = (bool, &AckItem)> {
        self.succeeded
            .iter()
            .map(|a| (true, a))
            .chain(self.failed.iter().map(|a| (false, a)))
    }

    /// The distinct priorities of the group, ascending.
    #[must_use]
    pub fn priorities(&self) -> Vec<i64> {
        distinct(self.items().map(|(_, a)| a.priority))
    }
}

/// The distinct priorities of a batch of new jobs, ascending.
#[must_use]
pub fn priorities(jobs: &[NewJob]) -> Vec<i64> {
    distinct(jobs.iter().map(|j| j.priority))
}

/// The distinct priorities of the jobs ready at `now_ms` (run after not later), ascending.
#[must_use]
pub fn ready_priorities<'a>(jobs: impl IntoIterator<Item = &'a NewJob>, now_ms: i64) -> Vec<i64> {
    distinct(
        jobs.into_iter()
            .filter(|j| j.run_after_ms <= now_ms)
            .map(|j| j.priority),
    )
}

/// `(priority, run_after_ms)` of the jobs not ready at `now_ms`, distinct, ascending.
#[must_use]
pub fn later<'a>(jobs: impl IntoIterator<Item = &'a NewJob>, now_ms: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = jobs
        .into_iter()
        .filter(|j| j.run_after_ms > now_ms)
        .map(|j| (j.priority, j.run_after_ms))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn distinct(values: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut out: Vec<i64> = values.collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_points_at_its_first_job() {
        let keys: Vec<JobKeys> = [Some("a"), None, Some("b"), Some("a"), None, Some("a")]
            .iter()
            .map(|k| JobKeys {
                key: k.map(str::to_owned),
                ..JobKeys::default()
            })
            .collect();
        assert_eq!(
            repeated_keys(&keys),
            [None, None, None, Some(0), None, Some(0)]
        );
    }

    fn job(priority: i64, run_after_ms: i64) -> NewJob {
        NewJob {
            priority,
            body: b"b".to_vec(),
            run_after_ms,
            attempts_allowed: 1,
            custom_status: String::new(),
        }
    }

    #[test]
    fn priorities_are_distinct_and_sorted() {
        let jobs = [job(3, 0), job(1, 0), job(3, 5), job(2, 9)];
        assert_eq!(priorities(&jobs), vec![1, 2, 3]);
        assert_eq!(ready_priorities(&jobs, 5), vec![1, 3]);
        assert_eq!(later(&jobs, 5), vec![(2, 9)]);
        assert_eq!(later(&jobs, -1), vec![(1, 0), (2, 9), (3, 0), (3, 5)]);
    }

    #[test]
    fn ack_group_lists_successes_first() {
        let item = |priority, local_id| AckItem {
            priority,
            local_id,
            append_custom_status: String::new(),
            retry_delay_ms: 0,
        };
        let group = AckGroup {
            succeeded: vec![item(2, 1)],
            failed: vec![item(1, 2), item(2, 3)],
        };
        let seen: Vec<(bool, i64)> = group.items().map(|(ok, a)| (ok, a.local_id)).collect();
        assert_eq!(seen, vec![(true, 1), (false, 2), (false, 3)]);
        assert_eq!(group.priorities(), vec![1, 2]);
        assert_eq!(group.len(), 3);
        assert!(!group.is_empty());
    }
}
