//! pinlater's native core, and the seam Python sees (`pinlater._pinlater`, stub `_pinlater.pyi`).
//!
//! `wire`, `store` and `queue` are pure Rust, unit-tested in place, with no `PyO3` types; `py`
//! mirrors them with the bindings, the only code that imports `pyo3`. Core errors (`error.rs` and
//! the error types beside the code that raises them) cross into Python through the `From`
//! conversions in `py/errors.rs`, so bindings use `?`. Every export runs under
//! `py::errors::guarded`: a Rust panic reaches Python as `NativeError`.

pub mod error;
/// The process-wide tokio runtime.
pub mod runtime;

/// The Thrift binary protocol on the wire.
pub mod wire {
    /// `dequeue_reply`: the `dequeueJobs` REPLY message written from claimed jobs.
    pub mod dequeue_reply;
    /// `struct_end`: the bounds walk of a struct, before anything decodes it.
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
    /// `seconds`, `ms`, `local_id`, `count`, `order`: a Redis dequeue reply's fields.
    pub mod redis_rows;
}

/// The queue's own logic: job names, buffers, limits and filters.
pub mod queue {
    /// `BodyMatcher`: the linear-time body regex of count, scan and delete filters.
    pub mod body_matcher;
    /// `Descriptor`, `Encoder`, `decode`, `encode`: job descriptors `{queue}:s{shard}:p{priority}:{id}`.
    pub mod descriptor;
    /// `JobBuffer`: the dequeue broker's per-queue buffer of reserved jobs.
    pub mod job_buffer;
    /// `NewJob`, `ClaimedJob`, `AckItem`, `AckGroup`: the hot path's jobs as Rust values.
    pub mod jobs;
    /// `RateLimiter`, `TokenBucket`: per-queue dequeue rate limits.
    pub mod rate_limiter;
}

/// The bindings, mirroring the core modules; exported by `_pinlater` below.
pub mod py {
    pub mod errors;
    pub mod runtime;
    pub mod wire {
        pub mod dequeue_reply;
        pub mod struct_end;
    }
    pub mod store {
        pub mod mysql_inserts;
        pub mod mysql_shard;
        pub mod redis_command;
        pub mod redis_rows;
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
        BodyFilterTimeout, BodyPatternError, DescriptorError, MalformedThriftError, NativeError,
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
    use crate::py::queue::job_buffer::JobBuffer;
    #[pymodule_export]
    use crate::py::queue::jobs::{AckGroup, ClaimedJobs, LocalIds, NewJobBatch};
    #[pymodule_export]
    use crate::py::queue::rate_limiter::RateLimiter;
    #[pymodule_export]
    use crate::py::runtime::runtime_worker_count;
    #[pymodule_export]
    use crate::py::store::mysql_inserts::mysql_insert_statements;
    #[pymodule_export]
    use crate::py::store::mysql_shard::MySQLShard;
    #[pymodule_export]
    use crate::py::store::redis_command::redis_pack_command;
    #[pymodule_export]
    use crate::py::store::redis_rows::redis_claimed_jobs;
    #[pymodule_export]
    use crate::py::wire::dequeue_reply::encode_dequeue_reply;
    #[pymodule_export]
    use crate::py::wire::struct_end::thrift_struct_end;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("THRIFT_IDL", crate::THRIFT_IDL)?;
        m.add("BodyFilterTimeout", py.get_type::<BodyFilterTimeout>())?;
        m.add("BodyPatternError", py.get_type::<BodyPatternError>())?;
        m.add("DescriptorError", py.get_type::<DescriptorError>())?;
        m.add(
            "MalformedThriftError",
            py.get_type::<MalformedThriftError>(),
        )?;
        m.add("NativeError", py.get_type::<NativeError>())?;
        Ok(())
    }
}
