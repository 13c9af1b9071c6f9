//! Python binding of `crate::store::redis_rows`: a dequeue or reserve reply in, the jobs out.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString};

use crate::py::errors::guarded;
use crate::store::redis_rows::{count, local_id, ms, order, seconds, HEAD, WIDTH};

/// A reply value as text: bulk strings arrive as bytes, integers as int; nil as `None`.
fn text<'a>(value: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Option<Cow<'a, [u8]>>> {
    if value.is_none() {
        Ok(None)
    } else if let Ok(bytes) = value.cast::<PyBytes>() {
        Ok(Some(Cow::Borrowed(bytes.as_bytes())))
    } else if let Ok(s) = value.cast::<PyString>() {
        Ok(Some(Cow::Owned(s.to_str()?.as_bytes().to_vec())))
    } else if value.is_instance_of::<PyInt>() {
        Ok(Some(Cow::Owned(value.str()?.to_str()?.as_bytes().to_vec())))
    } else {
        let kind = value
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        Err(PyTypeError::new_err(format!(
            "malformed Redis reply: {what} is a {kind}"
        )))
    }
}

fn required<'a>(value: &'a Bound<'_, PyAny>, what: &'static str) -> PyResult<Cow<'a, [u8]>> {
    text(value, what)?
        .ok_or_else(|| PyValueError::new_err(format!("malformed Redis reply: no {what}")))
}

/// `int(x)` of a count, 0 when absent.
fn count_or_zero(value: &Bound<'_, PyAny>, what: &'static str) -> PyResult<i64> {
    Ok(text(value, what)?.map_or(Ok(0), |t| count(what, &t))?)
}

/// `round(float(x) * 1000)` of a time, 0 when absent.
fn ms_or_zero(value: &Bound<'_, PyAny>, what: &'static str) -> PyResult<i64> {
    match text(value, what)? {
        None => Ok(0),
        Some(t) => {
            let s = seconds(what, &t)?;
            Ok(ms(what, s, &t)?)
        }
    }
}

/// The jobs of a dequeue or reserve reply (`reply[0]` is the evicted count, `reply[1]` the
/// call's cut, then 7 values per job), built as `make((local_id, body, attempts_allowed, attempts_remaining, created_at_ms,
/// updated_at_ms))` (one tuple, so that `partial(tuple.__new__, cls)` builds a named tuple
/// without a Python frame) and ordered by (run after, id).
#[pyfunction]
pub fn redis_claimed_jobs<'py>(
    py: Python<'py>,
    reply: &Bound<'py, PyList>,
    make: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guarded("redis_claimed_jobs", || {
        let values = reply.as_sequence().to_list()?;
        if values.len() < HEAD {
            return Err(PyValueError::new_err(
                "malformed Redis reply: no evicted count and cut",
            ));
        }
        let n = values.len() - HEAD;
        if n % WIDTH != 0 {
            return Err(PyValueError::new_err(format!(
                "malformed Redis reply: {n} values after the evicted count and cut, not a multiple of {WIDTH}"
            )));
        }
        let mut keys = Vec::with_capacity(n / WIDTH);
        let mut jobs = Vec::with_capacity(n / WIDTH);
        for row in 0..n / WIDTH {
            let at = |k: usize| values.get_item(HEAD + row * WIDTH + k);
            let id_value = at(0)?;
            let id = local_id(&required(&id_value, "id")?)?;
            let score_value = at(1)?;
            let score_text = required(&score_value, "score")?;
            let score = seconds("score", &score_text)?;
            let body = at(2)?;
            if !body.is_instance_of::<PyBytes>() {
                return Err(PyTypeError::new_err(
                    "malformed Redis reply: a body is not bytes",
                ));
            }
            let fields = (
                id,
                body,
                count_or_zero(&at(3)?, "al")?,
                count_or_zero(&at(4)?, "ar")?,
                ms_or_zero(&at(5)?, "ca")?,
                ms_or_zero(&at(6)?, "ua")?,
            )
                .into_pyobject(py)?;
            let job = make.call1((fields,))?;
            keys.push((score, id));
            jobs.push(job);
        }
        PyList::new(py, order(&keys).into_iter().map(|i| jobs[i].clone()))
    })
}
