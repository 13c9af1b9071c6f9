//! The reply to a `dequeueJobs` call, written straight to Thrift binary-protocol bytes.
//!
//! A dequeue answers up to hundreds of jobs; building one `PinLaterDequeueMetadata` Python object
//! per job and encoding them through thriftpy2 cost more than the rest of the hand-out. This
//! writes the same bytes from the jobs themselves: a strict REPLY message header, then
//! `dequeueJobs_result { 0: success = PinLaterDequeueResponse { 1: jobs map<string, binary>,
//! 2: jobMetadata map<string, PinLaterDequeueMetadata { 1: i32, 2: i32 }> } }` (field ids and
//! types from `thrift/pinlater.thrift`). Map entries keep the jobs' order; descriptors are
//! unique (a dequeue never hands out one job twice), so no key repeats.

/// Thrift binary protocol wire types used here.
const T_STOP: u8 = 0;
const T_I32: u8 = 8;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;
const T_MAP: u8 = 13;
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
    let mut w = Writer(Vec::with_capacity(method.len() + payload + 32));
    w.0.extend_from_slice(&VERSION_REPLY.to_be_bytes());
    w.bytes(method.as_bytes(), "method name")?;
    w.i32(seqid);
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
}
