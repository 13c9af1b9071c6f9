//! Python binding of `crate::store::mysql_inserts`: a batch of jobs in, the INSERT statements out.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::py::errors::guarded;
use crate::store::mysql_inserts::{Format, Row, Statements, TS_MAX_MS, TS_MIN_MS};

/// An int attribute; one past i64 (a time far out of range) is clamped, as the store clamps.
fn time_ms(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    match value.extract::<i64>() {
        Ok(ms) => Ok(ms),
        Err(err) if err.is_instance_of::<PyOverflowError>(value.py()) => {
            Ok(if value.gt(0)? { TS_MAX_MS } else { TS_MIN_MS })
        }
        Err(err) => Err(err),
    }
}

fn type_error(index: usize, what: &str, value: &Bound<'_, PyAny>) -> PyErr {
    let kind = value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    PyTypeError::new_err(format!("jobs[{index}].{what}, not {kind}"))
}

/// The multi-row INSERT statements for `jobs` (objects with `body`, `attempts_allowed`,
/// `custom_status` and `run_after_ms`), as `(rows, statement)` pairs in job order.
#[pyfunction]
#[pyo3(signature = (head, tail, jobs, now_ms, *, budget, custom_status_limit, no_backslash_escapes))]
#[allow(clippy::too_many_arguments)] // keyword-only options of one call, mirrored in the stub
pub fn mysql_insert_statements<'py>(
    py: Python<'py>,
    head: &str,
    tail: &str,
    jobs: &Bound<'py, PyAny>,
    now_ms: &Bound<'py, PyAny>,
    budget: usize,
    custom_status_limit: usize,
    no_backslash_escapes: bool,
) -> PyResult<Bound<'py, PyList>> {
    guarded("mysql_insert_statements", || {
        if jobs.is_instance_of::<PyString>() || jobs.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err("jobs must be a sequence of jobs"));
        }
        let format = Format {
            head,
            tail,
            budget,
            custom_status_limit,
            no_backslash_escapes,
        };
        let mut statements = Statements::new(format, time_ms(now_ms)?);
        for (index, job) in jobs.try_iter()?.enumerate() {
            let job = job?;
            let body = job.getattr(intern!(py, "body"))?;
            let body = body
                .cast::<PyBytes>()
                .map_err(|_| type_error(index, "body must be bytes", &body))?;
            let status = job.getattr(intern!(py, "custom_status"))?;
            let status = status
                .cast::<PyString>()
                .map_err(|_| type_error(index, "custom_status must be str", &status))?;
            statements.push(&Row {
                attempts_allowed: job.getattr(intern!(py, "attempts_allowed"))?.extract()?,
                custom_status: status.to_str()?,
                run_after_ms: time_ms(&job.getattr(intern!(py, "run_after_ms"))?)?,
                body: body.as_bytes(),
            });
        }
        let pairs = statements
            .finish()
            .into_iter()
            .map(|(rows, sql)| (rows, PyBytes::new(py, &sql)).into_pyobject(py))
            .collect::<PyResult<Vec<Bound<'py, PyTuple>>>>()?;
        PyList::new(py, pairs)
    })
}
