//! Python exceptions of the extension, and the `From` conversions of core errors into them.
//!
//! - `DescriptorError(ValueError)`: a bad job descriptor or descriptor part.
//! - `MalformedThriftError(ValueError)`: bytes that are not a well-formed Thrift binary struct,
//!   or a `string` field of a hot call that is not UTF-8.
//! - `NotUtf8Error(MalformedThriftError)`: a `string` field of a hot call that is not UTF-8 (the
//!   dispatcher then reads the call as the original did: `server/lossy_text.py`).
//! - `MissingFieldError(ValueError)`: a hot call without a struct argument or a required field.
//! - `JobRejected(ValueError)`: an enqueue's job the handler refuses; `.code` is its `ErrorCode`.
//! - `BodyPatternError(ValueError)`: a body regex the linear-time engine cannot take.
//! - `BodyFilterTimeout(TimeoutError)`: a batch of bodies ran past its time budget.
//! - `RedisErrorReply(Exception)`: Redis answered an error; the message is its text.
//! - `NativeError(RuntimeError)`: a bug or resource failure inside the extension, including any
//!   Rust panic. A panic must never reach Python as `PyO3`'s `PanicException`, which derives from
//!   `BaseException` and so slips past `except Exception` in the server's error mapping.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyException, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

use crate::error::{self, RateLimitError, WalkError};
use crate::queue::body_matcher::{BudgetExceeded, PatternError};
use crate::store::redis_reply::ReplyError as RedisReplyError;
use crate::store::redis_rows::RowError;
use crate::wire::hot_calls::{self, DecodeError};
use crate::wire::replies::{ReplyError, TooLong};

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
    NotUtf8Error,
    MalformedThriftError,
    "A `string` field of a hot call that is not UTF-8, worded as Python's `UnicodeDecodeError`."
);

pyo3::create_exception!(
    pinlater._pinlater,
    MissingFieldError,
    PyValueError,
    "A hot call without a struct argument or a required field. The message is what the server \
     answers, e.g. `missing argument enqueueJobs.request` or `missing required field \
     PinLaterJob.body at request.jobs[3].body`."
);

pyo3::create_exception!(
    pinlater._pinlater,
    JobRejected,
    PyValueError,
    "A job of an enqueue that the server refuses: `.code` is the `ErrorCode` (an int) and the \
     message is the `PinLaterException`'s, e.g. `priority 9 is not in 1..3`."
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
    RedisErrorReply,
    PyException,
    "Redis answered a command with an error. The message is the error's text without its `-` \
     (`NOSCRIPT No matching script...`, `OOM command not allowed...`), for the store to map."
);

pyo3::create_exception!(
    pinlater._pinlater,
    NativeError,
    PyRuntimeError,
    "An internal failure of the native extension (a Rust panic or a resource it could not get). \
     Never the caller's fault; report it with the message."
);

// Core errors cross into Python through these conversions, so a binding returns them with `?`.

impl From<error::DescriptorError> for PyErr {
    fn from(err: error::DescriptorError) -> Self {
        DescriptorError::new_err(err.to_string())
    }
}

impl From<WalkError> for PyErr {
    fn from(err: WalkError) -> Self {
        MalformedThriftError::new_err(err.to_string())
    }
}

impl From<DecodeError> for PyErr {
    fn from(err: DecodeError) -> Self {
        match err {
            DecodeError::Walk(walk) => walk.into(),
            DecodeError::NotUtf8(_) => NotUtf8Error::new_err(err.to_string()),
            DecodeError::Missing(_) => MissingFieldError::new_err(err.to_string()),
            DecodeError::UnknownMethod(_) => PyValueError::new_err(err.to_string()),
        }
    }
}

impl From<hot_calls::JobRejected> for PyErr {
    fn from(err: hot_calls::JobRejected) -> Self {
        Python::attach(|py| {
            let exc = JobRejected::new_err(err.message);
            match exc.value(py).setattr("code", err.code) {
                Ok(()) => exc,
                Err(setattr_failed) => setattr_failed,
            }
        })
    }
}

impl From<RateLimitError> for PyErr {
    fn from(err: RateLimitError) -> Self {
        PyValueError::new_err(err.to_string())
    }
}

impl From<PatternError> for PyErr {
    fn from(err: PatternError) -> Self {
        BodyPatternError::new_err(err.to_string())
    }
}

impl From<BudgetExceeded> for PyErr {
    fn from(err: BudgetExceeded) -> Self {
        BodyFilterTimeout::new_err(err.to_string())
    }
}

impl From<RowError> for PyErr {
    fn from(err: RowError) -> Self {
        PyValueError::new_err(format!("malformed Redis reply: {err}"))
    }
}

impl From<ReplyError> for PyErr {
    fn from(err: ReplyError) -> Self {
        match err {
            ReplyError::Descriptor(descriptor) => descriptor.into(),
            ReplyError::TooLong(_) | ReplyError::NotI32(..) => {
                PyValueError::new_err(err.to_string())
            }
        }
    }
}

impl From<RedisReplyError> for PyErr {
    fn from(err: RedisReplyError) -> Self {
        PyValueError::new_err(format!("malformed Redis reply: {err}"))
    }
}

impl From<TooLong> for PyErr {
    fn from(err: TooLong) -> Self {
        PyValueError::new_err(err.to_string())
    }
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
