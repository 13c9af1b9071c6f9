//! Errors of the native core. Pure Rust: `py/errors.rs` converts each one (`From`) into a Python exception.
//!
//! - [`DescriptorError`]: a job descriptor that does not parse, or parts that cannot form one.
//!   Always the caller's fault; Python sees `pinlater._pinlater.DescriptorError` (a `ValueError`).
//! - [`RateLimitError`]: a rate or burst that is negative, NaN or infinite. Python sees `ValueError`.
//! - [`WalkError`]: bytes that are not a well-formed Thrift binary-protocol struct. Always the
//!   peer's fault; Python sees `pinlater._pinlater.MalformedThriftError` (a `ValueError`).

/// What is wrong with one descriptor, or with one part given to the encoder.
///
/// Each message names the offending text with `{:?}` quoting, so an empty or odd part stays visible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformation {
    #[error("expected 4 colon-separated parts `{{queue}}:s{{shard}}:p{{priority}}:{{local_id}}`, found {0}")]
    PartCount(usize),
    #[error("queue name is empty")]
    EmptyQueue,
    #[error("queue name {0:?} may only contain ASCII letters, digits and underscores")]
    QueueChars(String),
    #[error("shard part {0:?} does not start with 's'")]
    ShardPrefix(String),
    #[error("shard name is empty")]
    EmptyShard,
    #[error("shard name {0:?} may only contain ASCII letters, digits, `_`, `-` and `.`")]
    ShardChars(String),
    #[error("priority part {0:?} does not start with 'p'")]
    PriorityPrefix(String),
    #[error("priority {0:?} is not a decimal integer in 1..=127")]
    Priority(String),
    #[error("local id {0:?} is not an unsigned 64-bit decimal integer")]
    LocalId(String),
}

/// A job descriptor error, with enough context to find the culprit in a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// A descriptor string that does not parse.
    #[error("invalid job descriptor {descriptor:?}: {reason}")]
    Malformed {
        descriptor: String,
        reason: Malformation,
    },
    /// A part handed to the encoder that cannot appear in a descriptor.
    #[error("cannot encode job descriptor: {0}")]
    InvalidPart(Malformation),
    /// The encoder's parallel inputs differ in length.
    #[error("cannot encode job descriptors: {priorities} priorities but {local_ids} local ids")]
    LengthMismatch { priorities: usize, local_ids: usize },
    /// One call's acks name more shards than any deployment has (`hot_calls::MAX_ACK_SHARDS`).
    #[error("the acks name more than {0} shards")]
    TooManyShards(usize),
    /// The first failing item of a batch; `index` is its position in the input.
    #[error("descriptor at index {index}: {error}")]
    AtIndex {
        index: usize,
        error: Box<DescriptorError>,
    },
}

impl DescriptorError {
    /// Tags an error with its position in a batch.
    #[must_use]
    pub fn at_index(self, index: usize) -> Self {
        Self::AtIndex {
            index,
            error: Box::new(self),
        }
    }
}

/// An invalid rate-limiter setting.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RateLimitError {
    #[error("rate must be a finite number of jobs per second >= 0, got {0}")]
    Rate(f64),
    #[error("burst_seconds must be a finite number > 0, got {0}")]
    BurstSeconds(f64),
}

/// Why a Thrift binary-protocol struct failed the walk (`crate::wire::struct_end`).
///
/// The messages are the server's wire contract: they reach the peer inside
/// `TApplicationException(PROTOCOL_ERROR, "malformed <method> call: <message>")`, worded as the
/// Python walker worded them (element types are listed as a Python tuple would print).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("struct truncated")]
    StructTruncated,
    #[error("string truncated")]
    StringTruncated,
    #[error("negative string length")]
    NegativeStringLength,
    #[error("list header truncated")]
    ListHeaderTruncated,
    #[error("map header truncated")]
    MapHeaderTruncated,
    #[error("unknown wire type {0}")]
    UnknownWireType(u8),
    #[error("negative container size")]
    NegativeContainerSize,
    #[error("unknown element type in ({0},)")]
    UnknownElementType(u8),
    #[error("unknown element type in ({0}, {1})")]
    UnknownMapElementType(u8, u8),
    #[error("container truncated")]
    ContainerTruncated,
    #[error("structs nested too deeply")]
    StructsTooDeep,
    #[error("containers nested too deeply")]
    ContainersTooDeep,
}
