//! The seed-004 machines for Python: `Workstream`, `Step` and
//! `CircuitBreaker`, with `retry_delay_ms` and `circuit_open_message`.
//!
//! States cross as the seed's codes (`"S_RUNNING"`, `"HALF_OPEN"`), time as
//! integer milliseconds the caller reads from any clock it likes (the machines
//! read none). A refused workstream or step transition raises
//! `weft.errors.InvalidTransitionError` with the seed's text
//! (`Cannot transition from S_SUCCESS to S_RUNNING`, followed by the failed
//! condition when the pair is in the table but its guard did not hold); its
//! `code` is `"invalid_transition"` for a pair outside the table and
//! `"guard_failed"` for a failed condition. The machine is unchanged.
//!
//! A refused circuit-breaker request is an expected outcome, so it is a value:
//! `allow_request` returns `None` when the request may go and otherwise the
//! milliseconds to wait.
//!
//! `restore` rebuilds a machine from what a store kept (state, counters, ready
//! times). The pure machines deliberately have no setters, so a restore
//! replays the machine's own transitions with inputs chosen to land exactly on
//! the stored values: a restored machine is always one the machine itself
//! could have reached, and impossible combinations are refused.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::machine::workstream::{
    self as ws, CircuitBreakerConfig, CircuitOpen, CircuitState, InvalidTransitionError,
    RetryBackoff, StepContext, StepState, WorkstreamState, DEFAULT_BASE_DELAY_MS,
    DEFAULT_COOLDOWN_MS, DEFAULT_FAILURE_THRESHOLD, DEFAULT_MAX_DELAY_MS,
    DEFAULT_SUCCESS_THRESHOLD,
};

// The constructors' defaults are written as literals so Python's signatures
// show them; these keep them equal to the machine's defaults.
const _: () = assert!(DEFAULT_BASE_DELAY_MS == 1_000);
const _: () = assert!(DEFAULT_MAX_DELAY_MS == 60_000);
const _: () = assert!(DEFAULT_FAILURE_THRESHOLD == 5);
const _: () = assert!(DEFAULT_COOLDOWN_MS == 60_000);
const _: () = assert!(DEFAULT_SUCCESS_THRESHOLD == 1);

static INVALID_TRANSITION: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The circuit states, in the seed's order.
const CIRCUIT_STATE_NAMES: [&str; 3] = ["CLOSED", "OPEN", "HALF_OPEN"];

/// Adds the seed-004 classes, functions and constants to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let ws_states: Vec<&str> = WorkstreamState::ALL.iter().map(|s| s.as_str()).collect();
    let step_states: Vec<&str> = StepState::ALL.iter().map(|s| s.as_str()).collect();
    m.add("WORKSTREAM_STATES", PyTuple::new(py, ws_states)?)?;
    m.add("STEP_STATES", PyTuple::new(py, step_states)?)?;
    m.add("CIRCUIT_STATES", PyTuple::new(py, CIRCUIT_STATE_NAMES)?)?;
    m.add_function(wrap_pyfunction!(retry_delay_ms, m)?)?;
    m.add_function(wrap_pyfunction!(circuit_open_message, m)?)?;
    m.add_class::<Workstream>()?;
    m.add_class::<Step>()?;
    m.add_class::<CircuitBreaker>()?;
    Ok(())
}

/// `min(base_delay_ms * 2^retry_count, max_delay_ms)`: the wait before the
/// retry that follows `retry_count` earlier ones. Saturates, never overflows.
#[pyfunction]
#[pyo3(signature = (retry_count, *, base_delay_ms = 1000, max_delay_ms = 60000))]
fn retry_delay_ms(retry_count: u64, base_delay_ms: u64, max_delay_ms: u64) -> u64 {
    RetryBackoff {
        base_delay_ms,
        max_delay_ms,
    }
    // Beyond u32 the cap has long been reached; saturate rather than refuse.
    .delay_ms(u32::try_from(retry_count).unwrap_or(u32::MAX))
}

/// The seed's text for a refused request: `circuit is open, retry in 58
/// seconds` (rounded up, so it never says 0).
#[pyfunction]
fn circuit_open_message(retry_in_ms: u64) -> String {
    CircuitOpen {
        retry_in_ms: retry_in_ms.max(1),
    }
    .to_string()
}

fn parse_ws_state(code: &str) -> PyResult<WorkstreamState> {
    WorkstreamState::from_code(code).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown workstream state {code:?}; expected one of S_PENDING, S_RUNNING, \
             S_SUCCESS, S_FAILED, S_RETRYING, S_ABANDONED"
        ))
    })
}

fn parse_step_state(code: &str) -> PyResult<StepState> {
    StepState::from_code(code).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown step state {code:?}; expected one of S_PENDING, S_RUNNING, S_SUCCESS, \
             S_FAILED, S_RETRYING"
        ))
    })
}

fn parse_step_states(codes: Vec<String>) -> PyResult<Vec<StepState>> {
    codes.iter().map(|c| parse_step_state(c)).collect()
}

/// `weft.errors.InvalidTransitionError(message, from_status=, to_status=,
/// code=)`.
fn transition_error<S: std::fmt::Display + Copy>(
    py: Python<'_>,
    err: &InvalidTransitionError<S>,
) -> PyErr {
    let code = if err.guard.is_some() {
        "guard_failed"
    } else {
        "invalid_transition"
    };
    let kwargs = PyDict::new(py);
    let built = kwargs
        .set_item("from_status", err.from.to_string())
        .and_then(|()| kwargs.set_item("to_status", err.to.to_string()))
        .and_then(|()| kwargs.set_item("code", code))
        .and_then(|()| {
            INVALID_TRANSITION
                .import(py, "weft.errors", "InvalidTransitionError")?
                .call((err.to_string(),), Some(&kwargs))
        });
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// A restore that replays the machine landed somewhere it should not: the
/// stored values are not a state the machine can reach.
fn unreachable_restore(what: &str, detail: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("cannot restore {what}: {detail}"))
}

/// The backoff that makes `S_FAILED -> S_RETRYING` at `now_ms = ready_at`
/// record exactly `ready_at`.
const NO_BACKOFF: RetryBackoff = RetryBackoff {
    base_delay_ms: 0,
    max_delay_ms: 0,
};

// ---------------------------------------------------------------------------
// Workstream
// ---------------------------------------------------------------------------

/// A workstream of seed 004: `S_PENDING`, `S_RUNNING`, `S_SUCCESS`,
/// `S_FAILED`, `S_RETRYING`, `S_ABANDONED`, with retry bookkeeping and an
/// exponential retry backoff.
#[pyclass(module = "weft._core")]
#[derive(Clone)]
pub struct Workstream {
    inner: ws::Workstream,
}

#[pymethods]
impl Workstream {
    #[new]
    #[pyo3(signature = (max_retries = 0, *, base_delay_ms = 1000, max_delay_ms = 60000))]
    fn new(max_retries: u32, base_delay_ms: u64, max_delay_ms: u64) -> Self {
        Self {
            inner: ws::Workstream::new(max_retries).with_backoff(RetryBackoff {
                base_delay_ms,
                max_delay_ms,
            }),
        }
    }

    /// A workstream in `state` with the stored counters, rebuilt through the
    /// machine's own transitions. `retry_ready_at_ms` is required for
    /// `S_RETRYING` and refused otherwise.
    #[staticmethod]
    #[pyo3(signature = (
        state, *, max_retries = 0, retry_count = 0, retry_ready_at_ms = None,
        base_delay_ms = 1000, max_delay_ms = 60000,
    ))]
    fn restore(
        state: &str,
        max_retries: u32,
        retry_count: u32,
        retry_ready_at_ms: Option<u64>,
        base_delay_ms: u64,
        max_delay_ms: u64,
    ) -> PyResult<Self> {
        use WorkstreamState as W;
        let target = parse_ws_state(state)?;
        let what = format!("workstream in {state} with retry_count {retry_count}");
        check_restore(
            &what,
            target == W::Retrying,
            target == W::Pending,
            retry_count,
            max_retries,
            retry_ready_at_ms,
        )?;
        let mut m = ws::Workstream::new(max_retries).with_backoff(NO_BACKOFF);
        let failed = [StepState::Failed];
        let go = |m: &mut ws::Workstream, to: W, steps: &[StepState], now: u64| {
            m.transition(to, steps, now)
                .map_err(|e| unreachable_restore(&what, e))
        };
        if target != W::Pending {
            go(&mut m, W::Running, &[], 0)?;
        }
        for _ in 0..retry_count {
            go(&mut m, W::Failed, &failed, 0)?;
            go(&mut m, W::Retrying, &[], 0)?;
            go(&mut m, W::Running, &[], 0)?;
        }
        match target {
            W::Pending | W::Running => {}
            W::Success => go(&mut m, W::Success, &[], 0)?,
            W::Failed => go(&mut m, W::Failed, &failed, 0)?,
            W::Abandoned => go(&mut m, W::Abandoned, &[], 0)?,
            W::Retrying => {
                go(&mut m, W::Failed, &failed, 0)?;
                go(&mut m, W::Retrying, &[], retry_ready_at_ms.unwrap_or(0))?;
            }
        }
        Ok(Self {
            inner: m.with_backoff(RetryBackoff {
                base_delay_ms,
                max_delay_ms,
            }),
        })
    }

    /// The state's seed code.
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    /// Whether the state is terminal (`S_SUCCESS`, `S_ABANDONED`).
    #[getter]
    fn is_terminal(&self) -> bool {
        self.inner.state().is_terminal()
    }

    /// Retry attempts made (`S_RETRYING -> S_RUNNING` moves).
    #[getter]
    fn retry_count(&self) -> u32 {
        self.inner.retry_count()
    }

    /// Retry attempts allowed.
    #[getter]
    fn max_retries(&self) -> u32 {
        self.inner.max_retries()
    }

    /// Delay before the first retry, in milliseconds.
    #[getter]
    fn base_delay_ms(&self) -> u64 {
        self.inner.backoff().base_delay_ms
    }

    /// Upper bound of any retry delay, in milliseconds.
    #[getter]
    fn max_delay_ms(&self) -> u64 {
        self.inner.backoff().max_delay_ms
    }

    /// While `S_RETRYING`, the earliest `now_ms` at which `S_RUNNING` is
    /// allowed; otherwise `None`.
    #[getter]
    fn retry_ready_at_ms(&self) -> Option<u64> {
        self.inner.retry_ready_at_ms()
    }

    /// Whether `S_FAILED -> S_RETRYING` is allowed now.
    #[getter]
    fn retry_eligible(&self) -> bool {
        self.inner.retry_eligible()
    }

    /// Targets the seed's table allows from the current state, guards aside.
    fn valid_targets(&self) -> Vec<&'static str> {
        self.inner
            .state()
            .valid_targets()
            .iter()
            .map(|s| s.as_str())
            .collect()
    }

    /// Move to `to` or raise `InvalidTransitionError` and stay put.
    /// `step_states` are this workstream's step states (read by `S_RUNNING ->
    /// S_SUCCESS | S_FAILED`); `now_ms` is read entering and leaving
    /// `S_RETRYING`.
    #[pyo3(signature = (to, step_states = Vec::new(), *, now_ms = 0))]
    fn transition(
        &mut self,
        py: Python<'_>,
        to: &str,
        step_states: Vec<String>,
        now_ms: u64,
    ) -> PyResult<()> {
        let to = parse_ws_state(to)?;
        let steps = parse_step_states(step_states)?;
        self.inner
            .transition(to, &steps, now_ms)
            .map_err(|e| transition_error(py, &e))
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Workstream(state={}, retry_count={}/{})",
            self.inner.state(),
            self.inner.retry_count(),
            self.inner.max_retries()
        )
    }
}

/// Refuses stored values no sequence of transitions can produce.
fn check_restore(
    what: &str,
    retrying: bool,
    pending: bool,
    retry_count: u32,
    max_retries: u32,
    retry_ready_at_ms: Option<u64>,
) -> PyResult<()> {
    if retrying != retry_ready_at_ms.is_some() {
        return Err(unreachable_restore(
            what,
            "retry_ready_at_ms is set exactly when the state is S_RETRYING",
        ));
    }
    let needed = retry_count.saturating_add(u32::from(retrying));
    if needed > max_retries {
        return Err(unreachable_restore(
            what,
            format!("more retries than max_retries {max_retries}"),
        ));
    }
    if pending && retry_count > 0 {
        return Err(unreachable_restore(what, "S_PENDING has made no retry"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Step
// ---------------------------------------------------------------------------

/// A step of seed 004: `S_PENDING`, `S_RUNNING`, `S_SUCCESS`, `S_FAILED`,
/// `S_RETRYING`, with its accepted exit codes and retry backoff.
#[pyclass(module = "weft._core")]
#[derive(Clone)]
pub struct Step {
    inner: ws::Step,
}

fn new_step(max_retries: u32, expected_exit_codes: Vec<i32>, backoff: RetryBackoff) -> ws::Step {
    ws::Step::new(max_retries)
        .with_expected_exit_codes(expected_exit_codes)
        .with_backoff(backoff)
}

#[pymethods]
impl Step {
    #[new]
    #[pyo3(signature = (
        max_retries = 0, *, expected_exit_codes = vec![0], base_delay_ms = 1000,
        max_delay_ms = 60000,
    ))]
    fn new(
        max_retries: u32,
        expected_exit_codes: Vec<i32>,
        base_delay_ms: u64,
        max_delay_ms: u64,
    ) -> Self {
        Self {
            inner: new_step(
                max_retries,
                expected_exit_codes,
                RetryBackoff {
                    base_delay_ms,
                    max_delay_ms,
                },
            ),
        }
    }

    /// A step in `state` with the stored counters, rebuilt through the
    /// machine's own transitions. `retry_ready_at_ms` is required for
    /// `S_RETRYING` and refused otherwise.
    #[staticmethod]
    #[pyo3(signature = (
        state, *, max_retries = 0, retry_count = 0, retry_ready_at_ms = None,
        expected_exit_codes = vec![0], base_delay_ms = 1000, max_delay_ms = 60000,
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one keyword argument per stored field, as Python callers pass them"
    )]
    fn restore(
        state: &str,
        max_retries: u32,
        retry_count: u32,
        retry_ready_at_ms: Option<u64>,
        expected_exit_codes: Vec<i32>,
        base_delay_ms: u64,
        max_delay_ms: u64,
    ) -> PyResult<Self> {
        use StepState as P;
        let target = parse_step_state(state)?;
        let what = format!("step in {state} with retry_count {retry_count}");
        check_restore(
            &what,
            target == P::Retrying,
            target == P::Pending,
            retry_count,
            max_retries,
            retry_ready_at_ms,
        )?;
        let success_code = expected_exit_codes.first().copied();
        let mut m = new_step(max_retries, expected_exit_codes, NO_BACKOFF);
        let go = |m: &mut ws::Step, to: P, ctx: StepContext<'_>| {
            m.transition(to, &ctx)
                .map_err(|e| unreachable_restore(&what, e))
        };
        let at = |now_ms: u64| StepContext {
            now_ms,
            ..StepContext::default()
        };
        if target != P::Pending {
            go(&mut m, P::Running, at(0))?;
        }
        for _ in 0..retry_count {
            go(&mut m, P::Failed, at(0))?;
            go(&mut m, P::Retrying, at(0))?;
            go(&mut m, P::Running, at(0))?;
        }
        match target {
            P::Pending | P::Running => {}
            P::Success => {
                let Some(code) = success_code else {
                    return Err(unreachable_restore(
                        &what,
                        "no exit code is expected, so the step cannot have succeeded",
                    ));
                };
                go(
                    &mut m,
                    P::Success,
                    StepContext {
                        exit_code: Some(code),
                        ..StepContext::default()
                    },
                )?;
            }
            P::Failed => go(&mut m, P::Failed, at(0))?,
            P::Retrying => {
                go(&mut m, P::Failed, at(0))?;
                go(&mut m, P::Retrying, at(retry_ready_at_ms.unwrap_or(0)))?;
            }
        }
        Ok(Self {
            inner: m.with_backoff(RetryBackoff {
                base_delay_ms,
                max_delay_ms,
            }),
        })
    }

    /// The state's seed code.
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    /// Whether the state is terminal (only `S_SUCCESS`).
    #[getter]
    fn is_terminal(&self) -> bool {
        self.inner.state().is_terminal()
    }

    /// Whether dependents must wait (the step is not `S_SUCCESS`).
    #[getter]
    fn blocks_dependents(&self) -> bool {
        self.inner.blocks_dependents()
    }

    /// Retry attempts made (`S_RETRYING -> S_RUNNING` moves).
    #[getter]
    fn retry_count(&self) -> u32 {
        self.inner.retry_count()
    }

    /// Retry attempts allowed.
    #[getter]
    fn max_retries(&self) -> u32 {
        self.inner.max_retries()
    }

    /// Exit codes that count as success.
    #[getter]
    fn expected_exit_codes(&self) -> Vec<i32> {
        self.inner.expected_exit_codes().to_vec()
    }

    /// Delay before the first retry, in milliseconds.
    #[getter]
    fn base_delay_ms(&self) -> u64 {
        self.inner.backoff().base_delay_ms
    }

    /// Upper bound of any retry delay, in milliseconds.
    #[getter]
    fn max_delay_ms(&self) -> u64 {
        self.inner.backoff().max_delay_ms
    }

    /// While `S_RETRYING`, the earliest `now_ms` at which `S_RUNNING` is
    /// allowed; otherwise `None`.
    #[getter]
    fn retry_ready_at_ms(&self) -> Option<u64> {
        self.inner.retry_ready_at_ms()
    }

    /// Whether `S_FAILED -> S_RETRYING` is allowed now.
    #[getter]
    fn retry_eligible(&self) -> bool {
        self.inner.retry_eligible()
    }

    /// Targets the seed's table allows from the current state, guards aside.
    fn valid_targets(&self) -> Vec<&'static str> {
        self.inner
            .state()
            .valid_targets()
            .iter()
            .map(|s| s.as_str())
            .collect()
    }

    /// The state a run ending with `exit_code` leads to (`None`: no exit
    /// code, e.g. killed by a signal). Changes nothing.
    #[pyo3(signature = (exit_code))]
    fn exit_target(&self, exit_code: Option<i32>) -> &'static str {
        self.inner.exit_target(exit_code).as_str()
    }

    /// Record the end of a run: `S_RUNNING -> exit_target(exit_code)`;
    /// returns the new state's code.
    #[pyo3(signature = (exit_code))]
    fn finish(&mut self, py: Python<'_>, exit_code: Option<i32>) -> PyResult<&'static str> {
        self.inner
            .finish(exit_code)
            .map(StepState::as_str)
            .map_err(|e| transition_error(py, &e))
    }

    /// Move to `to` or raise `InvalidTransitionError` and stay put.
    #[pyo3(signature = (to, *, dependency_states = Vec::new(), exit_code = None, now_ms = 0))]
    fn transition(
        &mut self,
        py: Python<'_>,
        to: &str,
        dependency_states: Vec<String>,
        exit_code: Option<i32>,
        now_ms: u64,
    ) -> PyResult<()> {
        let to = parse_step_state(to)?;
        let deps = parse_step_states(dependency_states)?;
        let ctx = StepContext {
            dependency_states: &deps,
            exit_code,
            now_ms,
        };
        self.inner
            .transition(to, &ctx)
            .map_err(|e| transition_error(py, &e))
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Step(state={}, retry_count={}/{}, expected_exit_codes={:?})",
            self.inner.state(),
            self.inner.retry_count(),
            self.inner.max_retries(),
            self.inner.expected_exit_codes()
        )
    }
}

// ---------------------------------------------------------------------------
// Circuit breaker
// ---------------------------------------------------------------------------

/// A circuit breaker for one tool or provider: `CLOSED`, `OPEN`, `HALF_OPEN`.
///
/// Ask `allow_request(now_ms)` before every request and report every allowed
/// request with `record_success(now_ms)` or `record_failure(now_ms)`.
#[pyclass(module = "weft._core")]
#[derive(Clone)]
pub struct CircuitBreaker {
    inner: ws::CircuitBreaker,
}

#[pymethods]
impl CircuitBreaker {
    #[new]
    #[pyo3(signature = (*, failure_threshold = 5, cooldown_ms = 60000, success_threshold = 1))]
    fn new(failure_threshold: u32, cooldown_ms: u64, success_threshold: u32) -> Self {
        Self {
            inner: ws::CircuitBreaker::new(CircuitBreakerConfig {
                failure_threshold,
                cooldown_ms,
                success_threshold,
            }),
        }
    }

    /// A breaker with the stored state and counters, rebuilt through the
    /// machine's own calls. `opened_at_ms` is required unless `CLOSED`;
    /// `probe_started_at_ms` is the outstanding `HALF_OPEN` test request.
    #[staticmethod]
    #[pyo3(signature = (
        state, *, consecutive_failures = 0, half_open_successes = 0, opened_at_ms = None,
        probe_started_at_ms = None, failure_threshold = 5, cooldown_ms = 60000,
        success_threshold = 1,
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one keyword argument per stored field, as Python callers pass them"
    )]
    fn restore(
        state: &str,
        consecutive_failures: u32,
        half_open_successes: u32,
        opened_at_ms: Option<u64>,
        probe_started_at_ms: Option<u64>,
        failure_threshold: u32,
        cooldown_ms: u64,
        success_threshold: u32,
    ) -> PyResult<Self> {
        let config = CircuitBreakerConfig {
            failure_threshold,
            cooldown_ms,
            success_threshold,
        };
        let mut cb = ws::CircuitBreaker::new(config);
        let target = match state {
            "CLOSED" => CircuitState::Closed,
            "OPEN" => CircuitState::Open,
            "HALF_OPEN" => CircuitState::HalfOpen,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown circuit state {other:?}; expected CLOSED, OPEN or HALF_OPEN"
                )))
            }
        };
        let what = format!("circuit breaker in {state}");
        if target == CircuitState::Closed {
            if opened_at_ms.is_some() || probe_started_at_ms.is_some() || half_open_successes > 0 {
                return Err(unreachable_restore(
                    &what,
                    "a closed circuit has no opened_at_ms, test request or half-open successes",
                ));
            }
            for _ in 0..consecutive_failures {
                cb.record_failure(0);
            }
        } else {
            let Some(opened) = opened_at_ms else {
                return Err(unreachable_restore(&what, "opened_at_ms is required"));
            };
            for _ in 0..failure_threshold.max(1) {
                cb.record_failure(opened);
            }
            if target == CircuitState::HalfOpen {
                let first = opened.saturating_add(cooldown_ms);
                for _ in 0..half_open_successes {
                    // Each earlier test request starts after the cool-down and
                    // succeeded; only the counter matters once it reported.
                    let _ = cb.allow_request(first);
                    cb.record_success(first);
                }
                match probe_started_at_ms {
                    Some(at) if cb.allow_request(at).is_err() => {
                        return Err(unreachable_restore(
                            &what,
                            "the test request starts before the cool-down is over",
                        ));
                    }
                    None if half_open_successes == 0 => {
                        return Err(unreachable_restore(
                            &what,
                            "half-open with no success yet always has a test request out",
                        ))
                    }
                    Some(_) | None => {}
                }
            } else if probe_started_at_ms.is_some() || half_open_successes > 0 {
                return Err(unreachable_restore(
                    &what,
                    "an open circuit has no test request or half-open successes",
                ));
            }
        }
        // Open or half-open, the failure counter keeps the value that opened
        // the circuit; the machine's own state says whether the stored
        // counters fit.
        if cb.state() != target
            || cb.consecutive_failures() != consecutive_failures
            || cb.half_open_successes() != half_open_successes
        {
            return Err(unreachable_restore(
                &what,
                format!(
                    "the counters do not fit (consecutive_failures {consecutive_failures}, \
                     half_open_successes {half_open_successes}, thresholds \
                     {failure_threshold}/{success_threshold})"
                ),
            ));
        }
        Ok(Self { inner: cb })
    }

    /// The state's seed code: `"CLOSED"`, `"OPEN"` or `"HALF_OPEN"`.
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    /// Consecutive failures counted while `CLOSED`.
    #[getter]
    fn consecutive_failures(&self) -> u32 {
        self.inner.consecutive_failures()
    }

    /// Test-request successes in the current `HALF_OPEN` period.
    #[getter]
    fn half_open_successes(&self) -> u32 {
        self.inner.half_open_successes()
    }

    /// When the circuit last opened; `None` while `CLOSED`.
    #[getter]
    fn opened_at_ms(&self) -> Option<u64> {
        self.inner.opened_at_ms()
    }

    /// Whether a `HALF_OPEN` test request is outstanding.
    #[getter]
    fn probe_in_flight(&self) -> bool {
        self.inner.probe_in_flight()
    }

    /// Consecutive failures that open the circuit.
    #[getter]
    fn failure_threshold(&self) -> u32 {
        self.inner.config().failure_threshold
    }

    /// How long the circuit stays open, in milliseconds.
    #[getter]
    fn cooldown_ms(&self) -> u64 {
        self.inner.config().cooldown_ms
    }

    /// Test-request successes that close the circuit.
    #[getter]
    fn success_threshold(&self) -> u32 {
        self.inner.config().success_threshold
    }

    /// `None` if a request may be sent now (after the cool-down this call
    /// moves `OPEN` to `HALF_OPEN` and the request is the test); otherwise
    /// the milliseconds to wait (at least 1).
    fn allow_request(&mut self, now_ms: u64) -> Option<u64> {
        self.inner
            .allow_request(now_ms)
            .err()
            .map(|e| e.retry_in_ms)
    }

    /// Report that an allowed request succeeded.
    fn record_success(&mut self, now_ms: u64) {
        self.inner.record_success(now_ms);
    }

    /// Report that an allowed request failed.
    fn record_failure(&mut self, now_ms: u64) {
        self.inner.record_failure(now_ms);
    }

    /// Force `CLOSED` with all counters cleared (the seed's Recovery 3).
    fn reset(&mut self) {
        self.inner.reset();
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "CircuitBreaker(state={}, consecutive_failures={}/{}, opened_at_ms={})",
            self.inner.state(),
            self.inner.consecutive_failures(),
            self.inner.config().failure_threshold,
            self.inner
                .opened_at_ms()
                .map_or_else(|| "None".to_owned(), |t| t.to_string())
        )
    }
}
