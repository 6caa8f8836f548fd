//! The agent-session machine (seed 002) for Python: `SessionMachine`,
//! `SessionEffect` and `backoff_ms`.
//!
//! Python sees one method per seed event (`worktree_ready()`,
//! `session_exited("Error", "boom")`, ...) rather than a generic `handle`
//! taking an event object: each call is typed by the stub, payloads are
//! plain arguments, and nothing is allocated for the event itself. States,
//! events and effect kinds are the seed's names as strings. A pair outside
//! the seed's table raises `weft.errors.SessionTransitionError` and leaves
//! the machine untouched.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::machine::session::{
    self, ExitOutcome, SessionConfig, SessionEvent, SessionState, SessionTransitionError,
    BACKOFF_BASE_MS, BACKOFF_CAP_MS, DEFAULT_MAX_CONSECUTIVE_ERRORS, DEFAULT_MAX_TOTAL_ERRORS,
};

// The constructor's defaults are written as literals so Python's signature
// shows them; these keep them equal to the machine's defaults.
const _: () = assert!(DEFAULT_MAX_CONSECUTIVE_ERRORS == 5);
const _: () = assert!(DEFAULT_MAX_TOTAL_ERRORS == 20);

static TRANSITION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The state names, in lifecycle order (`SESSION_STATES`).
const STATE_NAMES: [&str; 9] = [
    "Initializing",
    "BuildingPrompt",
    "Spawning",
    "Running",
    "Interrupting",
    "SessionComplete",
    "CoolingDown",
    "Parked",
    "Stopped",
];

/// Adds the session machine's classes, function and constants to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SESSION_STATES", PyTuple::new(py, STATE_NAMES)?)?;
    m.add("BACKOFF_BASE_MS", BACKOFF_BASE_MS)?;
    m.add("BACKOFF_CAP_MS", BACKOFF_CAP_MS)?;
    m.add(
        "DEFAULT_MAX_CONSECUTIVE_ERRORS",
        DEFAULT_MAX_CONSECUTIVE_ERRORS,
    )?;
    m.add("DEFAULT_MAX_TOTAL_ERRORS", DEFAULT_MAX_TOTAL_ERRORS)?;
    m.add_function(wrap_pyfunction!(backoff_ms, m)?)?;
    m.add_class::<SessionMachine>()?;
    m.add_class::<SessionEffect>()?;
    Ok(())
}

/// Cool-down after the `n`-th consecutive error, in milliseconds:
/// `min(2000 * 2^(n-1), 60000)`; `n = 0` counts as 1.
#[pyfunction]
fn backoff_ms(n: u64) -> u64 {
    // Beyond u32 the cap has long been reached; saturate rather than refuse.
    session::backoff_ms(u32::try_from(n).unwrap_or(u32::MAX))
}

/// A side effect the caller must perform after a transition.
///
/// `kind` is the seed's name; the payload field that goes with it is set and
/// the others are `None`: `StorePrompt` -> `prompt`, `LogFatal` -> `message`,
/// `IncrementSession` -> `session_seq`; `CancelSession` and
/// `ForceStopSession` carry nothing.
#[pyclass(frozen, eq, hash, get_all, module = "weft._core")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionEffect {
    kind: &'static str,
    prompt: Option<String>,
    message: Option<String>,
    session_seq: Option<u64>,
}

impl From<session::SessionEffect> for SessionEffect {
    fn from(effect: session::SessionEffect) -> Self {
        use session::SessionEffect as F;
        let mut out = SessionEffect {
            kind: "",
            prompt: None,
            message: None,
            session_seq: None,
        };
        out.kind = match effect {
            F::StorePrompt(prompt) => {
                out.prompt = Some(prompt);
                "StorePrompt"
            }
            F::CancelSession => "CancelSession",
            F::ForceStopSession => "ForceStopSession",
            F::IncrementSession { session_seq } => {
                out.session_seq = Some(session_seq);
                "IncrementSession"
            }
            F::LogFatal(message) => {
                out.message = Some(message);
                "LogFatal"
            }
        };
        out
    }
}

#[pymethods]
impl SessionEffect {
    fn __repr__(&self) -> String {
        let payload = match (&self.prompt, &self.message, self.session_seq) {
            (Some(p), _, _) => format!(", prompt={p:?}"),
            (_, Some(m), _) => format!(", message={m:?}"),
            (_, _, Some(seq)) => format!(", session_seq={seq}"),
            _ => String::new(),
        };
        format!("SessionEffect(kind='{}'{payload})", self.kind)
    }
}

/// The agent-session supervisor machine of seed 002.
///
/// It only decides: each event method applies one event and returns the
/// effects the caller must perform, in order. It does no I/O and reads no
/// clock; the cool-down length is `cooldown_ms` while in `CoolingDown`.
#[pyclass(module = "weft._core")]
pub struct SessionMachine {
    inner: session::SessionMachine,
}

type Effects = PyResult<Vec<SessionEffect>>;

impl SessionMachine {
    fn handle(&mut self, py: Python<'_>, event: SessionEvent) -> Effects {
        match self.inner.handle(event) {
            Ok(effects) => Ok(effects.into_iter().map(SessionEffect::from).collect()),
            Err(err) => Err(transition_error(py, &err)),
        }
    }
}

#[pymethods]
impl SessionMachine {
    #[new]
    #[pyo3(signature = (
        *,
        max_consecutive_errors = 5,
        max_total_errors = 20,
    ))]
    fn new(max_consecutive_errors: u32, max_total_errors: u32) -> Self {
        Self {
            inner: session::SessionMachine::new(SessionConfig {
                max_consecutive_errors,
                max_total_errors,
            }),
        }
    }

    /// The current state's seed name (`"Running"`, `"CoolingDown"`, ...).
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    /// Whether the machine is in its terminal state `Stopped`.
    #[getter]
    fn is_stopped(&self) -> bool {
        self.inner.state().is_terminal()
    }

    /// The cool-down to wait before `backoff_elapsed()`, in milliseconds,
    /// while in `CoolingDown`; otherwise `None`.
    #[getter]
    fn cooldown_ms(&self) -> Option<u64> {
        match self.inner.state() {
            SessionState::CoolingDown { duration_ms } => Some(duration_ms),
            _ => None,
        }
    }

    /// The wait for the usage window, in milliseconds, while in `Parked`;
    /// otherwise `None`.
    #[getter]
    fn parked_ms(&self) -> Option<u64> {
        match self.inner.state() {
            SessionState::Parked { wait_ms } => Some(wait_ms),
            _ => None,
        }
    }

    /// Errors since the last `SessionStarted` or successful exit.
    #[getter]
    fn consecutive_errors(&self) -> u32 {
        self.inner.consecutive_errors()
    }

    /// Errors over the machine's lifetime (never reset).
    #[getter]
    fn total_errors(&self) -> u32 {
        self.inner.total_errors()
    }

    /// The last `SessionStarted(seq)`, bumped by each `IncrementSession`.
    #[getter]
    fn session_seq(&self) -> u64 {
        self.inner.session_seq()
    }

    /// The consecutive-error threshold (default 5).
    #[getter]
    fn max_consecutive_errors(&self) -> u32 {
        self.inner.config().max_consecutive_errors
    }

    /// The total-error threshold (default 20).
    #[getter]
    fn max_total_errors(&self) -> u32 {
        self.inner.config().max_total_errors
    }

    /// `WorktreeReady`: the worktree is ready for a (new) session.
    fn worktree_ready(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::WorktreeReady)
    }

    /// `PromptReady(prompt)`: the next session's prompt is built.
    fn prompt_ready(&mut self, py: Python<'_>, prompt: String) -> Effects {
        self.handle(py, SessionEvent::PromptReady(prompt))
    }

    /// `SessionStarted(seq)`: the backend reported that session `seq` started.
    fn session_started(&mut self, py: Python<'_>, seq: u64) -> Effects {
        self.handle(py, SessionEvent::SessionStarted(seq))
    }

    /// `SessionExited(outcome)`: `outcome` is `"Success"`, `"Error"` (with an
    /// optional `message`) or `"Timeout"`.
    #[pyo3(signature = (outcome, message = None))]
    fn session_exited(
        &mut self,
        py: Python<'_>,
        outcome: &str,
        message: Option<String>,
    ) -> Effects {
        let outcome = match (outcome, message) {
            ("Error", message) => ExitOutcome::Error(message.unwrap_or_default()),
            ("Success", None) => ExitOutcome::Success,
            ("Timeout", None) => ExitOutcome::Timeout,
            ("Success" | "Timeout", Some(_)) => {
                return Err(PyValueError::new_err(format!(
                    "a {outcome} exit carries no message; only \"Error\" does"
                )))
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown session exit outcome {outcome:?}; expected \"Success\", \
                     \"Error\" or \"Timeout\""
                )))
            }
        };
        self.handle(py, SessionEvent::SessionExited(outcome))
    }

    /// `UrgentMessage`: cancel the running session to deliver a message.
    fn urgent_message(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::UrgentMessage)
    }

    /// `GraceExceeded`: the interrupted session outlived its grace period.
    fn grace_exceeded(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::GraceExceeded)
    }

    /// `BackoffElapsed`: the cool-down is over.
    fn backoff_elapsed(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::BackoffElapsed)
    }

    /// `WindowClosed(wait_ms)`: the session ended on a closed usage window
    /// (Weft's addition to the seed); parks without counting an error.
    fn window_closed(&mut self, py: Python<'_>, wait_ms: u64) -> Effects {
        self.handle(py, SessionEvent::WindowClosed(wait_ms))
    }

    /// `WindowOpened`: the usage window is open; the next prompt is built.
    fn window_opened(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::WindowOpened)
    }

    /// `OperatorStop`: valid in every state.
    fn operator_stop(&mut self, py: Python<'_>) -> Effects {
        self.handle(py, SessionEvent::OperatorStop)
    }

    /// `FatalError(message)`: valid in every state.
    fn fatal_error(&mut self, py: Python<'_>, message: String) -> Effects {
        self.handle(py, SessionEvent::FatalError(message))
    }

    fn __repr__(&self) -> String {
        let state = match self.inner.state() {
            SessionState::Running { session_seq } | SessionState::Interrupting { session_seq } => {
                format!("{}(session_seq={session_seq})", self.inner.state())
            }
            SessionState::CoolingDown { duration_ms } => {
                format!("CoolingDown(duration_ms={duration_ms})")
            }
            SessionState::Parked { wait_ms } => format!("Parked(wait_ms={wait_ms})"),
            other => other.as_str().to_owned(),
        };
        format!(
            "SessionMachine(state={state}, consecutive_errors={}/{}, total_errors={}/{}, \
             session_seq={})",
            self.inner.consecutive_errors(),
            self.inner.config().max_consecutive_errors,
            self.inner.total_errors(),
            self.inner.config().max_total_errors,
            self.inner.session_seq()
        )
    }
}

/// `weft.errors.SessionTransitionError(message, state=..., event=...)`.
fn transition_error(py: Python<'_>, err: &SessionTransitionError) -> PyErr {
    let kwargs = PyDict::new(py);
    let built = kwargs
        .set_item("state", err.from.as_str())
        .and_then(|()| kwargs.set_item("event", err.event.as_str()))
        .and_then(|()| {
            TRANSITION_ERROR
                .import(py, "weft.errors", "SessionTransitionError")?
                .call((err.to_string(),), Some(&kwargs))
        });
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}
