//! The execution thread (seed 003) for Python: `analyze_execution_thread`,
//! `Core.execution_thread`, `find_continuation_session_id` and the frozen
//! classes `ExecutionThread`, `ThreadCodons`, `ThreadCodon` and
//! `CheckpointInfo`.
//!
//! The thread of a long history holds a hundred thousand codons, and most
//! callers read a handful of them (the newest, the last success, one
//! session). So the analysis keeps positions and computes the rest when it
//! is read: `codons` is a lazy sequence whose items are small views made on
//! access, a record's dict is built when its `codon` is read, its validated
//! checkpoints when they are. No record is copied up front:
//!
//! - a thread analysed from JSON owns the state it parsed;
//! - a thread of a `Core` reads the live state. The reducer only changes
//!   records of a running run, so records of ended runs read later are what
//!   the analysis saw; the records of a running run, and the plan, are
//!   copied when the thread is built, because they may still move.
//!
//! The checkpoint set is frozen with `frozenset(checkpoints)` (no copy for a
//! frozenset) when the thread is built, so later changes to the caller's set
//! do not change the answers.
//!
//! Why one long file (about 850 lines): the lazy views and the analysis they
//! read share private state (`Shared`, `View`, `Records`); splitting them
//! would widen that state to the whole crate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyByteArray, PyBytes, PyFrozenSet, PyList, PySlice, PySliceMethods, PyString, PyTuple, PyType,
};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::py::core::Core;
use crate::state::model::{CodonExecution, Run, RunStatus, State};
use crate::state::validate::{self, Environment};
use crate::thread::{self, checkpoint_type_name, recorded_checkpoints, ThreadEntry, UnknownRun};

// `orjson` is a runtime dependency and the fastest way from JSON bytes to a dict.
static ORJSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static WEFT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Adds the thread's classes and functions to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(analyze_execution_thread, m)?)?;
    m.add_function(wrap_pyfunction!(find_continuation_session_id, m)?)?;
    m.add_class::<ExecutionThread>()?;
    m.add_class::<ThreadCodons>()?;
    m.add_class::<ThreadCodon>()?;
    m.add_class::<CheckpointInfo>()?;
    Ok(())
}

/// Which shas count as existing in git.
enum Known {
    /// Validation switched off: every recorded checkpoint is listed.
    Unchecked,
    /// Validation on, nothing given: nothing is confirmed.
    Nothing,
    /// Validation against this set.
    Set(Py<PyFrozenSet>),
}

impl Known {
    fn from_args(
        py: Python<'_>,
        checkpoints: Option<&Bound<'_, PyAny>>,
        validate: bool,
    ) -> PyResult<Known> {
        if !validate {
            return Ok(Known::Unchecked);
        }
        let Some(given) = checkpoints else {
            return Ok(Known::Nothing);
        };
        if given.is_instance_of::<PyString>()
            || given.is_instance_of::<PyBytes>()
            || given.is_instance_of::<PyByteArray>()
        {
            return Err(PyTypeError::new_err(
                "checkpoints must be a collection of commit shas (a set or a list of str), \
                 not a single string",
            ));
        }
        let set = py.get_type::<PyFrozenSet>().call1((given,))?;
        Ok(Known::Set(set.cast_into::<PyFrozenSet>()?.unbind()))
    }

    fn exists(&self, py: Python<'_>, sha: &str) -> PyResult<bool> {
        match self {
            Known::Unchecked => Ok(true),
            Known::Nothing => Ok(false),
            Known::Set(set) => set.bind(py).contains(sha),
        }
    }
}

/// Where the records come from.
enum Records {
    /// The state parsed from JSON, owned by the thread.
    Owned(State),
    /// The live state of a `Core`, with copies of the running runs'
    /// records, by run position.
    Live {
        core: Py<Core>,
        frozen: Vec<(usize, Vec<CodonExecution>)>,
    },
}

/// Records by thread entry, with the live state locked if there is one.
struct View<'a> {
    state: &'a State,
    frozen: &'a [(usize, Vec<CodonExecution>)],
}

impl<'a> View<'a> {
    fn record(&self, e: ThreadEntry) -> &'a CodonExecution {
        match self.frozen.iter().find(|(run, _)| *run == e.run) {
            Some((_, records)) => &records[e.codon],
            None => &self.state.runs[e.run].codons[e.codon],
        }
    }
}

/// What a `ThreadCodon` reports about its run.
struct RunInfo {
    run_id: String,
    status: &'static str,
    start_time: String,
    end_time: Option<String>,
    git_branch: String,
}

impl RunInfo {
    fn new(run: &Run) -> Self {
        RunInfo {
            run_id: run.run_id.clone(),
            status: run.status.as_str(),
            start_time: run.start_time.clone(),
            end_time: run.end_time.clone(),
            git_branch: run.git_branch.clone(),
        }
    }
}

/// The plan's codon ids end to end in one string: a plan expanded over many
/// loop iterations holds a hundred thousand ids, and one copy is cheaper
/// than a hundred thousand.
struct PlanIds {
    text: String,
    ends: Vec<usize>,
}

impl PlanIds {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| &self.text[a..b])
    }
}

/// Everything a thread and its codons read, shared by all of them.
struct Shared {
    records: Records,
    entries: Vec<ThreadEntry>,
    /// By run index (0 = the run the thread starts from).
    runs: Vec<RunInfo>,
    /// The plan's codon ids when the thread was built, for a live state
    /// (an owned state's plan cannot change).
    plan: Option<PlanIds>,
    known: Known,
    has_running_codon: bool,
    next_codon_id: Option<String>,
    failed: bool,
}

impl Shared {
    /// What the thread needs of `state` besides its records: its runs (a
    /// chain has at most a few thousand) and, if `copy_plan`, the plan's ids.
    fn context(
        state: &State,
        t: &thread::ExecutionThread,
        copy_plan: bool,
    ) -> (Vec<RunInfo>, Option<PlanIds>) {
        let runs = t
            .chain
            .iter()
            .map(|&p| RunInfo::new(&state.runs[p]))
            .collect();
        let plan = copy_plan.then(|| {
            let mut plan = PlanIds {
                text: String::new(),
                ends: Vec::with_capacity(state.execution_plan.len()),
            };
            for entry in &state.execution_plan {
                plan.text.push_str(&entry.codon_id);
                plan.ends.push(plan.text.len());
            }
            plan
        });
        (runs, plan)
    }

    fn new(
        context: (Vec<RunInfo>, Option<PlanIds>),
        t: thread::ExecutionThread,
        known: Known,
        records: Records,
    ) -> Self {
        let (runs, plan) = context;
        Shared {
            runs,
            plan,
            entries: t.entries,
            has_running_codon: t.has_running_codon,
            next_codon_id: t.next_codon_id,
            failed: t.failed,
            known,
            records,
        }
    }

    /// Runs `f` with the records readable.
    fn read<R>(&self, py: Python<'_>, f: impl FnOnce(&View<'_>) -> R) -> PyResult<R> {
        match &self.records {
            Records::Owned(state) => Ok(f(&View { state, frozen: &[] })),
            Records::Live { core, frozen } => {
                let guard = core.get().state(py)?;
                Ok(f(&View {
                    state: &guard,
                    frozen,
                }))
            }
        }
    }

    fn with_record<R>(
        &self,
        py: Python<'_>,
        index: usize,
        f: impl FnOnce(&CodonExecution) -> R,
    ) -> PyResult<R> {
        let e = self.entries[index];
        self.read(py, |v| f(v.record(e)))
    }

    /// The checkpoints of entry `index` that are known to exist.
    fn validated(&self, py: Python<'_>, index: usize) -> PyResult<Vec<(&'static str, String)>> {
        let recorded: Vec<(&'static str, String)> = self.with_record(py, index, |rec| {
            recorded_checkpoints(rec)
                .map(|c| (checkpoint_type_name(c.kind), c.sha.to_owned()))
                .collect()
        })?;
        let mut kept = Vec::with_capacity(recorded.len());
        for (kind, sha) in recorded {
            if self.known.exists(py, &sha)? {
                kept.push((kind, sha));
            }
        }
        Ok(kept)
    }
}

/// `state_json` as `str` or `bytes`.
#[derive(FromPyObject)]
pub enum Json {
    /// UTF-8 bytes.
    Bytes(PyBackedBytes),
    /// Text.
    Text(PyBackedStr),
}

impl Json {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Json::Bytes(b) => b,
            Json::Text(s) => s.as_bytes(),
        }
    }
}

fn unknown_run(py: Python<'_>, err: &UnknownRun, state: &State) -> PyErr {
    let newest: Vec<&str> = state
        .runs
        .iter()
        .rev()
        .take(5)
        .map(|r| r.run_id.as_str())
        .collect();
    let known = if newest.is_empty() {
        "it has no runs".to_owned()
    } else {
        let more = if state.runs.len() > newest.len() {
            ", ..."
        } else {
            ""
        };
        format!("its runs, newest first: {}{more}", newest.join(", "))
    };
    let message = format!(
        "{err}: the state has no run with that id ({known}); \
         pass one of its run ids, or None for the latest run"
    );
    match WEFT_ERROR
        .import(py, "weft.errors", "WeftError")
        .and_then(|cls| cls.call1((message,)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// The execution thread (seed 003) of a state document: every codon of the
/// continuation chain that ends in `target_run_id` (default: the latest
/// run), newest first.
///
/// `state_json` (str or bytes) is checked as `Core(state_json)` checks it; an
/// invalid document raises `StateValidationError`. `checkpoints` are the
/// commit shas the checkpoint repository holds: each codon's
/// `validated_checkpoints` lists only those. Without them nothing is
/// confirmed; `validate_checkpoints=False` lists every recorded checkpoint
/// unchecked. An unknown `target_run_id` raises `WeftError`. Parsing and
/// analysis run without the GIL.
#[pyfunction]
#[pyo3(signature = (state_json, checkpoints = None, target_run_id = None, validate_checkpoints = true))]
pub fn analyze_execution_thread(
    py: Python<'_>,
    state_json: Json,
    checkpoints: Option<Bound<'_, PyAny>>,
    target_run_id: Option<&str>,
    validate_checkpoints: bool,
) -> PyResult<ExecutionThread> {
    let known = Known::from_args(py, checkpoints.as_ref(), validate_checkpoints)?;
    let bytes = state_json.as_bytes();
    let loaded = py.detach(|| {
        validate::load(bytes, &Environment::default()).map(|(state, _)| {
            let analysed = thread::analyze(&state, target_run_id);
            (state, analysed)
        })
    });
    let Ok((state, analysed)) = loaded else {
        // The constructor of `Core` owns turning load findings into a
        // StateValidationError; loading again through it (only on this
        // error path) raises exactly what `Core(state_json)` would.
        return Err(
            match py.get_type::<Core>().call1((PyBytes::new(py, bytes),)) {
                Err(e) => e,
                Ok(_) => PyRuntimeError::new_err(
                    "the state document failed to load here but loads in Core(); \
                     this is a bug in weft._core",
                ),
            },
        );
    };
    let t = analysed.map_err(|e| unknown_run(py, &e, &state))?;
    let context = Shared::context(&state, &t, false);
    Ok(ExecutionThread::new(Shared::new(
        context,
        t,
        known,
        Records::Owned(state),
    )))
}

/// The thread of a `Core`'s live state (`Core.execution_thread`).
pub fn of_core(
    core: &Bound<'_, Core>,
    checkpoints: Option<&Bound<'_, PyAny>>,
    target_run_id: Option<&str>,
    validate_checkpoints: bool,
) -> PyResult<ExecutionThread> {
    let py = core.py();
    let known = Known::from_args(py, checkpoints, validate_checkpoints)?;
    let guard = core.get().state(py)?;
    let state: &State = &guard;
    let t = py
        .detach(|| thread::analyze(state, target_run_id))
        .map_err(|e| unknown_run(py, &e, state))?;
    let frozen = t
        .chain
        .iter()
        .filter(|&&p| state.runs[p].status == RunStatus::Running)
        .map(|&p| (p, state.runs[p].codons.clone()))
        .collect();
    let records = Records::Live {
        core: core.clone().unbind(),
        frozen,
    };
    let shared = Shared::new(Shared::context(state, &t, true), t, known, records);
    drop(guard);
    Ok(ExecutionThread::new(shared))
}

/// The seed's `findContinuationSessionId(thread, codonId)`: the session a
/// continue-previous `codon_id` resumes, i.e. the newest execution in the
/// thread of the codon planned right before it that completed, or was
/// skipped after at least one assistant message. `None` if there is none,
/// or `codon_id` is first in the plan or not in it.
#[pyfunction]
pub fn find_continuation_session_id(
    py: Python<'_>,
    thread: &ExecutionThread,
    codon_id: &str,
) -> PyResult<Option<String>> {
    thread.find_continuation_session_id(py, codon_id)
}

/// A checkpoint of a thread codon that exists in git.
#[pyclass(frozen, eq, hash, module = "weft._core")]
#[derive(PartialEq, Eq, Hash)]
pub struct CheckpointInfo {
    /// `rig-setup`, `completed`, `error` or `skipped`.
    #[pyo3(get, name = "type")]
    kind: &'static str,
    /// The commit sha.
    #[pyo3(get)]
    sha: String,
}

#[pymethods]
impl CheckpointInfo {
    fn __repr__(&self) -> String {
        format!("CheckpointInfo(type={:?}, sha={:?})", self.kind, self.sha)
    }
}

/// One codon of an execution thread, with its run and its place in the
/// history. A light view: two views of the same codon of the same thread
/// are equal.
#[pyclass(frozen, module = "weft._core")]
pub struct ThreadCodon {
    shared: Arc<Shared>,
    index: usize,
    codon: PyOnceLock<Py<PyAny>>,
}

impl ThreadCodon {
    fn new(shared: &Arc<Shared>, index: usize) -> Self {
        ThreadCodon {
            shared: Arc::clone(shared),
            index,
            codon: PyOnceLock::new(),
        }
    }

    fn run(&self) -> &RunInfo {
        &self.shared.runs[self.shared.entries[self.index].run_index]
    }
}

#[pymethods]
impl ThreadCodon {
    /// The codon record, as in state.json (a dict, built on first read).
    #[getter]
    fn codon(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.codon
            .get_or_try_init(py, || {
                let bytes = self
                    .shared
                    .with_record(py, self.index, serde_json::to_vec::<CodonExecution>)?
                    .map_err(|e| {
                        PyRuntimeError::new_err(format!("cannot serialise a codon record: {e}"))
                    })?;
                let loads = ORJSON_LOADS.import(py, "orjson", "loads")?;
                Ok::<_, PyErr>(loads.call1((PyBytes::new(py, &bytes),))?.unbind())
            })
            .map(|d| d.clone_ref(py))
    }

    /// `codon["codonId"]`, without building the dict.
    #[getter]
    fn codon_id(&self, py: Python<'_>) -> PyResult<String> {
        self.shared
            .with_record(py, self.index, |r| r.codon_id.clone())
    }

    /// `codon["status"]`, without building the dict.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.shared
            .with_record(py, self.index, |r| r.status.as_str())
    }

    #[getter]
    fn run_id(&self) -> &str {
        &self.run().run_id
    }

    #[getter]
    fn run_status(&self) -> &'static str {
        self.run().status
    }

    #[getter]
    fn run_start_time(&self) -> &str {
        &self.run().start_time
    }

    #[getter]
    fn run_end_time(&self) -> Option<&str> {
        self.run().end_time.as_deref()
    }

    #[getter]
    fn git_branch(&self) -> &str {
        &self.run().git_branch
    }

    /// 0 is the newest codon of the thread.
    #[getter]
    fn global_index(&self) -> usize {
        self.index
    }

    /// 0 is the run the thread starts from, 1 its source, ...
    #[getter]
    fn run_index(&self) -> usize {
        self.shared.entries[self.index].run_index
    }

    /// Position of the record within its run.
    #[getter]
    fn codon_index_in_run(&self) -> usize {
        self.shared.entries[self.index].codon
    }

    /// The record's checkpoints confirmed to exist (rig-setup first).
    #[getter]
    fn validated_checkpoints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = self
            .shared
            .validated(py, self.index)?
            .into_iter()
            .map(|(kind, sha)| Py::new(py, CheckpointInfo { kind, sha }))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }

    /// The session this codon continued from (`previousSessionId`).
    #[getter]
    fn continuation_session_id(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.shared
            .with_record(py, self.index, |r| r.previous_session_id.clone())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<ThreadCodon>().is_ok_and(|o| {
            let o = o.get();
            Arc::ptr_eq(&self.shared, &o.shared) && self.index == o.index
        })
    }

    fn __hash__(&self) -> u64 {
        (Arc::as_ptr(&self.shared) as u64).rotate_left(17) ^ self.index as u64
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (id, status) = self
            .shared
            .with_record(py, self.index, |r| (r.codon_id.clone(), r.status))?;
        Ok(format!(
            "ThreadCodon({id} {status}, run={}, global_index={}, run_index={})",
            self.run().run_id,
            self.index,
            self.run_index()
        ))
    }
}

/// The codons of a thread, newest first: a read-only sequence whose items
/// are made when read.
#[pyclass(frozen, sequence, module = "weft._core")]
pub struct ThreadCodons {
    shared: Arc<Shared>,
}

#[pymethods]
impl ThreadCodons {
    fn __len__(&self) -> usize {
        self.shared.entries.len()
    }

    /// One codon (`codons[0]` is the newest), or a list for a slice.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let len = self.shared.entries.len();
        if let Ok(slice) = key.cast::<PySlice>() {
            let ix = slice.indices(len as isize)?;
            let items = (0..ix.slicelength)
                .map(|k| {
                    Py::new(
                        py,
                        ThreadCodon::new(&self.shared, (ix.start + k as isize * ix.step) as usize),
                    )
                })
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(PyList::new(py, items)?.into_any().unbind());
        }
        let i: isize = key.extract()?;
        let at = if i < 0 { i + len as isize } else { i };
        if at < 0 || at >= len as isize {
            return Err(PyIndexError::new_err(format!(
                "thread codon index {i} out of range (the thread has {len})"
            )));
        }
        Ok(Py::new(py, ThreadCodon::new(&self.shared, at as usize))?.into_any())
    }

    fn __iter__(&self) -> ThreadCodonIter {
        ThreadCodonIter {
            shared: Arc::clone(&self.shared),
            next: AtomicUsize::new(0),
        }
    }

    fn __repr__(&self) -> String {
        format!("ThreadCodons(len={})", self.shared.entries.len())
    }
}

/// Iterator over a thread's codons, newest first.
#[pyclass(frozen, module = "weft._core")]
pub struct ThreadCodonIter {
    shared: Arc<Shared>,
    next: AtomicUsize,
}

#[pymethods]
impl ThreadCodonIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> Option<ThreadCodon> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.shared.entries.len()).then(|| ThreadCodon::new(&self.shared, i))
    }
}

/// The execution thread: every codon of a continuation chain, newest first.
#[pyclass(frozen, module = "weft._core")]
pub struct ExecutionThread {
    shared: Arc<Shared>,
}

impl ExecutionThread {
    fn new(shared: Shared) -> Self {
        ExecutionThread {
            shared: Arc::new(shared),
        }
    }
}

#[pymethods]
impl ExecutionThread {
    /// Every codon of the thread, newest first (a lazy sequence).
    #[getter]
    fn codons(&self) -> ThreadCodons {
        ThreadCodons {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Number of runs in the continuation chain.
    #[getter]
    fn total_runs(&self) -> usize {
        self.shared.runs.len()
    }

    /// Whether some codon of the thread is not terminal.
    #[getter]
    fn has_running_codon(&self) -> bool {
        self.shared.has_running_codon
    }

    /// The codon to run next; `None` when the plan is done, the thread
    /// failed, or a codon is running.
    #[getter]
    fn next_codon_id(&self) -> Option<&str> {
        self.shared.next_codon_id.as_deref()
    }

    /// The newest codon failed, or the run the thread starts from crashed.
    #[getter]
    fn failed(&self) -> bool {
        self.shared.failed
    }

    fn __len__(&self) -> usize {
        self.shared.entries.len()
    }

    /// The session a continue-previous `codon_id` resumes: the newest
    /// completed (or skipped after an assistant message) execution of the
    /// codon planned right before it.
    fn find_continuation_session_id(
        &self,
        py: Python<'_>,
        codon_id: &str,
    ) -> PyResult<Option<String>> {
        let shared = &self.shared;
        shared.read(py, |v| {
            let previous = match &shared.plan {
                Some(plan) => thread::previous_in_plan(plan.iter(), codon_id),
                None => thread::previous_in_plan(
                    v.state.execution_plan.iter().map(|p| p.codon_id.as_str()),
                    codon_id,
                ),
            }?;
            let records = shared.entries.iter().map(|&e| v.record(e));
            thread::continuation_session(records, previous).map(str::to_owned)
        })
    }

    /// The whole thread as JSON bytes, in the seed's camelCase shape.
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let shared = &self.shared;
        // Validation may consult a Python set, so it runs first, with the
        // interpreter; serialising then runs without it.
        let mut keep: Vec<u8> = Vec::with_capacity(shared.entries.len());
        let recorded: Vec<Vec<String>> = shared.read(py, |v| {
            shared
                .entries
                .iter()
                .map(|&e| {
                    recorded_checkpoints(v.record(e))
                        .map(|c| c.sha.to_owned())
                        .collect()
                })
                .collect()
        })?;
        for shas in &recorded {
            let mut mask = 0u8;
            for (bit, sha) in shas.iter().enumerate() {
                if shared.known.exists(py, sha)? {
                    mask |= 1 << bit;
                }
            }
            keep.push(mask);
        }
        let bytes = shared.read(py, |v| {
            py.detach(|| {
                serde_json::to_vec(&Document {
                    shared,
                    view: v,
                    keep: &keep,
                })
            })
        })?;
        let bytes = bytes
            .map_err(|e| PyRuntimeError::new_err(format!("cannot serialise the thread: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn __repr__(&self) -> String {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        let next = self
            .shared
            .next_codon_id
            .as_deref()
            .map_or_else(|| "None".to_owned(), |id| format!("{id:?}"));
        format!(
            "ExecutionThread(codons={}, total_runs={}, next_codon_id={next}, failed={}, \
             has_running_codon={})",
            self.shared.entries.len(),
            self.shared.runs.len(),
            py_bool(self.shared.failed),
            py_bool(self.shared.has_running_codon)
        )
    }
}

/// The seed's JSON shape of a thread.
struct Document<'a> {
    shared: &'a Shared,
    view: &'a View<'a>,
    /// Per entry, which of its recorded checkpoints exist (bit i = the i-th).
    keep: &'a [u8],
}

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("codons", &Codons(self))?;
        m.serialize_entry("totalRuns", &self.shared.runs.len())?;
        m.serialize_entry("hasRunningCodon", &self.shared.has_running_codon)?;
        m.serialize_entry("nextCodonId", &self.shared.next_codon_id)?;
        m.serialize_entry("failed", &self.shared.failed)?;
        m.end()
    }
}

struct Codons<'a>(&'a Document<'a>);

impl Serialize for Codons<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let doc = self.0;
        let mut seq = s.serialize_seq(Some(doc.shared.entries.len()))?;
        for (i, &e) in doc.shared.entries.iter().enumerate() {
            let rec = doc.view.record(e);
            let run = &doc.shared.runs[e.run_index];
            let checkpoints: Vec<Checkpoint<'_>> = recorded_checkpoints(rec)
                .enumerate()
                .filter(|(bit, _)| doc.keep[i] & (1 << bit) != 0)
                .map(|(_, c)| Checkpoint {
                    kind: checkpoint_type_name(c.kind),
                    sha: c.sha,
                })
                .collect();
            seq.serialize_element(&CodonDoc {
                codon: rec,
                run_id: &run.run_id,
                run_status: run.status,
                run_start_time: &run.start_time,
                run_end_time: run.end_time.as_deref(),
                git_branch: &run.git_branch,
                global_index: i,
                run_index: e.run_index,
                codon_index_in_run: e.codon,
                validated_checkpoints: checkpoints,
                continuation_session_id: rec.previous_session_id.as_deref(),
            })?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CodonDoc<'a> {
    codon: &'a CodonExecution,
    run_id: &'a str,
    run_status: &'static str,
    run_start_time: &'a str,
    run_end_time: Option<&'a str>,
    git_branch: &'a str,
    global_index: usize,
    run_index: usize,
    codon_index_in_run: usize,
    validated_checkpoints: Vec<Checkpoint<'a>>,
    continuation_session_id: Option<&'a str>,
}

#[derive(Serialize)]
struct Checkpoint<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sha: &'a str,
}
