//! The Python module `pinlater._pinlater`: the only place that exports to Python.

use pyo3::prelude::*;

#[pymodule(gil_used = false)]
mod _pinlater {
    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("THRIFT_IDL", crate::THRIFT_IDL)?;
        Ok(())
    }
}
