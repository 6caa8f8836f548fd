//! The codon state machine (seed `000`): eight states, a fixed transition
//! graph, and metadata guards that say what a transition into a state must
//! carry.
//!
//! The graph only moves forward. Every non-terminal state may fail or be
//! skipped; `completed`, `failed` and `skipped` are final. The guards exist
//! because each state promises data to whoever reads it (a `running` codon
//! has a session id, a `completed` one has a checkpoint), so a transition
//! that cannot keep the promise is refused before it changes anything.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::state::model::{BudgetExceeded, FailureReason};

/// One of the eight states a codon execution moves through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodonStatus {
    /// Rig setup is running (copy files, run commands).
    Preparing,
    /// The agent process is being spawned.
    Starting,
    /// The process is up; waiting for its session id.
    Initializing,
    /// The agent is working.
    Running,
    /// The agent finished; sentinel queues are draining.
    CompletingSentinels,
    /// Success (terminal).
    Completed,
    /// Error (terminal).
    Failed,
    /// Skipped by the user (terminal).
    Skipped,
}

impl CodonStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [CodonStatus; 8] = [
        CodonStatus::Preparing,
        CodonStatus::Starting,
        CodonStatus::Initializing,
        CodonStatus::Running,
        CodonStatus::CompletingSentinels,
        CodonStatus::Completed,
        CodonStatus::Failed,
        CodonStatus::Skipped,
    ];

    /// The wire name (`"completing-sentinels"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            CodonStatus::Preparing => "preparing",
            CodonStatus::Starting => "starting",
            CodonStatus::Initializing => "initializing",
            CodonStatus::Running => "running",
            CodonStatus::CompletingSentinels => "completing-sentinels",
            CodonStatus::Completed => "completed",
            CodonStatus::Failed => "failed",
            CodonStatus::Skipped => "skipped",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(name: &str) -> Option<CodonStatus> {
        CodonStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// `completed`, `failed` and `skipped` are final.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            CodonStatus::Completed | CodonStatus::Failed | CodonStatus::Skipped
        )
    }

    /// The states this one may move to, in the seed's order.
    pub const fn targets(self) -> &'static [CodonStatus] {
        use CodonStatus::{
            Completed, CompletingSentinels, Failed, Initializing, Running, Skipped, Starting,
        };
        match self {
            CodonStatus::Preparing => &[Starting, Failed, Skipped],
            CodonStatus::Starting => &[Initializing, Failed, Skipped],
            CodonStatus::Initializing => &[Running, Failed, Skipped],
            CodonStatus::Running => &[CompletingSentinels, Completed, Failed, Skipped],
            CodonStatus::CompletingSentinels => &[Completed, Failed, Skipped],
            CodonStatus::Completed | CodonStatus::Failed | CodonStatus::Skipped => &[],
        }
    }

    /// Whether the graph has an edge from `self` to `to`.
    pub fn can_transition_to(self, to: CodonStatus) -> bool {
        self.targets().contains(&to)
    }

    /// Whether a codon in this state has a live agent whose costs accrue.
    pub const fn is_live(self) -> bool {
        matches!(
            self,
            CodonStatus::Running | CodonStatus::CompletingSentinels
        )
    }
}

impl fmt::Display for CodonStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Metadata a `CodonTransitioned` event may carry. Which fields are required
/// depends on the target state; see [`check_metadata`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TransitionMetadata {
    /// Agent process id (to `initializing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_pid: Option<i64>,
    /// Agent log path, relative to the execution (to `initializing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_log_path: Option<String>,
    /// The session this codon resumes, for continue-previous codons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_session_id: Option<String>,
    /// The agent's session id (to `running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_session_id: Option<String>,
    /// Process exit code (to `failed`; `0` if given to `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Why the codon failed (to `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<FailureReason>,
    /// The state the codon failed from (to `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_during: Option<String>,
    /// The state the codon was skipped from (to `skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_during: Option<String>,
    /// Whether the agent's result message arrived (to `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_message_received: Option<bool>,
    /// The checkpoint taken for this transition (required to `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_sha: Option<String>,
    /// The agent ran out of context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_exceeded: Option<bool>,
    /// How many times the session was extended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_count: Option<u64>,
    /// The budget that was exceeded, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exceeded: Option<BudgetExceeded>,
}

/// A transition the graph does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidTransition {
    /// Current state.
    pub from: CodonStatus,
    /// Requested state.
    pub to: CodonStatus,
}

impl fmt::Display for InvalidTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Invalid transition from {} to {}", self.from, self.to)
    }
}

/// A field that is present but of the wrong kind, with what it should be.
pub type InvalidField = (&'static str, &'static str);

/// A transition whose metadata does not satisfy its target's guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataError {
    /// Current state.
    pub from: CodonStatus,
    /// Requested state.
    pub to: CodonStatus,
    /// Required fields that are absent (or null, or an empty checkpoint sha).
    pub missing: Vec<&'static str>,
    /// Required fields that are present but wrong, with what they should be.
    pub invalid: Vec<InvalidField>,
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let invalid = || {
            self.invalid
                .iter()
                .map(|(field, want)| format!("{field} must be {want}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.missing.is_empty() {
            write!(
                f,
                "Invalid metadata for transition to {}: {}",
                self.to,
                invalid()
            )
        } else {
            write!(
                f,
                "Missing required metadata for transition to {}: {}",
                self.to,
                self.missing.join(", ")
            )?;
            if !self.invalid.is_empty() {
                write!(f, "; invalid: {}", invalid())?;
            }
            Ok(())
        }
    }
}

/// Why a codon transition was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransitionError {
    /// Not an edge of the graph.
    Invalid(InvalidTransition),
    /// An edge of the graph, but the metadata does not satisfy the guard.
    Metadata(MetadataError),
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionError::Invalid(e) => e.fmt(f),
            TransitionError::Metadata(e) => e.fmt(f),
        }
    }
}

/// The fields the guard of `to` requires, in the order they are reported.
pub const fn required_fields(to: CodonStatus) -> &'static [&'static str] {
    match to {
        CodonStatus::Initializing => &["claudePid", "claudeLogPath"],
        CodonStatus::Running => &["claudeSessionId"],
        CodonStatus::Completed => &["checkpointSha"],
        CodonStatus::Failed => &["exitCode", "failureReason", "failedDuring"],
        CodonStatus::Skipped => &["skippedDuring"],
        CodonStatus::Preparing | CodonStatus::Starting | CodonStatus::CompletingSentinels => &[],
    }
}

const STATUS_NAME: &str = "a codon status";

/// Checks the guard of `to` against `meta`, for a codon leaving `from`.
///
/// `failedDuring` and `skippedDuring` must name `from`: they say where the
/// codon was when it stopped, and a record that lied about it would send
/// whoever debugs it to the wrong phase.
///
/// `type_errors` lists required fields that were present in the caller's
/// input but could not be read at all (a string where a number belongs); the
/// byte path never has any because serde refuses such input earlier. They
/// are reported only for fields the guard of `to` requires.
pub fn check_metadata(
    from: CodonStatus,
    to: CodonStatus,
    meta: Option<&TransitionMetadata>,
    type_errors: &[InvalidField],
) -> Result<(), MetadataError> {
    let empty = TransitionMetadata::default();
    let meta = meta.unwrap_or(&empty);
    let mut missing = Vec::new();
    let mut invalid: Vec<InvalidField> = Vec::new();
    for &field in required_fields(to) {
        if let Some(&bad) = type_errors.iter().find(|(name, _)| *name == field) {
            invalid.push(bad);
            continue;
        }
        let present = match field {
            "claudePid" => meta.claude_pid.is_some(),
            "claudeLogPath" => meta.claude_log_path.is_some(),
            "claudeSessionId" => meta.claude_session_id.is_some(),
            "checkpointSha" => meta
                .checkpoint_sha
                .as_deref()
                .is_some_and(|s| !s.is_empty()),
            "exitCode" => meta.exit_code.is_some(),
            "failureReason" => meta.failure_reason.is_some(),
            "failedDuring" => during(field, meta.failed_during.as_deref(), from, &mut invalid),
            "skippedDuring" => during(field, meta.skipped_during.as_deref(), from, &mut invalid),
            _ => true,
        };
        if !present {
            missing.push(field);
        }
    }
    // The seed fixes a completed codon's exit code at 0; anything else is a
    // caller that meant `failed`.
    if to == CodonStatus::Completed {
        if let Some(&bad) = type_errors.iter().find(|(name, _)| *name == "exitCode") {
            invalid.push(bad);
        } else if meta.exit_code.is_some_and(|c| c != 0) {
            invalid.push(("exitCode", "0"));
        }
    }
    if missing.is_empty() && invalid.is_empty() {
        Ok(())
    } else {
        Err(MetadataError {
            from,
            to,
            missing,
            invalid,
        })
    }
}

/// Checks a `failedDuring`/`skippedDuring` value; false when absent.
fn during(
    field: &'static str,
    value: Option<&str>,
    from: CodonStatus,
    invalid: &mut Vec<InvalidField>,
) -> bool {
    let Some(name) = value else {
        return false;
    };
    match CodonStatus::parse(name) {
        None => invalid.push((field, STATUS_NAME)),
        Some(status) if status != from => invalid.push((field, from.as_str())),
        Some(_) => {}
    }
    true
}

/// Validates a transition: first the graph, then the guard of the target.
pub fn validate_transition(
    from: CodonStatus,
    to: CodonStatus,
    meta: Option<&TransitionMetadata>,
) -> Result<(), TransitionError> {
    if !from.can_transition_to(to) {
        return Err(TransitionError::Invalid(InvalidTransition { from, to }));
    }
    check_metadata(from, to, meta, &[]).map_err(TransitionError::Metadata)
}

#[cfg(test)]
mod tests {
    use super::CodonStatus::{
        Completed, CompletingSentinels, Failed, Initializing, Preparing, Running, Skipped, Starting,
    };
    use super::*;

    fn reason() -> FailureReason {
        FailureReason {
            kind: "unknown".into(),
            retriable: false,
            message: None,
            retry_after_ms: None,
            sentinel_refs: None,
        }
    }

    /// Metadata that satisfies every guard at once, for a codon leaving `from`.
    fn full_from(from: CodonStatus) -> TransitionMetadata {
        TransitionMetadata {
            failed_during: Some(from.as_str().into()),
            skipped_during: Some(from.as_str().into()),
            ..full()
        }
    }

    /// Metadata that satisfies every guard for a codon leaving `running`.
    fn full() -> TransitionMetadata {
        TransitionMetadata {
            claude_pid: Some(42),
            claude_log_path: Some("runs/r/c-claude.log".into()),
            claude_session_id: Some("s-1".into()),
            exit_code: Some(0),
            failure_reason: Some(reason()),
            failed_during: Some("running".into()),
            skipped_during: Some("running".into()),
            checkpoint_sha: Some("abc123".into()),
            ..TransitionMetadata::default()
        }
    }

    #[test]
    fn the_graph_is_exactly_the_seed_table() {
        let table: [(CodonStatus, &[CodonStatus]); 8] = [
            (Preparing, &[Starting, Failed, Skipped]),
            (Starting, &[Initializing, Failed, Skipped]),
            (Initializing, &[Running, Failed, Skipped]),
            (Running, &[CompletingSentinels, Completed, Failed, Skipped]),
            (CompletingSentinels, &[Completed, Failed, Skipped]),
            (Completed, &[]),
            (Failed, &[]),
            (Skipped, &[]),
        ];
        for (from, allowed) in table {
            for to in CodonStatus::ALL {
                let expected = allowed.contains(&to);
                assert_eq!(from.can_transition_to(to), expected, "{from} -> {to}");
                let result = validate_transition(from, to, Some(&full_from(from)));
                assert_eq!(result.is_ok(), expected, "{from} -> {to}: {result:?}");
                if !expected {
                    assert_eq!(
                        result.unwrap_err().to_string(),
                        format!("Invalid transition from {from} to {to}")
                    );
                }
            }
        }
    }

    #[test]
    fn terminal_states_are_final_and_the_rest_are_not() {
        for s in CodonStatus::ALL {
            assert_eq!(s.is_terminal(), matches!(s, Completed | Failed | Skipped));
            assert_eq!(s.is_terminal(), s.targets().is_empty());
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in CodonStatus::ALL {
            assert_eq!(CodonStatus::parse(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        assert_eq!(CodonStatus::parse("completing_sentinels"), None);
        assert_eq!(CodonStatus::parse("Running"), None);
    }

    #[test]
    fn the_seed_messages_are_exact() {
        let err = validate_transition(Completed, Running, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid transition from completed to running"
        );
        let err = validate_transition(Initializing, Running, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Missing required metadata for transition to running: claudeSessionId"
        );
    }

    #[test]
    fn each_guard_reports_exactly_its_missing_fields() {
        let cases: [(CodonStatus, CodonStatus, &[&str]); 5] = [
            (Starting, Initializing, &["claudePid", "claudeLogPath"]),
            (Initializing, Running, &["claudeSessionId"]),
            (Running, Completed, &["checkpointSha"]),
            (
                Running,
                Failed,
                &["exitCode", "failureReason", "failedDuring"],
            ),
            (Running, Skipped, &["skippedDuring"]),
        ];
        for (from, to, fields) in cases {
            match validate_transition(from, to, Some(&TransitionMetadata::default())) {
                Err(TransitionError::Metadata(e)) => {
                    assert_eq!(e.missing, fields.to_vec());
                    assert!(e.invalid.is_empty());
                }
                other => panic!("{from} -> {to}: {other:?}"),
            }
            assert!(validate_transition(from, to, Some(&full_from(from))).is_ok());
        }
    }

    #[test]
    fn guards_without_requirements_accept_no_metadata() {
        for (from, to) in [(Preparing, Starting), (Running, CompletingSentinels)] {
            assert!(validate_transition(from, to, None).is_ok());
        }
    }

    #[test]
    fn one_missing_field_of_several_is_named_alone() {
        let meta = TransitionMetadata {
            claude_pid: Some(1),
            ..TransitionMetadata::default()
        };
        let err = validate_transition(Starting, Initializing, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Missing required metadata for transition to initializing: claudeLogPath"
        );
    }

    #[test]
    fn an_empty_checkpoint_sha_counts_as_missing() {
        let meta = TransitionMetadata {
            checkpoint_sha: Some(String::new()),
            ..TransitionMetadata::default()
        };
        let err = validate_transition(Running, Completed, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Missing required metadata for transition to completed: checkpointSha"
        );
    }

    #[test]
    fn failed_during_must_name_a_status() {
        let meta = TransitionMetadata {
            failed_during: Some("exploding".into()),
            ..full()
        };
        let err = validate_transition(Running, Failed, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid metadata for transition to failed: failedDuring must be a codon status"
        );
        let meta = TransitionMetadata {
            skipped_during: Some("later".into()),
            ..full()
        };
        let err = validate_transition(Running, Skipped, Some(&meta)).unwrap_err();
        assert!(err
            .to_string()
            .contains("skippedDuring must be a codon status"));
    }

    #[test]
    fn failed_and_skipped_during_must_name_the_state_being_left() {
        let meta = TransitionMetadata {
            failed_during: Some("completed".into()),
            ..full()
        };
        let err = validate_transition(Running, Failed, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid metadata for transition to failed: failedDuring must be running"
        );
        let meta = TransitionMetadata {
            skipped_during: Some("running".into()),
            ..full()
        };
        let err = validate_transition(Preparing, Skipped, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid metadata for transition to skipped: skippedDuring must be preparing"
        );
        assert!(validate_transition(Preparing, Skipped, Some(&full_from(Preparing))).is_ok());
    }

    #[test]
    fn completed_refuses_a_nonzero_exit_code() {
        let meta = TransitionMetadata {
            exit_code: Some(3),
            ..full()
        };
        let err = validate_transition(Running, Completed, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid metadata for transition to completed: exitCode must be 0"
        );
    }

    #[test]
    fn missing_and_invalid_are_reported_together() {
        let meta = TransitionMetadata {
            failed_during: Some("nope".into()),
            ..TransitionMetadata::default()
        };
        let err = validate_transition(Running, Failed, Some(&meta)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Missing required metadata for transition to failed: exitCode, failureReason; \
             invalid: failedDuring must be a codon status"
        );
    }

    #[test]
    fn type_errors_count_only_for_required_fields() {
        let errs = [("claudePid", "an integer")];
        let err = check_metadata(Starting, Initializing, None, &errs).unwrap_err();
        assert_eq!(err.missing, vec!["claudeLogPath"]);
        assert_eq!(err.invalid, vec![("claudePid", "an integer")]);
        assert!(check_metadata(Preparing, Starting, None, &errs).is_ok());
    }

    #[test]
    fn the_graph_check_comes_before_the_guard() {
        let err = validate_transition(Preparing, Running, None).unwrap_err();
        assert!(matches!(err, TransitionError::Invalid(_)));
    }
}
