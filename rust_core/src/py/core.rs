//! `Core`: the state, its ordered queue and its cost cache, for Python.
//!
//! The queue and the state sit behind separate locks: `submit` only touches
//! the queue, so submitters (any thread) never wait for a batch being
//! applied, while `drain` holds the state lock for the whole batch so two
//! drainers cannot interleave and the processing order is the submission
//! order. Locks are taken with the interpreter released while waiting.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::MutexExt;
use pyo3::types::PyBytes;
use rustc_hash::FxHashSet;

use crate::machine::codon::TransitionError;
use crate::py::errors;
use crate::queue::{self, Processed, Queue, Submission};
use crate::state::model::{Snapshot, State};
use crate::state::money::Money;
use crate::state::reducer::Rejection;
use crate::state::transition;
use crate::state::validate::{self, Environment, Validation};

/// Batches at least this long are applied with the interpreter released;
/// shorter ones finish faster than a release costs.
const DETACH_AT: usize = 64;

/// The outcome of one transition: applied, or rejected with a reason.
// Flat bools read best from Python, which is who reads these.
#[allow(clippy::struct_excessive_bools)]
#[pyclass(frozen, get_all, module = "weft._core")]
pub struct Outcome {
    seq: u64,
    pub(crate) transition: bool,
    pub(crate) kind: Option<&'static str>,
    pub(crate) run_id: Option<String>,
    pub(crate) codon_id: Option<String>,
    pub(crate) ok: bool,
    code: Option<&'static str>,
    message: Option<String>,
    from_status: Option<&'static str>,
    to_status: Option<&'static str>,
    missing: Vec<&'static str>,
    invalid: Vec<(&'static str, &'static str)>,
    pub(crate) codon_terminal: bool,
    pub(crate) run_ended: bool,
}

#[pymethods]
impl Outcome {
    fn __repr__(&self) -> String {
        match (&self.code, &self.message) {
            (Some(code), Some(message)) => {
                format!("Outcome(seq={}, rejected={code}: {message})", self.seq)
            }
            _ if !self.transition => format!("Outcome(seq={}, event)", self.seq),
            _ => format!(
                "Outcome(seq={}, kind={}, applied)",
                self.seq,
                self.kind.unwrap_or("?")
            ),
        }
    }
}

impl From<Processed> for Outcome {
    fn from(p: Processed) -> Self {
        let (from_status, to_status) = match p.about.moves {
            Some((from, to)) => (Some(from.as_str()), Some(to.as_str())),
            None => (None, None),
        };
        let mut out = Outcome {
            seq: p.seq,
            transition: p.transition,
            kind: p.kind,
            run_id: p.about.run,
            codon_id: p.about.codon,
            ok: p.result.is_ok(),
            code: None,
            message: None,
            from_status,
            to_status,
            missing: Vec::new(),
            invalid: Vec::new(),
            codon_terminal: false,
            run_ended: false,
        };
        match p.result {
            Ok(applied) => {
                out.codon_terminal = applied.codon_terminal;
                out.run_ended = applied.run_ended;
            }
            Err(rejection) => {
                out.code = Some(rejection.code());
                out.message = Some(rejection.to_string());
                match rejection {
                    Rejection::Transition(TransitionError::Invalid(e)) => {
                        out.from_status = Some(e.from.as_str());
                        out.to_status = Some(e.to.as_str());
                    }
                    Rejection::Transition(TransitionError::Metadata(e)) => {
                        out.from_status = Some(e.from.as_str());
                        out.to_status = Some(e.to.as_str());
                        out.missing = e.missing;
                        out.invalid = e.invalid;
                    }
                    Rejection::Malformed(_) | Rejection::Conflict { .. } => {}
                }
            }
        }
        out
    }
}

/// The result of `Core.apply_batch`: counts, and only the rejections.
#[pyclass(frozen, get_all, module = "weft._core")]
pub struct BatchResult {
    first_seq: u64,
    count: usize,
    applied: usize,
    rejected: Vec<Py<Outcome>>,
}

#[pymethods]
impl BatchResult {
    fn __repr__(&self) -> String {
        format!(
            "BatchResult(first_seq={}, count={}, applied={}, rejected={})",
            self.first_seq,
            self.count,
            self.applied,
            self.rejected.len()
        )
    }
}

/// One finding of a state validation.
#[pyclass(frozen, get_all, module = "weft._core")]
pub struct Issue {
    kind: &'static str,
    message: String,
    path: String,
}

#[pymethods]
impl Issue {
    fn __repr__(&self) -> String {
        format!("Issue({}: {} at {})", self.kind, self.message, self.path)
    }
}

/// Errors and warnings of a state validation.
#[pyclass(frozen, get_all, module = "weft._core")]
pub struct StateValidation {
    valid: bool,
    errors: Vec<Py<Issue>>,
    warnings: Vec<Py<Issue>>,
}

fn issues(py: Python<'_>, list: Vec<validate::Issue>) -> PyResult<Vec<Py<Issue>>> {
    list.into_iter()
        .map(|i| {
            Py::new(
                py,
                Issue {
                    kind: i.kind,
                    message: i.message,
                    path: i.path,
                },
            )
        })
        .collect()
}

fn to_validation(py: Python<'_>, v: Validation) -> PyResult<StateValidation> {
    Ok(StateValidation {
        valid: v.is_valid(),
        errors: issues(py, v.errors)?,
        warnings: issues(py, v.warnings)?,
    })
}

fn environment<'a>(
    checkpoints: Option<&'a FxHashSet<String>>,
    run_folders: Option<&'a [String]>,
) -> Environment<'a> {
    Environment {
        checkpoints,
        run_folders,
    }
}

/// Checks a state document without loading it.
#[pyfunction]
#[pyo3(signature = (state_json, *, checkpoints = None, run_folders = None))]
pub fn validate_state(
    py: Python<'_>,
    state_json: &[u8],
    checkpoints: Option<Vec<String>>,
    run_folders: Option<Vec<String>>,
) -> PyResult<StateValidation> {
    let known: Option<FxHashSet<String>> = checkpoints.map(|c| c.into_iter().collect());
    let env = environment(known.as_ref(), run_folders.as_deref());
    let report = match validate::load(state_json, &env) {
        Ok((_, report)) | Err(report) => report,
    };
    to_validation(py, report)
}

/// The execution state with its ordered transition queue and cost cache.
#[pyclass(frozen, module = "weft._core")]
pub struct Core {
    queue: Mutex<Queue<Submission<PyBackedBytes>>>,
    state: Mutex<State>,
    warnings: Vec<Py<Issue>>,
}

impl Core {
    pub(super) fn state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, State>> {
        self.state
            .lock_py_attached(py)
            .map_err(|_| errors::poisoned(py))
    }

    fn queue<'a>(
        &'a self,
        py: Python<'_>,
    ) -> PyResult<MutexGuard<'a, Queue<Submission<PyBackedBytes>>>> {
        self.queue
            .lock_py_attached(py)
            .map_err(|_| errors::poisoned(py))
    }

    fn outcomes(py: Python<'_>, processed: Vec<Processed>) -> PyResult<Vec<Py<Outcome>>> {
        processed
            .into_iter()
            .map(|p| Py::new(py, Outcome::from(p)))
            .collect()
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (state_json = None, *, checkpoints = None, run_folders = None, next_seq = None))]
    fn new(
        py: Python<'_>,
        state_json: Option<&[u8]>,
        checkpoints: Option<Vec<String>>,
        run_folders: Option<Vec<String>>,
        next_seq: Option<u64>,
    ) -> PyResult<Self> {
        let (state, warnings) = match state_json {
            None => (State::default(), Vec::new()),
            Some(bytes) => {
                let known: Option<FxHashSet<String>> = checkpoints.map(|c| c.into_iter().collect());
                let env = environment(known.as_ref(), run_folders.as_deref());
                match validate::load(bytes, &env) {
                    Ok((state, report)) => (state, issues(py, report.warnings)?),
                    Err(report) => {
                        let summary = report
                            .errors
                            .iter()
                            .map(|i| {
                                if i.path.is_empty() {
                                    format!("{}: {}", i.kind, i.message)
                                } else {
                                    format!("{}: {} (at {})", i.kind, i.message, i.path)
                                }
                            })
                            .collect::<Vec<_>>()
                            .join("; ");
                        let v = to_validation(py, report)?;
                        return Err(errors::state_validation_error(
                            py,
                            format!("invalid state document: {summary}"),
                            v.errors.into_pyobject(py)?.into_any().unbind(),
                            v.warnings.into_pyobject(py)?.into_any().unbind(),
                        ));
                    }
                }
            }
        };
        // A snapshot says which journal entry it reflects; numbering goes on
        // from there unless the caller knows better.
        let next_seq = next_seq.unwrap_or_else(|| state.journal_seq.map_or(1, |s| s + 1));
        Ok(Core {
            queue: Mutex::new(Queue::new(next_seq)),
            state: Mutex::new(state),
            warnings,
        })
    }

    /// Enqueues one encoded transition; returns its sequence number at once.
    fn submit(&self, py: Python<'_>, event: PyBackedBytes) -> PyResult<u64> {
        Ok(self.queue(py)?.submit(Submission::Transition(event)))
    }

    /// Enqueues an encoded stream event: it takes its place in the order and
    /// is returned by `drain`, but does not touch the state.
    fn emit(&self, py: Python<'_>, event: PyBackedBytes) -> PyResult<u64> {
        Ok(self.queue(py)?.submit(Submission::Event(event)))
    }

    /// Enqueues several encoded transitions in order; returns the first
    /// sequence number (the rest follow consecutively).
    fn submit_many(&self, py: Python<'_>, events: Vec<PyBackedBytes>) -> PyResult<u64> {
        let mut q = self.queue(py)?;
        let first = q.next_seq();
        for e in events {
            q.submit(Submission::Transition(e));
        }
        Ok(first)
    }

    /// Applies up to `max_events` pending transitions in order and returns
    /// their outcomes.
    #[pyo3(signature = (max_events = None))]
    fn drain(&self, py: Python<'_>, max_events: Option<usize>) -> PyResult<Vec<Py<Outcome>>> {
        let mut state = self.state(py)?;
        let batch = self.queue(py)?.take(max_events.unwrap_or(usize::MAX));
        let st: &mut State = &mut state;
        let processed = if batch.len() >= DETACH_AT {
            py.detach(|| queue::process(st, &batch))
        } else {
            queue::process(st, &batch)
        };
        drop(state);
        Self::outcomes(py, processed)
    }

    /// Applies one transition now, bypassing the queue (which must be
    /// empty, so the order stays the submission order).
    fn apply(&self, py: Python<'_>, event: &[u8]) -> PyResult<Outcome> {
        let mut state = self.state(py)?;
        let seq = self.reserve(py, 1)?;
        Ok(Outcome::from(queue::apply_one(&mut state, seq, event)))
    }

    /// Applies a JSON array of transitions now, bypassing the queue (which
    /// must be empty). Returns counts and the rejected outcomes only.
    fn apply_batch(&self, py: Python<'_>, events: PyBackedBytes) -> PyResult<BatchResult> {
        let bytes: &[u8] = &events;
        let elements = py.detach(|| transition::split_batch(bytes)).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "apply_batch expects a JSON array of transitions: {e}"
            ))
        })?;
        let elements: Vec<&[u8]> = elements.iter().map(|raw| raw.get().as_bytes()).collect();
        self.apply_direct(py, &elements)
    }

    /// Applies a list of encoded transitions now, bypassing the queue (which
    /// must be empty): the replay path, with no array to build. Returns
    /// counts and the rejected outcomes only.
    fn apply_many(&self, py: Python<'_>, events: Vec<PyBackedBytes>) -> PyResult<BatchResult> {
        self.apply_direct(py, &events)
    }

    /// Moves the numbering so the next submission gets `next_seq`, and
    /// records `next_seq - 1` as the journal position: after a replay, when
    /// the journal also holds stream events. Only forward, only when idle.
    fn skip_to(&self, py: Python<'_>, next_seq: u64) -> PyResult<()> {
        let mut state = self.state(py)?;
        if !self.queue(py)?.skip_to(next_seq) {
            return Err(PyRuntimeError::new_err(
                "skip_to needs an empty queue and a sequence number no lower than next_seq",
            ));
        }
        state.journal_seq = next_seq.checked_sub(1).filter(|s| *s > 0);
        Ok(())
    }

    /// The last sequence number applied (or passed through), if any.
    #[getter]
    fn journal_seq(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        Ok(self.state(py)?.journal_seq)
    }

    /// The state.json snapshot: the state document plus `journalSeq`, the
    /// last sequence number it reflects (0 before any).
    fn snapshot_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let state = self.state(py)?;
        let st: &State = &state;
        let bytes = py
            .detach(|| {
                serde_json::to_vec(&Snapshot {
                    state: st,
                    journal_seq: st.journal_seq.unwrap_or(0),
                })
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot serialise the state: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Writes the state.json snapshot (as [`Self::snapshot_json`] gives it)
    /// to the file at `path` (created or truncated) and fsyncs it; returns
    /// its size. Streamed through a small buffer: a long run's state is tens
    /// of megabytes, which the bytes of `snapshot_json` and their copy in
    /// Python held at once at every snapshot (the run's peak memory).
    fn write_snapshot_json(&self, py: Python<'_>, path: PathBuf) -> PyResult<u64> {
        let file = {
            // The state stays locked only while it is written into the page
            // cache (the loop's next drain waits for it): the fsync comes after.
            let state = self.state(py)?;
            let st: &State = &state;
            py.detach(|| -> std::io::Result<File> {
                let mut out = BufWriter::with_capacity(1 << 16, File::create(&path)?);
                serde_json::to_writer(
                    &mut out,
                    &Snapshot {
                        state: st,
                        journal_seq: st.journal_seq.unwrap_or(0),
                    },
                )
                .map_err(std::io::Error::from)?;
                out.into_inner()
                    .map_err(std::io::IntoInnerError::into_error)
            })
            .map_err(os_error)?
        };
        py.detach(|| -> std::io::Result<u64> {
            file.sync_all()?;
            Ok(file.metadata()?.len())
        })
        .map_err(os_error)
    }

    /// Transitions waiting to be applied.
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.queue(py)?.len())
    }

    /// The sequence number the next submission gets.
    #[getter]
    fn next_seq(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.queue(py)?.next_seq())
    }

    /// Warnings found when the state was loaded.
    #[getter]
    fn warnings(&self, py: Python<'_>) -> Vec<Py<Issue>> {
        self.warnings.iter().map(|i| i.clone_ref(py)).collect()
    }

    /// The state document, in the state.json layout (compact JSON).
    fn state_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let state = self.state(py)?;
        let st: &State = &state;
        let bytes = py
            .detach(|| serde_json::to_vec(st))
            .map_err(|e| PyRuntimeError::new_err(format!("cannot serialise the state: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The active run's id, or `None`.
    #[getter]
    fn current_run_id(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.state(py)?.current_run_id.clone())
    }

    /// Cost of every codon record of every run, in dollars. O(1).
    fn total_cost(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.state(py)?.total_cost().usd())
    }

    /// Cost of the active run so far (0 when none). O(1).
    fn current_run_cost(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.state(py)?.current_run_cost().usd())
    }

    /// Cost of one run, or `None` for an unknown run. O(1).
    fn run_cost(&self, py: Python<'_>, run_id: &str) -> PyResult<Option<f64>> {
        Ok(self.state(py)?.run(run_id).map(|r| r.cost().usd()))
    }

    /// The seed's getCodonCost of a codon's latest record in a run, or
    /// `None` when the codon has no record there. O(1).
    fn codon_cost(&self, py: Python<'_>, run_id: &str, codon_id: &str) -> PyResult<Option<f64>> {
        Ok(self.state(py)?.codon_cost(run_id, codon_id).map(Money::usd))
    }

    /// The status of a codon's latest record in a run, or `None`.
    fn codon_status(
        &self,
        py: Python<'_>,
        run_id: &str,
        codon_id: &str,
    ) -> PyResult<Option<&'static str>> {
        Ok(self
            .state(py)?
            .run(run_id)
            .and_then(|r| r.latest(codon_id))
            .map(|c| c.status.as_str()))
    }

    /// Number of runs.
    #[getter]
    fn run_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.state(py)?.runs.len())
    }

    /// Number of codon records over all runs.
    #[getter]
    fn codon_record_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.state(py)?.codon_record_count())
    }

    /// The execution thread (seed 003) of the live state, ending in
    /// `target_run_id` or the latest run: `analyze_execution_thread` without
    /// the JSON round trip. The thread is a snapshot: transitions applied
    /// later do not change it. The analysis runs without the GIL.
    #[pyo3(signature = (checkpoints = None, target_run_id = None, validate_checkpoints = true))]
    fn execution_thread(
        slf: &Bound<'_, Self>,
        checkpoints: Option<Bound<'_, PyAny>>,
        target_run_id: Option<&str>,
        validate_checkpoints: bool,
    ) -> PyResult<super::thread::ExecutionThread> {
        super::thread::of_core(
            slf,
            checkpoints.as_ref(),
            target_run_id,
            validate_checkpoints,
        )
    }
}

impl Core {
    /// Applies `events` in order with the interpreter released, numbering
    /// them after anything applied before; keeps only the rejections.
    fn apply_direct<B: AsRef<[u8]> + Sync>(
        &self,
        py: Python<'_>,
        events: &[B],
    ) -> PyResult<BatchResult> {
        let mut state = self.state(py)?;
        let st: &mut State = &mut state;
        let count = events.len();
        let first_seq = self.reserve(py, count as u64)?;
        let rejected: Vec<Processed> = py.detach(|| {
            events
                .iter()
                .enumerate()
                .map(|(i, e)| queue::apply_one(st, first_seq + i as u64, e.as_ref()))
                .filter(|p| p.result.is_err())
                .collect()
        });
        drop(state);
        Ok(BatchResult {
            first_seq,
            count,
            applied: count - rejected.len(),
            rejected: Self::outcomes(py, rejected)?,
        })
    }

    fn reserve(&self, py: Python<'_>, count: u64) -> PyResult<u64> {
        self.queue(py)?.reserve(count).ok_or_else(|| {
            PyRuntimeError::new_err(
                "transitions are queued; drain() them before applying directly, \
                 so the order stays the submission order",
            )
        })
    }
}

/// An I/O error as Python's `OSError` (the subclass its errno maps to, as
/// Python's own writes report a full disk), with the system's message:
/// `strerror` without Rust's "(os error N)".
pub(crate) fn os_error(e: std::io::Error) -> PyErr {
    match e.raw_os_error() {
        Some(code) => PyOSError::new_err((code, strerror(&e))),
        None => PyOSError::new_err(e.to_string()),
    }
}

/// [`os_error`] naming the file it is about (`OSError.filename`).
pub(crate) fn os_error_at(e: &std::io::Error, path: std::ffi::OsString) -> PyErr {
    PyOSError::new_err((e.raw_os_error().unwrap_or(0), strerror(e), path))
}

fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    text.split(" (os error ").next().unwrap_or(&text).to_owned()
}
