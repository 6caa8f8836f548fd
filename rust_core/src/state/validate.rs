//! Load-time integrity checks of a state document.
//!
//! Errors (the state cannot be trusted): `corrupted_data` (not a state
//! document, or internally inconsistent), `missing_run` (currentRunId names
//! no run), `invalid_codon` (a record lacks what its status promises).
//! Warnings (worth telling, safe to run): `orphaned_folder` (a run folder
//! with no run), `missing_checkpoint` (a recorded sha the repository does
//! not have), `cost_mismatch` (a sentinel total that is not the sum of its
//! sentinels).
//!
//! The core does no I/O, so what exists on disk (checkpoint shas, run
//! folders) is passed in; a check whose data is not given is skipped.

use rustc_hash::FxHashSet;

use crate::machine::codon::CodonStatus;
use crate::state::model::{CodonExecution, RunStatus, Sentinels, StartingConditions, State};
use crate::state::money::Money;

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// The category (`corrupted_data`, `missing_run`, ...).
    pub kind: &'static str,
    /// What is wrong.
    pub message: String,
    /// Where, as a JSON path into the document (`runs[0].codons[2]`).
    pub path: String,
}

/// The findings of one validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validation {
    /// Findings that make the state unusable.
    pub errors: Vec<Issue>,
    /// Findings worth reporting that do not block a run.
    pub warnings: Vec<Issue>,
}

impl Validation {
    /// True when there are no errors.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// What exists outside the document, when the caller knows.
#[derive(Clone, Debug, Default)]
pub struct Environment<'a> {
    /// Every commit sha in the checkpoint repository.
    pub checkpoints: Option<&'a FxHashSet<String>>,
    /// The names of the folders under `runs/`.
    pub run_folders: Option<&'a [String]>,
}

/// Parses and checks a state document. On success the state comes back
/// indexed and ready to use, with the warnings; on any error, only the
/// findings.
pub fn load(bytes: &[u8], env: &Environment<'_>) -> Result<(State, Validation), Validation> {
    let mut state: State = match serde_json::from_slice(bytes) {
        Ok(s) => s,
        Err(e) => {
            return Err(Validation {
                errors: vec![Issue {
                    kind: "corrupted_data",
                    message: format!("not a valid state document: {e}"),
                    path: String::new(),
                }],
                warnings: Vec::new(),
            })
        }
    };
    let report = check(&state, env);
    if report.is_valid() {
        state.reindex();
        Ok((state, report))
    } else {
        Err(report)
    }
}

/// Checks a parsed state.
pub fn check(state: &State, env: &Environment<'_>) -> Validation {
    let mut v = Validation::default();
    let total = state.runs.len();
    let mut seen = FxHashSet::default();
    for (i, run) in state.runs.iter().enumerate() {
        // Paths use the document's order: newest first.
        let at = format!("runs[{}]", total - 1 - i);
        if !seen.insert(run.run_id.as_str()) {
            v.errors.push(Issue {
                kind: "corrupted_data",
                message: format!("run '{}' appears more than once", run.run_id),
                path: at.clone(),
            });
        }
        if let StartingConditions::Continuation { source, .. } = &run.starting_conditions {
            if !state.runs.iter().any(|r| r.run_id == source.run_id) {
                v.errors.push(Issue {
                    kind: "missing_run",
                    message: format!(
                        "run '{}' continues run '{}', which is not in the state",
                        run.run_id, source.run_id
                    ),
                    path: format!("{at}.startingConditions.source.runId"),
                });
            }
        }
        check_codons(&mut v, &at, run.status, &run.codons);
    }
    if let Some(current) = &state.current_run_id {
        match state.runs.iter().find(|r| &r.run_id == current) {
            None => v.errors.push(Issue {
                kind: "missing_run",
                message: format!("currentRunId '{current}' names no run"),
                path: "currentRunId".to_owned(),
            }),
            Some(r) if r.status != RunStatus::Running => v.errors.push(Issue {
                kind: "corrupted_data",
                message: format!(
                    "currentRunId '{current}' names a run that is {}, not running",
                    r.status.as_str()
                ),
                path: "currentRunId".to_owned(),
            }),
            Some(_) => {}
        }
    }
    if let Some(known) = env.checkpoints {
        check_checkpoints(&mut v, state, known);
    }
    if let Some(folders) = env.run_folders {
        for folder in folders {
            if !state.runs.iter().any(|r| &r.run_id == folder) {
                v.warnings.push(Issue {
                    kind: "orphaned_folder",
                    message: format!("runs/{folder} has no run in the state"),
                    path: format!("runs/{folder}"),
                });
            }
        }
    }
    v
}

/// Checks a run's codon records, and that at most one is active and only
/// in a running run.
fn check_codons(v: &mut Validation, at: &str, run_status: RunStatus, codons: &[CodonExecution]) {
    let mut active = 0;
    for (j, c) in codons.iter().enumerate() {
        let path = format!("{at}.codons[{j}]");
        if !c.status.is_terminal() {
            active += 1;
        }
        let missing = missing_fields(c);
        if !missing.is_empty() {
            v.errors.push(Issue {
                kind: "invalid_codon",
                message: format!(
                    "codon '{}' is {} but lacks {}",
                    c.codon_id,
                    c.status,
                    missing.join(", ")
                ),
                path: path.clone(),
            });
        }
        check_during(v, &path, c);
        if let Some(s) = &c.sentinels {
            check_sentinels(v, &path, c, s);
        }
    }
    if active > 1 {
        v.errors.push(Issue {
            kind: "invalid_codon",
            message: format!("{active} codons are active at once; at most one may be"),
            path: format!("{at}.codons"),
        });
    }
    if active > 0 && run_status != RunStatus::Running {
        v.errors.push(Issue {
            kind: "invalid_codon",
            message: format!(
                "the run is {} but a codon is still active",
                run_status.as_str()
            ),
            path: format!("{at}.codons"),
        });
    }
}

/// The fields a record's status promises that it lacks.
fn missing_fields(c: &CodonExecution) -> Vec<&'static str> {
    let mut missing: Vec<&'static str> = Vec::new();
    let mut need = |ok: bool, field: &'static str| {
        if !ok {
            missing.push(field);
        }
    };
    let s = c.status;
    let reached = |t: CodonStatus| s >= t && !s.is_terminal();
    if reached(CodonStatus::Initializing) {
        need(c.claude_pid.is_some(), "claudePid");
        need(c.claude_log_path.is_some(), "claudeLogPath");
    }
    if reached(CodonStatus::Running) {
        need(c.claude_session_id.is_some(), "claudeSessionId");
        need(c.current_cost.is_some(), "currentCost");
        need(c.current_tokens.is_some(), "currentTokens");
        need(c.assistant_message_count.is_some(), "assistantMessageCount");
        need(c.extension_count.is_some(), "extensionCount");
    }
    if s.is_terminal() {
        need(c.end_time.is_some(), "endTime");
    }
    match s {
        CodonStatus::Completed => {
            // Only a codon that ran can complete.
            need(c.claude_session_id.is_some(), "claudeSessionId");
            need(c.claude_log_path.is_some(), "claudeLogPath");
            need(c.exit_code == Some(0), "exitCode 0");
            need(c.result_message_received.is_some(), "resultMessageReceived");
            need(c.final_cost.is_some(), "finalCost");
            need(c.final_tokens.is_some(), "finalTokens");
            need(
                c.completion_checkpoint
                    .as_deref()
                    .is_some_and(|x| !x.is_empty()),
                "completionCheckpoint",
            );
        }
        CodonStatus::Failed => {
            need(c.exit_code.is_some(), "exitCode");
            need(c.failure_reason.is_some(), "failureReason");
            need(c.failed_during.is_some(), "failedDuring");
            need(c.partial_cost.is_some(), "partialCost");
            need(c.partial_tokens.is_some(), "partialTokens");
        }
        CodonStatus::Skipped => {
            need(c.skipped_during.is_some(), "skippedDuring");
            need(c.partial_cost.is_some(), "partialCost");
            need(c.partial_tokens.is_some(), "partialTokens");
        }
        _ => {}
    }
    missing
}

/// `failedDuring` and `skippedDuring` name the state left, never a terminal one.
fn check_during(v: &mut Validation, path: &str, c: &CodonExecution) {
    for (field, during) in [
        ("failedDuring", c.failed_during),
        ("skippedDuring", c.skipped_during),
    ] {
        if during.is_some_and(CodonStatus::is_terminal) {
            v.errors.push(Issue {
                kind: "invalid_codon",
                message: format!(
                    "codon '{}' has {field} {}, which is a terminal state",
                    c.codon_id,
                    during.map_or("", CodonStatus::as_str)
                ),
                path: format!("{path}.{field}"),
            });
        }
    }
}

/// Sentinels are `loaded` while the codon lives and `executed` once it
/// ended, never both; their total is the sum of theirs (a warning if not).
fn check_sentinels(v: &mut Validation, path: &str, c: &CodonExecution, s: &Sentinels) {
    if s.loaded.is_some() == s.executed.is_some() {
        v.errors.push(Issue {
            kind: "invalid_codon",
            message: format!(
                "codon '{}' must have exactly one of sentinels.loaded and sentinels.executed",
                c.codon_id
            ),
            path: format!("{path}.sentinels"),
        });
    } else if s.executed.is_some() != c.status.is_terminal() {
        v.errors.push(Issue {
            kind: "invalid_codon",
            message: format!(
                "codon '{}' is {} but its sentinels are {}",
                c.codon_id,
                c.status,
                if s.executed.is_some() {
                    "executed"
                } else {
                    "loaded"
                }
            ),
            path: format!("{path}.sentinels"),
        });
    }
    let list = s.loaded.as_ref().or(s.executed.as_ref());
    let sum = list.map_or(Money::ZERO, |l| {
        l.iter().fold(Money::ZERO, |acc, st| acc + st.total_cost)
    });
    if sum != s.total_cost {
        v.warnings.push(Issue {
            kind: "cost_mismatch",
            message: format!(
                "codon '{}' records sentinel cost {} but its sentinels sum to {}",
                c.codon_id,
                s.total_cost.usd(),
                sum.usd()
            ),
            path: format!("{path}.sentinels.totalCost"),
        });
    }
}

fn check_checkpoints(v: &mut Validation, state: &State, known: &FxHashSet<String>) {
    let mut report = |sha: &str, path: String| {
        if !known.contains(sha) {
            v.warnings.push(Issue {
                kind: "missing_checkpoint",
                message: format!("checkpoint {sha} is not in the checkpoint repository"),
                path,
            });
        }
    };
    if let Some(sha) = &state.initial_checkpoint {
        report(sha, "initialCheckpoint".to_owned());
    }
    let total = state.runs.len();
    for (i, run) in state.runs.iter().enumerate() {
        let at = format!("runs[{}]", total - 1 - i);
        match &run.starting_conditions {
            StartingConditions::Continuation { source, .. } => report(
                &source.checkpoint_sha,
                format!("{at}.startingConditions.source.checkpointSha"),
            ),
            StartingConditions::Fresh {
                initial_checkpoint_sha: Some(sha),
            } => report(sha, format!("{at}.startingConditions.initialCheckpointSha")),
            StartingConditions::Fresh { .. } => {}
        }
        for (j, c) in run.codons.iter().enumerate() {
            for (field, sha) in [
                ("rigSetupCheckpoint", &c.rig_setup_checkpoint),
                ("completionCheckpoint", &c.completion_checkpoint),
                ("errorCheckpoint", &c.error_checkpoint),
                ("skipCheckpoint", &c.skip_checkpoint),
            ] {
                if let Some(sha) = sha {
                    report(sha, format!("{at}.codons[{j}].{field}"));
                }
            }
        }
    }
}
