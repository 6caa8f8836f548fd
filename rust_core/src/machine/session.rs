//! The agent-session supervisor machine (seed 002, "State Transitions").
//!
//! A supervisor walks one agent through prompt building, backend session
//! spawning, running, interruption and error cool-down:
//!
//! ```text
//! Initializing ─WorktreeReady─► BuildingPrompt ◄─BackoffElapsed─ CoolingDown
//!                                  │ PromptReady                      ▲
//!                                  ▼                                  │
//!                               Spawning ───SessionExited(Error|Timeout)┤
//!                                  │ SessionStarted                   │
//!                                  ▼                                  │
//!                               Running ────SessionExited(Error|Timeout)┘
//!                  SessionExited(Success) │      │ UrgentMessage
//!                                  ▼      │      ▼
//!                        SessionComplete  │  Interrupting ─SessionExited | GraceExceeded─► BuildingPrompt
//!                                  │ WorktreeReady
//!                                  └────────────────────────────► BuildingPrompt
//! OperatorStop | FatalError, from any state ─► Stopped
//!
//! Weft's addition, usage windows (not in the seed):
//! Spawning | Running ─WindowClosed(wait_ms)─► Parked ─WindowOpened─► BuildingPrompt
//! ```
//!
//! # Design
//!
//! [`SessionMachine::handle`] is a pure transition function: it takes one
//! [`SessionEvent`], updates the state and counters, and returns the side
//! effects the caller must perform as [`SessionEffect`] values. It does no
//! I/O and reads no clock, so every row of the seed's table is testable in
//! isolation. The only duration in the seed, the cool-down backoff, is
//! computed here and carried by [`SessionState::CoolingDown`]; the caller
//! schedules a timer for it and feeds [`SessionEvent::BackoffElapsed`] back.
//!
//! A `(state, event)` pair that is not in the seed's table is rejected with a
//! [`SessionTransitionError`] and leaves the machine untouched, so a stray or
//! duplicated event from a racing backend can never corrupt the supervisor.
//!
//! # Usage windows
//!
//! A subscription's provider may refuse every session until a time it names
//! (Claude Code's `rate_limit_event` with `status: rejected` and `resetsAt`).
//! Retrying on the seed's backoff would burn the error thresholds within
//! minutes of a window that opens hours later, so the session exit is fed as
//! [`SessionEvent::WindowClosed`] instead: the machine parks for the wait the
//! caller computed (it reads no clock) and counts no error, and
//! [`SessionEvent::WindowOpened`] builds the next prompt as a cool-down's end
//! does.
//!
//! # Error counters
//!
//! Every `SessionExited(Error | Timeout)` received in `Spawning` or `Running`
//! increments both `consecutive_errors` and `total_errors`.
//! `consecutive_errors` is reset by `SessionStarted` and by
//! `SessionExited(Success)` in `Running`; `total_errors` is never reset. When
//! either counter reaches its threshold ([`SessionConfig`]) the machine stops
//! with [`SessionEffect::LogFatal`] instead of cooling down. An exit received
//! while `Interrupting` never counts: the supervisor itself asked for it.
//!
//! Because `Running` can only be entered through `SessionStarted`, which
//! resets `consecutive_errors`, that counter in practice counts failed spawns
//! in a row plus at most one crash of a session that did start. This follows
//! from the seed's table and is kept as specified.

use std::fmt;

/// Default for [`SessionConfig::max_consecutive_errors`] (seed: 5).
pub const DEFAULT_MAX_CONSECUTIVE_ERRORS: u32 = 5;

/// Default for [`SessionConfig::max_total_errors`] (seed: 20).
pub const DEFAULT_MAX_TOTAL_ERRORS: u32 = 20;

/// Cool-down after the first error of a run, in milliseconds (seed: 2000).
pub const BACKOFF_BASE_MS: u64 = 2_000;

/// Upper bound of any cool-down, in milliseconds (seed: 60000).
pub const BACKOFF_CAP_MS: u64 = 60_000;

/// Cool-down duration after the `n`-th consecutive error:
/// `min(2000 * 2^(n-1), 60000)` milliseconds.
///
/// `n` is `consecutive_errors` after the increment, so the machine never
/// passes 0; `n = 0` is treated like `n = 1` (2000 ms) rather than halving the
/// base, because a cool-down shorter than the first one has no meaning.
/// Never overflows: any `n` from 6 up to `u32::MAX` yields the 60000 ms cap.
pub fn backoff_ms(n: u32) -> u64 {
    let exponent = n.saturating_sub(1);
    // A shift of 64 or more is undefined for u64, and the cap is reached long
    // before that anyway.
    let factor = 1u64.checked_shl(exponent).unwrap_or(u64::MAX);
    BACKOFF_BASE_MS.saturating_mul(factor).min(BACKOFF_CAP_MS)
}

/// Error thresholds of a [`SessionMachine`].
///
/// A counter "reaches" its threshold when it becomes greater than or equal to
/// it, so a threshold of 0 or 1 stops the machine on the first error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionConfig {
    /// Errors in a row after which the machine stops (default 5).
    pub max_consecutive_errors: u32,
    /// Errors over the machine's lifetime after which it stops (default 20).
    pub max_total_errors: u32,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_consecutive_errors: DEFAULT_MAX_CONSECUTIVE_ERRORS,
            max_total_errors: DEFAULT_MAX_TOTAL_ERRORS,
        }
    }
}

/// How a backend session ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExitOutcome {
    /// The session completed normally.
    Success,
    /// The session failed with an error message.
    Error(String),
    /// The session exceeded its timeout.
    Timeout,
}

impl ExitOutcome {
    /// The variant's name as written in the seed (`"Success"`, `"Error"`,
    /// `"Timeout"`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Success => "Success",
            Self::Error(_) => "Error",
            Self::Timeout => "Timeout",
        }
    }
}

/// A state of the session supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Waiting for the agent's worktree to be prepared (initial state).
    Initializing,
    /// Assembling the prompt for the next session.
    BuildingPrompt,
    /// A backend session has been requested but has not reported that it
    /// started.
    Spawning,
    /// A backend session is running.
    Running {
        /// Sequence number reported by `SessionStarted`.
        session_seq: u64,
    },
    /// The running session was cancelled for an urgent message and the
    /// supervisor is waiting for it to exit.
    Interrupting {
        /// Sequence number of the session being interrupted.
        session_seq: u64,
    },
    /// The session finished successfully; waiting for the worktree to be
    /// ready for the next one.
    SessionComplete,
    /// Backing off after an error; the caller schedules
    /// [`SessionEvent::BackoffElapsed`] after `duration_ms`.
    CoolingDown {
        /// Length of this cool-down, from [`backoff_ms`].
        duration_ms: u64,
    },
    /// Waiting for the provider's usage window to open (Weft's addition);
    /// the caller schedules [`SessionEvent::WindowOpened`] after `wait_ms`.
    Parked {
        /// How long until the window opens, as the caller computed it.
        wait_ms: u64,
    },
    /// Terminal: the supervisor has stopped.
    Stopped,
}

impl SessionState {
    /// The state's name as written in the seed, without its fields.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Initializing => "Initializing",
            Self::BuildingPrompt => "BuildingPrompt",
            Self::Spawning => "Spawning",
            Self::Running { .. } => "Running",
            Self::Interrupting { .. } => "Interrupting",
            Self::SessionComplete => "SessionComplete",
            Self::CoolingDown { .. } => "CoolingDown",
            Self::Parked { .. } => "Parked",
            Self::Stopped => "Stopped",
        }
    }

    /// Whether this is the terminal state `Stopped`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Stopped)
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An input to the session supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionEvent {
    /// The agent's worktree is ready for a (new) session.
    WorktreeReady,
    /// The prompt for the next session has been built.
    PromptReady(String),
    /// The backend reported that session number `seq` started.
    SessionStarted(u64),
    /// The backend session ended.
    SessionExited(ExitOutcome),
    /// An urgent message arrived for the agent.
    UrgentMessage,
    /// An interrupted session did not exit within its grace period.
    GraceExceeded,
    /// The cool-down scheduled for [`SessionState::CoolingDown`] is over.
    BackoffElapsed,
    /// The session ended because the provider's usage window is closed for
    /// `wait_ms` more milliseconds (Weft's addition: no error is counted).
    WindowClosed(u64),
    /// The usage window a [`SessionState::Parked`] machine waited for is open.
    WindowOpened,
    /// The operator asked the agent to stop (valid in any state).
    OperatorStop,
    /// An unrecoverable error occurred (valid in any state).
    FatalError(String),
}

impl SessionEvent {
    /// The event's name as written in the seed, without its payload.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::WorktreeReady => "WorktreeReady",
            Self::PromptReady(_) => "PromptReady",
            Self::SessionStarted(_) => "SessionStarted",
            Self::SessionExited(_) => "SessionExited",
            Self::UrgentMessage => "UrgentMessage",
            Self::GraceExceeded => "GraceExceeded",
            Self::BackoffElapsed => "BackoffElapsed",
            Self::WindowClosed(_) => "WindowClosed",
            Self::WindowOpened => "WindowOpened",
            Self::OperatorStop => "OperatorStop",
            Self::FatalError(_) => "FatalError",
        }
    }
}

/// A side effect the caller must perform after a transition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionEffect {
    /// Persist the prompt the next session will be spawned with.
    StorePrompt(String),
    /// Ask the running backend session to stop.
    CancelSession,
    /// Kill the backend session that ignored its cancellation.
    ForceStopSession,
    /// Start a new session number; carries the bumped value.
    IncrementSession {
        /// `session_seq` after the increment.
        session_seq: u64,
    },
    /// Log an unrecoverable error; the machine is now `Stopped`.
    LogFatal(String),
}

/// A `(state, event)` pair that is not in the seed's transition table.
///
/// The machine is unchanged when this is returned; the rejected event is
/// handed back so the caller can log or re-route it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionTransitionError {
    /// The state the machine was (and still is) in.
    pub from: SessionState,
    /// The rejected event.
    pub event: SessionEvent,
}

impl fmt::Display for SessionTransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid session transition: {} in {}",
            self.event.as_str(),
            self.from.as_str()
        )
    }
}

impl std::error::Error for SessionTransitionError {}

/// The session supervisor: current state, error counters and session number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionMachine {
    state: SessionState,
    consecutive_errors: u32,
    total_errors: u32,
    session_seq: u64,
    config: SessionConfig,
}

impl Default for SessionMachine {
    fn default() -> Self {
        Self::new(SessionConfig::default())
    }
}

impl SessionMachine {
    /// A machine in `Initializing` with zeroed counters and `session_seq` 0.
    pub fn new(config: SessionConfig) -> Self {
        Self {
            state: SessionState::Initializing,
            consecutive_errors: 0,
            total_errors: 0,
            session_seq: 0,
            config,
        }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// Errors since the last `SessionStarted` or successful exit.
    pub fn consecutive_errors(&self) -> u32 {
        self.consecutive_errors
    }

    /// Errors over the machine's lifetime.
    pub fn total_errors(&self) -> u32 {
        self.total_errors
    }

    /// The current session number: the last `SessionStarted(seq)`, bumped by
    /// each [`SessionEffect::IncrementSession`].
    pub fn session_seq(&self) -> u64 {
        self.session_seq
    }

    /// The thresholds this machine was built with.
    pub fn config(&self) -> SessionConfig {
        self.config
    }

    /// Apply one event and return the side effects to perform, in order.
    ///
    /// Rows whose seed side effect is "None" return an empty `Vec` (which
    /// does not allocate).
    ///
    /// `OperatorStop` and `FatalError` are valid in every state, `Stopped`
    /// included, as the seed's "valid from any state" says. From `Stopped`
    /// they are idempotent on the state: `OperatorStop` returns no effect
    /// (there is no session left to cancel) and `FatalError(msg)` still
    /// returns `LogFatal(msg)` so that a late fatal error is not lost. Every
    /// other event is rejected in `Stopped`, so nothing ever leaves it.
    pub fn handle(
        &mut self,
        event: SessionEvent,
    ) -> Result<Vec<SessionEffect>, SessionTransitionError> {
        use SessionEvent as E;
        use SessionState as S;

        match (self.state, event) {
            (from, E::OperatorStop) => {
                self.state = S::Stopped;
                if matches!(from, S::Running { .. } | S::Interrupting { .. }) {
                    Ok(vec![SessionEffect::CancelSession])
                } else {
                    Ok(Vec::new())
                }
            }
            (_, E::FatalError(msg)) => {
                self.state = S::Stopped;
                Ok(vec![SessionEffect::LogFatal(msg)])
            }
            // An exit while Interrupting was requested by the supervisor, so
            // it is not an error whatever the backend reports.
            (S::Initializing, E::WorktreeReady)
            | (S::CoolingDown { .. }, E::BackoffElapsed)
            | (S::Parked { .. }, E::WindowOpened)
            | (S::Interrupting { .. }, E::SessionExited(_)) => {
                self.state = S::BuildingPrompt;
                Ok(Vec::new())
            }
            (S::BuildingPrompt, E::PromptReady(prompt)) => {
                self.state = S::Spawning;
                Ok(vec![SessionEffect::StorePrompt(prompt)])
            }
            (S::Spawning, E::SessionStarted(seq)) => {
                self.consecutive_errors = 0;
                self.session_seq = seq;
                self.state = S::Running { session_seq: seq };
                Ok(Vec::new())
            }
            (
                S::Spawning | S::Running { .. },
                E::SessionExited(outcome @ (ExitOutcome::Error(_) | ExitOutcome::Timeout)),
            ) => Ok(self.record_error(&outcome)),
            // Neither counter moves: the provider refused on its own schedule,
            // and a session that started still breaks the run of failures.
            (S::Spawning | S::Running { .. }, E::WindowClosed(wait_ms)) => {
                self.state = S::Parked { wait_ms };
                Ok(Vec::new())
            }
            (S::Running { .. }, E::SessionExited(ExitOutcome::Success)) => {
                self.consecutive_errors = 0;
                self.state = S::SessionComplete;
                Ok(Vec::new())
            }
            (S::Running { session_seq }, E::UrgentMessage) => {
                self.state = S::Interrupting { session_seq };
                Ok(vec![SessionEffect::CancelSession])
            }
            (S::Interrupting { .. }, E::GraceExceeded) => {
                self.state = S::BuildingPrompt;
                Ok(vec![SessionEffect::ForceStopSession])
            }
            (S::SessionComplete, E::WorktreeReady) => {
                self.session_seq = self.session_seq.saturating_add(1);
                self.state = S::BuildingPrompt;
                Ok(vec![SessionEffect::IncrementSession {
                    session_seq: self.session_seq,
                }])
            }
            (from, event) => Err(SessionTransitionError { from, event }),
        }
    }

    /// Count an error exit and pick between cooling down and stopping.
    fn record_error(&mut self, outcome: &ExitOutcome) -> Vec<SessionEffect> {
        self.consecutive_errors = self.consecutive_errors.saturating_add(1);
        self.total_errors = self.total_errors.saturating_add(1);

        let consecutive_hit = self.consecutive_errors >= self.config.max_consecutive_errors;
        let total_hit = self.total_errors >= self.config.max_total_errors;
        if !(consecutive_hit || total_hit) {
            self.state = SessionState::CoolingDown {
                duration_ms: backoff_ms(self.consecutive_errors),
            };
            return Vec::new();
        }

        let mut reached = Vec::with_capacity(2);
        if consecutive_hit {
            reached.push(format!(
                "consecutive_errors {}/{}",
                self.consecutive_errors, self.config.max_consecutive_errors
            ));
        }
        if total_hit {
            reached.push(format!(
                "total_errors {}/{}",
                self.total_errors, self.config.max_total_errors
            ));
        }
        let last_exit = match outcome {
            ExitOutcome::Error(msg) => format!("error: {msg}"),
            ExitOutcome::Timeout => "timeout".to_owned(),
            ExitOutcome::Success => "success".to_owned(),
        };
        self.state = SessionState::Stopped;
        vec![SessionEffect::LogFatal(format!(
            "session error threshold reached ({}); last exit: {last_exit}",
            reached.join(", ")
        ))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ExitOutcome as X;
    use SessionEffect as F;
    use SessionEvent as E;
    use SessionState as S;

    fn machine_in(state: SessionState) -> SessionMachine {
        SessionMachine {
            state,
            ..SessionMachine::default()
        }
    }

    fn err(msg: &str) -> SessionEvent {
        E::SessionExited(X::Error(msg.to_owned()))
    }

    /// One representative of every state.
    fn all_states() -> Vec<SessionState> {
        vec![
            S::Initializing,
            S::BuildingPrompt,
            S::Spawning,
            S::Running { session_seq: 7 },
            S::Interrupting { session_seq: 7 },
            S::SessionComplete,
            S::CoolingDown { duration_ms: 2_000 },
            S::Parked { wait_ms: 9_000 },
            S::Stopped,
        ]
    }

    /// One representative of every event (every `ExitOutcome` separately).
    fn all_events() -> Vec<SessionEvent> {
        vec![
            E::WorktreeReady,
            E::PromptReady("p".to_owned()),
            E::SessionStarted(9),
            E::SessionExited(X::Success),
            err("boom"),
            E::SessionExited(X::Timeout),
            E::UrgentMessage,
            E::GraceExceeded,
            E::BackoffElapsed,
            E::WindowClosed(9_000),
            E::WindowOpened,
            E::OperatorStop,
            E::FatalError("fatal".to_owned()),
        ]
    }

    /// The seed's table, written out independently of `handle`.
    fn in_table(state: &SessionState, event: &SessionEvent) -> bool {
        if matches!(event, E::OperatorStop | E::FatalError(_)) {
            return true;
        }
        match state {
            S::Initializing | S::SessionComplete => matches!(event, E::WorktreeReady),
            S::BuildingPrompt => matches!(event, E::PromptReady(_)),
            S::Spawning => matches!(
                event,
                E::SessionStarted(_)
                    | E::SessionExited(X::Error(_) | X::Timeout)
                    | E::WindowClosed(_)
            ),
            S::Running { .. } => matches!(
                event,
                E::SessionExited(_) | E::UrgentMessage | E::WindowClosed(_)
            ),
            S::Parked { .. } => matches!(event, E::WindowOpened),
            S::Interrupting { .. } => matches!(event, E::SessionExited(_) | E::GraceExceeded),
            S::CoolingDown { .. } => matches!(event, E::BackoffElapsed),
            S::Stopped => false,
        }
    }

    #[test]
    fn defaults_match_seed() {
        let m = SessionMachine::default();
        assert_eq!(m.state(), S::Initializing);
        assert_eq!(m.consecutive_errors(), 0);
        assert_eq!(m.total_errors(), 0);
        assert_eq!(m.session_seq(), 0);
        assert_eq!(
            m.config(),
            SessionConfig {
                max_consecutive_errors: 5,
                max_total_errors: 20
            }
        );
    }

    // ---- table rows -------------------------------------------------------

    #[test]
    fn row_initializing_worktree_ready() {
        let mut m = machine_in(S::Initializing);
        assert_eq!(m.handle(E::WorktreeReady), Ok(vec![]));
        assert_eq!(m.state(), S::BuildingPrompt);
    }

    #[test]
    fn row_building_prompt_prompt_ready_stores_prompt() {
        let mut m = machine_in(S::BuildingPrompt);
        assert_eq!(
            m.handle(E::PromptReady("do it".to_owned())),
            Ok(vec![F::StorePrompt("do it".to_owned())])
        );
        assert_eq!(m.state(), S::Spawning);
    }

    #[test]
    fn row_spawning_session_started_sets_seq_and_resets_consecutive() {
        let mut m = machine_in(S::Spawning);
        m.consecutive_errors = 3;
        m.total_errors = 4;
        assert_eq!(m.handle(E::SessionStarted(42)), Ok(vec![]));
        assert_eq!(m.state(), S::Running { session_seq: 42 });
        assert_eq!(m.session_seq(), 42);
        assert_eq!(m.consecutive_errors(), 0);
        assert_eq!(m.total_errors(), 4, "total_errors is never reset");
    }

    #[test]
    fn row_spawning_error_cools_down_and_counts() {
        let mut m = machine_in(S::Spawning);
        assert_eq!(m.handle(err("no binary")), Ok(vec![]));
        assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 1));
    }

    #[test]
    fn row_spawning_timeout_cools_down_and_counts() {
        let mut m = machine_in(S::Spawning);
        assert_eq!(m.handle(E::SessionExited(X::Timeout)), Ok(vec![]));
        assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 1));
    }

    #[test]
    fn row_spawning_error_at_threshold_stops() {
        let mut m = machine_in(S::Spawning);
        m.consecutive_errors = 4;
        m.total_errors = 4;
        assert_eq!(
            m.handle(err("no binary")),
            Ok(vec![F::LogFatal(
                "session error threshold reached (consecutive_errors 5/5); \
                 last exit: error: no binary"
                    .to_owned()
            )])
        );
        assert_eq!(m.state(), S::Stopped);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (5, 5));
    }

    #[test]
    fn row_spawning_timeout_at_threshold_stops() {
        let mut m = machine_in(S::Spawning);
        m.consecutive_errors = 4;
        m.total_errors = 4;
        assert_eq!(
            m.handle(E::SessionExited(X::Timeout)),
            Ok(vec![F::LogFatal(
                "session error threshold reached (consecutive_errors 5/5); last exit: timeout"
                    .to_owned()
            )])
        );
        assert_eq!(m.state(), S::Stopped);
    }

    #[test]
    fn row_running_success_completes_and_resets_consecutive() {
        let mut m = machine_in(S::Running { session_seq: 3 });
        m.consecutive_errors = 2;
        m.total_errors = 2;
        assert_eq!(m.handle(E::SessionExited(X::Success)), Ok(vec![]));
        assert_eq!(m.state(), S::SessionComplete);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (0, 2));
    }

    #[test]
    fn row_running_error_cools_down_and_counts() {
        let mut m = machine_in(S::Running { session_seq: 3 });
        assert_eq!(m.handle(err("crash")), Ok(vec![]));
        assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 1));
    }

    #[test]
    fn row_running_timeout_cools_down_and_counts() {
        let mut m = machine_in(S::Running { session_seq: 3 });
        assert_eq!(m.handle(E::SessionExited(X::Timeout)), Ok(vec![]));
        assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 1));
    }

    #[test]
    fn row_running_error_at_threshold_stops() {
        let mut m = machine_in(S::Running { session_seq: 3 });
        m.consecutive_errors = 4;
        m.total_errors = 10;
        assert_eq!(
            m.handle(err("crash")),
            Ok(vec![F::LogFatal(
                "session error threshold reached (consecutive_errors 5/5); \
                 last exit: error: crash"
                    .to_owned()
            )])
        );
        assert_eq!(m.state(), S::Stopped);
    }

    #[test]
    fn row_running_timeout_at_total_threshold_stops() {
        let mut m = machine_in(S::Running { session_seq: 3 });
        m.total_errors = 19;
        assert_eq!(
            m.handle(E::SessionExited(X::Timeout)),
            Ok(vec![F::LogFatal(
                "session error threshold reached (total_errors 20/20); last exit: timeout"
                    .to_owned()
            )])
        );
        assert_eq!(m.state(), S::Stopped);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 20));
    }

    #[test]
    fn row_running_urgent_message_interrupts_with_cancel() {
        let mut m = machine_in(S::Running { session_seq: 11 });
        assert_eq!(m.handle(E::UrgentMessage), Ok(vec![F::CancelSession]));
        assert_eq!(m.state(), S::Interrupting { session_seq: 11 });
    }

    #[test]
    fn row_interrupting_any_exit_rebuilds_prompt_without_counting() {
        for outcome in [X::Success, X::Error("killed".to_owned()), X::Timeout] {
            let mut m = machine_in(S::Interrupting { session_seq: 11 });
            m.consecutive_errors = 0;
            m.total_errors = 3;
            assert_eq!(m.handle(E::SessionExited(outcome.clone())), Ok(vec![]));
            assert_eq!(m.state(), S::BuildingPrompt, "{outcome:?}");
            assert_eq!(
                (m.consecutive_errors(), m.total_errors()),
                (0, 3),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn row_interrupting_exit_never_stops_even_at_threshold_minus_one() {
        let mut m = machine_in(S::Interrupting { session_seq: 1 });
        m.consecutive_errors = 4;
        m.total_errors = 19;
        assert_eq!(m.handle(E::SessionExited(X::Timeout)), Ok(vec![]));
        assert_eq!(m.state(), S::BuildingPrompt);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (4, 19));
    }

    #[test]
    fn row_interrupting_grace_exceeded_force_stops() {
        let mut m = machine_in(S::Interrupting { session_seq: 11 });
        assert_eq!(m.handle(E::GraceExceeded), Ok(vec![F::ForceStopSession]));
        assert_eq!(m.state(), S::BuildingPrompt);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (0, 0));
    }

    #[test]
    fn row_session_complete_worktree_ready_increments_session() {
        let mut m = machine_in(S::SessionComplete);
        m.session_seq = 42;
        assert_eq!(
            m.handle(E::WorktreeReady),
            Ok(vec![F::IncrementSession { session_seq: 43 }])
        );
        assert_eq!(m.state(), S::BuildingPrompt);
        assert_eq!(m.session_seq(), 43);
    }

    #[test]
    fn increment_session_saturates() {
        let mut m = machine_in(S::SessionComplete);
        m.session_seq = u64::MAX;
        assert_eq!(
            m.handle(E::WorktreeReady),
            Ok(vec![F::IncrementSession {
                session_seq: u64::MAX
            }])
        );
    }

    #[test]
    fn a_closed_window_parks_without_counting_and_opens_to_a_new_prompt() {
        for from in [S::Spawning, S::Running { session_seq: 3 }] {
            let mut m = machine_in(from);
            m.consecutive_errors = 2;
            m.total_errors = 7;
            assert_eq!(m.handle(E::WindowClosed(60_000)), Ok(vec![]));
            assert_eq!(m.state(), S::Parked { wait_ms: 60_000 });
            assert_eq!((m.consecutive_errors(), m.total_errors()), (2, 7));
            assert_eq!(m.handle(E::WindowOpened), Ok(vec![]));
            assert_eq!(m.state(), S::BuildingPrompt);
            assert_eq!((m.consecutive_errors(), m.total_errors()), (2, 7));
        }
    }

    #[test]
    fn a_stop_while_parked_cancels_nothing() {
        let mut m = machine_in(S::Parked { wait_ms: 1 });
        assert_eq!(m.handle(E::OperatorStop), Ok(vec![]));
        assert_eq!(m.state(), S::Stopped);
    }

    #[test]
    fn row_cooling_down_backoff_elapsed() {
        let mut m = machine_in(S::CoolingDown { duration_ms: 4_000 });
        m.consecutive_errors = 2;
        assert_eq!(m.handle(E::BackoffElapsed), Ok(vec![]));
        assert_eq!(m.state(), S::BuildingPrompt);
        assert_eq!(m.consecutive_errors(), 2, "backoff does not reset errors");
    }

    // ---- global transitions ----------------------------------------------

    #[test]
    fn operator_stop_from_every_state() {
        for state in all_states() {
            let mut m = machine_in(state);
            let expected = if matches!(state, S::Running { .. } | S::Interrupting { .. }) {
                vec![F::CancelSession]
            } else {
                vec![]
            };
            assert_eq!(m.handle(E::OperatorStop), Ok(expected), "from {state}");
            assert_eq!(m.state(), S::Stopped, "from {state}");
        }
    }

    #[test]
    fn fatal_error_from_every_state() {
        for state in all_states() {
            let mut m = machine_in(state);
            m.consecutive_errors = 1;
            m.total_errors = 2;
            assert_eq!(
                m.handle(E::FatalError("disk full".to_owned())),
                Ok(vec![F::LogFatal("disk full".to_owned())]),
                "from {state}"
            );
            assert_eq!(m.state(), S::Stopped, "from {state}");
            assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 2));
        }
    }

    #[test]
    fn stopped_is_idempotent_for_global_events() {
        let mut m = machine_in(S::Stopped);
        assert_eq!(m.handle(E::OperatorStop), Ok(vec![]));
        assert_eq!(m.handle(E::OperatorStop), Ok(vec![]));
        assert_eq!(
            m.handle(E::FatalError("late".to_owned())),
            Ok(vec![F::LogFatal("late".to_owned())])
        );
        assert_eq!(m.state(), S::Stopped);
        assert!(m.state().is_terminal());
    }

    // ---- invalid pairs ----------------------------------------------------

    #[test]
    fn every_pair_outside_the_table_is_rejected_and_changes_nothing() {
        let mut rejected = 0;
        let mut accepted = 0;
        for state in all_states() {
            for event in all_events() {
                let mut m = machine_in(state);
                m.consecutive_errors = 2;
                m.total_errors = 3;
                m.session_seq = 7;
                let before = m.clone();
                let result = m.handle(event.clone());
                if in_table(&state, &event) {
                    assert!(result.is_ok(), "{event:?} in {state:?}: {result:?}");
                    accepted += 1;
                } else {
                    assert_eq!(
                        result,
                        Err(SessionTransitionError {
                            from: state,
                            event: event.clone()
                        }),
                        "{event:?} in {state:?}"
                    );
                    assert_eq!(m, before, "{event:?} in {state:?} mutated the machine");
                    rejected += 1;
                }
            }
        }
        // 9 states x 13 events: 9 x 2 global cells plus 15 cells of the seed's
        // table (rows with a wildcard outcome count once per outcome) and 3 of
        // the usage windows.
        assert_eq!(accepted, 18 + 15 + 3);
        assert_eq!(rejected, 117 - 36);
    }

    #[test]
    fn stopped_rejects_everything_but_global_events() {
        for event in all_events() {
            if matches!(event, E::OperatorStop | E::FatalError(_)) {
                continue;
            }
            let mut m = machine_in(S::Stopped);
            assert!(m.handle(event.clone()).is_err(), "{event:?}");
            assert_eq!(m.state(), S::Stopped);
        }
    }

    #[test]
    fn spawning_success_exit_is_invalid() {
        let mut m = machine_in(S::Spawning);
        let e = m.handle(E::SessionExited(X::Success)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid session transition: SessionExited in Spawning"
        );
        assert_eq!(m.state(), S::Spawning);
    }

    #[test]
    fn error_display_message() {
        let mut m = machine_in(S::Running { session_seq: 1 });
        let e = m.handle(E::BackoffElapsed).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid session transition: BackoffElapsed in Running"
        );
        assert_eq!(e.from, S::Running { session_seq: 1 });
        assert_eq!(e.event, E::BackoffElapsed);
        let _: &dyn std::error::Error = &e;
    }

    // ---- counters and thresholds ------------------------------------------

    /// Drive `BuildingPrompt -> Spawning -> (fail)`, returning the effects of
    /// the failing exit.
    fn fail_spawn(m: &mut SessionMachine) -> Vec<SessionEffect> {
        assert_eq!(m.state(), S::BuildingPrompt);
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionExited(X::Timeout)).unwrap()
    }

    #[test]
    fn consecutive_threshold_reached_exactly_on_fifth_error() {
        let mut m = SessionMachine::default();
        m.handle(E::WorktreeReady).unwrap();
        for (n, expected_ms) in [(1, 2_000), (2, 4_000), (3, 8_000), (4, 16_000)] {
            assert_eq!(fail_spawn(&mut m), vec![]);
            assert_eq!(
                m.state(),
                S::CoolingDown {
                    duration_ms: expected_ms
                }
            );
            assert_eq!(m.consecutive_errors(), n);
            m.handle(E::BackoffElapsed).unwrap();
        }
        assert_eq!(
            fail_spawn(&mut m),
            vec![F::LogFatal(
                "session error threshold reached (consecutive_errors 5/5); last exit: timeout"
                    .to_owned()
            )]
        );
        assert_eq!(m.state(), S::Stopped);
        assert_eq!((m.consecutive_errors(), m.total_errors()), (5, 5));
    }

    #[test]
    fn session_started_breaks_the_consecutive_run() {
        let mut m = SessionMachine::default();
        m.handle(E::WorktreeReady).unwrap();
        for _ in 0..4 {
            fail_spawn(&mut m);
            m.handle(E::BackoffElapsed).unwrap();
        }
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionStarted(1)).unwrap();
        assert_eq!(m.consecutive_errors(), 0);
        assert_eq!(m.handle(err("crash")), Ok(vec![]));
        assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
        assert_eq!((m.consecutive_errors(), m.total_errors()), (1, 5));
    }

    #[test]
    fn total_threshold_reached_exactly_on_twentieth_error() {
        let mut m = SessionMachine::default();
        m.handle(E::WorktreeReady).unwrap();
        for i in 1..=19u32 {
            m.handle(E::PromptReady("p".to_owned())).unwrap();
            m.handle(E::SessionStarted(u64::from(i))).unwrap();
            assert_eq!(m.handle(err("crash")), Ok(vec![]), "error {i}");
            assert_eq!(m.state(), S::CoolingDown { duration_ms: 2_000 });
            assert_eq!((m.consecutive_errors(), m.total_errors()), (1, i));
            m.handle(E::BackoffElapsed).unwrap();
        }
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionStarted(20)).unwrap();
        assert_eq!(
            m.handle(err("crash")),
            Ok(vec![F::LogFatal(
                "session error threshold reached (total_errors 20/20); \
                 last exit: error: crash"
                    .to_owned()
            )])
        );
        assert_eq!(m.state(), S::Stopped);
    }

    #[test]
    fn both_thresholds_reached_together_are_both_reported() {
        let mut m = SessionMachine::new(SessionConfig {
            max_consecutive_errors: 2,
            max_total_errors: 2,
        });
        m.state = S::Spawning;
        m.consecutive_errors = 1;
        m.total_errors = 1;
        assert_eq!(
            m.handle(err("x")),
            Ok(vec![F::LogFatal(
                "session error threshold reached (consecutive_errors 2/2, total_errors 2/2); \
                 last exit: error: x"
                    .to_owned()
            )])
        );
    }

    #[test]
    fn configurable_thresholds() {
        let config = SessionConfig {
            max_consecutive_errors: 3,
            max_total_errors: 100,
        };
        let mut m = SessionMachine::new(config);
        assert_eq!(m.config(), config);
        m.handle(E::WorktreeReady).unwrap();
        assert_eq!(fail_spawn(&mut m), vec![]);
        m.handle(E::BackoffElapsed).unwrap();
        assert_eq!(fail_spawn(&mut m), vec![]);
        m.handle(E::BackoffElapsed).unwrap();
        assert_eq!(fail_spawn(&mut m).len(), 1);
        assert_eq!(m.state(), S::Stopped);

        // Raised thresholds let the backoff reach its cap.
        let mut m = SessionMachine::new(SessionConfig {
            max_consecutive_errors: 10,
            max_total_errors: 10,
        });
        m.handle(E::WorktreeReady).unwrap();
        let mut durations = Vec::new();
        for _ in 0..9 {
            assert_eq!(fail_spawn(&mut m), vec![]);
            if let S::CoolingDown { duration_ms } = m.state() {
                durations.push(duration_ms);
            }
            m.handle(E::BackoffElapsed).unwrap();
        }
        assert_eq!(
            durations,
            [2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000]
        );
        assert_eq!(fail_spawn(&mut m).len(), 1);
        assert_eq!(m.state(), S::Stopped);
    }

    #[test]
    fn threshold_of_zero_or_one_stops_on_first_error() {
        for max in [0, 1] {
            let mut m = SessionMachine::new(SessionConfig {
                max_consecutive_errors: max,
                max_total_errors: 20,
            });
            m.state = S::Spawning;
            assert_eq!(m.handle(err("x")).map(|v| v.len()), Ok(1));
            assert_eq!(m.state(), S::Stopped);
        }
    }

    #[test]
    fn counters_saturate() {
        let mut m = SessionMachine::new(SessionConfig {
            max_consecutive_errors: u32::MAX,
            max_total_errors: u32::MAX,
        });
        m.state = S::Spawning;
        m.consecutive_errors = u32::MAX - 1;
        m.total_errors = u32::MAX - 1;
        assert_eq!(m.handle(err("x")).map(|v| v.len()), Ok(1));
        assert_eq!(
            (m.consecutive_errors(), m.total_errors()),
            (u32::MAX, u32::MAX)
        );
    }

    #[test]
    fn interrupt_cycle_does_not_touch_counters() {
        let mut m = SessionMachine::default();
        m.handle(E::WorktreeReady).unwrap();
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionStarted(5)).unwrap();
        for _ in 0..30 {
            assert_eq!(m.handle(E::UrgentMessage), Ok(vec![F::CancelSession]));
            assert_eq!(m.handle(err("cancelled")), Ok(vec![]));
            m.handle(E::PromptReady("p".to_owned())).unwrap();
            m.handle(E::SessionStarted(5)).unwrap();
        }
        assert_eq!((m.consecutive_errors(), m.total_errors()), (0, 0));
        assert_eq!(m.state(), S::Running { session_seq: 5 });
    }

    #[test]
    fn full_happy_path_bumps_session_seq() {
        let mut m = SessionMachine::default();
        m.handle(E::WorktreeReady).unwrap();
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionStarted(1)).unwrap();
        m.handle(E::SessionExited(X::Success)).unwrap();
        assert_eq!(
            m.handle(E::WorktreeReady),
            Ok(vec![F::IncrementSession { session_seq: 2 }])
        );
        assert_eq!(m.session_seq(), 2);
        m.handle(E::PromptReady("p".to_owned())).unwrap();
        m.handle(E::SessionStarted(2)).unwrap();
        assert_eq!(m.state(), S::Running { session_seq: 2 });
    }

    // ---- backoff ----------------------------------------------------------

    #[test]
    fn backoff_table_from_seed() {
        assert_eq!(backoff_ms(1), 2_000);
        assert_eq!(backoff_ms(2), 4_000);
        assert_eq!(backoff_ms(3), 8_000);
        assert_eq!(backoff_ms(4), 16_000);
        assert_eq!(backoff_ms(5), 32_000);
        assert_eq!(backoff_ms(6), 60_000);
        assert_eq!(backoff_ms(7), 60_000);
    }

    #[test]
    fn backoff_huge_and_zero_n() {
        for n in [10, 31, 32, 33, 63, 64, 65, 1_000, u32::MAX - 1, u32::MAX] {
            assert_eq!(backoff_ms(n), 60_000, "n = {n}");
        }
        assert_eq!(backoff_ms(0), 2_000);
    }

    #[test]
    fn names() {
        assert_eq!(X::Error("e".to_owned()).as_str(), "Error");
        assert_eq!(X::Success.as_str(), "Success");
        assert_eq!(X::Timeout.as_str(), "Timeout");
        let names: Vec<&str> = all_states().iter().map(SessionState::as_str).collect();
        assert_eq!(
            names,
            [
                "Initializing",
                "BuildingPrompt",
                "Spawning",
                "Running",
                "Interrupting",
                "SessionComplete",
                "CoolingDown",
                "Parked",
                "Stopped"
            ]
        );
        let names: Vec<&str> = all_events().iter().map(SessionEvent::as_str).collect();
        assert_eq!(
            names,
            [
                "WorktreeReady",
                "PromptReady",
                "SessionStarted",
                "SessionExited",
                "SessionExited",
                "SessionExited",
                "UrgentMessage",
                "GraceExceeded",
                "BackoffElapsed",
                "WindowClosed",
                "WindowOpened",
                "OperatorStop",
                "FatalError"
            ]
        );
    }
}
