//! The workstream, step and circuit-breaker machines (seed 004, "State
//! Machine Documentation").
//!
//! # Workstream and step
//!
//! Both machines are driven by *target state*, like the seed's
//! `transition_workstream(conn, ws_id, to_state)`: the caller names the state
//! it wants and the machine either moves there or returns an
//! [`InvalidTransitionError`] and stays put. Two checks are made, in order:
//!
//! 1. the pair must be in the seed's "Valid Transitions" table
//!    ([`WorkstreamState::valid_targets`], [`StepState::valid_targets`]);
//!    otherwise the error reads exactly like the seed's
//!    `Cannot transition from S_X to S_Y`;
//! 2. the row's "Conditions" column must hold, judged from the inputs the
//!    caller passes in (step states, dependency states, exit code, time);
//!    otherwise the same message is followed by the failed [`GuardFailure`].
//!
//! ```text
//! workstream: S_PENDING ─► S_RUNNING ─► S_SUCCESS            (terminal)
//!                             │  └────► S_ABANDONED          (terminal)
//!                             ▼               ▲ retries exhausted
//!                          S_FAILED ──────────┘
//!                             │ retry_count < max_retries
//!                             ▼
//!                          S_RETRYING ─(backoff over)─► S_RUNNING
//!
//! step:       S_PENDING ─(deps succeeded)─► S_RUNNING ─(exit code)─► S_SUCCESS | S_FAILED
//!             S_FAILED ─(retry_count < max_retries)─► S_RETRYING ─(backoff over)─► S_RUNNING
//! ```
//!
//! The seed says only "after backoff period" / "after exponential backoff"
//! for `S_RETRYING -> S_RUNNING`. Both machines use [`RetryBackoff`]: entering
//! `S_RETRYING` at `now_ms` records a ready time of
//! `now_ms + min(base_delay_ms * 2^retry_count, max_delay_ms)` (defaults 1000
//! and 60000 ms), and `S_RETRYING -> S_RUNNING` is refused before it. That
//! move is the retry attempt itself, so it is where `retry_count` goes up:
//! the first retry waits `base_delay_ms`, the second twice that, and so on.
//!
//! # Circuit breaker
//!
//! [`CircuitBreaker`] guards calls to one tool. `CLOSED` lets every request
//! through and counts consecutive failures; at `failure_threshold` it goes
//! `OPEN` and fast-fails requests until `cooldown_ms` has passed since it
//! opened. The first request after that moves it to `HALF_OPEN` and is let
//! through alone as a test; its success (`success_threshold` of them) closes
//! the circuit, its failure re-opens it with a fresh cool-down.
//!
//! Everything here is pure: no I/O, no clock. Time is always an argument
//! (`now_ms`, milliseconds on any monotonic clock the caller chooses).
//!
//! Why one long file (about 950 lines before the tests): the seed documents
//! these machines in one chapter, and the workstream and step machines share
//! [`RetryBackoff`], [`GuardFailure`] and [`InvalidTransitionError`]. Each
//! machine is its own section below; the circuit breaker, which shares
//! nothing, is the part to move out first when `weft batch` drives them.

use std::fmt;

/// Default [`RetryBackoff::base_delay_ms`].
pub const DEFAULT_BASE_DELAY_MS: u64 = 1_000;

/// Default [`RetryBackoff::max_delay_ms`].
pub const DEFAULT_MAX_DELAY_MS: u64 = 60_000;

/// Default [`CircuitBreakerConfig::failure_threshold`] (seed: 5).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;

/// Default [`CircuitBreakerConfig::cooldown_ms`] (seed: 60 seconds).
pub const DEFAULT_COOLDOWN_MS: u64 = 60_000;

/// Default [`CircuitBreakerConfig::success_threshold`] (seed: 1).
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 1;

// ---------------------------------------------------------------------------
// Retry backoff
// ---------------------------------------------------------------------------

/// Exponential delay before a retry: `min(base_delay_ms * 2^retry_count,
/// max_delay_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryBackoff {
    /// Delay before the first retry (`retry_count` 0), in milliseconds.
    pub base_delay_ms: u64,
    /// Upper bound of any delay, in milliseconds.
    pub max_delay_ms: u64,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self {
            base_delay_ms: DEFAULT_BASE_DELAY_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
        }
    }
}

impl RetryBackoff {
    /// Delay before the retry that follows `retry_count` earlier retries.
    /// Saturates instead of overflowing, so any `retry_count` is accepted.
    pub fn delay_ms(&self, retry_count: u32) -> u64 {
        // checked_shl only rejects shifts of 64 or more; saturating_mul covers
        // the bits lost below that.
        let factor = 1u64.checked_shl(retry_count).unwrap_or(u64::MAX);
        self.base_delay_ms
            .saturating_mul(factor)
            .min(self.max_delay_ms)
    }
}

// ---------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------

/// A workstream's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkstreamState {
    /// `S_PENDING`: created, not yet started (initial).
    Pending,
    /// `S_RUNNING`: actively executing steps.
    Running,
    /// `S_SUCCESS`: all steps completed successfully (terminal).
    Success,
    /// `S_FAILED`: one or more steps failed (can retry).
    Failed,
    /// `S_RETRYING`: waiting before a retry attempt.
    Retrying,
    /// `S_ABANDONED`: manually stopped or out of retries (terminal).
    Abandoned,
}

impl WorkstreamState {
    /// Every workstream state, in the seed's order.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Running,
        Self::Success,
        Self::Failed,
        Self::Retrying,
        Self::Abandoned,
    ];

    /// The seed's code, e.g. `"S_PENDING"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "S_PENDING",
            Self::Running => "S_RUNNING",
            Self::Success => "S_SUCCESS",
            Self::Failed => "S_FAILED",
            Self::Retrying => "S_RETRYING",
            Self::Abandoned => "S_ABANDONED",
        }
    }

    /// Parse a seed code such as `"S_FAILED"`.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == code)
    }

    /// Whether the state is terminal (`S_SUCCESS`, `S_ABANDONED`).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Success | Self::Abandoned)
    }

    /// The seed's `VALID_TRANSITIONS` entry for this state, guards aside.
    pub fn valid_targets(self) -> &'static [Self] {
        match self {
            Self::Pending | Self::Retrying => &[Self::Running],
            Self::Running => &[Self::Success, Self::Failed, Self::Abandoned],
            Self::Failed => &[Self::Retrying, Self::Abandoned],
            Self::Success | Self::Abandoned => &[],
        }
    }

    /// Whether `self -> to` is in the table, guards aside.
    pub fn can_transition_to(self, to: Self) -> bool {
        self.valid_targets().contains(&to)
    }
}

impl fmt::Display for WorkstreamState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepState {
    /// `S_PENDING`: created, waiting for dependencies (initial).
    Pending,
    /// `S_RUNNING`: actively executing.
    Running,
    /// `S_SUCCESS`: completed successfully (terminal).
    Success,
    /// `S_FAILED`: execution failed.
    Failed,
    /// `S_RETRYING`: waiting before a retry.
    Retrying,
}

impl StepState {
    /// Every step state, in the seed's order.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Running,
        Self::Success,
        Self::Failed,
        Self::Retrying,
    ];

    /// The seed's code, e.g. `"S_PENDING"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "S_PENDING",
            Self::Running => "S_RUNNING",
            Self::Success => "S_SUCCESS",
            Self::Failed => "S_FAILED",
            Self::Retrying => "S_RETRYING",
        }
    }

    /// Parse a seed code such as `"S_RETRYING"`.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == code)
    }

    /// Whether the state is terminal: only `S_SUCCESS`. A step in `S_FAILED`
    /// whose retries are spent has no valid move either, but the seed does
    /// not call it terminal: its workstream decides what happens next.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Success)
    }

    /// Whether steps that depend on this one must wait: true unless
    /// `S_SUCCESS`.
    pub fn blocks_dependents(self) -> bool {
        self != Self::Success
    }

    /// The seed's valid targets for this state, guards aside.
    pub fn valid_targets(self) -> &'static [Self] {
        match self {
            Self::Pending | Self::Retrying => &[Self::Running],
            Self::Running => &[Self::Success, Self::Failed],
            Self::Failed => &[Self::Retrying],
            Self::Success => &[],
        }
    }

    /// Whether `self -> to` is in the table, guards aside.
    pub fn can_transition_to(self, to: Self) -> bool {
        self.valid_targets().contains(&to)
    }
}

impl fmt::Display for StepState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a transition that is in the table was refused: its "Conditions"
/// column did not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardFailure {
    /// `S_RUNNING -> S_SUCCESS` needs every step in `S_SUCCESS`.
    StepsNotAllSucceeded,
    /// `S_RUNNING -> S_FAILED` needs some step in `S_FAILED`.
    NoStepFailed,
    /// `S_FAILED -> S_RETRYING` needs `retry_count < max_retries`.
    RetriesExhausted {
        /// Retries already made.
        retry_count: u32,
        /// Retries allowed.
        max_retries: u32,
    },
    /// `S_FAILED -> S_ABANDONED` needs `retry_count >= max_retries`.
    RetriesRemaining {
        /// Retries already made.
        retry_count: u32,
        /// Retries allowed.
        max_retries: u32,
    },
    /// `S_RETRYING -> S_RUNNING` needs the retry backoff to be over.
    BackoffPending {
        /// Milliseconds until the retry may start.
        remaining_ms: u64,
    },
    /// Step `S_PENDING -> S_RUNNING` needs every dependency in `S_SUCCESS`.
    DependenciesNotMet,
    /// Step `S_RUNNING -> S_SUCCESS` needs an exit code in
    /// `expected_exit_codes`.
    ExitCodeNotExpected {
        /// The exit code given, `None` if the tool had none (e.g. killed by
        /// a signal).
        exit_code: Option<i32>,
    },
    /// Step `S_RUNNING -> S_FAILED` needs an exit code that is not expected.
    ExitCodeExpected {
        /// The (expected) exit code given.
        exit_code: i32,
    },
}

impl fmt::Display for GuardFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StepsNotAllSucceeded => f.write_str("not all steps are in S_SUCCESS"),
            Self::NoStepFailed => f.write_str("no step is in S_FAILED"),
            Self::RetriesExhausted {
                retry_count,
                max_retries,
            } => write!(
                f,
                "retries exhausted (retry_count {retry_count} >= max_retries {max_retries})"
            ),
            Self::RetriesRemaining {
                retry_count,
                max_retries,
            } => write!(
                f,
                "retries remain (retry_count {retry_count} < max_retries {max_retries})"
            ),
            Self::BackoffPending { remaining_ms } => {
                write!(f, "retry backoff has {remaining_ms} ms left")
            }
            Self::DependenciesNotMet => f.write_str("not all dependencies are in S_SUCCESS"),
            Self::ExitCodeNotExpected { exit_code: None } => {
                f.write_str("the tool has no exit code")
            }
            Self::ExitCodeNotExpected {
                exit_code: Some(code),
            } => write!(f, "exit code {code} is not in expected_exit_codes"),
            Self::ExitCodeExpected { exit_code } => {
                write!(f, "exit code {exit_code} is in expected_exit_codes")
            }
        }
    }
}

/// A refused transition (the seed's `InvalidTransitionError`). The machine is
/// unchanged when this is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InvalidTransitionError<S> {
    /// The state the machine was (and still is) in.
    pub from: S,
    /// The state that was asked for.
    pub to: S,
    /// `None` if the pair is not in the table at all; otherwise the guard
    /// that failed.
    pub guard: Option<GuardFailure>,
}

impl<S: fmt::Display> fmt::Display for InvalidTransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cannot transition from {} to {}", self.from, self.to)?;
        match &self.guard {
            Some(guard) => write!(f, ": {guard}"),
            None => Ok(()),
        }
    }
}

impl<S: fmt::Debug + fmt::Display> std::error::Error for InvalidTransitionError<S> {}

/// A refused workstream transition.
pub type WorkstreamTransitionError = InvalidTransitionError<WorkstreamState>;

/// A refused step transition.
pub type StepTransitionError = InvalidTransitionError<StepState>;

/// Check the time gate of `S_RETRYING -> S_RUNNING`.
fn backoff_over(retry_ready_at_ms: Option<u64>, now_ms: u64) -> Result<(), GuardFailure> {
    // `None` cannot happen through the public API (entering S_RETRYING always
    // sets it); treating it as "ready" keeps the machine live regardless.
    match retry_ready_at_ms {
        Some(ready_at) if now_ms < ready_at => Err(GuardFailure::BackoffPending {
            remaining_ms: ready_at - now_ms,
        }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Workstream
// ---------------------------------------------------------------------------

/// A workstream: its state, retry bookkeeping and retry backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Workstream {
    state: WorkstreamState,
    retry_count: u32,
    max_retries: u32,
    backoff: RetryBackoff,
    retry_ready_at_ms: Option<u64>,
}

impl Workstream {
    /// A workstream in `S_PENDING` with no retries made and the default
    /// [`RetryBackoff`].
    pub fn new(max_retries: u32) -> Self {
        Self {
            state: WorkstreamState::Pending,
            retry_count: 0,
            max_retries,
            backoff: RetryBackoff::default(),
            retry_ready_at_ms: None,
        }
    }

    /// The same workstream with another retry backoff.
    #[must_use]
    pub fn with_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The current state.
    pub fn state(&self) -> WorkstreamState {
        self.state
    }

    /// Retry attempts made so far (`S_RETRYING -> S_RUNNING` moves).
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// Retry attempts allowed.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The retry backoff in use.
    pub fn backoff(&self) -> RetryBackoff {
        self.backoff
    }

    /// While `S_RETRYING`, the earliest `now_ms` at which `S_RUNNING` is
    /// allowed; `None` in every other state.
    pub fn retry_ready_at_ms(&self) -> Option<u64> {
        self.retry_ready_at_ms
    }

    /// Whether `S_FAILED -> S_RETRYING` would be allowed now: the workstream
    /// is `S_FAILED` and `retry_count < max_retries`.
    pub fn retry_eligible(&self) -> bool {
        self.state == WorkstreamState::Failed && self.retry_count < self.max_retries
    }

    /// Move to `to` if the table allows it and its condition holds.
    ///
    /// `step_states` are the states of this workstream's steps; they are read
    /// only by `S_RUNNING -> S_SUCCESS` (all must be `S_SUCCESS`; an empty
    /// slice passes, as a workstream without steps has nothing left to do)
    /// and `S_RUNNING -> S_FAILED` (some must be `S_FAILED`). `now_ms` is read
    /// only when entering and leaving `S_RETRYING`. `S_RUNNING ->
    /// S_ABANDONED` (user cancel) has no condition.
    pub fn transition(
        &mut self,
        to: WorkstreamState,
        step_states: &[StepState],
        now_ms: u64,
    ) -> Result<(), WorkstreamTransitionError> {
        use WorkstreamState as W;

        let from = self.state;
        if !from.can_transition_to(to) {
            return Err(InvalidTransitionError {
                from,
                to,
                guard: None,
            });
        }
        let guard = match (from, to) {
            (W::Running, W::Success) if !step_states.iter().all(|s| *s == StepState::Success) => {
                Err(GuardFailure::StepsNotAllSucceeded)
            }
            (W::Running, W::Failed) if !step_states.contains(&StepState::Failed) => {
                Err(GuardFailure::NoStepFailed)
            }
            (W::Failed, W::Retrying) if self.retry_count >= self.max_retries => {
                Err(GuardFailure::RetriesExhausted {
                    retry_count: self.retry_count,
                    max_retries: self.max_retries,
                })
            }
            (W::Failed, W::Abandoned) if self.retry_count < self.max_retries => {
                Err(GuardFailure::RetriesRemaining {
                    retry_count: self.retry_count,
                    max_retries: self.max_retries,
                })
            }
            (W::Retrying, W::Running) => backoff_over(self.retry_ready_at_ms, now_ms),
            _ => Ok(()),
        };
        guard.map_err(|g| InvalidTransitionError {
            from,
            to,
            guard: Some(g),
        })?;

        match to {
            W::Retrying => {
                let delay = self.backoff.delay_ms(self.retry_count);
                self.retry_ready_at_ms = Some(now_ms.saturating_add(delay));
            }
            W::Running if from == W::Retrying => {
                self.retry_count = self.retry_count.saturating_add(1);
                self.retry_ready_at_ms = None;
            }
            _ => self.retry_ready_at_ms = None,
        }
        self.state = to;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Step
// ---------------------------------------------------------------------------

/// The inputs a step transition's condition may read. Build it with
/// `..StepContext::default()` and set only what the transition needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StepContext<'a> {
    /// States of the steps in `depends_on` (read by `S_PENDING ->
    /// S_RUNNING`; empty means no dependencies, which are then met).
    pub dependency_states: &'a [StepState],
    /// The tool's exit code, `None` if it had none, such as when killed by a
    /// signal (read by `S_RUNNING -> S_SUCCESS | S_FAILED`).
    pub exit_code: Option<i32>,
    /// The current time in milliseconds (read when entering and leaving
    /// `S_RETRYING`).
    pub now_ms: u64,
}

/// A step: its state, retry bookkeeping, accepted exit codes and retry
/// backoff.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    state: StepState,
    retry_count: u32,
    max_retries: u32,
    expected_exit_codes: Vec<i32>,
    backoff: RetryBackoff,
    retry_ready_at_ms: Option<u64>,
}

impl Step {
    /// A step in `S_PENDING` that expects exit code 0 and uses the default
    /// [`RetryBackoff`].
    pub fn new(max_retries: u32) -> Self {
        Self {
            state: StepState::Pending,
            retry_count: 0,
            max_retries,
            expected_exit_codes: vec![0],
            backoff: RetryBackoff::default(),
            retry_ready_at_ms: None,
        }
    }

    /// The same step with other exit codes counted as success. An empty list
    /// makes every run fail.
    #[must_use]
    pub fn with_expected_exit_codes(mut self, codes: Vec<i32>) -> Self {
        self.expected_exit_codes = codes;
        self
    }

    /// The same step with another retry backoff.
    #[must_use]
    pub fn with_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The current state.
    pub fn state(&self) -> StepState {
        self.state
    }

    /// Retry attempts made so far (`S_RETRYING -> S_RUNNING` moves).
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// Retry attempts allowed.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// Exit codes that count as success.
    pub fn expected_exit_codes(&self) -> &[i32] {
        &self.expected_exit_codes
    }

    /// The retry backoff in use.
    pub fn backoff(&self) -> RetryBackoff {
        self.backoff
    }

    /// While `S_RETRYING`, the earliest `now_ms` at which `S_RUNNING` is
    /// allowed; `None` in every other state.
    pub fn retry_ready_at_ms(&self) -> Option<u64> {
        self.retry_ready_at_ms
    }

    /// Whether `S_FAILED -> S_RETRYING` would be allowed now: the step is
    /// `S_FAILED` and `retry_count < max_retries`.
    pub fn retry_eligible(&self) -> bool {
        self.state == StepState::Failed && self.retry_count < self.max_retries
    }

    /// Whether steps that depend on this one must wait (not `S_SUCCESS`).
    pub fn blocks_dependents(&self) -> bool {
        self.state.blocks_dependents()
    }

    /// The state a run that ended with `exit_code` leads to: `S_SUCCESS` if
    /// the code is in `expected_exit_codes`, `S_FAILED` otherwise (including
    /// no exit code at all). Does not change the step.
    pub fn exit_target(&self, exit_code: Option<i32>) -> StepState {
        match exit_code {
            Some(code) if self.expected_exit_codes.contains(&code) => StepState::Success,
            _ => StepState::Failed,
        }
    }

    /// Record the end of a run: move from `S_RUNNING` to
    /// [`exit_target`](Self::exit_target)`(exit_code)` and return it.
    pub fn finish(&mut self, exit_code: Option<i32>) -> Result<StepState, StepTransitionError> {
        let to = self.exit_target(exit_code);
        self.transition(
            to,
            &StepContext {
                exit_code,
                ..StepContext::default()
            },
        )?;
        Ok(to)
    }

    /// Move to `to` if the table allows it and its condition, judged from
    /// `ctx`, holds.
    pub fn transition(
        &mut self,
        to: StepState,
        ctx: &StepContext<'_>,
    ) -> Result<(), StepTransitionError> {
        use StepState as P;

        let from = self.state;
        if !from.can_transition_to(to) {
            return Err(InvalidTransitionError {
                from,
                to,
                guard: None,
            });
        }
        let guard = match (from, to) {
            (P::Pending, P::Running) if !ctx.dependency_states.iter().all(|s| *s == P::Success) => {
                Err(GuardFailure::DependenciesNotMet)
            }
            (P::Running, P::Success) if self.exit_target(ctx.exit_code) != P::Success => {
                Err(GuardFailure::ExitCodeNotExpected {
                    exit_code: ctx.exit_code,
                })
            }
            (P::Running, P::Failed) => match ctx.exit_code {
                Some(code) if self.expected_exit_codes.contains(&code) => {
                    Err(GuardFailure::ExitCodeExpected { exit_code: code })
                }
                _ => Ok(()),
            },
            (P::Failed, P::Retrying) if self.retry_count >= self.max_retries => {
                Err(GuardFailure::RetriesExhausted {
                    retry_count: self.retry_count,
                    max_retries: self.max_retries,
                })
            }
            (P::Retrying, P::Running) => backoff_over(self.retry_ready_at_ms, ctx.now_ms),
            _ => Ok(()),
        };
        guard.map_err(|g| InvalidTransitionError {
            from,
            to,
            guard: Some(g),
        })?;

        match to {
            P::Retrying => {
                let delay = self.backoff.delay_ms(self.retry_count);
                self.retry_ready_at_ms = Some(ctx.now_ms.saturating_add(delay));
            }
            P::Running if from == P::Retrying => {
                self.retry_count = self.retry_count.saturating_add(1);
                self.retry_ready_at_ms = None;
            }
            _ => self.retry_ready_at_ms = None,
        }
        self.state = to;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Circuit breaker
// ---------------------------------------------------------------------------

/// A circuit breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CircuitState {
    /// `CLOSED`: healthy, requests allowed.
    Closed,
    /// `OPEN`: unhealthy, requests rejected until the cool-down is over.
    Open,
    /// `HALF_OPEN`: testing recovery, one request at a time.
    HalfOpen,
}

impl CircuitState {
    /// The seed's code: `"CLOSED"`, `"OPEN"` or `"HALF_OPEN"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "CLOSED",
            Self::Open => "OPEN",
            Self::HalfOpen => "HALF_OPEN",
        }
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tuning of a [`CircuitBreaker`] (the seed's `config/circuit_breaker.json`,
/// with the cool-down in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CircuitBreakerConfig {
    /// Consecutive failures in `CLOSED` that open the circuit (default 5;
    /// 0 behaves like 1).
    pub failure_threshold: u32,
    /// How long the circuit stays `OPEN`, in milliseconds (default 60000);
    /// also how long a `HALF_OPEN` test request may stay unreported before
    /// it is considered lost. 0 disables the breaker in effect.
    pub cooldown_ms: u64,
    /// Test-request successes in `HALF_OPEN` that close the circuit
    /// (default 1; 0 behaves like 1).
    pub success_threshold: u32,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            cooldown_ms: DEFAULT_COOLDOWN_MS,
            success_threshold: DEFAULT_SUCCESS_THRESHOLD,
        }
    }
}

/// A request refused by [`CircuitBreaker::allow_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CircuitOpen {
    /// Milliseconds until a request may be allowed (always at least 1).
    pub retry_in_ms: u64,
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Rounded up: "retry in 0 seconds" would invite an immediate retry
        // that is still refused.
        let seconds = self.retry_in_ms.div_ceil(1_000);
        let unit = if seconds == 1 { "second" } else { "seconds" };
        write!(f, "circuit is open, retry in {seconds} {unit}")
    }
}

impl std::error::Error for CircuitOpen {}

/// A circuit breaker for one tool.
///
/// Callers ask [`allow_request`](Self::allow_request) before every request
/// and report every allowed request's outcome with
/// [`record_success`](Self::record_success) or
/// [`record_failure`](Self::record_failure).
///
/// Outcomes reported while `OPEN`, or while `HALF_OPEN` with no test request
/// outstanding, come from requests let through before the circuit opened;
/// they say nothing about recovery and are ignored.
///
/// If a `HALF_OPEN` test request never reports (its caller crashed or dropped
/// it), the test is considered lost after `cooldown_ms` and the next request
/// becomes the new test, so the breaker cannot stay stuck; until then other
/// requests are refused. [`reset`](Self::reset) is the manual way out (the
/// seed's Recovery 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: CircuitState,
    consecutive_failures: u32,
    half_open_successes: u32,
    opened_at_ms: u64,
    probe_started_at_ms: Option<u64>,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new(CircuitBreakerConfig::default())
    }
}

impl CircuitBreaker {
    /// A `CLOSED` breaker with zeroed counters.
    pub fn new(config: CircuitBreakerConfig) -> Self {
        Self {
            config,
            state: CircuitState::Closed,
            consecutive_failures: 0,
            half_open_successes: 0,
            opened_at_ms: 0,
            probe_started_at_ms: None,
        }
    }

    /// The tuning this breaker was built with.
    pub fn config(&self) -> CircuitBreakerConfig {
        self.config
    }

    /// The current state. `OPEN` turns into `HALF_OPEN` only when
    /// [`allow_request`](Self::allow_request) is called after the cool-down,
    /// not by the passing of time alone.
    pub fn state(&self) -> CircuitState {
        self.state
    }

    /// Consecutive failures counted in `CLOSED` (kept, not counted further,
    /// while the circuit is not closed).
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Test-request successes counted in the current `HALF_OPEN` period.
    pub fn half_open_successes(&self) -> u32 {
        self.half_open_successes
    }

    /// When the circuit last opened; `None` while `CLOSED`.
    pub fn opened_at_ms(&self) -> Option<u64> {
        match self.state {
            CircuitState::Closed => None,
            CircuitState::Open | CircuitState::HalfOpen => Some(self.opened_at_ms),
        }
    }

    /// Whether a `HALF_OPEN` test request is outstanding.
    pub fn probe_in_flight(&self) -> bool {
        self.probe_started_at_ms.is_some()
    }

    /// Ask whether a request may be sent now.
    ///
    /// `CLOSED` always allows. `OPEN` refuses until `now_ms >= opened_at +
    /// cooldown_ms`; the first call from then on moves to `HALF_OPEN` and is
    /// allowed as the test request. `HALF_OPEN` allows a request only when no
    /// test request is outstanding (see the type's doc for lost tests).
    pub fn allow_request(&mut self, now_ms: u64) -> Result<(), CircuitOpen> {
        match self.state {
            CircuitState::Closed => Ok(()),
            CircuitState::Open => {
                let reopen_at = self.opened_at_ms.saturating_add(self.config.cooldown_ms);
                if now_ms < reopen_at {
                    return Err(CircuitOpen {
                        retry_in_ms: reopen_at - now_ms,
                    });
                }
                self.state = CircuitState::HalfOpen;
                self.half_open_successes = 0;
                self.probe_started_at_ms = Some(now_ms);
                Ok(())
            }
            CircuitState::HalfOpen => {
                if let Some(started) = self.probe_started_at_ms {
                    let lost_at = started.saturating_add(self.config.cooldown_ms);
                    if now_ms < lost_at {
                        return Err(CircuitOpen {
                            retry_in_ms: lost_at - now_ms,
                        });
                    }
                }
                self.probe_started_at_ms = Some(now_ms);
                Ok(())
            }
        }
    }

    /// Report that an allowed request succeeded.
    ///
    /// `CLOSED`: the failure count goes back to 0. `HALF_OPEN` with a test
    /// outstanding: one more success; reaching `success_threshold` closes the
    /// circuit with all counters reset. Otherwise ignored.
    pub fn record_success(&mut self, now_ms: u64) {
        // A success starts no timer; the argument keeps the three calls
        // interchangeable for callers that always pass the clock.
        let _ = now_ms;
        match self.state {
            CircuitState::Closed => self.consecutive_failures = 0,
            CircuitState::HalfOpen if self.probe_started_at_ms.is_some() => {
                self.probe_started_at_ms = None;
                self.half_open_successes = self.half_open_successes.saturating_add(1);
                if self.half_open_successes >= self.config.success_threshold {
                    self.reset();
                }
            }
            CircuitState::HalfOpen | CircuitState::Open => {}
        }
    }

    /// Report that an allowed request failed.
    ///
    /// `CLOSED`: one more consecutive failure; reaching `failure_threshold`
    /// opens the circuit at `now_ms`. `HALF_OPEN` with a test outstanding:
    /// the circuit opens again at `now_ms`. Otherwise ignored.
    pub fn record_failure(&mut self, now_ms: u64) {
        match self.state {
            CircuitState::Closed => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                if self.consecutive_failures >= self.config.failure_threshold {
                    self.open(now_ms);
                }
            }
            CircuitState::HalfOpen if self.probe_started_at_ms.is_some() => self.open(now_ms),
            CircuitState::HalfOpen | CircuitState::Open => {}
        }
    }

    /// Force the circuit `CLOSED` with all counters cleared.
    pub fn reset(&mut self) {
        *self = Self::new(self.config);
    }

    fn open(&mut self, now_ms: u64) {
        self.state = CircuitState::Open;
        self.opened_at_ms = now_ms;
        self.half_open_successes = 0;
        self.probe_started_at_ms = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use StepState as P;
    use WorkstreamState as W;

    // ---- shared -----------------------------------------------------------

    #[test]
    fn retry_backoff_defaults_and_table() {
        let b = RetryBackoff::default();
        assert_eq!((b.base_delay_ms, b.max_delay_ms), (1_000, 60_000));
        let delays: Vec<u64> = (0..9).map(|n| b.delay_ms(n)).collect();
        assert_eq!(
            delays,
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]
        );
    }

    #[test]
    fn retry_backoff_never_overflows() {
        let b = RetryBackoff::default();
        for n in [31, 32, 62, 63, 64, 65, 1_000, u32::MAX] {
            assert_eq!(b.delay_ms(n), 60_000, "n = {n}");
        }
        let unbounded = RetryBackoff {
            base_delay_ms: u64::MAX,
            max_delay_ms: u64::MAX,
        };
        assert_eq!(unbounded.delay_ms(u32::MAX), u64::MAX);
        let zero = RetryBackoff {
            base_delay_ms: 0,
            max_delay_ms: 10,
        };
        assert_eq!(zero.delay_ms(u32::MAX), 0);
    }

    #[test]
    fn codes_round_trip() {
        let codes: Vec<&str> = W::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            codes,
            [
                "S_PENDING",
                "S_RUNNING",
                "S_SUCCESS",
                "S_FAILED",
                "S_RETRYING",
                "S_ABANDONED"
            ]
        );
        let codes: Vec<&str> = P::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            codes,
            [
                "S_PENDING",
                "S_RUNNING",
                "S_SUCCESS",
                "S_FAILED",
                "S_RETRYING"
            ]
        );
        for s in W::ALL {
            assert_eq!(W::from_code(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        for s in P::ALL {
            assert_eq!(P::from_code(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(W::from_code("S_NOPE"), None);
        assert_eq!(P::from_code("S_ABANDONED"), None);
        assert_eq!(
            [
                CircuitState::Closed,
                CircuitState::Open,
                CircuitState::HalfOpen
            ]
            .map(CircuitState::as_str),
            ["CLOSED", "OPEN", "HALF_OPEN"]
        );
        assert_eq!(CircuitState::HalfOpen.to_string(), "HALF_OPEN");
    }

    // ---- workstream -------------------------------------------------------

    /// The seed's valid-transition table, written out independently.
    const WS_TABLE: [(W, W); 7] = [
        (W::Pending, W::Running),
        (W::Running, W::Success),
        (W::Running, W::Failed),
        (W::Running, W::Abandoned),
        (W::Failed, W::Retrying),
        (W::Failed, W::Abandoned),
        (W::Retrying, W::Running),
    ];

    fn ws_in(state: W, retry_count: u32, max_retries: u32) -> Workstream {
        let mut ws = Workstream::new(max_retries);
        ws.state = state;
        ws.retry_count = retry_count;
        ws
    }

    #[test]
    fn workstream_starts_pending() {
        let ws = Workstream::new(3);
        assert_eq!(ws.state(), W::Pending);
        assert_eq!((ws.retry_count(), ws.max_retries()), (0, 3));
        assert_eq!(ws.backoff(), RetryBackoff::default());
        assert_eq!(ws.retry_ready_at_ms(), None);
        assert!(!ws.retry_eligible());
    }

    #[test]
    fn workstream_terminal_states() {
        let terminal: Vec<W> = W::ALL.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [W::Success, W::Abandoned]);
    }

    #[test]
    fn workstream_every_pair_outside_table_is_rejected_with_seed_message() {
        let mut rejected = 0;
        for from in W::ALL {
            for to in W::ALL {
                let in_table = WS_TABLE.contains(&(from, to));
                assert_eq!(from.can_transition_to(to), in_table, "{from} -> {to}");
                if in_table {
                    continue;
                }
                // Inputs that would satisfy any guard, so only the table can
                // be what refuses.
                let mut ws = ws_in(from, 0, 3);
                let before = ws;
                let err = ws.transition(to, &[], u64::MAX).unwrap_err();
                assert_eq!(
                    err,
                    InvalidTransitionError {
                        from,
                        to,
                        guard: None
                    }
                );
                assert_eq!(
                    err.to_string(),
                    format!(
                        "Cannot transition from {} to {}",
                        from.as_str(),
                        to.as_str()
                    )
                );
                assert_eq!(ws, before);
                rejected += 1;
            }
        }
        assert_eq!(rejected, 36 - 7);
    }

    #[test]
    fn workstream_seed_invalid_examples() {
        let cases = [
            (
                W::Success,
                W::Running,
                "Cannot transition from S_SUCCESS to S_RUNNING",
            ),
            (
                W::Pending,
                W::Success,
                "Cannot transition from S_PENDING to S_SUCCESS",
            ),
            (
                W::Pending,
                W::Failed,
                "Cannot transition from S_PENDING to S_FAILED",
            ),
            (
                W::Running,
                W::Pending,
                "Cannot transition from S_RUNNING to S_PENDING",
            ),
            (
                W::Abandoned,
                W::Running,
                "Cannot transition from S_ABANDONED to S_RUNNING",
            ),
        ];
        for (from, to, msg) in cases {
            let mut ws = ws_in(from, 0, 3);
            assert_eq!(
                ws.transition(to, &[P::Success], 0).unwrap_err().to_string(),
                msg
            );
            assert_eq!(ws.state(), from);
        }
    }

    #[test]
    fn workstream_pending_to_running() {
        let mut ws = Workstream::new(3);
        assert_eq!(ws.transition(W::Running, &[], 0), Ok(()));
        assert_eq!(ws.state(), W::Running);
        assert_eq!(ws.retry_count(), 0, "a first start is not a retry");
    }

    #[test]
    fn workstream_running_to_success_needs_all_steps_succeeded() {
        let mut ws = ws_in(W::Running, 0, 3);
        for steps in [
            &[P::Success, P::Running][..],
            &[P::Pending],
            &[P::Success, P::Failed],
            &[P::Retrying, P::Success],
        ] {
            let err = ws.transition(W::Success, steps, 0).unwrap_err();
            assert_eq!(err.guard, Some(GuardFailure::StepsNotAllSucceeded));
            assert_eq!(
                err.to_string(),
                "Cannot transition from S_RUNNING to S_SUCCESS: not all steps are in S_SUCCESS"
            );
            assert_eq!(ws.state(), W::Running);
        }
        assert_eq!(
            ws.transition(W::Success, &[P::Success, P::Success], 0),
            Ok(())
        );
        assert_eq!(ws.state(), W::Success);
    }

    #[test]
    fn workstream_without_steps_can_succeed() {
        let mut ws = ws_in(W::Running, 0, 3);
        assert_eq!(ws.transition(W::Success, &[], 0), Ok(()));
    }

    #[test]
    fn workstream_running_to_failed_needs_a_failed_step() {
        let mut ws = ws_in(W::Running, 0, 3);
        for steps in [&[][..], &[P::Success, P::Running], &[P::Retrying]] {
            let err = ws.transition(W::Failed, steps, 0).unwrap_err();
            assert_eq!(err.guard, Some(GuardFailure::NoStepFailed));
            assert_eq!(
                err.to_string(),
                "Cannot transition from S_RUNNING to S_FAILED: no step is in S_FAILED"
            );
        }
        assert_eq!(
            ws.transition(W::Failed, &[P::Success, P::Failed], 0),
            Ok(())
        );
        assert_eq!(ws.state(), W::Failed);
    }

    #[test]
    fn workstream_running_to_abandoned_is_unconditional() {
        let mut ws = ws_in(W::Running, 0, 3);
        assert_eq!(ws.transition(W::Abandoned, &[P::Running], 0), Ok(()));
        assert_eq!(ws.state(), W::Abandoned);
    }

    #[test]
    fn workstream_failed_to_retrying_guard() {
        let mut ws = ws_in(W::Failed, 2, 3);
        assert!(ws.retry_eligible());
        assert_eq!(ws.transition(W::Retrying, &[], 10_000), Ok(()));
        assert_eq!(ws.state(), W::Retrying);
        // Delay for retry_count 2 is 4000 ms.
        assert_eq!(ws.retry_ready_at_ms(), Some(14_000));
        assert_eq!(ws.retry_count(), 2, "counted when the retry runs");

        let mut ws = ws_in(W::Failed, 3, 3);
        assert!(!ws.retry_eligible());
        let err = ws.transition(W::Retrying, &[], 0).unwrap_err();
        assert_eq!(
            err.guard,
            Some(GuardFailure::RetriesExhausted {
                retry_count: 3,
                max_retries: 3
            })
        );
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_FAILED to S_RETRYING: \
             retries exhausted (retry_count 3 >= max_retries 3)"
        );
        assert_eq!(ws.state(), W::Failed);
    }

    #[test]
    fn workstream_failed_to_abandoned_needs_exhausted_retries() {
        let mut ws = ws_in(W::Failed, 2, 3);
        let err = ws.transition(W::Abandoned, &[], 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_FAILED to S_ABANDONED: \
             retries remain (retry_count 2 < max_retries 3)"
        );
        assert_eq!(ws.state(), W::Failed);

        for count in [3, 4] {
            let mut ws = ws_in(W::Failed, count, 3);
            assert_eq!(ws.transition(W::Abandoned, &[], 0), Ok(()));
            assert_eq!(ws.state(), W::Abandoned);
        }
    }

    #[test]
    fn workstream_zero_max_retries() {
        let mut ws = ws_in(W::Failed, 0, 0);
        assert!(!ws.retry_eligible());
        assert!(ws.transition(W::Retrying, &[], 0).is_err());
        assert_eq!(ws.transition(W::Abandoned, &[], 0), Ok(()));
    }

    #[test]
    fn workstream_retrying_to_running_waits_for_backoff_and_counts() {
        let mut ws = ws_in(W::Failed, 0, 3);
        ws.transition(W::Retrying, &[], 5_000).unwrap();
        assert_eq!(ws.retry_ready_at_ms(), Some(6_000));

        let err = ws.transition(W::Running, &[], 5_999).unwrap_err();
        assert_eq!(
            err.guard,
            Some(GuardFailure::BackoffPending { remaining_ms: 1 })
        );
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_RETRYING to S_RUNNING: retry backoff has 1 ms left"
        );
        assert_eq!((ws.state(), ws.retry_count()), (W::Retrying, 0));

        assert_eq!(ws.transition(W::Running, &[], 6_000), Ok(()));
        assert_eq!((ws.state(), ws.retry_count()), (W::Running, 1));
        assert_eq!(ws.retry_ready_at_ms(), None);
    }

    #[test]
    fn workstream_custom_backoff() {
        let mut ws = ws_in(W::Failed, 1, 3).with_backoff(RetryBackoff {
            base_delay_ms: 10,
            max_delay_ms: 15,
        });
        ws.transition(W::Retrying, &[], 100).unwrap();
        assert_eq!(ws.retry_ready_at_ms(), Some(115));
    }

    #[test]
    fn workstream_ready_time_saturates() {
        let mut ws = ws_in(W::Failed, 0, 3);
        ws.transition(W::Retrying, &[], u64::MAX - 1).unwrap();
        assert_eq!(ws.retry_ready_at_ms(), Some(u64::MAX));
        assert_eq!(ws.transition(W::Running, &[], u64::MAX), Ok(()));
    }

    #[test]
    fn workstream_lifecycle_until_abandoned() {
        let mut ws = Workstream::new(2);
        let mut now = 0;
        ws.transition(W::Running, &[], now).unwrap();
        for attempt in 1..=2 {
            ws.transition(W::Failed, &[P::Failed], now).unwrap();
            assert!(ws.retry_eligible());
            assert!(ws.transition(W::Abandoned, &[], now).is_err());
            ws.transition(W::Retrying, &[], now).unwrap();
            now = ws.retry_ready_at_ms().unwrap();
            ws.transition(W::Running, &[], now).unwrap();
            assert_eq!(ws.retry_count(), attempt);
        }
        ws.transition(W::Failed, &[P::Failed], now).unwrap();
        assert!(!ws.retry_eligible());
        assert!(ws.transition(W::Retrying, &[], now).is_err());
        ws.transition(W::Abandoned, &[], now).unwrap();
        assert_eq!(ws.state(), W::Abandoned);
        assert_eq!(now, 1_000 + 2_000);
    }

    #[test]
    fn workstream_retry_eligible_only_in_failed() {
        for state in W::ALL {
            let ws = ws_in(state, 0, 3);
            assert_eq!(ws.retry_eligible(), state == W::Failed, "{state}");
        }
    }

    // ---- step -------------------------------------------------------------

    /// The seed's step table, written out independently.
    const STEP_TABLE: [(P, P); 5] = [
        (P::Pending, P::Running),
        (P::Running, P::Success),
        (P::Running, P::Failed),
        (P::Failed, P::Retrying),
        (P::Retrying, P::Running),
    ];

    fn step_in(state: P, retry_count: u32, max_retries: u32) -> Step {
        let mut step = Step::new(max_retries);
        step.state = state;
        step.retry_count = retry_count;
        step
    }

    fn at(now_ms: u64) -> StepContext<'static> {
        StepContext {
            now_ms,
            ..StepContext::default()
        }
    }

    #[test]
    fn step_starts_pending() {
        let step = Step::new(2);
        assert_eq!(step.state(), P::Pending);
        assert_eq!((step.retry_count(), step.max_retries()), (0, 2));
        assert_eq!(step.expected_exit_codes(), &[0]);
        assert_eq!(step.backoff(), RetryBackoff::default());
        assert_eq!(step.retry_ready_at_ms(), None);
        assert!(step.blocks_dependents());
    }

    #[test]
    fn step_every_pair_outside_table_is_rejected_with_seed_message() {
        let mut rejected = 0;
        for from in P::ALL {
            for to in P::ALL {
                let in_table = STEP_TABLE.contains(&(from, to));
                assert_eq!(from.can_transition_to(to), in_table, "{from} -> {to}");
                if in_table {
                    continue;
                }
                let mut step = step_in(from, 0, 3);
                let before = step.clone();
                let ctx = StepContext {
                    dependency_states: &[],
                    exit_code: Some(0),
                    now_ms: u64::MAX,
                };
                let err = step.transition(to, &ctx).unwrap_err();
                assert_eq!(
                    err,
                    InvalidTransitionError {
                        from,
                        to,
                        guard: None
                    }
                );
                assert_eq!(
                    err.to_string(),
                    format!(
                        "Cannot transition from {} to {}",
                        from.as_str(),
                        to.as_str()
                    )
                );
                assert_eq!(step, before);
                rejected += 1;
            }
        }
        assert_eq!(rejected, 25 - 5);
    }

    #[test]
    fn step_success_is_terminal_and_only_it_unblocks() {
        for s in P::ALL {
            assert_eq!(s.is_terminal(), s == P::Success, "{s}");
            assert_eq!(s.blocks_dependents(), s != P::Success, "{s}");
            assert_eq!(step_in(s, 0, 1).blocks_dependents(), s != P::Success);
        }
        assert!(P::Success.valid_targets().is_empty());
    }

    #[test]
    fn step_pending_to_running_needs_dependencies_succeeded() {
        let mut step = Step::new(1);
        for deps in [&[P::Pending][..], &[P::Success, P::Failed], &[P::Running]] {
            let ctx = StepContext {
                dependency_states: deps,
                ..StepContext::default()
            };
            let err = step.transition(P::Running, &ctx).unwrap_err();
            assert_eq!(err.guard, Some(GuardFailure::DependenciesNotMet));
            assert_eq!(
                err.to_string(),
                "Cannot transition from S_PENDING to S_RUNNING: \
                 not all dependencies are in S_SUCCESS"
            );
            assert_eq!(step.state(), P::Pending);
        }
        let ctx = StepContext {
            dependency_states: &[P::Success, P::Success],
            ..StepContext::default()
        };
        assert_eq!(step.transition(P::Running, &ctx), Ok(()));
        assert_eq!(step.state(), P::Running);
    }

    #[test]
    fn step_without_dependencies_can_start() {
        let mut step = Step::new(1);
        assert_eq!(step.transition(P::Running, &at(0)), Ok(()));
    }

    #[test]
    fn step_exit_target() {
        let step = Step::new(0).with_expected_exit_codes(vec![0, 3]);
        assert_eq!(step.exit_target(Some(0)), P::Success);
        assert_eq!(step.exit_target(Some(3)), P::Success);
        assert_eq!(step.exit_target(Some(1)), P::Failed);
        assert_eq!(step.exit_target(Some(-9)), P::Failed);
        assert_eq!(step.exit_target(None), P::Failed);
        let never = Step::new(0).with_expected_exit_codes(vec![]);
        assert_eq!(never.exit_target(Some(0)), P::Failed);
    }

    #[test]
    fn step_finish_picks_the_target() {
        let mut step = step_in(P::Running, 0, 1);
        assert_eq!(step.finish(Some(0)), Ok(P::Success));
        assert_eq!(step.state(), P::Success);

        let mut step = step_in(P::Running, 0, 1);
        assert_eq!(step.finish(Some(2)), Ok(P::Failed));
        assert_eq!(step.state(), P::Failed);

        let mut step = step_in(P::Running, 0, 1);
        assert_eq!(step.finish(None), Ok(P::Failed));

        let mut step = step_in(P::Pending, 0, 1);
        assert_eq!(
            step.finish(Some(0)).unwrap_err().to_string(),
            "Cannot transition from S_PENDING to S_SUCCESS"
        );
        assert_eq!(step.state(), P::Pending);
    }

    #[test]
    fn step_running_to_success_guard() {
        let mut step = step_in(P::Running, 0, 1);
        let ctx = StepContext {
            exit_code: Some(1),
            ..StepContext::default()
        };
        let err = step.transition(P::Success, &ctx).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_RUNNING to S_SUCCESS: exit code 1 is not in expected_exit_codes"
        );
        let err = step.transition(P::Success, &at(0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_RUNNING to S_SUCCESS: the tool has no exit code"
        );
        assert_eq!(step.state(), P::Running);
        let ctx = StepContext {
            exit_code: Some(0),
            ..StepContext::default()
        };
        assert_eq!(step.transition(P::Success, &ctx), Ok(()));
    }

    #[test]
    fn step_running_to_failed_guard() {
        let mut step = step_in(P::Running, 0, 1).with_expected_exit_codes(vec![0, 3]);
        let ctx = StepContext {
            exit_code: Some(3),
            ..StepContext::default()
        };
        let err = step.transition(P::Failed, &ctx).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_RUNNING to S_FAILED: exit code 3 is in expected_exit_codes"
        );
        assert_eq!(step.state(), P::Running);
        let ctx = StepContext {
            exit_code: Some(4),
            ..StepContext::default()
        };
        assert_eq!(step.transition(P::Failed, &ctx), Ok(()));

        let mut step = step_in(P::Running, 0, 1);
        assert_eq!(step.transition(P::Failed, &at(0)), Ok(()), "no exit code");
    }

    #[test]
    fn step_failed_to_retrying_guard() {
        let mut step = step_in(P::Failed, 1, 2);
        assert!(step.retry_eligible());
        assert_eq!(step.transition(P::Retrying, &at(100)), Ok(()));
        assert_eq!(step.retry_ready_at_ms(), Some(2_100));

        let mut step = step_in(P::Failed, 2, 2);
        assert!(!step.retry_eligible());
        let err = step.transition(P::Retrying, &at(100)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_FAILED to S_RETRYING: \
             retries exhausted (retry_count 2 >= max_retries 2)"
        );
        assert_eq!(step.state(), P::Failed);
        assert!(!step.state().is_terminal());
    }

    #[test]
    fn step_retrying_to_running_waits_for_exponential_backoff() {
        let mut step = Step::new(10);
        let mut now = 0;
        step.transition(P::Running, &at(now)).unwrap();
        let mut waits = Vec::new();
        for attempt in 1..=8 {
            assert_eq!(step.finish(Some(1)), Ok(P::Failed));
            step.transition(P::Retrying, &at(now)).unwrap();
            let ready = step.retry_ready_at_ms().unwrap();
            waits.push(ready - now);
            let err = step.transition(P::Running, &at(ready - 1)).unwrap_err();
            assert_eq!(
                err.guard,
                Some(GuardFailure::BackoffPending { remaining_ms: 1 })
            );
            assert_eq!(step.state(), P::Retrying);
            assert_eq!(step.transition(P::Running, &at(ready)), Ok(()));
            assert_eq!(step.retry_count(), attempt);
            now = ready;
        }
        assert_eq!(
            waits,
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
    }

    #[test]
    fn step_retry_eligible_only_in_failed() {
        for state in P::ALL {
            assert_eq!(step_in(state, 0, 1).retry_eligible(), state == P::Failed);
        }
    }

    #[test]
    fn step_custom_backoff() {
        let mut step = step_in(P::Failed, 0, 1).with_backoff(RetryBackoff {
            base_delay_ms: 5,
            max_delay_ms: 100,
        });
        step.transition(P::Retrying, &at(10)).unwrap();
        assert_eq!(step.retry_ready_at_ms(), Some(15));
    }

    #[test]
    fn error_trait_is_implemented() {
        let err: Box<dyn std::error::Error> = Box::new(InvalidTransitionError {
            from: W::Success,
            to: W::Failed,
            guard: None,
        });
        assert_eq!(
            err.to_string(),
            "Cannot transition from S_SUCCESS to S_FAILED"
        );
        let err: Box<dyn std::error::Error> = Box::new(CircuitOpen { retry_in_ms: 1 });
        assert_eq!(err.to_string(), "circuit is open, retry in 1 second");
    }

    // ---- circuit breaker --------------------------------------------------

    fn opened_at(t: u64) -> CircuitBreaker {
        let mut cb = CircuitBreaker::default();
        for _ in 0..5 {
            cb.record_failure(t);
        }
        assert_eq!(cb.state(), CircuitState::Open);
        cb
    }

    #[test]
    fn breaker_defaults() {
        let cb = CircuitBreaker::default();
        assert_eq!(
            cb.config(),
            CircuitBreakerConfig {
                failure_threshold: 5,
                cooldown_ms: 60_000,
                success_threshold: 1
            }
        );
        assert_eq!(cb.state(), CircuitState::Closed);
        assert_eq!(cb.consecutive_failures(), 0);
        assert_eq!(cb.opened_at_ms(), None);
        assert!(!cb.probe_in_flight());
    }

    #[test]
    fn breaker_closed_allows_and_opens_exactly_at_threshold() {
        let mut cb = CircuitBreaker::default();
        for i in 1..=4 {
            cb.record_failure(100);
            assert_eq!(cb.state(), CircuitState::Closed);
            assert_eq!(cb.consecutive_failures(), i);
            assert_eq!(cb.allow_request(100), Ok(()));
        }
        cb.record_failure(1_000);
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(cb.opened_at_ms(), Some(1_000));
        assert_eq!(cb.consecutive_failures(), 5);
    }

    #[test]
    fn breaker_success_in_closed_resets_failures() {
        let mut cb = CircuitBreaker::default();
        for _ in 0..4 {
            cb.record_failure(0);
        }
        cb.record_success(0);
        assert_eq!(cb.consecutive_failures(), 0);
        for _ in 0..4 {
            cb.record_failure(0);
        }
        assert_eq!(
            cb.state(),
            CircuitState::Closed,
            "failures must be consecutive"
        );
        cb.record_failure(0);
        assert_eq!(cb.state(), CircuitState::Open);
    }

    #[test]
    fn breaker_open_rejects_until_exact_cooldown_boundary() {
        let mut cb = opened_at(1_000);
        assert_eq!(
            cb.allow_request(1_000),
            Err(CircuitOpen {
                retry_in_ms: 60_000
            })
        );
        assert_eq!(
            cb.allow_request(60_999),
            Err(CircuitOpen { retry_in_ms: 1 })
        );
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(cb.allow_request(61_000), Ok(()));
        assert_eq!(cb.state(), CircuitState::HalfOpen);
        assert!(cb.probe_in_flight());
        assert_eq!(cb.opened_at_ms(), Some(1_000));
    }

    #[test]
    fn breaker_open_message_rounds_up() {
        let mut cb = opened_at(0);
        let err = cb.allow_request(2_000).unwrap_err();
        assert_eq!(err.retry_in_ms, 58_000);
        assert_eq!(err.to_string(), "circuit is open, retry in 58 seconds");
        let err = cb.allow_request(2_500).unwrap_err();
        assert_eq!(err.to_string(), "circuit is open, retry in 58 seconds");
        let err = cb.allow_request(2_999).unwrap_err();
        assert_eq!(err.to_string(), "circuit is open, retry in 58 seconds");
        let err = cb.allow_request(3_001).unwrap_err();
        assert_eq!(err.to_string(), "circuit is open, retry in 57 seconds");
        let err = cb.allow_request(59_999).unwrap_err();
        assert_eq!(err.to_string(), "circuit is open, retry in 1 second");
    }

    #[test]
    fn breaker_half_open_allows_a_single_test_request() {
        let mut cb = opened_at(0);
        assert_eq!(cb.allow_request(60_000), Ok(()));
        assert_eq!(
            cb.allow_request(60_000),
            Err(CircuitOpen {
                retry_in_ms: 60_000
            })
        );
        assert_eq!(
            cb.allow_request(60_500),
            Err(CircuitOpen {
                retry_in_ms: 59_500
            })
        );
        assert_eq!(cb.state(), CircuitState::HalfOpen);
    }

    #[test]
    fn breaker_half_open_success_closes_and_resets() {
        let mut cb = opened_at(0);
        cb.allow_request(60_000).unwrap();
        cb.record_success(60_100);
        assert_eq!(cb.state(), CircuitState::Closed);
        assert_eq!(cb.consecutive_failures(), 0);
        assert_eq!(cb.half_open_successes(), 0);
        assert_eq!(cb.opened_at_ms(), None);
        assert!(!cb.probe_in_flight());
        assert_eq!(cb.allow_request(60_100), Ok(()));
        assert_eq!(cb.allow_request(60_100), Ok(()));
        for _ in 0..4 {
            cb.record_failure(60_200);
        }
        assert_eq!(cb.state(), CircuitState::Closed, "counter was reset");
    }

    #[test]
    fn breaker_half_open_failure_reopens_with_fresh_opened_at() {
        let mut cb = opened_at(0);
        cb.allow_request(60_000).unwrap();
        cb.record_failure(60_500);
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(cb.opened_at_ms(), Some(60_500));
        assert!(!cb.probe_in_flight());
        assert_eq!(
            cb.allow_request(120_499),
            Err(CircuitOpen { retry_in_ms: 1 })
        );
        assert_eq!(cb.allow_request(120_500), Ok(()));
        assert_eq!(cb.state(), CircuitState::HalfOpen);
    }

    #[test]
    fn breaker_success_threshold_above_one() {
        let mut cb = CircuitBreaker::new(CircuitBreakerConfig {
            failure_threshold: 1,
            cooldown_ms: 10,
            success_threshold: 3,
        });
        cb.record_failure(0);
        assert_eq!(cb.state(), CircuitState::Open);
        for i in 1..=2 {
            cb.allow_request(100).unwrap();
            assert_eq!(cb.allow_request(100), Err(CircuitOpen { retry_in_ms: 10 }));
            cb.record_success(100);
            assert_eq!(cb.state(), CircuitState::HalfOpen);
            assert_eq!(cb.half_open_successes(), i);
        }
        cb.allow_request(100).unwrap();
        cb.record_success(100);
        assert_eq!(cb.state(), CircuitState::Closed);

        // A failure in the middle of the series starts it over.
        cb.record_failure(200);
        cb.allow_request(210).unwrap();
        cb.record_success(210);
        cb.allow_request(210).unwrap();
        cb.record_failure(210);
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(cb.half_open_successes(), 0);
        cb.allow_request(220).unwrap();
        cb.record_success(220);
        assert_eq!(cb.half_open_successes(), 1);
    }

    #[test]
    fn breaker_configurable_failure_threshold_and_cooldown() {
        let mut cb = CircuitBreaker::new(CircuitBreakerConfig {
            failure_threshold: 2,
            cooldown_ms: 500,
            success_threshold: 1,
        });
        cb.record_failure(10);
        assert_eq!(cb.state(), CircuitState::Closed);
        cb.record_failure(20);
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(cb.allow_request(519), Err(CircuitOpen { retry_in_ms: 1 }));
        assert_eq!(cb.allow_request(520), Ok(()));
    }

    #[test]
    fn breaker_zero_thresholds_behave_like_one() {
        let mut cb = CircuitBreaker::new(CircuitBreakerConfig {
            failure_threshold: 0,
            cooldown_ms: 10,
            success_threshold: 0,
        });
        assert_eq!(cb.allow_request(0), Ok(()));
        cb.record_success(0);
        assert_eq!(cb.state(), CircuitState::Closed);
        cb.record_failure(0);
        assert_eq!(cb.state(), CircuitState::Open);
        cb.allow_request(10).unwrap();
        cb.record_success(10);
        assert_eq!(cb.state(), CircuitState::Closed);
    }

    #[test]
    fn breaker_ignores_stragglers() {
        let mut cb = opened_at(0);
        cb.record_success(10);
        cb.record_failure(20);
        assert_eq!(cb.state(), CircuitState::Open);
        assert_eq!(
            cb.opened_at_ms(),
            Some(0),
            "a late failure does not extend OPEN"
        );

        // HALF_OPEN with no test outstanding (success_threshold 2 between tests).
        let mut cb = CircuitBreaker::new(CircuitBreakerConfig {
            failure_threshold: 1,
            cooldown_ms: 10,
            success_threshold: 2,
        });
        cb.record_failure(0);
        cb.allow_request(10).unwrap();
        cb.record_success(11);
        assert!(!cb.probe_in_flight());
        cb.record_failure(12);
        cb.record_success(12);
        assert_eq!(cb.state(), CircuitState::HalfOpen);
        assert_eq!(cb.half_open_successes(), 1);
    }

    #[test]
    fn breaker_lost_test_request_is_replaced_after_cooldown() {
        let mut cb = opened_at(0);
        cb.allow_request(60_000).unwrap();
        assert_eq!(
            cb.allow_request(119_999),
            Err(CircuitOpen { retry_in_ms: 1 })
        );
        assert_eq!(cb.allow_request(120_000), Ok(()));
        assert_eq!(cb.state(), CircuitState::HalfOpen);
        assert_eq!(
            cb.allow_request(120_000),
            Err(CircuitOpen {
                retry_in_ms: 60_000
            })
        );
    }

    #[test]
    fn breaker_reset() {
        let mut cb = opened_at(5);
        cb.reset();
        assert_eq!(cb, CircuitBreaker::default());
        assert_eq!(cb.allow_request(6), Ok(()));

        let mut cb = opened_at(0);
        cb.allow_request(60_000).unwrap();
        cb.reset();
        assert_eq!(cb.state(), CircuitState::Closed);
        assert!(!cb.probe_in_flight());
    }

    #[test]
    fn breaker_time_extremes_do_not_panic() {
        let mut cb = opened_at(u64::MAX - 10);
        assert_eq!(
            cb.allow_request(u64::MAX - 1),
            Err(CircuitOpen { retry_in_ms: 1 })
        );
        assert_eq!(cb.allow_request(u64::MAX), Ok(()));
        // Clock going backwards: refused, with the whole remaining wait.
        let mut cb = opened_at(1_000);
        assert_eq!(
            cb.allow_request(0),
            Err(CircuitOpen {
                retry_in_ms: 61_000
            })
        );
    }
}
