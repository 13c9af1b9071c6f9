//! Python binding of `crate::queue::jobs`: a request's jobs as one opaque value per batch.
//!
//! The hot path hands these between the wire decoder, the stores and the reply encoder without
//! looking inside: Python sees a length and a few per-batch facts. `to_list` and the
//! constructors exist for the stores and tests that work on Python values (one tuple per job,
//! in the field order of `backends.base`'s `NewJob`, `ClaimedJob` and `AckItem`).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::py::errors::guarded;
use crate::queue::jobs::{self, AckItem, ClaimedJob, JobKeys, NewJob, Placed};

/// `(priority, body, run_after_ms, attempts_allowed, custom_status)`.
type NewJobTuple<'py> = (i64, Bound<'py, PyBytes>, i64, i64, String);
/// `(local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms)`.
type ClaimedTuple<'py> = (i64, Bound<'py, PyBytes>, i64, i64, i64, i64);
/// `(dedup_key, window_ms, group, expire_at_ms)`.
pub type KeysTuple = (Option<String>, i64, Option<String>, Option<i64>);
/// `(priority, local_id, append_custom_status, retry_delay_ms)`.
type AckTuple = (i64, i64, String, i64);

/// Batches of at least this many jobs are built and cut with the GIL released
/// (`EnqueueCall.keyed`, `KeyedJobBatch.chunks`), the caller having sent the call to a worker
/// thread (`pinlater.eventloop.off_loop`), so the event loop serves other connections meanwhile:
/// each takes 0.1-0.6 us a job (warm to cold), tens of ms for 100,000 jobs. Smaller ones stay on
/// the loop: the hop to a worker thread and back costs more than they do.
pub const DETACH_JOBS: usize = 10_000;

/// The jobs of one enqueue, every default resolved, in request order.
#[pyclass(frozen, name = "NewJobBatch", module = "pinlater._pinlater")]
pub struct NewJobBatch {
    jobs: Vec<NewJob>,
}

impl NewJobBatch {
    #[must_use]
    pub fn from_jobs(jobs: Vec<NewJob>) -> Self {
        Self { jobs }
    }

    #[must_use]
    pub fn jobs(&self) -> &[NewJob] {
        &self.jobs
    }
}

#[pymethods]
impl NewJobBatch {
    #[new]
    fn new(jobs: Vec<NewJobTuple<'_>>) -> PyResult<Self> {
        guarded("NewJobBatch", || {
            Ok(Self::from_jobs(
                jobs.into_iter()
                    .map(
                        |(priority, body, run_after_ms, attempts_allowed, custom_status)| NewJob {
                            priority,
                            body: body.as_bytes().to_vec(),
                            run_after_ms,
                            attempts_allowed,
                            custom_status,
                        },
                    )
                    .collect(),
            ))
        })
    }

    fn __len__(&self) -> usize {
        self.jobs.len()
    }

    /// The sum of the bodies' lengths.
    #[getter]
    fn body_bytes(&self) -> usize {
        self.jobs.iter().map(|j| j.body.len()).sum()
    }

    /// The distinct priorities, ascending.
    fn priorities(&self) -> Vec<i64> {
        jobs::priorities(&self.jobs)
    }

    /// The distinct priorities of the jobs ready at `now_ms`, ascending.
    fn ready_priorities(&self, now_ms: i64) -> Vec<i64> {
        jobs::ready_priorities(&self.jobs, now_ms)
    }

    /// Distinct `(priority, run_after_ms)` of the jobs not ready at `now_ms`, ascending.
    fn later(&self, now_ms: i64) -> Vec<(i64, i64)> {
        jobs::later(&self.jobs, now_ms)
    }

    /// The batch in parts of at most `size` jobs (at least 1), in order: a request too large
    /// for one store call (`backends.base.STORE_CALL_JOBS`). The parts copy the jobs.
    fn chunks(&self, size: usize) -> Vec<NewJobBatch> {
        self.jobs
            .chunks(size.max(1))
            .map(|part| Self::from_jobs(part.to_vec()))
            .collect()
    }

    /// One `(priority, body, run_after_ms, attempts_allowed, custom_status)` per job.
    fn to_list<'py>(&self, py: Python<'py>) -> Vec<NewJobTuple<'py>> {
        self.jobs
            .iter()
            .map(|j| {
                (
                    j.priority,
                    PyBytes::new(py, &j.body),
                    j.run_after_ms,
                    j.attempts_allowed,
                    j.custom_status.clone(),
                )
            })
            .collect()
    }
}

/// The jobs of one enqueue of which some carry a pinlater extension, each with its keys (a
/// dedup key, an ordered group, an expiry: any of them, or none), in request order. A store
/// that takes it whole places every job in one call, keys repeated in it included.
#[pyclass(frozen, name = "KeyedJobBatch", module = "pinlater._pinlater")]
pub struct KeyedJobBatch {
    jobs: Vec<NewJob>,
    keys: Vec<JobKeys>,
}

impl KeyedJobBatch {
    /// # Panics
    /// If `jobs` and `keys` differ in length (a decoder's bug).
    #[must_use]
    pub fn from_parts(jobs: Vec<NewJob>, keys: Vec<JobKeys>) -> Self {
        assert_eq!(jobs.len(), keys.len(), "a job's keys per job");
        Self { jobs, keys }
    }

    #[must_use]
    pub fn jobs(&self) -> &[NewJob] {
        &self.jobs
    }

    #[must_use]
    pub fn job_keys(&self) -> &[JobKeys] {
        &self.keys
    }

    /// The jobs a placement wrote (not deduplicated), with their keys.
    fn taken<'a>(
        &'a self,
        placement: &'a KeyedPlacement,
    ) -> impl Iterator<Item = (&'a NewJob, &'a JobKeys)> + 'a {
        self.jobs
            .iter()
            .zip(&self.keys)
            .zip(&placement.placed)
            .filter(|(_, placed)| !placed.2)
            .map(|(pair, _)| pair)
    }

    /// `chunks`' work (see there).
    fn cut(&self, size: usize) -> (Vec<KeyedJobBatch>, Vec<(usize, usize)>) {
        let size = size.max(1);
        let mut parts = Vec::with_capacity(self.jobs.len().div_ceil(size));
        let mut repeats = Vec::new();
        let (mut jobs, mut keys) = (Vec::with_capacity(size), Vec::with_capacity(size));
        for (i, earlier) in jobs::repeated_keys(&self.keys).into_iter().enumerate() {
            if let Some(first) = earlier {
                repeats.push((i, first));
                continue;
            }
            jobs.push(self.jobs[i].clone());
            keys.push(self.keys[i].clone());
            if jobs.len() == size {
                parts.push(Self::from_parts(
                    std::mem::take(&mut jobs),
                    std::mem::take(&mut keys),
                ));
            }
        }
        if !jobs.is_empty() {
            parts.push(Self::from_parts(jobs, keys));
        }
        (parts, repeats)
    }
}

#[pymethods]
impl KeyedJobBatch {
    #[new]
    fn new(jobs: Vec<NewJobTuple<'_>>, keys: Vec<KeysTuple>) -> PyResult<Self> {
        guarded("KeyedJobBatch", || {
            if jobs.len() != keys.len() {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "{} jobs but {} keys",
                    jobs.len(),
                    keys.len()
                )));
            }
            let batch = NewJobBatch::new(jobs)?;
            let keys = keys
                .into_iter()
                .map(|(key, window_ms, group, expire_at_ms)| JobKeys {
                    key,
                    window_ms,
                    group,
                    expire_at_ms,
                })
                .collect();
            Ok(Self::from_parts(batch.jobs, keys))
        })
    }

    fn __len__(&self) -> usize {
        self.jobs.len()
    }

    /// The jobs alone.
    fn batch(&self) -> NewJobBatch {
        NewJobBatch::from_jobs(self.jobs.clone())
    }

    /// Each job's `(dedup_key, window_ms, group, expire_at_ms)`, in job order.
    #[pyo3(name = "keys")]
    fn keys_list(&self) -> Vec<KeysTuple> {
        self.keys
            .iter()
            .map(|k| (k.key.clone(), k.window_ms, k.group.clone(), k.expire_at_ms))
            .collect()
    }

    /// The highest priority of the jobs (0 for no job).
    #[getter]
    fn max_priority(&self) -> i64 {
        self.jobs.iter().map(|j| j.priority).max().unwrap_or(0)
    }

    /// The index of the first job of an ordered group, if any job has one.
    #[getter]
    fn first_grouped(&self) -> Option<usize> {
        self.keys.iter().position(|k| k.group.is_some())
    }

    /// The batch in parts of at most `size` jobs (at least 1), in order, each job with its
    /// keys, for a request too large for one store call (`backends.base.STORE_CALL_JOBS`); and
    /// `(index, first)` for each job left out of them, whose dedup key an earlier job of the
    /// batch has (`first`): it is answered with that job's place (`KeyedPlacement.concat`), as
    /// a store answers a key repeated in one call, even when that job ended before a later
    /// part was sent. The parts copy the jobs, with the GIL released for a batch of
    /// `DETACH_JOBS` jobs or more.
    fn chunks(&self, py: Python<'_>, size: usize) -> (Vec<KeyedJobBatch>, Vec<(usize, usize)>) {
        if self.jobs.len() >= DETACH_JOBS {
            py.detach(|| self.cut(size))
        } else {
            self.cut(size)
        }
    }

    /// `(jobs, body_bytes, keys, key_bytes)` of the jobs `placement` wrote: how many, their
    /// bodies' bytes, how many carry a dedup key and those keys' UTF-8 bytes.
    fn written(&self, placement: &KeyedPlacement) -> (usize, usize, usize, usize) {
        let mut out = (0, 0, 0, 0);
        for (job, keys) in self.taken(placement) {
            out.0 += 1;
            out.1 += job.body.len();
            if let Some(key) = &keys.key {
                out.2 += 1;
                out.3 += key.len();
            }
        }
        out
    }

    /// The distinct priorities of the jobs `placement` wrote that are ready at `now_ms`, and
    /// the distinct `(priority, run_after_ms)` of those that are not, both ascending.
    fn written_ready(
        &self,
        placement: &KeyedPlacement,
        now_ms: i64,
    ) -> (Vec<i64>, Vec<(i64, i64)>) {
        let written = || self.taken(placement).map(|(job, _)| job);
        (
            jobs::ready_priorities(written(), now_ms),
            jobs::later(written(), now_ms),
        )
    }

    /// Whether a job has an expiry and no dedup key or group: `split` then needs a `loose`
    /// shard for it.
    #[getter]
    fn needs_loose(&self) -> bool {
        self.keys
            .iter()
            .any(|k| k.key.is_none() && k.group.is_none() && k.expire_at_ms.is_some())
    }

    /// The first job (a dedup key's repeats aside) whose group lives on one of the shards
    /// `among` (indexes into `shards`, the names `split` would be given): `(request index,
    /// shard)`, or None (`jobs::first_grouped_on`).
    fn first_grouped_on(
        &self,
        queue: &str,
        shards: Vec<String>,
        among: Vec<usize>,
    ) -> Option<(usize, usize)> {
        jobs::first_grouped_on(queue, &self.keys, &shards, &among)
    }

    /// The request spread over `shards` (their names, the shards that take new jobs) by its
    /// keys, as `ShardedBackend.enqueue_keyed_jobs` spreads it (`jobs::split_by_shard`): each
    /// shard's jobs as a batch of their own, `(index into shards, batch)`, the jobs without any
    /// extension as one `NewJobBatch` (None if there are none), and the `KeyedSplit` that puts
    /// the shards' answers back in request order. A dedup key repeated in the request goes to
    /// no shard: its first job's place answers it.
    ///
    /// # Errors
    /// `ValueError`: a job with a key or group and no shard, or a job with only an expiry and
    /// no `loose` (an index into `shards`) to put it on.
    #[allow(clippy::type_complexity)]
    fn split(
        &self,
        py: Python<'_>,
        queue: &str,
        shards: Vec<String>,
        loose: Option<usize>,
    ) -> PyResult<(KeyedSplit, Vec<(usize, KeyedJobBatch)>, Option<NewJobBatch>)> {
        guarded("KeyedJobBatch.split", || {
            let split = py.detach(|| jobs::split_by_shard(queue, &self.keys, &shards, loose));
            let split = split.ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "cannot split {} jobs over {} shards (loose shard {loose:?})",
                    self.jobs.len(),
                    shards.len()
                ))
            })?;
            let parts = split
                .parts
                .iter()
                .map(|(shard, indexes)| {
                    let batch = Self::from_parts(
                        indexes.iter().map(|&i| self.jobs[i].clone()).collect(),
                        indexes.iter().map(|&i| self.keys[i].clone()).collect(),
                    );
                    (*shard, batch)
                })
                .collect();
            let plain = (!split.plain.is_empty()).then(|| {
                NewJobBatch::from_jobs(split.plain.iter().map(|&i| self.jobs[i].clone()).collect())
            });
            let priorities = self.jobs.iter().map(|j| j.priority).collect();
            Ok((
                KeyedSplit {
                    shards,
                    split,
                    priorities,
                },
                parts,
                plain,
            ))
        })
    }
}

/// Where a keyed enqueue put each job of its request, in job order (`KeyedJobBatch`).
#[pyclass(frozen, name = "KeyedPlacement", module = "pinlater._pinlater")]
pub struct KeyedPlacement {
    placed: Vec<Placed>,
}

impl KeyedPlacement {
    #[must_use]
    pub fn from_placed(placed: Vec<Placed>) -> Self {
        Self { placed }
    }

    #[must_use]
    pub fn placed(&self) -> &[Placed] {
        &self.placed
    }
}

#[pymethods]
impl KeyedPlacement {
    #[new]
    fn new(placed: Vec<Placed>) -> Self {
        Self::from_placed(placed)
    }

    fn __len__(&self) -> usize {
        self.placed.len()
    }

    /// The places of a batch's jobs from the answers to its `chunks`: the parts' places in
    /// order, each job of `repeats` (`(index, first)`) at its index, answered with its first
    /// job's place, deduplicated.
    #[staticmethod]
    fn concat(
        parts: Vec<PyRef<'_, KeyedPlacement>>,
        repeats: Vec<(usize, usize)>,
    ) -> PyResult<Self> {
        guarded("KeyedPlacement.concat", || {
            let mut placed: Vec<Placed> = Vec::with_capacity(
                parts.iter().map(|p| p.placed.len()).sum::<usize>() + repeats.len(),
            );
            let mut answers = parts.iter().flat_map(|p| p.placed.iter().copied());
            let mut repeats = repeats.into_iter().peekable();
            loop {
                let at = placed.len();
                if let Some(&(index, first)) = repeats.peek().filter(|&&(index, _)| index == at) {
                    let &(priority, local_id, _) =
                        placed.get(first).filter(|_| first < index).ok_or_else(|| {
                            pyo3::exceptions::PyValueError::new_err(format!(
                                "job {index} repeats job {first}, which is not before it"
                            ))
                        })?;
                    placed.push((priority, local_id, true));
                    repeats.next();
                } else if let Some(answer) = answers.next() {
                    placed.push(answer);
                } else {
                    break;
                }
            }
            if let Some((index, _)) = repeats.next() {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "job {index} is beyond the parts' jobs"
                )));
            }
            Ok(Self::from_placed(placed))
        })
    }

    /// How many jobs were deduplicated (answered with the place of the job holding their key).
    #[getter]
    fn deduplicated(&self) -> usize {
        self.placed.iter().filter(|p| p.2).count()
    }

    /// One `(priority, local_id, deduplicated)` per job.
    fn to_list(&self) -> Vec<Placed> {
        self.placed.clone()
    }
}

/// Where the jobs of a request spread over shards went (`KeyedJobBatch.split`): each shard's
/// part, the jobs without an extension, the repeats of a dedup key, and every job's priority.
#[pyclass(frozen, name = "KeyedSplit", module = "pinlater._pinlater")]
pub struct KeyedSplit {
    /// The names the request was split over (the parts' shard indexes point into them).
    shards: Vec<String>,
    split: jobs::ShardSplit,
    priorities: Vec<i64>,
}

#[pymethods]
impl KeyedSplit {
    /// Every job's place in request order: the parts' `placements` (one per part, in order,
    /// each as long as its part), then the jobs without an extension, enqueued on shard
    /// `plain[0]` with the ids `plain[1]`, then each repeat of a dedup key, answered with its
    /// first job's place, deduplicated.
    ///
    /// # Errors
    /// `ValueError`: a placement or the plain ids do not match their jobs.
    fn merge(
        &self,
        placements: Vec<PyRef<'_, KeyedPlacement>>,
        plain: Option<(String, PyRef<'_, LocalIds>)>,
    ) -> PyResult<SplitPlacement> {
        guarded("KeyedSplit.merge", || {
            let wrong = |what: String| pyo3::exceptions::PyValueError::new_err(what);
            let split = &self.split;
            if placements.len() != split.parts.len() {
                return Err(wrong(format!(
                    "{} placements for {} parts",
                    placements.len(),
                    split.parts.len()
                )));
            }
            let mut names = self.shards.clone();
            let mut placed: Vec<Option<(usize, Placed)>> = vec![None; self.priorities.len()];
            for ((shard, indexes), placement) in split.parts.iter().zip(&placements) {
                if *shard >= names.len() || placement.placed.len() != indexes.len() {
                    return Err(wrong(format!(
                        "a placement of {} jobs for {} on shard #{shard} of {}",
                        placement.placed.len(),
                        indexes.len(),
                        names.len()
                    )));
                }
                for (&i, &place) in indexes.iter().zip(&placement.placed) {
                    placed[i] = Some((*shard, place));
                }
            }
            match plain {
                Some((name, ids)) if ids.ids.len() == split.plain.len() => {
                    let shard = names.iter().position(|n| *n == name).unwrap_or_else(|| {
                        names.push(name);
                        names.len() - 1
                    });
                    for (&i, &id) in split.plain.iter().zip(&ids.ids) {
                        placed[i] = Some((shard, (self.priorities[i], id, false)));
                    }
                }
                None if split.plain.is_empty() => {}
                _ => {
                    return Err(wrong(format!(
                        "the {} jobs without an extension were not placed as one batch",
                        split.plain.len()
                    )))
                }
            }
            for &(i, j) in &split.repeats {
                placed[i] =
                    placed[j].map(|(shard, (priority, id, _))| (shard, (priority, id, true)));
            }
            let placed = placed
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong("a job was not placed".to_owned()))?;
            Ok(SplitPlacement {
                shards: names,
                placed,
            })
        })
    }
}

/// Where a keyed enqueue spread over shards put each job of its request, in job order
/// (`KeyedSplit.merge`): a shard and a place per job.
#[pyclass(frozen, name = "SplitPlacement", module = "pinlater._pinlater")]
pub struct SplitPlacement {
    shards: Vec<String>,
    placed: Vec<(usize, Placed)>,
}

impl SplitPlacement {
    /// The shards' names, and per job an index into them and its place.
    #[must_use]
    pub fn parts(&self) -> (&[String], &[(usize, Placed)]) {
        (&self.shards, &self.placed)
    }
}

#[pymethods]
impl SplitPlacement {
    fn __len__(&self) -> usize {
        self.placed.len()
    }

    /// How many jobs were deduplicated.
    #[getter]
    fn deduplicated(&self) -> usize {
        self.placed.iter().filter(|(_, p)| p.2).count()
    }

    /// One `(shard, priority, local_id, deduplicated)` per job.
    fn to_list(&self) -> Vec<(String, i64, i64, bool)> {
        self.placed
            .iter()
            .map(|&(shard, (priority, id, repeated))| {
                (self.shards[shard].clone(), priority, id, repeated)
            })
            .collect()
    }
}

/// The local ids a store gave an enqueue's jobs, in job order.
#[pyclass(frozen, name = "LocalIds", module = "pinlater._pinlater")]
pub struct LocalIds {
    ids: Vec<i64>,
}

impl LocalIds {
    #[must_use]
    pub fn from_ids(ids: Vec<i64>) -> Self {
        Self { ids }
    }

    #[must_use]
    pub fn ids(&self) -> &[i64] {
        &self.ids
    }
}

#[pymethods]
impl LocalIds {
    #[new]
    fn new(ids: Vec<i64>) -> Self {
        Self::from_ids(ids)
    }

    fn __len__(&self) -> usize {
        self.ids.len()
    }

    /// The ids of `parts`, one after the other: the answers of a batch's `chunks`, in order.
    #[staticmethod]
    fn concat(parts: Vec<PyRef<'_, LocalIds>>) -> Self {
        Self::from_ids(parts.iter().flat_map(|p| p.ids.iter().copied()).collect())
    }

    fn to_list(&self) -> Vec<i64> {
        self.ids.clone()
    }
}

/// The jobs one store call of a dequeue claimed, in dequeue order, and whether the call
/// stopped at one of its work budgets before its limit (`cut`: the place is not empty).
#[pyclass(frozen, name = "ClaimedJobs", module = "pinlater._pinlater")]
pub struct ClaimedJobs {
    jobs: Vec<ClaimedJob>,
    cut: bool,
}

impl ClaimedJobs {
    #[must_use]
    pub fn from_jobs(jobs: Vec<ClaimedJob>) -> Self {
        Self { jobs, cut: false }
    }

    #[must_use]
    pub fn from_cut_jobs(jobs: Vec<ClaimedJob>, cut: bool) -> Self {
        Self { jobs, cut }
    }

    #[must_use]
    pub fn jobs(&self) -> &[ClaimedJob] {
        &self.jobs
    }
}

#[pymethods]
impl ClaimedJobs {
    #[new]
    #[pyo3(signature = (jobs, cut = false))]
    fn new(jobs: Vec<ClaimedTuple<'_>>, cut: bool) -> PyResult<Self> {
        guarded("ClaimedJobs", || {
            Ok(Self::from_cut_jobs(
                jobs.into_iter()
                    .map(
                        |(local_id, body, allowed, remaining, created, updated)| ClaimedJob {
                            local_id,
                            body: body.as_bytes().to_vec(),
                            attempts_allowed: allowed,
                            attempts_remaining: remaining,
                            created_at_ms: created,
                            updated_at_ms: updated,
                        },
                    )
                    .collect(),
                cut,
            ))
        })
    }

    fn __len__(&self) -> usize {
        self.jobs.len()
    }

    /// The store call stopped at one of its work budgets before its limit: due jobs may be
    /// left behind what it passed (`ShardedBackend.walk_ready` calls again).
    #[getter]
    fn cut(&self) -> bool {
        self.cut
    }

    /// The length of every job's body, summed: what a dequeue walk counts against its reply's
    /// byte budget (`DEQUEUE_BYTES`).
    #[getter]
    fn body_bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.body.len() as u64).sum()
    }

    /// One `(local_id, body, attempts_allowed, attempts_remaining, created_at_ms,
    /// updated_at_ms)` per job.
    fn to_list<'py>(&self, py: Python<'py>) -> Vec<ClaimedTuple<'py>> {
        self.jobs
            .iter()
            .map(|j| {
                (
                    j.local_id,
                    PyBytes::new(py, &j.body),
                    j.attempts_allowed,
                    j.attempts_remaining,
                    j.created_at_ms,
                    j.updated_at_ms,
                )
            })
            .collect()
    }
}

/// The acks of one queue on one shard.
#[pyclass(frozen, name = "AckGroup", module = "pinlater._pinlater")]
pub struct AckGroup {
    group: jobs::AckGroup,
}

impl AckGroup {
    #[must_use]
    pub fn from_group(group: jobs::AckGroup) -> Self {
        Self { group }
    }

    #[must_use]
    pub fn group(&self) -> &jobs::AckGroup {
        &self.group
    }
}

fn ack_items(items: Vec<AckTuple>) -> Vec<AckItem> {
    items
        .into_iter()
        .map(
            |(priority, local_id, append_custom_status, retry_delay_ms)| AckItem {
                priority,
                local_id,
                append_custom_status,
                retry_delay_ms,
            },
        )
        .collect()
}

fn ack_tuples(items: &[AckItem]) -> Vec<AckTuple> {
    items
        .iter()
        .map(|a| {
            (
                a.priority,
                a.local_id,
                a.append_custom_status.clone(),
                a.retry_delay_ms,
            )
        })
        .collect()
}

#[pymethods]
impl AckGroup {
    #[new]
    fn new(succeeded: Vec<AckTuple>, failed: Vec<AckTuple>) -> Self {
        Self::from_group(jobs::AckGroup {
            succeeded: ack_items(succeeded),
            failed: ack_items(failed),
        })
    }

    fn __len__(&self) -> usize {
        self.group.len()
    }

    /// The distinct priorities, ascending.
    fn priorities(&self) -> Vec<i64> {
        self.group.priorities()
    }

    /// The acks in parts of at most `size` (at least 1), successes first, each part's in the
    /// order a store applies the whole group's: for stores taken a part at a time.
    fn chunks(&self, size: usize) -> Vec<AckGroup> {
        self.group
            .chunks(size)
            .into_iter()
            .map(Self::from_group)
            .collect()
    }

    /// One `(priority, local_id, append_custom_status, retry_delay_ms)` per success.
    fn succeeded(&self) -> Vec<AckTuple> {
        ack_tuples(&self.group.succeeded)
    }

    /// One `(priority, local_id, append_custom_status, retry_delay_ms)` per failure.
    fn failed(&self) -> Vec<AckTuple> {
        ack_tuples(&self.group.failed)
    }
}
