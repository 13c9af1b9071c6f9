//! The REPLY messages of the three hot calls, written straight to Thrift binary-protocol bytes,
//! byte for byte what thriftpy2 writes for the same result objects (checked by
//! `tests/server/test_hot_wire.py`).
//!
//! A reply answers up to hundreds of jobs; building a Python object per job and encoding them
//! through thriftpy2 cost more than the rest of the call. Every reply is a strict REPLY message
//! header, then the method's result struct with field 0 (`success`) set, or no field for a void
//! method (field ids and types from `thrift/pinlater.thrift`):
//! - [`enqueue_reply`]: `enqueueJobs_result { 0: PinLaterEnqueueResponse { 1: list<string>
//!   jobDescriptors } }`, a descriptor per job in job order;
//! - [`dequeue_reply`], [`dequeue_batches_reply`]: `dequeueJobs_result { 0:
//!   PinLaterDequeueResponse { 1: jobs map<string, binary>, 2: jobMetadata map<string,
//!   PinLaterDequeueMetadata { 1: i32, 2: i32 }> } }`. Map entries keep the jobs' order;
//!   descriptors are unique (a dequeue never hands out one job twice), so no key repeats;
//! - [`void_reply`]: `<method>_result {}` (`ackDequeuedJobs`).

use crate::error::{DescriptorError, Malformation};
use crate::queue::descriptor::Encoder;
use crate::queue::jobs::{ClaimedJob, NewJob, Placed};

/// Thrift binary protocol wire types used here.
const T_STOP: u8 = 0;
const T_BOOL: u8 = 2;
const T_I32: u8 = 8;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;
const T_MAP: u8 = 13;
const T_LIST: u8 = 15;
/// The strict message header's version word with message type REPLY (2).
const VERSION_REPLY: u32 = 0x8001_0002;

/// One job of the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyJob<'a> {
    pub descriptor: &'a str,
    pub body: &'a [u8],
    pub attempts_allowed: i32,
    pub attempts_remaining: i32,
}

/// What cannot be written: a string or map longer than a Thrift i32 length can say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLong(pub &'static str);

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} longer than a Thrift length (2**31 - 1)", self.0)
    }
}

impl std::error::Error for TooLong {}

fn length(n: usize, what: &'static str) -> Result<[u8; 4], TooLong> {
    i32::try_from(n)
        .map(i32::to_be_bytes)
        .map_err(|_| TooLong(what))
}

struct Writer(Vec<u8>);

impl Writer {
    fn byte(&mut self, b: u8) {
        self.0.push(b);
    }

    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    fn field(&mut self, ttype: u8, id: i16) {
        self.0.push(ttype);
        self.0.extend_from_slice(&id.to_be_bytes());
    }

    fn bytes(&mut self, b: &[u8], what: &'static str) -> Result<(), TooLong> {
        self.0.extend_from_slice(&length(b.len(), what)?);
        self.0.extend_from_slice(b);
        Ok(())
    }

    fn map(&mut self, id: i16, value_type: u8, n: [u8; 4]) {
        self.field(T_MAP, id);
        self.byte(T_STRING);
        self.byte(value_type);
        self.0.extend_from_slice(&n);
    }
}

/// Why a reply cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error(transparent)]
    TooLong(#[from] TooLong),
    /// A queue or shard name, priority or local id that cannot form a descriptor, or local ids
    /// not one per job.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
    /// Attempts that do not fit the reply's i32.
    #[error("{0} {1} does not fit a Thrift i32")]
    NotI32(&'static str, i64),
}

fn header(method: &str, seqid: i32, capacity: usize) -> Result<Writer, TooLong> {
    let mut w = Writer(Vec::with_capacity(method.len() + capacity + 16));
    w.0.extend_from_slice(&VERSION_REPLY.to_be_bytes());
    w.bytes(method.as_bytes(), "method name")?;
    w.i32(seqid);
    Ok(w)
}

/// The reply of a void method (`ackDequeuedJobs`): an empty result struct.
pub fn void_reply(method: &str, seqid: i32) -> Result<Vec<u8>, TooLong> {
    let mut w = header(method, seqid, 1)?;
    w.byte(T_STOP);
    Ok(w.0)
}

/// The `enqueueJobs` reply: one descriptor `{queue}:s{shard}:p{priority}:{local_id}` per job,
/// `local_ids[i]` being the id the store gave `jobs[i]`.
pub fn enqueue_reply(
    method: &str,
    seqid: i32,
    queue: &str,
    shard: &str,
    jobs: &[NewJob],
    local_ids: &[i64],
) -> Result<Vec<u8>, ReplyError> {
    crate::queue::descriptor::check_lengths(jobs.len(), local_ids.len())?;
    let mut encoder = Encoder::new(queue, shard)?;
    let each = queue.len() + shard.len() + 32;
    let mut w = header(method, seqid, jobs.len() * each + 16)?;
    w.field(T_STRUCT, 0); // success
    w.field(T_LIST, 1); // jobDescriptors
    w.byte(T_STRING);
    w.0.extend_from_slice(&length(jobs.len(), "job count")?);
    for (index, (job, &id)) in jobs.iter().zip(local_ids).enumerate() {
        let descriptor = u64::try_from(id)
            .map_err(|_| DescriptorError::InvalidPart(Malformation::LocalId(id.to_string())))
            .and_then(|id| encoder.encode(job.priority, id))
            .map_err(|e| e.at_index(index))?;
        w.bytes(descriptor.as_bytes(), "job descriptor")?;
    }
    w.byte(T_STOP); // end of PinLaterEnqueueResponse
    w.byte(T_STOP); // end of the result struct
    Ok(w.0)
}

/// The `enqueueJobs` reply of jobs placed one by one (dedup keys spread a request over shards
/// and answer some jobs with the descriptor of the job holding their key): `descriptors` in
/// job order, and `deduplicated` (parallel to them) as the response's field 2 when given.
pub fn enqueue_descriptors_reply(
    method: &str,
    seqid: i32,
    descriptors: &[&str],
    deduplicated: Option<&[bool]>,
) -> Result<Vec<u8>, ReplyError> {
    if let Some(flags) = deduplicated {
        crate::queue::descriptor::check_lengths(descriptors.len(), flags.len())?;
    }
    let size: usize = descriptors.iter().map(|d| d.len() + 4).sum();
    let mut w = header(method, seqid, size + descriptors.len() + 24)?;
    w.field(T_STRUCT, 0); // success
    w.field(T_LIST, 1); // jobDescriptors
    w.byte(T_STRING);
    w.0.extend_from_slice(&length(descriptors.len(), "job count")?);
    for descriptor in descriptors {
        w.bytes(descriptor.as_bytes(), "job descriptor")?;
    }
    if let Some(flags) = deduplicated {
        w.field(T_LIST, 2); // deduplicated
        w.byte(T_BOOL);
        w.0.extend_from_slice(&length(flags.len(), "job count")?);
        w.0.extend(flags.iter().map(|&f| u8::from(f)));
    }
    w.byte(T_STOP); // end of PinLaterEnqueueResponse
    w.byte(T_STOP); // end of the result struct
    Ok(w.0)
}

/// The `enqueueJobs` reply of a keyed enqueue on one shard: a descriptor per job of `placed`
/// (in `queue` on `shard`, the holder's for a deduplicated job), and the response's field 2,
/// `deduplicated`, when some job was.
pub fn keyed_enqueue_reply(
    method: &str,
    seqid: i32,
    queue: &str,
    shard: &str,
    placed: &[Placed],
) -> Result<Vec<u8>, ReplyError> {
    sharded_enqueue_reply(method, seqid, queue, &[shard], placed.len(), |i| {
        (0, placed[i])
    })
}

/// [`keyed_enqueue_reply`] of a request whose jobs went to several shards: job `i` of `count`
/// is `job(i)`, `(index into shards, its place)`.
///
/// # Errors
/// As [`keyed_enqueue_reply`].
///
/// # Panics
/// If a job's shard index is past `shards` (the caller's bug: `KeyedSplit.merge` checks them).
pub fn sharded_enqueue_reply(
    method: &str,
    seqid: i32,
    queue: &str,
    shards: &[&str],
    count: usize,
    job: impl Fn(usize) -> (usize, Placed),
) -> Result<Vec<u8>, ReplyError> {
    let mut encoders = shards
        .iter()
        .map(|shard| Encoder::new(queue, shard))
        .collect::<Result<Vec<Encoder>, DescriptorError>>()?;
    let longest = shards.iter().map(|s| s.len()).max().unwrap_or(0);
    let each = queue.len() + longest + 32;
    let mut w = header(method, seqid, count * (each + 1) + 24)?;
    w.field(T_STRUCT, 0); // success
    w.field(T_LIST, 1); // jobDescriptors
    w.byte(T_STRING);
    w.0.extend_from_slice(&length(count, "job count")?);
    let mut deduplicated = false;
    for index in 0..count {
        let (shard, (priority, id, repeated)) = job(index);
        deduplicated |= repeated;
        let encoder = &mut encoders[shard];
        let descriptor = u64::try_from(id)
            .map_err(|_| DescriptorError::InvalidPart(Malformation::LocalId(id.to_string())))
            .and_then(|id| encoder.encode(priority, id))
            .map_err(|e| e.at_index(index))?;
        w.bytes(descriptor.as_bytes(), "job descriptor")?;
    }
    if deduplicated {
        w.field(T_LIST, 2); // deduplicated
        w.byte(T_BOOL);
        w.0.extend_from_slice(&length(count, "job count")?);
        w.0.extend((0..count).map(|i| u8::from(job(i).1 .2)));
    }
    w.byte(T_STOP); // end of PinLaterEnqueueResponse
    w.byte(T_STOP); // end of the result struct
    Ok(w.0)
}

/// One store call's claimed jobs: `(shard, priority, jobs)`.
pub type Batch<'a> = (&'a str, i64, &'a [ClaimedJob]);

/// A job of a dequeue reply with where it lives, as a store call or the broker's buffer holds
/// it: its descriptor is built from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedJob<'a> {
    pub shard: &'a str,
    pub priority: i64,
    pub local_id: i64,
    pub body: &'a [u8],
    pub attempts_allowed: i64,
    pub attempts_remaining: i64,
}

/// The `dequeueJobs` reply of jobs claimed in `batches` of `queue`, in batch order: the same
/// bytes as [`dequeue_reply`] with each job's descriptor built from its batch.
pub fn dequeue_batches_reply(
    method: &str,
    seqid: i32,
    queue: &str,
    batches: &[Batch<'_>],
) -> Result<Vec<u8>, ReplyError> {
    let count: usize = batches.iter().map(|(_, _, jobs)| jobs.len()).sum();
    let mut placed = Vec::with_capacity(count);
    for &(shard, priority, jobs) in batches {
        placed.extend(jobs.iter().map(|job| PlacedJob {
            shard,
            priority,
            local_id: job.local_id,
            body: &job.body,
            attempts_allowed: job.attempts_allowed,
            attempts_remaining: job.attempts_remaining,
        }));
    }
    dequeue_placed_reply(method, seqid, queue, &placed)
}

/// The `dequeueJobs` reply of `jobs` of `queue`, in order: the same bytes as [`dequeue_reply`]
/// with each job's descriptor built from its shard, priority and local id.
pub fn dequeue_placed_reply(
    method: &str,
    seqid: i32,
    queue: &str,
    jobs: &[PlacedJob<'_>],
) -> Result<Vec<u8>, ReplyError> {
    // Every descriptor in one buffer, then borrowed by the reply's jobs; one encoder per shard
    // (a broker's hand-out mixes shards, a store call's batch has one).
    let mut text = String::with_capacity(jobs.len() * (queue.len() + 24));
    let mut ends = Vec::with_capacity(jobs.len());
    let mut encoders: Vec<(&str, Encoder)> = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let at = if let Some(at) = encoders.iter().position(|(shard, _)| *shard == job.shard) {
            at
        } else {
            encoders.push((job.shard, Encoder::new(queue, job.shard)?));
            encoders.len() - 1
        };
        let descriptor = u64::try_from(job.local_id)
            .map_err(|_| {
                DescriptorError::InvalidPart(Malformation::LocalId(job.local_id.to_string()))
            })
            .and_then(|id| encoders[at].1.encode(job.priority, id))
            .map_err(|e| e.at_index(index))?;
        text.push_str(descriptor);
        ends.push(text.len());
    }
    let mut reply_jobs = Vec::with_capacity(jobs.len());
    let mut start = 0;
    for (job, &end) in jobs.iter().zip(&ends) {
        let attempts = |what, v: i64| i32::try_from(v).map_err(|_| ReplyError::NotI32(what, v));
        reply_jobs.push(ReplyJob {
            descriptor: &text[start..end],
            body: job.body,
            attempts_allowed: attempts("attempts_allowed", job.attempts_allowed)?,
            attempts_remaining: attempts("attempts_remaining", job.attempts_remaining)?,
        });
        start = end;
    }
    Ok(dequeue_reply(method, seqid, &reply_jobs)?)
}

/// The whole reply message for `method` (normally `dequeueJobs`) and `seqid`.
///
/// # Errors
/// [`TooLong`] when a name, descriptor or body, or the number of jobs, does not fit a Thrift
/// length.
pub fn dequeue_reply(method: &str, seqid: i32, jobs: &[ReplyJob<'_>]) -> Result<Vec<u8>, TooLong> {
    let payload: usize = jobs
        .iter()
        .map(|j| 2 * j.descriptor.len() + j.body.len() + 30)
        .sum();
    let mut w = header(method, seqid, payload + 16)?;
    let n = length(jobs.len(), "job count")?;
    w.field(T_STRUCT, 0); // success
    w.map(1, T_STRING, n); // jobs
    for job in jobs {
        w.bytes(job.descriptor.as_bytes(), "job descriptor")?;
        w.bytes(job.body, "job body")?;
    }
    w.map(2, T_STRUCT, n); // jobMetadata
    for job in jobs {
        w.bytes(job.descriptor.as_bytes(), "job descriptor")?;
        w.field(T_I32, 1);
        w.i32(job.attempts_allowed);
        w.field(T_I32, 2);
        w.i32(job.attempts_remaining);
        w.byte(T_STOP);
    }
    w.byte(T_STOP); // end of PinLaterDequeueResponse
    w.byte(T_STOP); // end of the result struct
    Ok(w.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::struct_end::struct_end;

    #[test]
    fn empty_reply_has_both_maps_and_walks_as_one_struct() {
        let reply = dequeue_reply("dequeueJobs", 7, &[]).unwrap();
        let header = 4 + 4 + "dequeueJobs".len() + 4;
        assert_eq!(&reply[..4], &[0x80, 0x01, 0x00, 0x02]);
        assert_eq!(&reply[header - 4..header], &7_i32.to_be_bytes());
        assert_eq!(struct_end(&reply, header), Ok(reply.len()));
        // success (struct, id 0), jobs (map, id 1) of 0, jobMetadata (map, id 2) of 0, stops.
        let body = [
            12, 0, 0, 13, 0, 1, 11, 11, 0, 0, 0, 0, 13, 0, 2, 11, 12, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&reply[header..], &body);
    }

    #[test]
    fn jobs_keep_their_order_in_both_maps() {
        let jobs = [
            ReplyJob {
                descriptor: "q:s1:p1:2",
                body: b"b",
                attempts_allowed: 3,
                attempts_remaining: -1,
            },
            ReplyJob {
                descriptor: "q:s1:p1:1",
                body: b"",
                attempts_allowed: i32::MAX,
                attempts_remaining: i32::MIN,
            },
        ];
        let reply = dequeue_reply("dequeueJobs", -5, &jobs).unwrap();
        let header = 4 + 4 + "dequeueJobs".len() + 4;
        assert_eq!(struct_end(&reply, header), Ok(reply.len()));
        let text = String::from_utf8_lossy(&reply);
        let first = text.find("q:s1:p1:2").unwrap();
        let second = text.find("q:s1:p1:1").unwrap();
        assert!(first < second);
        assert_eq!(text.matches("q:s1:p1:2").count(), 2, "a key in each map");
    }

    fn claimed(local_id: i64, body: &[u8], allowed: i64, remaining: i64) -> ClaimedJob {
        ClaimedJob {
            local_id,
            body: body.to_vec(),
            attempts_allowed: allowed,
            attempts_remaining: remaining,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    #[test]
    fn batches_write_what_dequeue_reply_writes() {
        let first = [claimed(7, b"a", 2, 1), claimed(8, b"", 3, 3)];
        let second = [claimed(1, b"zz", 1, 0)];
        let batches: [Batch<'_>; 2] = [("1", 2, &first), ("2", 1, &second)];
        let reply = dequeue_batches_reply("dequeueJobs", 3, "q", &batches).unwrap();
        let jobs = [
            ("q:s1:p2:7", &first[0]),
            ("q:s1:p2:8", &first[1]),
            ("q:s2:p1:1", &second[0]),
        ]
        .map(|(descriptor, j)| ReplyJob {
            descriptor,
            body: &j.body,
            attempts_allowed: i32::try_from(j.attempts_allowed).unwrap(),
            attempts_remaining: i32::try_from(j.attempts_remaining).unwrap(),
        });
        assert_eq!(reply, dequeue_reply("dequeueJobs", 3, &jobs).unwrap());
        assert_eq!(
            dequeue_batches_reply("dequeueJobs", 3, "q", &[]).unwrap(),
            dequeue_reply("dequeueJobs", 3, &[]).unwrap()
        );
    }

    #[test]
    fn placed_jobs_of_interleaved_shards_write_what_dequeue_reply_writes() {
        let place = |shard, priority, local_id, body| PlacedJob {
            shard,
            priority,
            local_id,
            body,
            attempts_allowed: 3,
            attempts_remaining: 2,
        };
        let placed = [
            place("east_2", 1, 9, b"b".as_slice()),
            place("1", 1, 4, b"".as_slice()),
            place("east_2", 2, 10, b"cc".as_slice()),
        ];
        let reply = dequeue_placed_reply("dequeueJobs", 5, "emails", &placed).unwrap();
        let jobs = [
            ("emails:seast_2:p1:9", b"b".as_slice()),
            ("emails:s1:p1:4", b"".as_slice()),
            ("emails:seast_2:p2:10", b"cc".as_slice()),
        ]
        .map(|(descriptor, body)| ReplyJob {
            descriptor,
            body,
            attempts_allowed: 3,
            attempts_remaining: 2,
        });
        assert_eq!(reply, dequeue_reply("dequeueJobs", 5, &jobs).unwrap());
        let bad = [
            place("1", 1, 1, b"".as_slice()),
            place("1", 0, 2, b"".as_slice()),
        ];
        let err = dequeue_placed_reply("d", 0, "q", &bad).unwrap_err();
        assert!(
            err.to_string().starts_with("descriptor at index 1: "),
            "{err}"
        );
    }

    #[test]
    fn batches_refuse_what_no_reply_can_say() {
        let negative = [claimed(1, b"", 1, 1), claimed(-1, b"", 1, 1)];
        let err = dequeue_batches_reply("d", 0, "q", &[("s", 1, &negative)]).unwrap_err();
        assert!(
            err.to_string().starts_with("descriptor at index 1: "),
            "{err}"
        );
        let huge = [claimed(1, b"", i64::from(i32::MAX) + 1, 1)];
        let err = dequeue_batches_reply("d", 0, "q", &[("s", 1, &huge)]).unwrap_err();
        assert_eq!(err, ReplyError::NotI32("attempts_allowed", 2_147_483_648));
        let bad_shard = dequeue_batches_reply("d", 0, "q", &[("s:", 1, &huge)]);
        assert!(matches!(bad_shard, Err(ReplyError::Descriptor(_))));
    }

    fn new_job(priority: i64) -> NewJob {
        NewJob {
            priority,
            body: Vec::new(),
            run_after_ms: 0,
            attempts_allowed: 1,
            custom_status: String::new(),
        }
    }

    #[test]
    fn a_keyed_reply_is_the_reply_of_its_descriptors_with_the_flags_when_some_job_was_deduplicated()
    {
        let placed = [(1, 5, false), (3, 6, false), (1, 5, true)];
        let descriptors = ["q:s1:p1:5", "q:s1:p3:6", "q:s1:p1:5"];
        let flags = [false, false, true];
        assert_eq!(
            keyed_enqueue_reply("enqueueJobs", 9, "q", "1", &placed).unwrap(),
            enqueue_descriptors_reply("enqueueJobs", 9, &descriptors, Some(&flags)).unwrap()
        );
        assert_eq!(
            keyed_enqueue_reply("enqueueJobs", 9, "q", "1", &placed[..2]).unwrap(),
            enqueue_descriptors_reply("enqueueJobs", 9, &descriptors[..2], None).unwrap()
        );
        let bad = keyed_enqueue_reply("enqueueJobs", 9, "q", "1", &[(1, 5, false), (1, -1, false)]);
        assert!(bad.unwrap_err().to_string().contains("index 1"));
    }

    #[test]
    fn a_sharded_reply_names_each_job_s_own_shard() {
        let placed = [
            (1, (1, 5, false)),
            (0, (3, 6, false)),
            (2, (2, 7, false)),
            (1, (1, 5, true)),
        ];
        let descriptors = ["q:sb:p1:5", "q:sa:p3:6", "q:sc:p2:7", "q:sb:p1:5"];
        let reply = |n: usize| {
            sharded_enqueue_reply("enqueueJobs", 9, "q", &["a", "b", "c"], n, |i| placed[i])
        };
        assert_eq!(
            reply(4).unwrap(),
            enqueue_descriptors_reply(
                "enqueueJobs",
                9,
                &descriptors,
                Some(&[false, false, false, true])
            )
            .unwrap()
        );
        assert_eq!(
            reply(3).unwrap(),
            enqueue_descriptors_reply("enqueueJobs", 9, &descriptors[..3], None).unwrap()
        );
    }

    #[test]
    fn enqueue_reply_lists_a_descriptor_per_job() {
        let reply = enqueue_reply(
            "enqueueJobs",
            9,
            "q",
            "1",
            &[new_job(1), new_job(3)],
            &[5, 6],
        )
        .unwrap();
        let header = 4 + 4 + "enqueueJobs".len() + 4;
        assert_eq!(&reply[..4], &[0x80, 0x01, 0x00, 0x02]);
        assert_eq!(struct_end(&reply, header), Ok(reply.len()));
        let mut body = vec![12, 0, 0, 15, 0, 1, 11, 0, 0, 0, 2];
        for d in ["q:s1:p1:5", "q:s1:p3:6"] {
            body.extend_from_slice(&i32::try_from(d.len()).unwrap().to_be_bytes());
            body.extend_from_slice(d.as_bytes());
        }
        body.extend_from_slice(&[0, 0]);
        assert_eq!(&reply[header..], &body);
        let empty = enqueue_reply("enqueueJobs", 9, "q", "1", &[], &[]).unwrap();
        assert_eq!(
            &empty[header..],
            &[12, 0, 0, 15, 0, 1, 11, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn enqueue_reply_refuses_bad_parts() {
        let jobs = [new_job(1), new_job(1)];
        let mismatch = enqueue_reply("e", 0, "q", "s", &jobs, &[1]).unwrap_err();
        assert!(matches!(
            mismatch,
            ReplyError::Descriptor(DescriptorError::LengthMismatch { .. })
        ));
        let negative = enqueue_reply("e", 0, "q", "s", &jobs, &[1, -2]).unwrap_err();
        assert!(
            negative.to_string().starts_with("descriptor at index 1: "),
            "{negative}"
        );
        let priority = enqueue_reply("e", 0, "q", "s", &[new_job(0)], &[1]).unwrap_err();
        assert!(matches!(priority, ReplyError::Descriptor(_)));
    }

    #[test]
    fn void_reply_is_an_empty_result() {
        let reply = void_reply("ackDequeuedJobs", -1).unwrap();
        let mut expected = vec![0x80, 0x01, 0x00, 0x02, 0, 0, 0, 15];
        expected.extend_from_slice(b"ackDequeuedJobs");
        expected.extend_from_slice(&(-1_i32).to_be_bytes());
        expected.push(0);
        assert_eq!(reply, expected);
    }
}
