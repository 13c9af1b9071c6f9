//! pinlater's native core, and the seam Python sees (`pinlater._pinlater`, stub `_pinlater.pyi`).
//!
//! `wire`, `store` and `queue` are pure Rust, unit-tested in place, with no `PyO3` types; `py`
//! mirrors them with the bindings, the only code that imports `pyo3`. Core errors (`error.rs` and
//! the error types beside the code that raises them) cross into Python through the `From`
//! conversions in `py/errors.rs`, so bindings use `?`. Every export runs under
//! `py::errors::guarded`: a Rust panic reaches Python as `NativeError`.

pub mod error;

/// Every Rust allocation of the extension (request buffers, job bodies, the stores' threads) goes
/// to mimalloc rather than glibc's malloc; Python's own objects are Python's allocator's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The Thrift binary protocol on the wire.
pub mod wire {
    /// `decode`, `HotCall`, `EnqueueCall`, `DequeueCall`, `AckCall`: the three hot calls read from the frame
    /// (with the dedup keys an enqueue's jobs carry).
    pub mod hot_calls;
    /// `enqueue_reply`, `enqueue_descriptors_reply`, `dequeue_reply`, `dequeue_batches_reply`, `void_reply`: their REPLY messages.
    pub mod replies;
    /// `struct_end`, `value_end`: the bounds walk of a struct, before anything decodes it.
    pub mod struct_end;
}

/// What the stores are sent and answer.
pub mod store {
    /// `push_int`, `push_uint`: integers as ASCII decimal.
    pub mod decimal;
    /// `Statements`: a batch of jobs as MySQL multi-row INSERTs.
    pub mod mysql_inserts;
    /// `Session`, `Shared`: one MySQL shard's enqueue, dequeue and ack over the `mysql` crate.
    pub mod mysql_shard;
    /// `Command`: a Redis command packed in RESP.
    pub mod redis_command;
    /// `reply_end`, `ids_reply`, `claimed_reply`, `ack_reply`, `int_reply`: Redis replies read.
    pub mod redis_reply;
    /// `seconds`, `ms`, `local_id`, `count`, `order`: a Redis dequeue reply's fields.
    pub mod redis_rows;
    /// `enqueue_command`, `dequeue_command`, `ack_command`, `claim_reserved_command`: the scripts' EVALSHA commands.
    pub mod redis_scripts;
    /// `SqliteInserts`: the embedded store's enqueue statement as multi-row INSERTs.
    pub mod sqlite_inserts;
    /// `SqliteShard`, `WriteGate`: the embedded store's hot writes on a thread, group committed.
    pub mod sqlite_shard;
}

/// The queue's own logic: job names, buffers, limits and filters.
pub mod queue {
    /// `BodyMatcher`: the linear-time body regex of count, scan and delete filters.
    pub mod body_matcher;
    /// `Descriptor`, `Encoder`, `decode`, `encode`: job descriptors `{queue}:s{shard}:p{priority}:{id}`.
    pub mod descriptor;
    /// `JobBuffer`, `HandOut`, `ClaimLedger`: the dequeue broker's buffer, hand-outs and claims.
    pub mod job_buffer;
    /// `NewJob`, `ClaimedJob`, `AckItem`, `AckGroup`: the hot path's jobs as Rust values.
    pub mod jobs;
    /// `RateLimiter`, `TokenBucket`: per-queue dequeue rate limits.
    pub mod rate_limiter;
}

/// The bindings, mirroring the core modules; exported by `_pinlater` below.
pub mod py {
    pub mod errors;
    pub mod wire {
        pub mod hot_calls;
        pub mod replies;
        pub mod struct_end;
    }
    pub mod store {
        pub mod mysql_inserts;
        pub mod mysql_shard;
        pub mod redis_command;
        pub mod redis_reply;
        pub mod redis_rows;
        pub mod redis_scripts;
        pub mod sqlite_shard;
    }
    pub mod queue {
        pub mod body_matcher;
        pub mod descriptor;
        pub mod job_buffer;
        pub mod jobs;
        pub mod rate_limiter;
    }
}

/// The wire contract, embedded at compile time so the wheel cannot carry a stale copy.
pub const THRIFT_IDL: &str = include_str!("../thrift/pinlater.thrift");

/// The Python module `pinlater._pinlater`: everything Python can call.
#[pyo3::pymodule(gil_used = false)]
mod _pinlater {
    use pyo3::prelude::*;

    use crate::py::errors::{
        BodyFilterTimeout, BodyPatternError, DescriptorError, JobRejected, MalformedThriftError,
        MissingFieldError, NativeError, NotUtf8Error, RedisErrorReply,
    };

    #[pymodule_export]
    use crate::py::errors::panic_for_tests;
    #[pymodule_export]
    use crate::py::queue::body_matcher::BodyMatcher;
    #[pymodule_export]
    use crate::py::queue::descriptor::{
        decode_descriptor, decode_descriptors, encode_descriptor, encode_descriptors,
    };
    #[pymodule_export]
    use crate::py::queue::job_buffer::{ClaimFlush, ClaimItems, HandOut, JobBuffer};
    #[pymodule_export]
    use crate::py::queue::jobs::{
        AckGroup, ClaimedJobs, KeyedJobBatch, KeyedPlacement, KeyedSplit, LocalIds, NewJobBatch,
        SplitPlacement,
    };
    #[pymodule_export]
    use crate::py::queue::rate_limiter::RateLimiter;
    #[pymodule_export]
    use crate::py::store::mysql_inserts::mysql_insert_statements;
    #[pymodule_export]
    use crate::py::store::mysql_shard::MySQLShard;
    #[pymodule_export]
    use crate::py::store::redis_command::redis_pack_command;
    #[pymodule_export]
    use crate::py::store::redis_reply::{
        redis_ack_reply, redis_claimed_reply, redis_claimed_split, redis_ids_reply,
        redis_int_reply, redis_reply_end,
    };
    #[pymodule_export]
    use crate::py::store::redis_rows::redis_claimed_jobs;
    #[pymodule_export]
    use crate::py::store::redis_scripts::{
        redis_ack_command, redis_claim_command, redis_dequeue_command, redis_enqueue_command,
        redis_enqueue_keyed_command, redis_keyed_placement, redis_require_queue_command,
        RedisScriptTail,
    };
    #[pymodule_export]
    use crate::py::store::sqlite_shard::{
        sqlite_library_version, AnswerSignal, SqliteShard, WriteGate,
    };
    #[pymodule_export]
    use crate::py::wire::hot_calls::{
        decode_hot_call, decode_hot_frame, AckCall, DequeueCall, EnqueueCall,
    };
    #[pymodule_export]
    use crate::py::wire::replies::{
        encode_dequeue_batches, encode_dequeue_handout, encode_dequeue_reply,
        encode_enqueue_descriptors, encode_enqueue_reply, encode_keyed_enqueue_reply,
        encode_split_enqueue_reply, encode_void_reply,
    };
    #[pymodule_export]
    use crate::py::wire::struct_end::{thrift_struct_end, thrift_struct_objects};

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("THRIFT_IDL", crate::THRIFT_IDL)?;
        m.add("DETACH_BYTES", crate::py::wire::struct_end::DETACH_BYTES)?;
        m.add("DETACH_JOBS", crate::py::queue::jobs::DETACH_JOBS)?;
        m.add("MAX_TIMESTAMP_MS", crate::wire::hot_calls::MAX_TIMESTAMP_MS)?;
        m.add("MAX_ENQUEUE_JOBS", crate::wire::hot_calls::MAX_ENQUEUE_JOBS)?;
        m.add("BodyFilterTimeout", py.get_type::<BodyFilterTimeout>())?;
        m.add("BodyPatternError", py.get_type::<BodyPatternError>())?;
        m.add("DescriptorError", py.get_type::<DescriptorError>())?;
        m.add("JobRejected", py.get_type::<JobRejected>())?;
        m.add(
            "MalformedThriftError",
            py.get_type::<MalformedThriftError>(),
        )?;
        m.add("MissingFieldError", py.get_type::<MissingFieldError>())?;
        m.add("NativeError", py.get_type::<NativeError>())?;
        m.add("NotUtf8Error", py.get_type::<NotUtf8Error>())?;
        m.add("RedisErrorReply", py.get_type::<RedisErrorReply>())?;
        Ok(())
    }
}
