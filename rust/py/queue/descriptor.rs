//! Python bindings of `crate::queue::descriptor`: batch forms, so a batch crosses the boundary once.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::error::{DescriptorError, Malformation};
use crate::py::errors::guarded;
use crate::queue::descriptor;

/// An int out of the Rust type's range becomes the descriptor error `malformation` names.
fn int_part<'py, T>(
    item: &Bound<'py, PyAny>,
    malformation: fn(String) -> Malformation,
    index: Option<usize>,
) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    item.extract::<T>().map_err(|err| {
        if err.is_instance_of::<PyOverflowError>(item.py()) {
            let text = item
                .str()
                .map_or_else(|_| "?".to_owned(), |s| s.to_string());
            let error = DescriptorError::InvalidPart(malformation(text));
            PyErr::from(match index {
                Some(i) => error.at_index(i),
                None => error,
            })
        } else {
            err
        }
    })
}

/// Items of a non-`str` iterable, so a lone string is not taken for a sequence of characters.
fn items<'py>(seq: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if seq.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a sequence, not a single str"
        )));
    }
    seq.try_iter()?.collect()
}

/// Builds one descriptor string from its parts.
#[pyfunction]
pub fn encode_descriptor(
    queue: &str,
    shard: &str,
    priority: &Bound<'_, PyAny>,
    local_id: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("encode_descriptor", || {
        let priority: i64 = int_part(priority, Malformation::Priority, None)?;
        let local_id: u64 = int_part(local_id, Malformation::LocalId, None)?;
        Ok(descriptor::encode(queue, shard, priority, local_id)?)
    })
}

/// Builds one descriptor per `(priorities[i], local_ids[i])`, all for one queue and shard.
#[pyfunction]
pub fn encode_descriptors<'py>(
    py: Python<'py>,
    queue: &str,
    shard: &str,
    priorities: &Bound<'py, PyAny>,
    local_ids: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guarded("encode_descriptors", || {
        let priorities = items(priorities, "priorities")?;
        let local_ids = items(local_ids, "local_ids")?;
        descriptor::check_lengths(priorities.len(), local_ids.len())?;
        let mut encoder = descriptor::Encoder::new(queue, shard)?;
        let strings = priorities
            .iter()
            .zip(&local_ids)
            .enumerate()
            .map(|(i, (priority, local_id))| {
                let priority: i64 = int_part(priority, Malformation::Priority, Some(i))?;
                let local_id: u64 = int_part(local_id, Malformation::LocalId, Some(i))?;
                let text = encoder
                    .encode(priority, local_id)
                    .map_err(|e| e.at_index(i))?;
                Ok(PyString::new(py, text))
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, strings)
    })
}

/// The Python string for the last name seen, reused while the name repeats.
#[derive(Default)]
struct NameCache<'a, 'py> {
    last: Option<(&'a str, Bound<'py, PyString>)>,
}

impl<'a, 'py> NameCache<'a, 'py> {
    fn get(&mut self, py: Python<'py>, name: &'a str) -> Bound<'py, PyString> {
        match &self.last {
            Some((text, object)) if *text == name => object.clone(),
            _ => {
                let object = PyString::new(py, name);
                self.last = Some((name, object.clone()));
                object
            }
        }
    }
}

fn to_tuple<'py>(py: Python<'py>, d: &descriptor::Descriptor<'_>) -> PyResult<Bound<'py, PyTuple>> {
    (d.queue, d.shard, d.priority, d.local_id).into_pyobject(py)
}

/// Splits one descriptor into `(queue, shard, priority, local_id)`.
#[pyfunction]
pub fn decode_descriptor<'py>(py: Python<'py>, descriptor: &str) -> PyResult<Bound<'py, PyTuple>> {
    guarded("decode_descriptor", || {
        let d = descriptor::decode(descriptor)?;
        to_tuple(py, &d)
    })
}

/// Splits each descriptor into `(queue, shard, priority, local_id)`.
#[pyfunction]
pub fn decode_descriptors<'py>(
    py: Python<'py>,
    descriptors: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guarded("decode_descriptors", || {
        let strings = items(descriptors, "descriptors")?
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                item.cast_into::<PyString>().map_err(|e| {
                    PyTypeError::new_err(format!(
                        "descriptors[{i}] must be str, not {}",
                        e.into_inner()
                            .get_type()
                            .name()
                            .map_or_else(|_| "?".to_owned(), |n| n.to_string())
                    ))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let texts = strings
            .iter()
            .map(|s| s.to_str())
            .collect::<PyResult<Vec<&str>>>()?;
        let decoded = descriptor::decode_batch(texts)?;
        // A batch is usually one queue on few shards: share the name objects between tuples.
        let mut queue = NameCache::default();
        let mut shard = NameCache::default();
        let tuples = decoded
            .iter()
            .map(|d| {
                (
                    queue.get(py, d.queue),
                    shard.get(py, d.shard),
                    d.priority,
                    d.local_id,
                )
                    .into_pyobject(py)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, tuples)
    })
}
