//! The only `PyO3` code in the crate: the `weft._core` extension module.
//!
//! Everything here converts and delegates; the logic lives in the pure
//! modules. Transitions cross as bytes already encoded by msgspec, never as
//! Python objects walked field by field, and calls that may take long
//! (batches, state serialisation) detach from the interpreter.

mod blob;
mod codon;
mod core;
mod errors;
mod journal;
mod pattern;
mod session;
mod statcache;
mod stream;
mod thread;
mod workstream;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::machine::codon::CodonStatus;
use crate::state::transition::Transition;

/// The `weft._core` module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "BUILD_PROFILE",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    let statuses: Vec<&str> = CodonStatus::ALL.iter().map(|s| s.as_str()).collect();
    m.add("CODON_STATUSES", PyTuple::new(py, statuses)?)?;
    m.add("TRANSITION_TYPES", PyTuple::new(py, Transition::KINDS)?)?;
    m.add_function(wrap_pyfunction!(codon::validate_transition, m)?)?;
    m.add_function(wrap_pyfunction!(codon::allowed_transitions, m)?)?;
    m.add_function(wrap_pyfunction!(codon::is_terminal, m)?)?;
    m.add_function(wrap_pyfunction!(core::validate_state, m)?)?;
    m.add_class::<core::Core>()?;
    m.add_class::<core::Outcome>()?;
    m.add_class::<core::BatchResult>()?;
    m.add_class::<core::Issue>()?;
    m.add_class::<core::StateValidation>()?;
    blob::register(m)?;
    journal::register(m)?;
    pattern::register(m)?;
    session::register(m)?;
    statcache::register(m)?;
    stream::register(m)?;
    thread::register(m)?;
    workstream::register(m)?;
    Ok(())
}
