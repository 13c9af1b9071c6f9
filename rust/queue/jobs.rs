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

/// Which of `shards` holds `key` of `queue` in `space` ("group" for ordered groups, "" for dedup
/// keys): the one whose name ranks highest under an 8-byte `BLAKE2b` of `queue`, `key`, `space`
/// and the name (rendezvous hashing), the first of equals. `key_shard` in `sharded.py` ranks the
/// same bytes, so every server, Rust or Python, picks the same shard. `None` for no shard.
///
/// # Panics
/// Never: 8 bytes is a `BLAKE2b` digest size, and the buffer is as long.
#[must_use]
pub fn key_shard<S: AsRef<str>>(
    queue: &str,
    key: &str,
    space: &str,
    shards: &[S],
) -> Option<usize> {
    use blake2::digest::{Update, VariableOutput};
    let mut prefix = blake2::Blake2bVar::new(8).expect("8 bytes is a BLAKE2b digest size");
    prefix.update(queue.as_bytes());
    prefix.update(b"\0");
    prefix.update(key.as_bytes());
    prefix.update(b"\0");
    if !space.is_empty() {
        prefix.update(space.as_bytes());
        prefix.update(b"\0");
    }
    let mut best: Option<(usize, [u8; 8])> = None;
    for (index, name) in shards.iter().enumerate() {
        let mut hasher = prefix.clone(); // the prefix hashed once, each name after it
        hasher.update(name.as_ref().as_bytes());
        let mut rank = [0u8; 8];
        hasher
            .finalize_variable(&mut rank)
            .expect("the buffer is the digest's size");
        if best.is_none_or(|(_, top)| rank > top) {
            best = Some((index, rank));
        }
    }
    best.map(|(index, _)| index)
}

/// A keyed enqueue's jobs spread over the shards that take new jobs (`split_by_shard`): the
/// request indexes of the jobs each shard places, of those with no extension, and of those that
/// repeat an earlier job's dedup key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardSplit {
    /// `(shard, request indexes)`: each shard's jobs in request order, shards in the order their
    /// first job came.
    pub parts: Vec<(usize, Vec<usize>)>,
    /// The jobs with no key, group or expiry, in request order.
    pub plain: Vec<usize>,
    /// `(i, j)`: job `i` repeats job `j`'s dedup key and is answered with `j`'s place.
    pub repeats: Vec<(usize, usize)>,
}

/// A keyed enqueue's jobs by the shard that places them, as `ShardedBackend.enqueue_keyed_jobs`
/// spreads them: a job with a group goes to its group's shard (its dedup key, if any, is checked
/// there), one with a dedup key alone to its key's, one with only an expiry to `loose`; a dedup key
/// repeated in the request is answered with its first job's place, wherever that went. `None`
/// when there is no shard, or a job with only an expiry and no `loose`.
#[must_use]
pub fn split_by_shard<S: AsRef<str>>(
    queue: &str,
    keys: &[JobKeys],
    shards: &[S],
    loose: Option<usize>,
) -> Option<ShardSplit> {
    let mut split = ShardSplit::default();
    let mut part_of: Vec<Option<usize>> = vec![None; shards.len()];
    // A group's shard, hashed once per request however many of its jobs come.
    let mut groups: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, (k, earlier)) in keys.iter().zip(repeated_keys(keys)).enumerate() {
        if let Some(j) = earlier {
            split.repeats.push((i, j));
            continue;
        }
        let shard = match (&k.group, &k.key) {
            (Some(group), _) => match groups.get(group.as_str()) {
                Some(&shard) => shard,
                None => *groups
                    .entry(group)
                    .or_insert(key_shard(queue, group, "group", shards)?),
            },
            (None, Some(key)) => key_shard(queue, key, "", shards)?,
            (None, None) if k.expire_at_ms.is_some() => loose.filter(|&s| s < shards.len())?,
            (None, None) => {
                split.plain.push(i);
                continue;
            }
        };
        let part = *part_of[shard].get_or_insert_with(|| {
            split.parts.push((shard, Vec::new()));
            split.parts.len() - 1
        });
        split.parts[part].1.push(i);
    }
    Some(split)
}

/// The first job of the request (a dedup key's repeats aside, as `split_by_shard` skips them)
/// whose group lives on one of the shards `among` (indexes into `shards`): `(request index,
/// shard)`. So a request that a shard would refuse for its groups is refused before anything is
/// written, naming the job `ShardedBackend.enqueue_keyed_jobs` would.
#[must_use]
pub fn first_grouped_on<S: AsRef<str>>(
    queue: &str,
    keys: &[JobKeys],
    shards: &[S],
    among: &[usize],
) -> Option<(usize, usize)> {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    keys.iter()
        .zip(repeated_keys(keys))
        .enumerate()
        .filter(|(_, (_, earlier))| earlier.is_none())
        .filter_map(|(i, (k, _))| Some((i, k.group.as_deref()?)))
        .filter(|&(_, group)| seen.insert(group)) // a group's later jobs are on its shard too
        .find_map(|(i, group)| {
            let shard = key_shard(queue, group, "group", shards)?;
            among.contains(&shard).then_some((i, shard))
        })
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

/// How many jobs, from the first, one store call takes under a byte budget, given their body
/// lengths in take order: a job is taken while the bodies taken before it hold fewer than
/// `max_bytes` bytes. The first job is always taken (a body larger than the budget is still
/// handed out, alone), so the bodies taken pass `max_bytes` by less than the last one's length.
/// Dequeue replies and the broker's buffer are bounded by this (`DEQUEUE_BYTES` in Python).
#[must_use]
pub fn within_bytes(lengths: impl IntoIterator<Item = usize>, max_bytes: u64) -> usize {
    let mut spent: u64 = 0;
    let mut taken = 0;
    for length in lengths {
        if taken > 0 && spent >= max_bytes {
            break;
        }
        spent = spent.saturating_add(length as u64);
        taken += 1;
    }
    taken
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

    /// The group cut into parts of at most `size` acks (at least 1), in `items` order: a store
    /// that takes the parts in turn applies every ack in the order it applies the whole group's
    /// (its successes, then its failures).
    #[must_use]
    pub fn chunks(&self, size: usize) -> Vec<AckGroup> {
        let size = size.max(1);
        let mut parts: Vec<AckGroup> = Vec::with_capacity(self.len().div_ceil(size));
        let mut part = AckGroup::default();
        for (succeeded, item) in self.items() {
            if succeeded {
                part.succeeded.push(item.clone());
            } else {
                part.failed.push(item.clone());
            }
            if part.len() == size {
                parts.push(std::mem::take(&mut part));
            }
        }
        if !part.is_empty() {
            parts.push(part);
        }
        parts
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

    fn ack(local_id: i64) -> AckItem {
        AckItem {
            priority: 1,
            local_id,
            append_custom_status: String::new(),
            retry_delay_ms: 0,
        }
    }

    #[test]
    fn within_bytes_takes_while_under_the_budget_and_always_one() {
        assert_eq!(within_bytes([4, 4, 4], 8), 2); // 4, then 8 reached: stop
        assert_eq!(within_bytes([4, 4, 4], 9), 3); // 8 < 9: the third goes too
        assert_eq!(within_bytes([100, 1], 8), 1); // larger than the budget: alone
        assert_eq!(within_bytes([0, 0, 0], 0), 1); // a budget of 0 still takes one
        assert_eq!(within_bytes([], 8), 0);
        let half = 1_usize << 63; // (the sum saturates rather than wrap)
        assert_eq!(within_bytes([half, half, half], u64::MAX), 2);
    }

    #[test]
    fn ack_chunks_keep_every_ack_in_order() {
        let group = AckGroup {
            succeeded: (1..=5).map(ack).collect(),
            failed: (6..=8).map(ack).collect(),
        };
        let parts = group.chunks(3);
        let ids = |items: &[AckItem]| items.iter().map(|a| a.local_id).collect::<Vec<_>>();
        let shapes: Vec<(Vec<i64>, Vec<i64>)> = parts
            .iter()
            .map(|p| (ids(&p.succeeded), ids(&p.failed)))
            .collect();
        assert_eq!(
            shapes,
            [
                (vec![1, 2, 3], vec![]),
                (vec![4, 5], vec![6]),
                (vec![], vec![7, 8]),
            ]
        );
        assert_eq!(group.chunks(8), std::slice::from_ref(&group));
        assert_eq!(group.chunks(0).len(), 8, "a size of 0 is taken as 1");
        assert!(AckGroup::default().chunks(3).is_empty());
    }

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

    fn keyed(key: Option<&str>, group: Option<&str>, expire_at_ms: Option<i64>) -> JobKeys {
        JobKeys {
            key: key.map(str::to_owned),
            window_ms: 0,
            group: group.map(str::to_owned),
            expire_at_ms,
        }
    }

    #[test]
    fn key_shard_ranks_by_the_python_hash() {
        // max(names, key=lambda n: hashlib.blake2b(prefix + n.encode(), digest_size=8).digest())
        // in Python, prefix b"q\0a\0" (a dedup key) or b"q\0a\0group\0" (a group).
        assert_eq!(key_shard("q", "a", "", &["1", "2", "3"]), Some(2));
        assert_eq!(key_shard("q", "a", "group", &["1", "2", "3"]), Some(0));
        assert_eq!(key_shard("q", "d", "", &["1", "2", "3"]), Some(1));
        assert_eq!(key_shard("q", "k", "", &[] as &[&str]), None);
        assert_eq!(key_shard("q", "k", "", &["only"]), Some(0));
    }

    #[test]
    fn a_split_sends_each_job_where_its_keys_live() {
        let shards = ["1", "2", "3"];
        let keys = [
            keyed(Some("a"), None, None),      // its key's shard
            keyed(None, None, None),           // plain
            keyed(Some("b"), Some("g"), None), // its group's shard
            keyed(Some("a"), Some("g"), None), // repeats job 0's key
            keyed(None, None, Some(5)),        // an expiry alone: loose
            keyed(None, Some("g"), None),      // its group's shard
        ];
        let split = split_by_shard("q", &keys, &shards, Some(0)).expect("a shard for each");
        let at = |i: usize| {
            split
                .parts
                .iter()
                .find(|(_, jobs)| jobs.contains(&i))
                .map(|&(shard, _)| shard)
        };
        assert_eq!(at(0), key_shard("q", "a", "", &shards));
        assert_eq!(at(2), key_shard("q", "g", "group", &shards));
        assert_eq!(at(5), at(2));
        assert_eq!(at(4), Some(0));
        assert_eq!((at(1), at(3)), (None, None));
        assert_eq!(split.plain, vec![1]);
        assert_eq!(split.repeats, vec![(3, 0)]);
        let placed: usize = split.parts.iter().map(|(_, jobs)| jobs.len()).sum();
        assert_eq!(placed, 4, "each job placed once: {split:?}");
        let distinct: std::collections::HashSet<usize> = split.parts.iter().map(|p| p.0).collect();
        assert_eq!(
            distinct.len(),
            split.parts.len(),
            "one part per shard: {split:?}"
        );
        // An expiry alone needs the loose shard.
        assert_eq!(split_by_shard("q", &keys, &shards, None), None);
        assert_eq!(split_by_shard("q", &keys, &shards, Some(3)), None);
    }

    #[test]
    fn the_first_job_grouped_on_a_shard_is_found_in_request_order() {
        let shards = ["1", "2", "3"];
        // "a" is on shard 0 in the group space, so are its later jobs; a repeat is skipped.
        let on = |group: &str| key_shard("q", group, "group", &shards).unwrap();
        let other = ["b", "c", "d", "e", "f", "g"]
            .into_iter()
            .find(|g| on(g) != on("a"))
            .unwrap();
        let keys = [
            keyed(Some("k"), None, None),
            keyed(Some("x"), Some(other), None),
            keyed(Some("k"), Some("a"), None), // a repeat of job 0: goes nowhere
            keyed(None, Some("a"), None),
            keyed(None, Some("a"), None),
        ];
        assert_eq!(
            first_grouped_on("q", &keys, &shards, &[on("a")]),
            Some((3, on("a")))
        );
        assert_eq!(
            first_grouped_on("q", &keys, &shards, &[on("a"), on(other)]),
            Some((1, on(other)))
        );
        let rest: Vec<usize> = (0..3).filter(|&s| s != on("a") && s != on(other)).collect();
        assert_eq!(first_grouped_on("q", &keys, &shards, &rest), None);
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
