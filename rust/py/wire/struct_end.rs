//! Python binding of `crate::wire::struct_end`: the server's guard before the Cython decoder.

use pyo3::prelude::*;

use crate::py::errors::guarded;
use crate::wire::struct_end;

/// Payloads at least this long are walked with the interpreter released.
///
/// The walk runs at about 4 GB/s: a 1,000-job enqueue (126 KB) takes 30 µs, less than handing
/// the GIL to a waiting thread and taking it back can cost, so small payloads keep it. From
/// 1 MiB (about 250 µs; a 16 MiB frame takes about 4 ms) other threads get to run meanwhile.
pub const DETACH_BYTES: usize = 1 << 20;

/// Walks the Thrift binary-protocol struct at `offset` in `payload`; returns the offset just past
/// its STOP.
#[pyfunction]
#[pyo3(signature = (payload, offset = 0))]
pub fn thrift_struct_end(py: Python<'_>, payload: &[u8], offset: usize) -> PyResult<usize> {
    walked(py, "thrift_struct_end", payload, |p| {
        struct_end::struct_end(p, offset)
    })
}

/// [`thrift_struct_end`], and how many objects a decoder makes of the struct (itself, and every
/// struct, string and container in it): `(end, objects)`.
#[pyfunction]
#[pyo3(signature = (payload, offset = 0))]
pub fn thrift_struct_objects(
    py: Python<'_>,
    payload: &[u8],
    offset: usize,
) -> PyResult<(usize, usize)> {
    walked(py, "thrift_struct_objects", payload, |p| {
        struct_end::struct_objects(p, offset)
    })
}

/// `walk(payload)`, with the interpreter released from `DETACH_BYTES` on.
fn walked<T: Send>(
    py: Python<'_>,
    name: &'static str,
    payload: &[u8],
    walk: impl Fn(&[u8]) -> Result<T, crate::error::WalkError> + Send + Sync,
) -> PyResult<T> {
    guarded(name, || {
        // `payload` borrows an immutable `bytes` that the caller keeps alive for this call.
        let result = if payload.len() >= DETACH_BYTES {
            py.detach(|| walk(payload))
        } else {
            walk(payload)
        };
        Ok(result?)
    })
}
