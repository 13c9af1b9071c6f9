//! Python binding of `crate::store::redis_command`: the Redis backend's commands packed for the socket.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyString, PyTuple};

use crate::py::errors::guarded;
use crate::store::redis_command::Command;

/// `args` as one RESP command, exactly as `hiredis.pack_command(args)` packs it: each argument
/// must be exactly a `str` (as UTF-8), `int` (in decimal), `float` (as its `repr`) or `bytes`.
#[pyfunction]
pub fn redis_pack_command<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    guarded("redis_pack_command", || {
        let capacity = args.len() * 16;
        let mut command = Command::new(args.len(), capacity);
        for arg in args.iter() {
            if let Ok(bytes) = arg.cast_exact::<PyBytes>() {
                command.bulk(bytes.as_bytes());
            } else if let Ok(text) = arg.cast_exact::<PyString>() {
                command.bulk(text.to_str()?.as_bytes());
            } else if let Ok(int) = arg.cast_exact::<PyInt>() {
                match int.extract::<i64>() {
                    Ok(n) => command.int(n),
                    Err(_) => command.bulk(int.str()?.to_str()?.as_bytes()),
                }
            } else if let Ok(float) = arg.cast_exact::<PyFloat>() {
                command.bulk(float.repr()?.to_str()?.as_bytes());
            } else {
                return Err(PyTypeError::new_err(
                    "A tuple item must be str, int, float or bytes.",
                ));
            }
        }
        Ok(PyBytes::new(py, &command.into_bytes()))
    })
}
