//! The state machines of the seeds, as pure transition functions.
//!
//! Nothing here does I/O or reads a clock: time arrives as an argument and
//! side effects leave as values, so every table row is testable in isolation.

pub mod codon;
pub mod session;
pub mod workstream;
