//! Python binding of `crate::runtime`: the extension's tokio runtime, as far as Python sees it.

use pyo3::prelude::*;

use crate::py::errors::guarded;

/// Worker threads of the extension's tokio runtime, starting it if it is not running yet.
#[pyfunction]
pub fn runtime_worker_count() -> PyResult<usize> {
    guarded("runtime_worker_count", || {
        Ok(crate::runtime::worker_count()?)
    })
}
