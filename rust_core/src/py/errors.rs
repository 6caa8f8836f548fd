//! Raising the exception classes of `weft.errors` from Rust, so Rust and
//! Python callers catch the same types.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::machine::codon::{CodonStatus, MetadataError, TransitionError};

static INVALID_TRANSITION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static METADATA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static STATE_VALIDATION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CORE_STATE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.import(py, "weft.errors", name)
}

/// Builds a `weft.errors` exception from a message and keyword attributes.
fn build(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    message: String,
    kwargs: &Bound<'_, PyDict>,
) -> PyErr {
    match class(py, cell, name).and_then(|cls| cls.call((message,), Some(kwargs))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// `InvalidTransitionError` or `MetadataValidationError`.
pub fn transition_error(py: Python<'_>, err: &TransitionError) -> PyErr {
    let kwargs = PyDict::new(py);
    let filled = match err {
        TransitionError::Invalid(e) => kwargs
            .set_item("from_status", e.from.as_str())
            .and_then(|()| kwargs.set_item("to_status", e.to.as_str())),
        TransitionError::Metadata(e) => metadata_kwargs(&kwargs, e),
    };
    if let Err(e) = filled {
        return e;
    }
    let (cell, name) = match err {
        TransitionError::Invalid(_) => (&INVALID_TRANSITION, "InvalidTransitionError"),
        TransitionError::Metadata(_) => (&METADATA, "MetadataValidationError"),
    };
    build(py, cell, name, err.to_string(), &kwargs)
}

fn metadata_kwargs(kwargs: &Bound<'_, PyDict>, e: &MetadataError) -> PyResult<()> {
    kwargs.set_item("from_status", e.from.as_str())?;
    kwargs.set_item("to_status", e.to.as_str())?;
    kwargs.set_item("missing", e.missing.clone())?;
    kwargs.set_item("invalid", e.invalid.clone())?;
    Ok(())
}

/// `StateValidationError` carrying the issues.
pub fn state_validation_error(
    py: Python<'_>,
    message: String,
    errors: Py<PyAny>,
    warnings: Py<PyAny>,
) -> PyErr {
    let kwargs = PyDict::new(py);
    if let Err(e) = kwargs
        .set_item("errors", errors)
        .and_then(|()| kwargs.set_item("warnings", warnings))
    {
        return e;
    }
    build(
        py,
        &STATE_VALIDATION,
        "StateValidationError",
        message,
        &kwargs,
    )
}

/// `CoreStateError`: the state lock was poisoned by an earlier panic.
pub fn poisoned(py: Python<'_>) -> PyErr {
    build(
        py,
        &CORE_STATE,
        "CoreStateError",
        "the core's state was left inconsistent by an earlier internal error; \
         reload it from the journal"
            .to_owned(),
        &PyDict::new(py),
    )
}

/// A `ValueError` for an unknown status name.
pub fn unknown_status(name: &str) -> PyErr {
    let names: Vec<&str> = CodonStatus::ALL.iter().map(|s| s.as_str()).collect();
    PyValueError::new_err(format!(
        "unknown codon status '{name}'; expected one of: {}",
        names.join(", ")
    ))
}
