//! # weft-core
//!
//! The compiled core of Weft, a runtime for long-running AI-agent
//! pipelines. Every state change of a run passes through here, in order:
//!
//! 1. a transition arrives as JSON bytes (encoded once by msgspec on the
//!    Python side; the same bytes go to the journal) and is given a sequence
//!    number by the [`queue`];
//! 2. the [`state::reducer`] validates it against the codon state machine
//!    ([`machine::codon`]) and the current state, then applies it, or refuses
//!    it without changing anything;
//! 3. the cost cache moves by the record's cost delta, so total, per-run and
//!    per-codon costs are O(1) queries.
//!
//! The crate is pure: no I/O, no clocks, no randomness. Time and ids are
//! arguments, so replaying a journal reproduces a state exactly and every
//! test is deterministic. Python bindings live only in `py/` behind the
//! `python` feature; plain `cargo test` needs no Python.
//! Three bindings do I/O for Python, where holding the interpreter's lock
//! around it costs more than the work: streaming state.json to its file,
//! reading a checkpoint's changed file as a git blob (`py/blob.rs`), and
//! comparing the whole work tree with the checkpoint index's stat data
//! (`py/statcache.rs`).
//!
//! The other engines of the seeds, the agent-session supervisor
//! ([`machine::session`]) and the workstream, step and circuit-breaker
//! machines ([`machine::workstream`]), are pure transition functions that
//! return their side effects as values.

pub mod machine;
pub mod queue;
pub mod state;
pub mod stream;
pub mod thread;

#[cfg(feature = "python")]
mod py;
