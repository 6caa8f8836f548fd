//! Module functions of the codon state machine.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};

use crate::machine::codon::{
    check_metadata, required_fields, CodonStatus, InvalidField, InvalidTransition, TransitionError,
    TransitionMetadata,
};
use crate::py::errors;
use crate::state::model::FailureReason;

pub fn parse_status(name: &str) -> PyResult<CodonStatus> {
    CodonStatus::parse(name).ok_or_else(|| errors::unknown_status(name))
}

/// Raises `InvalidTransitionError` or `MetadataValidationError` unless a
/// codon may move from `from_status` to `to_status` with `metadata`.
#[pyfunction]
#[pyo3(signature = (from_status, to_status, metadata = None))]
pub fn validate_transition(
    py: Python<'_>,
    from_status: &str,
    to_status: &str,
    metadata: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let from = parse_status(from_status)?;
    let to = parse_status(to_status)?;
    if !from.can_transition_to(to) {
        let err = TransitionError::Invalid(InvalidTransition { from, to });
        return Err(errors::transition_error(py, &err));
    }
    let (meta, type_errors) = read_metadata(to, metadata)?;
    check_metadata(from, to, Some(&meta), &type_errors)
        .map_err(|e| errors::transition_error(py, &TransitionError::Metadata(e)))
}

/// Reads only the fields the guard of `to` looks at, noting wrong kinds.
fn read_metadata(
    to: CodonStatus,
    metadata: Option<&Bound<'_, PyDict>>,
) -> PyResult<(TransitionMetadata, Vec<InvalidField>)> {
    let mut meta = TransitionMetadata::default();
    let mut bad: Vec<InvalidField> = Vec::new();
    let Some(dict) = metadata else {
        return Ok((meta, bad));
    };
    let mut fields: Vec<&'static str> = required_fields(to).to_vec();
    if to == CodonStatus::Completed {
        fields.push("exitCode");
    }
    for field in fields {
        let Some(value) = dict.get_item(field)? else {
            continue;
        };
        if value.is_none() {
            continue;
        }
        let is_int = value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>();
        let as_str = || value.cast::<PyString>().ok().map(ToString::to_string);
        match field {
            "claudePid" | "exitCode" => match (is_int, value.extract::<i64>()) {
                (true, Ok(v)) if field == "claudePid" => meta.claude_pid = Some(v),
                (true, Ok(v)) => meta.exit_code = Some(v),
                _ => bad.push((field, "an integer")),
            },
            "failureReason" => {
                if value.is_instance_of::<PyDict>() {
                    meta.failure_reason = Some(FailureReason {
                        kind: String::new(),
                        retriable: false,
                        message: None,
                        retry_after_ms: None,
                        sentinel_refs: None,
                    });
                } else {
                    bad.push((field, "an object"));
                }
            }
            _ => match as_str() {
                Some(s) => match field {
                    "claudeLogPath" => meta.claude_log_path = Some(s),
                    "claudeSessionId" => meta.claude_session_id = Some(s),
                    "checkpointSha" => meta.checkpoint_sha = Some(s),
                    "failedDuring" => meta.failed_during = Some(s),
                    _ => meta.skipped_during = Some(s),
                },
                None => bad.push((field, "a string")),
            },
        }
    }
    Ok((meta, bad))
}

/// The statuses a codon in `status` may move to.
#[pyfunction]
pub fn allowed_transitions(status: &str) -> PyResult<Vec<&'static str>> {
    Ok(parse_status(status)?
        .targets()
        .iter()
        .map(|s| s.as_str())
        .collect())
}

/// Whether `status` is terminal (completed, failed, skipped).
#[pyfunction]
pub fn is_terminal(status: &str) -> PyResult<bool> {
    Ok(parse_status(status)?.is_terminal())
}
