//! Python binding of `crate::queue::body_matcher`: a compiled body filter that matches a batch of bodies
//! with the interpreter released.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::py::errors::guarded;
use crate::queue::body_matcher;

/// Single bodies at least this long are matched with the interpreter released (a search runs
/// at hundreds of MB/s, so below this it costs less than handing the GIL over and back).
const DETACH_BYTES: usize = 64 << 10;

/// A compiled `bodyRegexToMatch`.
#[pyclass(frozen, module = "pinlater._pinlater")]
pub struct BodyMatcher {
    inner: body_matcher::BodyMatcher,
}

fn budget(seconds: f64) -> PyResult<Duration> {
    if seconds.is_nan() {
        return Err(PyValueError::new_err(
            "budget_seconds must be a number, not NaN",
        ));
    }
    // Negative: already spent. Too large for a Duration: no deadline at all.
    Ok(Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX))
}

#[pymethods]
impl BodyMatcher {
    /// Compiles with the interpreter released: the size limit keeps it to about 15 ms at worst.
    #[new]
    fn new(py: Python<'_>, pattern: &str) -> PyResult<Self> {
        guarded("BodyMatcher", || {
            let inner = py.detach(|| body_matcher::BodyMatcher::new(pattern))?;
            Ok(Self { inner })
        })
    }

    /// The pattern as given.
    #[getter]
    fn pattern(&self) -> &str {
        self.inner.pattern()
    }

    /// Whether the pattern occurs anywhere in `body`.
    fn is_match(&self, py: Python<'_>, body: &[u8]) -> PyResult<bool> {
        guarded("BodyMatcher.is_match", || {
            Ok(if body.len() >= DETACH_BYTES {
                py.detach(|| self.inner.is_match(body))
            } else {
                self.inner.is_match(body)
            })
        })
    }

    /// Positions in `bodies` of the bodies the pattern occurs in, matched with the interpreter
    /// released; `BodyFilterTimeout` once `budget_seconds` have passed.
    fn match_indices(
        &self,
        py: Python<'_>,
        bodies: &Bound<'_, PyAny>,
        budget_seconds: f64,
    ) -> PyResult<Vec<usize>> {
        guarded("BodyMatcher.match_indices", || {
            let budget = budget(budget_seconds)?;
            if bodies.is_instance_of::<PyBytes>() || bodies.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(
                    "bodies must be a sequence of bytes, not a single bytes or str",
                ));
            }
            let items = bodies.try_iter()?.collect::<PyResult<Vec<_>>>()?;
            let slices = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    if item.is_none() {
                        Ok(None)
                    } else {
                        item.cast::<PyBytes>()
                            .map(|b| Some(b.as_bytes()))
                            .map_err(|_| {
                                PyTypeError::new_err(format!(
                                    "bodies[{i}] must be bytes or None, not {}",
                                    item.get_type()
                                        .name()
                                        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
                                ))
                            })
                    }
                })
                .collect::<PyResult<Vec<Option<&[u8]>>>>()?;
            // The slices borrow immutable `bytes` objects that `items` keeps alive meanwhile.
            Ok(py.detach(|| self.inner.match_indices(&slices, budget))?)
        })
    }

    fn __repr__(&self) -> String {
        format!("BodyMatcher({:?})", self.inner.pattern())
    }
}
