//! The Python module `pinlater._pinlater`: the only place that exports to Python.
//!
//! Every exported function runs its body under `errors::guarded`, so a Rust panic reaches Python
//! as `NativeError`, never as `PyO3`'s `PanicException` (a `BaseException`).

pub mod body_filter;
pub mod broker;
pub mod descriptor;
pub mod errors;
pub mod mysql_rows;
pub mod ratelimit;
pub mod redis_pack;
pub mod redis_rows;
pub mod thrift_reply;
pub mod thrift_walk;

use pyo3::prelude::*;

/// Worker threads of the extension's tokio runtime, starting it if it is not running yet.
#[pyfunction]
pub fn runtime_worker_count() -> PyResult<usize> {
    errors::guarded("runtime_worker_count", || {
        crate::runtime::worker_count().map_err(|e| errors::runtime_start_error(&e))
    })
}

#[pymodule(gil_used = false)]
mod _pinlater {
    use pyo3::prelude::*;

    #[pymodule_export]
    use super::body_filter::BodyMatcher;
    #[pymodule_export]
    use super::broker::JobBuffer;
    #[pymodule_export]
    use super::descriptor::{
        decode_descriptor, decode_descriptors, encode_descriptor, encode_descriptors,
    };
    #[pymodule_export]
    use super::errors::panic_for_tests;
    #[pymodule_export]
    use super::mysql_rows::mysql_insert_statements;
    #[pymodule_export]
    use super::ratelimit::RateLimiter;
    #[pymodule_export]
    use super::redis_pack::redis_pack_command;
    #[pymodule_export]
    use super::redis_rows::redis_claimed_jobs;
    #[pymodule_export]
    use super::runtime_worker_count;
    #[pymodule_export]
    use super::thrift_reply::encode_dequeue_reply;
    #[pymodule_export]
    use super::thrift_walk::thrift_struct_end;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("THRIFT_IDL", crate::THRIFT_IDL)?;
        m.add(
            "BodyFilterTimeout",
            py.get_type::<super::errors::BodyFilterTimeout>(),
        )?;
        m.add(
            "BodyPatternError",
            py.get_type::<super::errors::BodyPatternError>(),
        )?;
        m.add(
            "DescriptorError",
            py.get_type::<super::errors::DescriptorError>(),
        )?;
        m.add(
            "MalformedThriftError",
            py.get_type::<super::errors::MalformedThriftError>(),
        )?;
        m.add("NativeError", py.get_type::<super::errors::NativeError>())?;
        Ok(())
    }
}
