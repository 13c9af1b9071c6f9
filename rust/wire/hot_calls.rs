//! The three hot calls, `enqueueJobs`, `dequeueJobs` and `ackDequeuedJobs`, decoded straight
//! from the frame into Rust values: no Python object per job.
//!
//! The rules are those of the Cython decoder (thriftpy2's `cybin` with `strict_decode`) that the
//! server used before, checked against it by `tests/server/test_hot_wire.py`:
//! - the argument struct is walked first ([`struct_end`]), so a frame that is not well-formed
//!   fails with the walk's error, worded as before;
//! - an unknown field id is skipped, and so is a known id with another wire type; a list whose
//!   element type is not the IDL's decodes as empty (its elements skipped);
//! - a later duplicate field replaces the earlier one (a struct wholly: the two are not merged);
//! - a `string` field must be UTF-8 ([`NotUtf8`], worded as Python's `UnicodeDecodeError`); a
//!   `binary` one (`PinLaterJob.body`) is bytes;
//! - absent optional fields take their IDL defaults, except `runAfterTimestampMillis` and
//!   `waitMillis`, which stay `None` (the handler treats an absent `waitMillis` as 0);
//! - then a missing struct argument, and after it the first missing `required` field (depth
//!   first, in field-id order, as the dispatcher's `_first_missing` walks) is a [`MissingField`]
//!   whose message is the dispatcher's reply.
//!
//! Per-job bytes (bodies, descriptors, custom statuses) stay in the payload as [`Span`]s: the
//! caller keeps the payload and hands it back to the accessors, which copy what they need once.

use std::ops::Range;

use crate::error::{DescriptorError, WalkError};
use crate::queue::descriptor::{self, Descriptor};
use crate::queue::jobs::{AckGroup, AckItem, NewJob};
use crate::wire::struct_end;

const T_STOP: u8 = 0;
const T_BOOL: u8 = 2;
const T_BYTE: u8 = 3;
const T_DOUBLE: u8 = 4;
const T_I32: u8 = 8;
const T_I64: u8 = 10;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;
const T_LIST: u8 = 15;

/// The fewest bytes a complete list item takes: both lists' items (`PinLaterJob`,
/// `PinLaterJobAckInfo`) need a string field (a 3-byte header, a 4-byte length) and a STOP.
const MIN_COMPLETE_ITEM: usize = 8;

/// Most shards one ack call may name (`AckCall::groups`): far past any deployment's, far below
/// the hundreds of thousands of made-up names a frame holds.
pub const MAX_ACK_SHARDS: usize = 10_000;

/// `ErrorCode.PRIORITY_NOT_SUPPORTED` of the IDL.
pub const PRIORITY_NOT_SUPPORTED: i32 = 416;
/// `ErrorCode.ENQUEUE_REJECTED` of the IDL.
pub const ENQUEUE_REJECTED: i32 = 430;

/// Where a value lies in the payload.
pub type Span = Range<usize>;

/// Why a hot call could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not a well-formed struct (Python: `MalformedThriftError`).
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// A `string` field that is not UTF-8 (Python: `MalformedThriftError`).
    #[error(transparent)]
    NotUtf8(#[from] NotUtf8),
    /// A struct argument or a required field left out (Python: `MissingFieldError`).
    #[error(transparent)]
    Missing(#[from] MissingField),
    /// Not one of the three hot methods: the caller's bug (Python: `ValueError`).
    #[error("{0:?} is not a hot call (enqueueJobs, dequeueJobs or ackDequeuedJobs)")]
    UnknownMethod(String),
}

/// A `string` field's bytes that are not UTF-8, described as Python's `UnicodeDecodeError` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotUtf8 {
    /// The first offending byte.
    pub byte: u8,
    /// How many bytes the error covers (1 to 3).
    pub len: usize,
    /// Where they start in the string.
    pub position: usize,
    pub reason: &'static str,
}

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p, reason) = (self.position, self.reason);
        if self.len == 1 {
            let b = self.byte;
            write!(
                f,
                "'utf-8' codec can't decode byte 0x{b:02x} in position {p}: {reason}"
            )
        } else {
            let last = p + self.len - 1;
            write!(
                f,
                "'utf-8' codec can't decode bytes in position {p}-{last}: {reason}"
            )
        }
    }
}

impl std::error::Error for NotUtf8 {}

/// `bytes` as UTF-8, or Python's description of the first error.
pub fn utf8(bytes: &[u8]) -> Result<&str, NotUtf8> {
    std::str::from_utf8(bytes).map_err(|e| {
        let position = e.valid_up_to();
        let byte = bytes[position];
        // Rust and Python both report the maximal invalid subpart (the Unicode practice).
        let (len, reason) = match e.error_len() {
            None => (bytes.len() - position, "unexpected end of data"),
            Some(n) if (0xC2..=0xF4).contains(&byte) => (n, "invalid continuation byte"),
            Some(n) => (n, "invalid start byte"),
        };
        NotUtf8 {
            byte,
            len,
            position,
            reason,
        }
    })
}

/// A struct argument or required field left out; the message is the dispatcher's reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MissingField {
    #[error("missing argument {method}.{argument}")]
    Argument {
        method: &'static str,
        argument: &'static str,
    },
    /// `field` is `Struct.field`, `path` where it is below the arguments.
    #[error("missing required field {field} at {path}")]
    Field { field: &'static str, path: String },
}

fn missing(field: &'static str, path: String) -> MissingField {
    MissingField::Field { field, path }
}

/// A job the handler refuses, as `PinLaterException(code, message)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JobRejected {
    /// An `ErrorCode` of the IDL.
    pub code: i32,
    pub message: String,
}

/// `RequestContext`. `request_id` is `""` when absent (its IDL default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    pub source: Option<String>,
    pub request_id: String,
}

/// `PinLaterJob`, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub body: Option<Span>,
    pub priority: i8,
    pub run_after_ms: Option<i64>,
    pub attempts_allowed: i32,
    pub custom_status: Span,
    /// The pinlater extensions (6-9), checked by [`EnqueueCall::keys`], not here.
    pub dedup_key: Option<Span>,
    pub dedup_window_ms: i64,
    pub group_key: Option<Span>,
    pub expire_at_ms: Option<i64>,
}

impl Job {
    /// Whether the job asks for an extension: a key, an expiry, or a dedup window other than 0
    /// (clients generated from the IDL send its default 0 with every job).
    #[must_use]
    pub fn has_extensions(&self) -> bool {
        self.dedup_key.is_some()
            || self.group_key.is_some()
            || self.expire_at_ms.is_some()
            || self.dedup_window_ms != 0
    }
}

impl Default for Job {
    fn default() -> Self {
        Self {
            body: None,
            priority: 1,
            run_after_ms: None,
            attempts_allowed: 2,
            custom_status: 0..0,
            dedup_key: None,
            dedup_window_ms: 0,
            group_key: None,
            expire_at_ms: None,
        }
    }
}

/// `PinLaterJobAckInfo`, defaults applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckInfo {
    pub descriptor: Option<Span>,
    pub append_custom_status: Span,
    pub retry_delay_ms: i64,
}

/// An `enqueueJobs` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueCall {
    pub context: Context,
    pub queue: Option<String>,
    /// Its jobs, or none if it declared more than [`MAX_ENQUEUE_JOBS`] (the handler refuses it).
    pub jobs: Vec<Job>,
    /// How many jobs its list declared (`jobs.len()` unless past [`MAX_ENQUEUE_JOBS`]).
    pub declared: usize,
}

/// Most jobs one `enqueueJobs` takes (the handler's `MAX_ENQUEUE`): a call declaring more is
/// walked, not decoded, its jobs left out, so that refusing it holds no job in memory (a 16 MiB
/// frame of two million empty jobs held about 290 MB while it was decoded to be refused).
pub const MAX_ENQUEUE_JOBS: usize = 100_000;

/// A `PinLaterJobAckRequest`: the argument of `ackDequeuedJobs`, or piggy-backed on a dequeue.
/// An absent list is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckCall {
    pub queue: Option<String>,
    pub succeeded: Vec<AckInfo>,
    pub failed: Vec<AckInfo>,
}

/// A `dequeueJobs` call.
#[derive(Debug, Clone, PartialEq)]
pub struct DequeueCall {
    pub context: Context,
    pub queue: Option<String>,
    pub limit: i32,
    pub ack: Option<AckCall>,
    pub dry_run: bool,
    pub coverage: f64,
    pub wait_millis: Option<i32>,
}

/// One decoded hot call.
#[derive(Debug, Clone, PartialEq)]
pub enum HotCall {
    Enqueue(EnqueueCall),
    Dequeue(DequeueCall),
    Ack(AckCall),
}

/// The bytes of `span` in `payload` (empty if the payload is not the one decoded).
#[must_use]
pub fn bytes_at<'p>(payload: &'p [u8], span: &Span) -> &'p [u8] {
    payload.get(span.clone()).unwrap_or_default()
}

/// The text of `span`, which the decoder checked is UTF-8.
#[must_use]
pub fn text_at<'p>(payload: &'p [u8], span: &Span) -> &'p str {
    std::str::from_utf8(bytes_at(payload, span)).unwrap_or_default()
}

/// A Thrift `CALL` message type (`TMessageType.CALL`).
const CALL: u8 = 1;
/// The version word of a strict binary message header (`VERSION_1`), and its mask.
const VERSION_1: u32 = 0x8001_0000;
const VERSION_MASK: u32 = 0xffff_0000;

/// The method of a hot call, its seqid and where its argument struct starts, when `payload`
/// begins with a well-formed `CALL` message header (strict or old style) naming `enqueueJobs`,
/// `dequeueJobs` or `ackDequeuedJobs`; `None` for anything else (another method, another
/// message type, a malformed header), which the caller's general path answers.
#[must_use]
pub fn hot_header(payload: &[u8]) -> Option<(&'static str, i32, usize)> {
    let i32_at = |pos: usize| -> Option<i32> {
        let word = payload.get(pos..pos.checked_add(4)?)?;
        Some(i32::from_be_bytes(word.try_into().ok()?))
    };
    let first = i32_at(0)?;
    let (name_len, name_at, mtype) = if first < 0 {
        // strict: version | type, then the name as a string
        #[allow(clippy::cast_sign_loss)] // the bit pattern is what is compared
        let word = first as u32;
        if word & VERSION_MASK != VERSION_1 {
            return None;
        }
        (i32_at(4)?, 8, Some((word & 0xff) as u8))
    } else {
        (first, 4, None) // old style: the name, then the type byte
    };
    let name_len = usize::try_from(name_len).ok()?;
    let name_end = name_at + name_len;
    let name = payload.get(name_at..name_end)?;
    let (mtype, seqid_at) = match mtype {
        Some(mtype) => (mtype, name_end),
        None => (*payload.get(name_end)?, name_end + 1),
    };
    if mtype != CALL {
        return None;
    }
    let method = match name {
        b"enqueueJobs" => "enqueueJobs",
        b"dequeueJobs" => "dequeueJobs",
        b"ackDequeuedJobs" => "ackDequeuedJobs",
        _ => return None,
    };
    Some((method, i32_at(seqid_at)?, seqid_at + 4))
}

/// Decodes the arguments of `method` at `offset` in `payload` (just past the message header).
pub fn decode(method: &str, payload: &[u8], offset: usize) -> Result<HotCall, DecodeError> {
    let method: &'static str = match method {
        "enqueueJobs" => "enqueueJobs",
        "dequeueJobs" => "dequeueJobs",
        "ackDequeuedJobs" => "ackDequeuedJobs",
        other => return Err(DecodeError::UnknownMethod(other.to_owned())),
    };
    struct_end::struct_end(payload, offset)?;
    let mut r = Reader {
        buf: payload,
        pos: offset,
    };
    Ok(match method {
        "enqueueJobs" => {
            let (context, request) = args(&mut r, method, enqueue_request)?;
            if request.queue.is_none() {
                return Err(missing(
                    "PinLaterEnqueueRequest.queueName",
                    "request.queueName".into(),
                )
                .into());
            }
            let Some(jobs) = request.jobs else {
                return Err(missing("PinLaterEnqueueRequest.jobs", "request.jobs".into()).into());
            };
            if let Some(i) = jobs.iter().position(|j| j.body.is_none()) {
                return Err(missing("PinLaterJob.body", format!("request.jobs[{i}].body")).into());
            }
            HotCall::Enqueue(EnqueueCall {
                context,
                queue: request.queue,
                jobs,
                declared: request.declared,
            })
        }
        "dequeueJobs" => {
            let (context, request) = args(&mut r, method, dequeue_request)?;
            if request.queue.is_none() {
                return Err(missing(
                    "PinLaterDequeueRequest.queueName",
                    "request.queueName".into(),
                )
                .into());
            }
            let Some(limit) = request.limit else {
                return Err(missing("PinLaterDequeueRequest.limit", "request.limit".into()).into());
            };
            if let Some(ack) = &request.ack {
                check_ack(ack, "request.jobAckRequest")?;
            }
            HotCall::Dequeue(DequeueCall {
                context,
                queue: request.queue,
                limit,
                ack: request.ack,
                dry_run: request.dry_run,
                coverage: request.coverage,
                wait_millis: request.wait_millis,
            })
        }
        _ => {
            let (_context, request) = args(&mut r, method, ack_request)?;
            check_ack(&request, "request")?;
            HotCall::Ack(request)
        }
    })
}

fn check_ack(ack: &AckCall, at: &str) -> Result<(), MissingField> {
    if ack.queue.is_none() {
        return Err(missing(
            "PinLaterJobAckRequest.queueName",
            format!("{at}.queueName"),
        ));
    }
    for (name, list) in [
        ("jobsSucceeded", &ack.succeeded),
        ("jobsFailed", &ack.failed),
    ] {
        if let Some(i) = list.iter().position(|a| a.descriptor.is_none()) {
            return Err(missing(
                "PinLaterJobAckInfo.jobDescriptor",
                format!("{at}.{name}[{i}].jobDescriptor"),
            ));
        }
    }
    Ok(())
}

/// Reads `(1: RequestContext context, 2: <request> request)`; both must be there, and the
/// context's `source` set (the context is checked before the request, as it comes first).
fn args<T>(
    r: &mut Reader<'_>,
    method: &'static str,
    mut request: impl FnMut(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<(Context, T), DecodeError> {
    let mut ctx = None;
    let mut req = None;
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRUCT) => ctx = Some(context(r)?),
            (2, T_STRUCT) => req = Some(request(r)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let argument = |argument| MissingField::Argument { method, argument };
    let ctx = ctx.ok_or_else(|| argument("context"))?;
    let req = req.ok_or_else(|| argument("request"))?;
    if ctx.source.is_none() {
        return Err(missing("RequestContext.source", "context.source".into()).into());
    }
    Ok((ctx, req))
}

fn context(r: &mut Reader<'_>) -> Result<Context, DecodeError> {
    let mut c = Context::default();
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => c.source = Some(r.string()?),
            (2, T_STRING) => c.request_id = r.string()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(c)
}

struct EnqueueRequest {
    queue: Option<String>,
    jobs: Option<Vec<Job>>,
    declared: usize,
}

fn enqueue_request(r: &mut Reader<'_>) -> Result<EnqueueRequest, DecodeError> {
    let mut req = EnqueueRequest {
        queue: None,
        jobs: None,
        declared: 0,
    };
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => req.queue = Some(r.string()?),
            (2, T_LIST) => {
                let (jobs, declared) =
                    r.list_capped(T_STRUCT, job, |j| j.body.is_some(), MAX_ENQUEUE_JOBS)?;
                req.jobs = Some(jobs);
                req.declared = declared;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(req)
}

fn job(r: &mut Reader<'_>) -> Result<Job, DecodeError> {
    let mut j = Job::default();
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => j.body = Some(r.span()?),
            (2, T_BYTE) => j.priority = i8::from_be_bytes(r.take()?),
            (3, T_I64) => j.run_after_ms = Some(i64::from_be_bytes(r.take()?)),
            (4, T_I32) => j.attempts_allowed = i32::from_be_bytes(r.take()?),
            (5, T_STRING) => j.custom_status = r.text()?,
            (6, T_STRING) => j.dedup_key = Some(r.text()?),
            (7, T_I64) => j.dedup_window_ms = i64::from_be_bytes(r.take()?),
            (8, T_STRING) => j.group_key = Some(r.text()?),
            (9, T_I64) => j.expire_at_ms = Some(i64::from_be_bytes(r.take()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(j)
}

struct DequeueRequest {
    queue: Option<String>,
    limit: Option<i32>,
    ack: Option<AckCall>,
    dry_run: bool,
    coverage: f64,
    wait_millis: Option<i32>,
}

fn dequeue_request(r: &mut Reader<'_>) -> Result<DequeueRequest, DecodeError> {
    let mut req = DequeueRequest {
        queue: None,
        limit: None,
        ack: None,
        dry_run: false,
        coverage: 1.0,
        wait_millis: None,
    };
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => req.queue = Some(r.string()?),
            (2, T_I32) => req.limit = Some(i32::from_be_bytes(r.take()?)),
            (3, T_STRUCT) => req.ack = Some(ack_request(r)?),
            (4, T_BOOL) => req.dry_run = r.take::<1>()? != [0],
            (5, T_DOUBLE) => req.coverage = f64::from_be_bytes(r.take()?),
            (6, T_I32) => req.wait_millis = Some(i32::from_be_bytes(r.take()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(req)
}

fn ack_request(r: &mut Reader<'_>) -> Result<AckCall, DecodeError> {
    let mut req = AckCall::default();
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => req.queue = Some(r.string()?),
            (2, T_LIST) => req.succeeded = r.list(T_STRUCT, ack_info, has_descriptor)?,
            (3, T_LIST) => req.failed = r.list(T_STRUCT, ack_info, has_descriptor)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(req)
}

fn has_descriptor(a: &AckInfo) -> bool {
    a.descriptor.is_some()
}

fn ack_info(r: &mut Reader<'_>) -> Result<AckInfo, DecodeError> {
    let mut a = AckInfo::default();
    r.fields(|r, ttype, id| {
        match (id, ttype) {
            (1, T_STRING) => a.descriptor = Some(r.text()?),
            (2, T_STRING) => a.append_custom_status = r.text()?,
            (3, T_I64) => a.retry_delay_ms = i64::from_be_bytes(r.take()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(a)
}

/// Reads a struct that `struct_end` accepted; every read is still bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WalkError> {
        let end = self.pos.checked_add(N).ok_or(WalkError::StructTruncated)?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .and_then(|b| <[u8; N]>::try_from(b).ok())
            .ok_or(WalkError::StructTruncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn span(&mut self) -> Result<Span, WalkError> {
        let n = i32::from_be_bytes(self.take()?);
        let n = usize::try_from(n).map_err(|_| WalkError::NegativeStringLength)?;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(WalkError::StructTruncated)?;
        let span = self.pos..end;
        self.pos = end;
        Ok(span)
    }

    /// A `string` kept in the payload, checked to be UTF-8.
    fn text(&mut self) -> Result<Span, DecodeError> {
        let span = self.span()?;
        utf8(bytes_at(self.buf, &span))?;
        Ok(span)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let span = self.span()?;
        Ok(utf8(bytes_at(self.buf, &span))?.to_owned())
    }

    fn skip(&mut self, ttype: u8) -> Result<(), WalkError> {
        self.pos = struct_end::value_end(self.buf, self.pos, ttype)?;
        Ok(())
    }

    /// Reads fields up to the struct's STOP: `field` reads those it knows (by id and wire type)
    /// and answers `false` for the others, which are skipped.
    fn fields(
        &mut self,
        mut field: impl FnMut(&mut Self, u8, i16) -> Result<bool, DecodeError>,
    ) -> Result<(), DecodeError> {
        loop {
            let [ttype] = self.take()?;
            if ttype == T_STOP {
                return Ok(());
            }
            let id = i16::from_be_bytes(self.take()?);
            if !field(self, ttype, id)? {
                self.skip(ttype)?;
            }
        }
    }

    /// A list of `etype` elements; one of another element type is skipped and reads as empty.
    ///
    /// Items are kept up to the first that is not `complete` (a required field missing): the
    /// call will be refused for it (or for an error found earlier in the checks' order), so later
    /// items are read, for their errors, but not kept. A frame of a million empty structs thus
    /// costs no memory, and the first incomplete item keeps its index.
    /// [`Self::list`], but a list of `etype` declaring more than `cap` elements is walked, not
    /// decoded: no element is returned, and how many it declared is (else the elements' count).
    fn list_capped<T>(
        &mut self,
        etype: u8,
        item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
        complete: fn(&T) -> bool,
        cap: usize,
    ) -> Result<(Vec<T>, usize), DecodeError> {
        let at = self.pos;
        let [found, n0, n1, n2, n3] = self.take()?;
        let n = usize::try_from(i32::from_be_bytes([n0, n1, n2, n3]))
            .map_err(|_| WalkError::NegativeContainerSize)?;
        if found == etype && n > cap {
            for _ in 0..n {
                self.skip(found)?;
            }
            return Ok((Vec::new(), n));
        }
        self.pos = at;
        let out = self.list(etype, item, complete)?;
        let len = out.len();
        Ok((out, len))
    }

    fn list<T>(
        &mut self,
        etype: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
        complete: fn(&T) -> bool,
    ) -> Result<Vec<T>, DecodeError> {
        let [found] = self.take()?;
        let n = i32::from_be_bytes(self.take()?);
        let n = usize::try_from(n).map_err(|_| WalkError::NegativeContainerSize)?;
        if found != etype {
            for _ in 0..n {
                self.skip(found)?;
            }
            return Ok(Vec::new());
        }
        let remaining = self.buf.len().saturating_sub(self.pos);
        let mut out = Vec::with_capacity(n.min(remaining / MIN_COMPLETE_ITEM));
        let mut keep = true;
        for _ in 0..n {
            let value = item(self)?;
            if keep {
                keep = complete(&value);
                out.push(value);
            }
        }
        Ok(out)
    }
}

impl EnqueueCall {
    /// The jobs to insert, as the handler built them: `now_ms` for an absent run-after (one past
    /// [`MAX_TIMESTAMP_MS`] cut to it), attempts below 1 as 1, each job checked in order (a body,
    /// then priority in `1..=num_priorities`); the first refused job refuses the call.
    pub fn new_jobs(
        &self,
        payload: &[u8],
        num_priorities: i64,
        now_ms: i64,
    ) -> Result<Vec<NewJob>, JobRejected> {
        let mut out = Vec::with_capacity(self.jobs.len());
        for job in &self.jobs {
            // Below 1 is 1: one attempt, no retry, as the original's Redis backend ran such a job
            // (its MySQL one left it IN_PROGRESS for good after a failure).
            let attempts = job.attempts_allowed.max(1);
            let Some(body) = &job.body else {
                return Err(JobRejected {
                    code: ENQUEUE_REJECTED,
                    message: "every job needs a body".to_owned(),
                });
            };
            let priority = i64::from(job.priority);
            if !(1..=num_priorities).contains(&priority) {
                return Err(JobRejected {
                    code: PRIORITY_NOT_SUPPORTED,
                    message: format!("priority {priority} is not in 1..{num_priorities}"),
                });
            }
            out.push(NewJob {
                priority,
                body: bytes_at(payload, body).to_vec(),
                // 0 is "now", as the original's Redis backend read it (its MySQL one stored the
                // epoch, which MySQL's TIMESTAMP cannot hold): a client that sends 0 for "no
                // delay" gets its job queued behind the ones before it, not ahead of them all.
                run_after_ms: job
                    .run_after_ms
                    .filter(|&ms| ms != 0)
                    .unwrap_or(now_ms)
                    .min(MAX_TIMESTAMP_MS),
                attempts_allowed: i64::from(attempts),
                custom_status: text_at(payload, &job.custom_status).to_owned(),
            });
        }
        Ok(out)
    }
}

/// The latest `runAfterTimestampMillis` or `expireAtTimestampMillis` a job keeps, the last
/// millisecond of the year 9999: a later one is cut to it. A Redis score is a double, exact only
/// below 2^53, and one near `i64::MAX` read back past it (lookups and scans of the job failed).
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

/// The longest `dedupKey` or `groupKey` taken, in bytes of UTF-8.
pub const MAX_DEDUP_KEY_BYTES: usize = 1024;
/// The longest `dedupWindowMillis` taken: ten years (so `now + window` never overflows).
pub const MAX_DEDUP_WINDOW_MS: i64 = 10 * 365 * 24 * 3600 * 1000;
/// The longest `retryDelayMillis` applied: ten years. A longer one is cut to it, so that
/// `now + delay` never overflows (`SQLite` would store the sum as a float, `MySQL` refuse it); a
/// negative one is 0. An ack is never refused for its delay: a worker's lost ack costs a retry.
pub const MAX_RETRY_DELAY_MS: i64 = MAX_DEDUP_WINDOW_MS;

/// One job's extensions, as `EnqueueCall::keys` checked them: its dedup key and window, its
/// group key, and its expiry.
pub type KeySpec<'p> = (Option<&'p str>, i64, Option<&'p str>, Option<i64>);

impl EnqueueCall {
    /// Whether any job asks for an extension (see [`Job::has_extensions`]).
    #[must_use]
    pub fn has_extensions(&self) -> bool {
        self.jobs.iter().any(Job::has_extensions)
    }

    /// Each job's dedup key, window, group key and expiry, in job order, checked: a key
    /// (either kind) is 1 to [`MAX_DEDUP_KEY_BYTES`] bytes, with no NUL character (the embedded
    /// store reads keys through JSON, where `SQLite` cuts a string at U+0000); a window is 0 to
    /// [`MAX_DEDUP_WINDOW_MS`] and more than 0 only with a dedup key; an expiry is 0 or more (one
    /// past [`MAX_TIMESTAMP_MS`] is cut to it).
    /// The first job refused refuses the call (`ENQUEUE_REJECTED`, naming the field and the
    /// job's index).
    pub fn keys<'p>(&self, payload: &'p [u8]) -> Result<Vec<KeySpec<'p>>, JobRejected> {
        let reject = |i: usize, what: String| JobRejected {
            code: ENQUEUE_REJECTED,
            message: format!("jobs[{i}]: {what}"),
        };
        let checked = |i: usize, field: &str, key: Option<&'p str>| match key {
            Some("") => Err(reject(i, format!("{field} must not be empty"))),
            Some(k) if k.contains('\0') => Err(reject(
                i,
                format!("{field} must not contain a NUL character (U+0000)"),
            )),
            Some(k) if k.len() > MAX_DEDUP_KEY_BYTES => {
                let n = k.len();
                Err(reject(
                    i,
                    format!("{field} is {n} bytes, at most {MAX_DEDUP_KEY_BYTES}"),
                ))
            }
            _ => Ok(key),
        };
        let mut out = Vec::with_capacity(self.jobs.len());
        for (i, job) in self.jobs.iter().enumerate() {
            let key = checked(
                i,
                "dedupKey",
                job.dedup_key.as_ref().map(|span| text_at(payload, span)),
            )?;
            let group = checked(
                i,
                "groupKey",
                job.group_key.as_ref().map(|span| text_at(payload, span)),
            )?;
            let window = job.dedup_window_ms;
            if key.is_none() && window != 0 {
                return Err(reject(i, "dedupWindowMillis needs a dedupKey".to_owned()));
            }
            if !(0..=MAX_DEDUP_WINDOW_MS).contains(&window) {
                return Err(reject(
                    i,
                    format!("dedupWindowMillis must be 0 to {MAX_DEDUP_WINDOW_MS}, not {window}"),
                ));
            }
            if let Some(at) = job.expire_at_ms.filter(|at| *at < 0) {
                return Err(reject(
                    i,
                    format!("expireAtTimestampMillis must be 0 or more, not {at}"),
                ));
            }
            let expire_at = job.expire_at_ms.map(|at| at.min(MAX_TIMESTAMP_MS));
            out.push((key, window, group, expire_at));
        }
        Ok(out)
    }
}

/// One decoded ack: its descriptor, whether it succeeded, and its item for the store (`None`
/// when the local id exceeds `i64`, which no store hands out: acking it would change nothing).
type Decoded<'p> = (Descriptor<'p>, bool, Option<AckItem>);

impl AckCall {
    /// Every descriptor, the successes first, decoded as `decode_descriptors` does (the error
    /// names the first bad one and its index in that order).
    pub fn keys<'p>(&self, payload: &'p [u8]) -> Result<Vec<Descriptor<'p>>, DescriptorError> {
        descriptor::decode_batch(self.infos().map(|(_, a)| descriptor_text(payload, a)))
    }

    fn infos(&self) -> impl Iterator<Item = (bool, &AckInfo)> {
        self.succeeded
            .iter()
            .map(|a| (true, a))
            .chain(self.failed.iter().map(|a| (false, a)))
    }

    fn decoded<'p>(&self, payload: &'p [u8]) -> Result<Vec<Decoded<'p>>, DescriptorError> {
        let keys = self.keys(payload)?;
        Ok(keys
            .into_iter()
            .zip(self.infos())
            .map(|(d, (ok, a))| {
                let item = i64::try_from(d.local_id).ok().map(|local_id| AckItem {
                    priority: i64::from(d.priority),
                    local_id,
                    append_custom_status: text_at(payload, &a.append_custom_status).to_owned(),
                    retry_delay_ms: a.retry_delay_ms.clamp(0, MAX_RETRY_DELAY_MS),
                });
                (d, ok, item)
            })
            .collect())
    }

    /// The acks by shard, shards in first-seen order (successes first), each group's items in
    /// request order. The descriptors' queue part is ignored: the call's queue is acked.
    ///
    /// A shard is found by the last one's name, else in a map: a search of the groups for each
    /// ack took time in the acks times the shards they name, which a peer picks (any name is a
    /// descriptor's shard here): 160,000 acks of as many shards held the loop for 26 s. Past
    /// `MAX_ACK_SHARDS` shards the call is refused (each group costs the server a Python value
    /// and a lookup in its shard map: 160,000 made-up shards, 0.5 s).
    pub fn groups(&self, payload: &[u8]) -> Result<Vec<(String, AckGroup)>, DescriptorError> {
        let mut groups: Vec<(String, AckGroup)> = Vec::new();
        let mut index: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
        for (d, ok, item) in self.decoded(payload)? {
            let Some(item) = item else { continue };
            let i = if groups.last().is_some_and(|(s, _)| s == d.shard) {
                groups.len() - 1
            } else if let Some(&i) = index.get(d.shard) {
                i
            } else if groups.len() == MAX_ACK_SHARDS {
                return Err(DescriptorError::TooManyShards(MAX_ACK_SHARDS));
            } else {
                index.insert(d.shard, groups.len());
                groups.push((d.shard.to_owned(), AckGroup::default()));
                groups.len() - 1
            };
            let group = &mut groups[i].1;
            if ok {
                group.succeeded.push(item);
            } else {
                group.failed.push(item);
            }
        }
        Ok(groups)
    }

    /// `(shard, priority, retry_delay_ms)` of each failure, in request order (a retried job
    /// becomes ready again after its delay).
    pub fn retried(&self, payload: &[u8]) -> Result<Vec<(String, i64, i64)>, DescriptorError> {
        Ok(self
            .decoded(payload)?
            .into_iter()
            .filter(|(_, ok, _)| !ok)
            .filter_map(|(d, _, item)| {
                item.map(|i| (d.shard.to_owned(), i.priority, i.retry_delay_ms))
            })
            .collect())
    }
}

fn descriptor_text<'p>(payload: &'p [u8], a: &AckInfo) -> &'p str {
    a.descriptor.as_ref().map_or("", |s| text_at(payload, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strict message header: version | `mtype`, the name, `seqid`.
    fn strict_header(name: &[u8], mtype: u8, seqid: i32) -> Vec<u8> {
        let mut out = (0x8001_0000_u32 | u32::from(mtype)).to_be_bytes().to_vec();
        out.extend_from_slice(&i32::try_from(name.len()).unwrap().to_be_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&seqid.to_be_bytes());
        out
    }

    #[test]
    fn a_hot_header_is_read_in_both_styles() {
        let mut strict = strict_header(b"dequeueJobs", CALL, 77);
        strict.push(0); // the argument struct's stop
        assert_eq!(
            hot_header(&strict),
            Some(("dequeueJobs", 77, strict.len() - 1))
        );

        let mut old = 15_i32.to_be_bytes().to_vec();
        old.extend_from_slice(b"ackDequeuedJobs");
        old.push(CALL);
        old.extend_from_slice(&(-3_i32).to_be_bytes());
        assert_eq!(hot_header(&old), Some(("ackDequeuedJobs", -3, old.len())));
    }

    #[test]
    fn anything_but_a_well_formed_hot_call_header_is_left_to_the_general_path() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("another method", strict_header(b"getQueueNames", CALL, 1)),
            ("a oneway message", strict_header(b"enqueueJobs", 4, 1)),
            ("a reply", strict_header(b"enqueueJobs", 2, 1)),
            (
                "a prefix of the name",
                strict_header(b"enqueueJob", CALL, 1),
            ),
            ("empty", Vec::new()),
            ("a bad version", {
                let mut h = strict_header(b"enqueueJobs", CALL, 1);
                h[1] = 2;
                h
            }),
            ("a name longer than the frame", {
                let mut h = strict_header(b"enqueueJobs", CALL, 1);
                h[4..8].copy_from_slice(&1000_i32.to_be_bytes());
                h
            }),
            ("a negative name length", {
                let mut h = strict_header(b"enqueueJobs", CALL, 1);
                h[4..8].copy_from_slice(&(-1_i32).to_be_bytes());
                h
            }),
        ];
        for (what, header) in &cases {
            assert_eq!(hot_header(header), None, "{what}");
        }
        let whole = strict_header(b"enqueueJobs", CALL, 1);
        for cut in 0..whole.len() {
            assert_eq!(hot_header(&whole[..cut]), None, "cut at {cut}");
        }
    }

    const T_I16: u8 = 6;
    const T_MAP: u8 = 13;

    /// Writes binary-protocol pieces.
    #[derive(Default, Clone)]
    struct Wire(Vec<u8>);

    impl Wire {
        fn field(mut self, ttype: u8, id: i16) -> Self {
            self.0.push(ttype);
            self.0.extend_from_slice(&id.to_be_bytes());
            self
        }
        fn bytes(mut self, bytes: &[u8]) -> Self {
            self.0.extend_from_slice(bytes);
            self
        }
        fn i32(self, v: i32) -> Self {
            self.bytes(&v.to_be_bytes())
        }
        fn i64(self, v: i64) -> Self {
            self.bytes(&v.to_be_bytes())
        }
        fn string(self, s: &[u8]) -> Self {
            self.i32(i32::try_from(s.len()).unwrap()).bytes(s)
        }
        fn list(self, etype: u8, n: i32) -> Self {
            self.bytes(&[etype]).i32(n)
        }
        fn stop(self) -> Self {
            self.bytes(&[0])
        }
        fn str_field(self, id: i16, s: &str) -> Self {
            self.field(T_STRING, id).string(s.as_bytes())
        }
        fn context(self, source: &str) -> Self {
            self.field(T_STRUCT, 1).str_field(1, source).stop()
        }
    }

    fn wire() -> Wire {
        Wire::default()
    }

    fn job(body: &[u8]) -> Wire {
        wire().field(T_STRING, 1).string(body)
    }

    fn enqueue(jobs: &[Wire]) -> Wire {
        let mut w = wire()
            .context("src")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .field(T_LIST, 2)
            .list(T_STRUCT, i32::try_from(jobs.len()).unwrap());
        for j in jobs {
            w = w.bytes(&j.0).stop();
        }
        w.stop().stop()
    }

    fn decode_enqueue(w: &Wire) -> Result<EnqueueCall, DecodeError> {
        match decode("enqueueJobs", &w.0, 0)? {
            HotCall::Enqueue(call) => Ok(call),
            other => panic!("{other:?}"),
        }
    }

    fn decode_ack(w: &Wire) -> Result<AckCall, DecodeError> {
        match decode("ackDequeuedJobs", &w.0, 0)? {
            HotCall::Ack(call) => Ok(call),
            other => panic!("{other:?}"),
        }
    }

    fn message(err: DecodeError) -> String {
        err.to_string()
    }

    #[test]
    fn enqueue_defaults_and_every_field() {
        let w = enqueue(&[
            job(b"\xff\x00"),
            job(b"b")
                .field(T_BYTE, 2)
                .bytes(&[3])
                .field(T_I64, 3)
                .i64(77)
                .field(T_I32, 4)
                .i32(5)
                .str_field(5, "st"),
        ]);
        let call = decode_enqueue(&w).unwrap();
        assert_eq!(call.context.source.as_deref(), Some("src"));
        assert_eq!(call.context.request_id, "");
        assert_eq!(call.queue.as_deref(), Some("q"));
        let jobs = call.new_jobs(&w.0, 3, 1000).unwrap();
        assert_eq!(
            jobs,
            vec![
                NewJob {
                    priority: 1,
                    body: b"\xff\x00".to_vec(),
                    run_after_ms: 1000,
                    attempts_allowed: 2,
                    custom_status: String::new()
                },
                NewJob {
                    priority: 3,
                    body: b"b".to_vec(),
                    run_after_ms: 77,
                    attempts_allowed: 5,
                    custom_status: "st".into()
                },
            ]
        );
        let refused = call.new_jobs(&w.0, 2, 0).unwrap_err();
        assert_eq!(refused.code, PRIORITY_NOT_SUPPORTED);
        assert_eq!(refused.message, "priority 3 is not in 1..2");
    }

    #[test]
    fn extension_fields_are_read_and_checked() {
        let plain = enqueue(&[job(b"a").field(T_I64, 7).i64(0)]);
        assert!(!decode_enqueue(&plain).unwrap().has_extensions());
        let w = enqueue(&[
            job(b"a").str_field(6, "k\u{e9}").field(T_I64, 7).i64(50),
            job(b"b"),
        ]);
        let call = decode_enqueue(&w).unwrap();
        assert!(call.has_extensions());
        assert_eq!(
            call.keys(&w.0).unwrap(),
            vec![(Some("k\u{e9}"), 50, None, None), (None, 0, None, None)]
        );
        let grouped = enqueue(&[job(b"a"), job(b"b").str_field(8, "g")]);
        assert_eq!(
            decode_enqueue(&grouped).unwrap().keys(&grouped.0).unwrap(),
            vec![(None, 0, None, None), (None, 0, Some("g"), None)]
        );
        let expiring = enqueue(&[job(b"a").field(T_I64, 9).i64(1_700)]);
        let call = decode_enqueue(&expiring).unwrap();
        assert!(call.has_extensions());
        assert_eq!(
            call.keys(&expiring.0).unwrap(),
            vec![(None, 0, None, Some(1_700))]
        );
        let refused = |w: &Wire| decode_enqueue(w).unwrap().keys(&w.0).unwrap_err();
        assert_eq!(
            refused(&enqueue(&[job(b"a").field(T_I64, 9).i64(-1)])).message,
            "jobs[0]: expireAtTimestampMillis must be 0 or more, not -1"
        );
        let err = refused(&enqueue(&[job(b"a"), job(b"b").str_field(8, "")]));
        assert_eq!(err.code, ENQUEUE_REJECTED);
        assert_eq!(err.message, "jobs[1]: groupKey must not be empty");
        let long = "z".repeat(MAX_DEDUP_KEY_BYTES + 1);
        assert_eq!(
            refused(&enqueue(&[job(b"a").str_field(8, &long)])).message,
            "jobs[0]: groupKey is 1025 bytes, at most 1024"
        );
        let long = "x".repeat(MAX_DEDUP_KEY_BYTES + 1);
        assert_eq!(
            refused(&enqueue(&[job(b"a").str_field(6, &long)])).message,
            "jobs[0]: dedupKey is 1025 bytes, at most 1024"
        );
        assert_eq!(
            refused(&enqueue(&[job(b"a").str_field(6, "")])).message,
            "jobs[0]: dedupKey must not be empty"
        );
        assert_eq!(
            refused(&enqueue(&[job(b"a"), job(b"b").str_field(6, "k\0x")])).message,
            "jobs[1]: dedupKey must not contain a NUL character (U+0000)"
        );
        assert_eq!(
            refused(&enqueue(&[job(b"a").str_field(8, "acct\u{0}7")])).message,
            "jobs[0]: groupKey must not contain a NUL character (U+0000)"
        );
        assert_eq!(
            refused(&enqueue(&[job(b"a").field(T_I64, 7).i64(5)])).message,
            "jobs[0]: dedupWindowMillis needs a dedupKey"
        );
        let negative = enqueue(&[job(b"a").str_field(6, "k").field(T_I64, 7).i64(-1)]);
        assert!(refused(&negative).message.ends_with("not -1"));
        let at_most = enqueue(&[job(b"a").str_field(6, &"y".repeat(MAX_DEDUP_KEY_BYTES))]);
        assert_eq!(
            decode_enqueue(&at_most)
                .unwrap()
                .keys(&at_most.0)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn attempts_below_one_are_one() {
        for attempts in [0, -7, i32::MIN] {
            let w = enqueue(&[job(b"a").field(T_I32, 4).i32(attempts)]);
            let jobs = decode_enqueue(&w).unwrap().new_jobs(&w.0, 3, 0).unwrap();
            assert_eq!(jobs[0].attempts_allowed, 1);
        }
        let w = enqueue(&[job(b"a")
            .field(T_BYTE, 2)
            .bytes(&[0xff])
            .field(T_I32, 4)
            .i32(0)]);
        let refused = decode_enqueue(&w)
            .unwrap()
            .new_jobs(&w.0, 3, 0)
            .unwrap_err();
        assert_eq!(
            refused.message, "priority -1 is not in 1..3",
            "attempts 0 is taken"
        );
    }

    #[test]
    fn unknown_ids_wrong_types_and_duplicates() {
        let j = job(b"first")
            .field(T_I32, 2) // priority with the wrong wire type: skipped
            .i32(9)
            .field(T_MAP, 99) // unknown id: skipped
            .bytes(&[T_STRING, T_I32])
            .i32(1)
            .string(b"k")
            .i32(5)
            .field(T_STRING, 1) // a later body wins
            .string(b"second");
        let w = enqueue(&[j]);
        let call = decode_enqueue(&w).unwrap();
        let jobs = call.new_jobs(&w.0, 3, 0).unwrap();
        assert_eq!(jobs[0].body, b"second");
        assert_eq!(jobs[0].priority, 1);
    }

    #[test]
    fn a_list_of_another_element_type_is_empty() {
        let w = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .field(T_LIST, 2)
            .list(T_I16, 2)
            .bytes(&[0, 1, 0, 2])
            .stop()
            .stop();
        assert!(decode_enqueue(&w).unwrap().jobs.is_empty());
    }

    #[test]
    fn missing_arguments_and_fields() {
        let no_request = wire().context("s").stop();
        assert_eq!(
            message(decode("enqueueJobs", &no_request.0, 0).unwrap_err()),
            "missing argument enqueueJobs.request"
        );
        // The context comes first, even with the request missing too.
        let empty = wire().stop();
        assert_eq!(
            message(decode("dequeueJobs", &empty.0, 0).unwrap_err()),
            "missing argument dequeueJobs.context"
        );
        let no_source = wire()
            .field(T_STRUCT, 1)
            .stop()
            .field(T_STRUCT, 2)
            .stop()
            .stop();
        assert_eq!(
            message(decode("ackDequeuedJobs", &no_source.0, 0).unwrap_err()),
            "missing required field RequestContext.source at context.source"
        );
        let no_body = enqueue(&[job(b"a"), job(b"b"), wire(), wire()]);
        assert_eq!(
            message(decode("enqueueJobs", &no_body.0, 0).unwrap_err()),
            "missing required field PinLaterJob.body at request.jobs[2].body"
        );
        let no_jobs = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .stop()
            .stop();
        assert_eq!(
            message(decode("enqueueJobs", &no_jobs.0, 0).unwrap_err()),
            "missing required field PinLaterEnqueueRequest.jobs at request.jobs"
        );
        let ack_without_descriptor = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .field(T_I32, 2)
            .i32(5)
            .field(T_STRUCT, 3)
            .str_field(1, "q")
            .field(T_LIST, 3)
            .list(T_STRUCT, 2)
            .str_field(1, "q:s1:p1:1")
            .stop()
            .stop()
            .stop()
            .stop()
            .stop();
        assert_eq!(
            message(decode("dequeueJobs", &ack_without_descriptor.0, 0).unwrap_err()),
            "missing required field PinLaterJobAckInfo.jobDescriptor at \
             request.jobAckRequest.jobsFailed[1].jobDescriptor"
        );
    }

    #[test]
    fn items_after_the_first_incomplete_are_read_but_not_kept() {
        let w = enqueue(&[job(b"a"), wire(), job(b"b"), wire()]);
        // The request starts after the context (3 + 3 + 4 + 3 + 1 bytes) and its own header.
        let mut r = Reader { buf: &w.0, pos: 17 };
        let request = enqueue_request(&mut r).unwrap();
        assert_eq!(request.jobs.map(|j| j.len()), Some(2));
        assert_eq!(
            message(decode("enqueueJobs", &w.0, 0).unwrap_err()),
            "missing required field PinLaterJob.body at request.jobs[1].body"
        );
        // A later item's UTF-8 error still comes first, as thriftpy2 decodes everything.
        let w = enqueue(&[wire(), job(b"b").field(T_STRING, 5).string(b"\xff")]);
        assert!(matches!(
            decode("enqueueJobs", &w.0, 0),
            Err(DecodeError::NotUtf8(_))
        ));
        // A million empty jobs in a megabyte.
        let mut w = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .field(T_LIST, 2)
            .list(T_STRUCT, 1 << 20);
        w.0.resize(w.0.len() + (1 << 20), T_STOP);
        let w = w.stop().stop();
        assert_eq!(
            message(decode("enqueueJobs", &w.0, 0).unwrap_err()),
            "missing required field PinLaterEnqueueRequest.queueName at request.queueName"
        );
    }

    #[test]
    fn dequeue_fields() {
        let w = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .field(T_I32, 2)
            .i32(10)
            .field(T_BOOL, 4)
            .bytes(&[7])
            .field(T_DOUBLE, 5)
            .bytes(&0.5_f64.to_be_bytes())
            .field(T_I32, 6)
            .i32(250)
            .stop()
            .stop();
        let HotCall::Dequeue(call) = decode("dequeueJobs", &w.0, 0).unwrap() else {
            panic!()
        };
        assert_eq!(call.limit, 10);
        assert!(call.dry_run);
        assert!((call.coverage - 0.5).abs() < f64::EPSILON);
        assert_eq!(call.wait_millis, Some(250));
        assert!(call.ack.is_none());
    }

    fn ack_call(succeeded: &[&str], failed: &[(&str, i64)]) -> Wire {
        let mut w = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .str_field(1, "q")
            .field(T_LIST, 2)
            .list(T_STRUCT, i32::try_from(succeeded.len()).unwrap());
        for d in succeeded {
            w = w.str_field(1, d).stop();
        }
        w = w
            .field(T_LIST, 3)
            .list(T_STRUCT, i32::try_from(failed.len()).unwrap());
        for (d, delay) in failed {
            w = w
                .str_field(1, d)
                .field(T_I64, 3)
                .i64(*delay)
                .str_field(2, "x")
                .stop();
        }
        w.stop().stop()
    }

    /// The run-after each job of an enqueue gets at `now_ms` (three priorities).
    fn run_afters(call: &EnqueueCall, w: &Wire, now_ms: i64) -> Vec<i64> {
        let jobs = call.new_jobs(&w.0, 3, now_ms).unwrap();
        jobs.iter().map(|j| j.run_after_ms).collect()
    }

    #[test]
    fn a_run_after_of_zero_is_now_as_the_original_redis_read_it() {
        let w = enqueue(&[
            job(b"a").field(T_I64, 3).i64(0),
            job(b"b"),
            job(b"c").field(T_I64, 3).i64(-5),
        ]);
        let call = decode_enqueue(&w).unwrap();
        assert_eq!(run_afters(&call, &w, 1000), vec![1000, 1000, -5]);
    }

    #[test]
    fn a_run_after_or_an_expiry_past_the_year_9999_is_cut_to_its_end() {
        let w = enqueue(&[
            job(b"a")
                .field(T_I64, 3)
                .i64(i64::MAX)
                .field(T_I64, 9)
                .i64(i64::MAX),
            job(b"b")
                .field(T_I64, 3)
                .i64(MAX_TIMESTAMP_MS)
                .field(T_I64, 9)
                .i64(7),
        ]);
        let call = decode_enqueue(&w).unwrap();
        assert_eq!(
            run_afters(&call, &w, 1000),
            vec![MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS]
        );
        let expiries: Vec<Option<i64>> = call.keys(&w.0).unwrap().iter().map(|k| k.3).collect();
        assert_eq!(expiries, vec![Some(MAX_TIMESTAMP_MS), Some(7)]);
    }

    #[test]
    fn a_retry_delay_is_cut_to_ten_years_and_a_negative_one_to_zero() {
        let w = ack_call(
            &[],
            &[
                ("q:s1:p1:1", i64::MAX),
                ("q:s1:p1:2", MAX_RETRY_DELAY_MS),
                ("q:s1:p1:3", -1),
                ("q:s1:p1:4", 2_500),
            ],
        );
        let groups = decode_ack(&w).unwrap().groups(&w.0).unwrap();
        let delays: Vec<i64> = groups[0]
            .1
            .failed
            .iter()
            .map(|a| a.retry_delay_ms)
            .collect();
        assert_eq!(
            delays,
            vec![MAX_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS, 0, 2_500]
        );
        let retried = decode_ack(&w).unwrap().retried(&w.0).unwrap();
        assert_eq!(retried[0].2, MAX_RETRY_DELAY_MS);
    }

    #[test]
    fn acks_group_by_shard_in_first_seen_order() {
        let w = ack_call(
            &["q:s2:p1:1", "q:s1:p2:2", "other:s2:p1:3"],
            &[("q:s1:p1:4", -5), ("q:s3:p1:18446744073709551615", 9)],
        );
        let call = decode_ack(&w).unwrap();
        let groups = call.groups(&w.0).unwrap();
        let shards: Vec<&str> = groups.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(shards, vec!["2", "1"]);
        let ids = |items: &[AckItem]| items.iter().map(|a| a.local_id).collect::<Vec<_>>();
        assert_eq!(ids(&groups[0].1.succeeded), vec![1, 3]);
        assert_eq!(ids(&groups[1].1.succeeded), vec![2]);
        assert_eq!(ids(&groups[1].1.failed), vec![4]);
        assert_eq!(groups[1].1.failed[0].retry_delay_ms, 0);
        assert_eq!(groups[1].1.failed[0].append_custom_status, "x");
        assert_eq!(call.retried(&w.0).unwrap(), vec![("1".to_owned(), 1, 0)]);
        assert_eq!(call.keys(&w.0).unwrap().len(), 5);
    }

    #[test]
    fn acks_past_the_most_shards_are_refused() {
        let descriptors: Vec<String> = (0..=MAX_ACK_SHARDS)
            .map(|i| format!("q:s{i}:p1:1"))
            .collect();
        let succeeded: Vec<&str> = descriptors.iter().map(String::as_str).collect();
        let w = ack_call(&succeeded, &[]);
        let err = decode_ack(&w).unwrap().groups(&w.0).unwrap_err();
        assert_eq!(err, DescriptorError::TooManyShards(MAX_ACK_SHARDS));
        let w = ack_call(&succeeded[..MAX_ACK_SHARDS], &[]);
        let groups = decode_ack(&w).unwrap().groups(&w.0).unwrap();
        assert_eq!(groups.len(), MAX_ACK_SHARDS);
    }

    #[test]
    fn acks_of_many_shards_find_theirs_by_name() {
        let descriptors: Vec<String> = (0..2000)
            .map(|i| format!("q:s{}:p1:{i}", i % 500))
            .collect();
        let succeeded: Vec<&str> = descriptors.iter().map(String::as_str).collect();
        let w = ack_call(&succeeded, &[]);
        let groups = decode_ack(&w).unwrap().groups(&w.0).unwrap();
        assert_eq!(groups.len(), 500);
        for (k, (shard, group)) in groups.iter().enumerate() {
            assert_eq!(shard, &k.to_string());
            let ids: Vec<i64> = group.succeeded.iter().map(|a| a.local_id).collect();
            let k = i64::try_from(k).unwrap();
            assert_eq!(ids, vec![k, k + 500, k + 1000, k + 1500]);
        }
    }

    #[test]
    fn a_bad_descriptor_names_its_index_over_both_lists() {
        let w = ack_call(&["q:s1:p1:1"], &[("q:s1:p1:2", 0), ("nope", 0)]);
        let call = decode_ack(&w).unwrap();
        let err = call.groups(&w.0).unwrap_err();
        assert!(
            err.to_string().starts_with("descriptor at index 2: "),
            "{err}"
        );
    }

    #[test]
    fn strings_must_be_utf8_but_bodies_need_not() {
        let w = enqueue(&[
            job(b"\xff"),
            job(b"ok").field(T_STRING, 5).string(b"a\xe2\x82"),
        ]);
        assert_eq!(
            message(decode("enqueueJobs", &w.0, 0).unwrap_err()),
            "'utf-8' codec can't decode bytes in position 1-2: unexpected end of data"
        );
        let cases: [(&[u8], &str); 4] = [
            (b"\x80", "byte 0x80 in position 0: invalid start byte"),
            (
                b"ab\xe2(",
                "byte 0xe2 in position 2: invalid continuation byte",
            ),
            (
                b"\xf0\x90(",
                "bytes in position 0-1: invalid continuation byte",
            ),
            (
                b"\xed\xa0\x80",
                "byte 0xed in position 0: invalid continuation byte",
            ),
        ];
        for (bytes, tail) in cases {
            let err = utf8(bytes).unwrap_err().to_string();
            assert_eq!(err, format!("'utf-8' codec can't decode {tail}"));
        }
    }

    #[test]
    fn malformed_frames_fail_the_walk_first() {
        // A list announcing 2**31 - 1 jobs in a few bytes.
        let w = wire()
            .context("s")
            .field(T_STRUCT, 2)
            .field(T_LIST, 2)
            .list(T_STRUCT, i32::MAX)
            .stop();
        assert_eq!(
            decode("enqueueJobs", &w.0, 0).unwrap_err(),
            DecodeError::Walk(WalkError::ContainerTruncated)
        );
        let full = enqueue(&[job(b"abc").str_field(5, "s")]);
        for cut in 0..full.0.len() {
            assert!(matches!(
                decode("enqueueJobs", &full.0[..cut], 0),
                Err(DecodeError::Walk(_))
            ));
        }
        assert!(matches!(
            decode("getQueueNames", &full.0, 0),
            Err(DecodeError::UnknownMethod(_))
        ));
    }
}
