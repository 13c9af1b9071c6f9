//! Python exceptions of the extension, and the conversions from core errors.
//!
//! - `DescriptorError(ValueError)`: a bad job descriptor or descriptor part.
//! - `MalformedThriftError(ValueError)`: bytes that are not a well-formed Thrift binary struct.
//! - `BodyPatternError(ValueError)`: a body regex the linear-time engine cannot take.
//! - `BodyFilterTimeout(TimeoutError)`: a batch of bodies ran past its time budget.
//! - `NativeError(RuntimeError)`: a bug or resource failure inside the extension, including any
//!   Rust panic. A panic must never reach Python as `PyO3`'s `PanicException`, which derives from
//!   `BaseException` and so slips past `except Exception` in the server's error mapping.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

use crate::body_filter::{BudgetExceeded, PatternError};
use crate::error::{self, RateLimitError, RuntimeStartError, WalkError};

pyo3::create_exception!(
    pinlater._pinlater,
    DescriptorError,
    PyValueError,
    "A job descriptor, or a part given to build one, is malformed. The message names the \
     offending descriptor (and its index in a batch) and what is wrong with it."
);

pyo3::create_exception!(
    pinlater._pinlater,
    MalformedThriftError,
    PyValueError,
    "The bytes are not a well-formed Thrift binary-protocol struct. The message is what is wrong, \
     e.g. `struct truncated` or `unknown wire type 99`."
);

pyo3::create_exception!(
    pinlater._pinlater,
    BodyPatternError,
    PyValueError,
    "A body regex that the linear-time engine cannot take: a syntax error, a backreference or \
     look-around, a pattern too long or one that compiles too big. The message is the reason, in \
     one line (e.g. `backreferences are not supported`)."
);

pyo3::create_exception!(
    pinlater._pinlater,
    BodyFilterTimeout,
    PyTimeoutError,
    "A batch of bodies was not matched within its time budget. The message says how far it got."
);

pyo3::create_exception!(
    pinlater._pinlater,
    NativeError,
    PyRuntimeError,
    "An internal failure of the native extension (a Rust panic or a resource it could not get). \
     Never the caller's fault; report it with the message."
);

#[must_use]
pub fn descriptor_error(err: &error::DescriptorError) -> PyErr {
    DescriptorError::new_err(err.to_string())
}

#[must_use]
pub fn walk_error(err: &WalkError) -> PyErr {
    MalformedThriftError::new_err(err.to_string())
}

#[must_use]
pub fn rate_limit_error(err: &RateLimitError) -> PyErr {
    PyValueError::new_err(err.to_string())
}

#[must_use]
pub fn body_pattern_error(err: &PatternError) -> PyErr {
    BodyPatternError::new_err(err.to_string())
}

#[must_use]
pub fn body_budget_error(err: &BudgetExceeded) -> PyErr {
    BodyFilterTimeout::new_err(err.to_string())
}

#[must_use]
pub fn runtime_start_error(err: &RuntimeStartError) -> PyErr {
    NativeError::new_err(err.to_string())
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// Runs an exported function's body, turning a Rust panic into `NativeError`.
///
/// `AssertUnwindSafe` is sound here: after a panic the only state we may observe again is behind
/// mutexes whose users recover from poisoning (rate-limiter buckets are plain numbers).
pub fn guarded<T>(name: &str, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        Err(NativeError::new_err(format!(
            "internal error in pinlater._pinlater.{name}: {}",
            panic_message(payload.as_ref())
        )))
    })
}

/// Test-only: panics inside [`guarded`], so tests can check that Python sees `NativeError`.
///
/// # Panics
///
/// Never past its own `guarded`: the panic it raises comes back as `Err(NativeError)`.
#[pyfunction(name = "_panic_for_tests")]
pub fn panic_for_tests(message: &str) -> PyResult<()> {
    guarded("_panic_for_tests", || panic!("{message}"))
}
