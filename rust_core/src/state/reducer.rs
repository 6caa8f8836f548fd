//! The reducer: applies one transition to the state, or refuses it and
//! changes nothing.
//!
//! [`apply`] dispatches each transition to its own handler, and every
//! handler has the same two steps:
//!
//! 1. **Check.** Everything that can refuse the transition reads the state
//!    through a shared borrow: the lookups `live_run`, `record` and
//!    `live_record`, a `check_*` function (`&State`) when the checks are
//!    long, a few lines inline when they are short. The check returns what
//!    the change needs: indexes, the new cost.
//! 2. **Change.** Only then does the handler write, and no error can be
//!    returned after its first write.
//!
//! So a rejection never leaves half an update behind. Keep it so: a new
//! check goes before the first `&mut` use of the state, never after it.
//!
//! Cost changes go through `with_record`, which moves the run's and the
//! execution's cached totals by the record's cost delta: the cache is never
//! rebuilt by scanning.

use std::fmt;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::machine::codon::{check_metadata, CodonStatus, InvalidTransition, TransitionError};
use crate::state::model::{
    share_configs, CodonExecution, FailureReason, Run, RunFailure, RunStatus, RunStop, Sentinels,
    StartingConditions, State, StopBy,
};
use crate::state::money::Money;
use crate::state::record::{enter, settle};
use crate::state::transition::{
    AssistantMessageCountUpdated, CheckpointCreated, CheckpointType, CodonFinalCostSet,
    CodonStarted, CodonTransitioned, CostsIncremented, CostsUpdated, ExtensionCountUpdated,
    InitialCheckpointSet, PlanExtended, PlanTrimmed, RunCrashed, RunFailed, RunStarted, RunStopped,
    SentinelStatesUpdated, Transition,
};

/// Why a transition was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The bytes are not a transition.
    Malformed(String),
    /// The codon state machine refused it.
    Transition(TransitionError),
    /// It does not fit the current state (unknown run, codon not live, ...).
    Conflict {
        /// Stable machine-readable code.
        code: &'static str,
        /// What is wrong, naming the run and codon.
        message: String,
    },
}

impl Rejection {
    /// A stable code: `malformed`, `invalid_transition`, `invalid_metadata`,
    /// or one of the conflict codes.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "malformed",
            Rejection::Transition(TransitionError::Invalid(_)) => "invalid_transition",
            Rejection::Transition(TransitionError::Metadata(_)) => "invalid_metadata",
            Rejection::Conflict { code, .. } => code,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Malformed(m) => write!(f, "Malformed transition: {m}"),
            Rejection::Transition(e) => e.fmt(f),
            Rejection::Conflict { message, .. } => f.write_str(message),
        }
    }
}

fn conflict(code: &'static str, message: String) -> Rejection {
    Rejection::Conflict { code, message }
}

/// What an applied transition did that a listener may care about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// A codon record reached a terminal state.
    pub codon_terminal: bool,
    /// A run ended (completed, failed or crashed).
    pub run_ended: bool,
}

/// Applies `t` to `state`, or refuses it and leaves `state` as it was.
pub fn apply(state: &mut State, t: Transition<'_>) -> Result<Applied, Rejection> {
    match t {
        Transition::RunStarted(d) => run_started(state, d),
        Transition::RunCompleted(d) => end_run(state, &d.run_id, d.end_time, RunStatus::Completed),
        Transition::RunFailed(d) => run_failed(state, d),
        Transition::RunStopped(d) => run_stopped(state, d),
        Transition::RunCrashed(d) => run_crashed(state, d),
        Transition::CodonStarted(d) => codon_started(state, d),
        Transition::CodonTransitioned(d) => codon_transitioned(state, d),
        Transition::CostsUpdated(d) => costs_updated(state, d),
        Transition::CostsIncremented(d) => costs_incremented(state, d),
        Transition::AssistantMessageCountUpdated(d) => assistant_message_count_updated(state, d),
        Transition::ExtensionCountUpdated(d) => extension_count_updated(state, d),
        Transition::CodonFinalCostSet(d) => codon_final_cost_set(state, d),
        Transition::SentinelStatesUpdated(d) => sentinel_states_updated(state, d),
        Transition::CheckpointCreated(d) => checkpoint_created(state, d),
        Transition::InitialCheckpointSet(d) => initial_checkpoint_set(state, d),
        Transition::PlanExtended(d) => plan_extended(state, d),
        Transition::PlanTrimmed(d) => plan_trimmed(state, d),
    }
}

// ----------------------------------------------------------------- runs

/// Creates a run and makes it current; a fresh run brings the plan.
fn run_started(state: &mut State, d: RunStarted<'_>) -> Result<Applied, Rejection> {
    check_run_start(state, &d)?;
    let run_id = d.run_id.into_owned();
    if let Some(plan) = d.execution_plan {
        state.execution_plan = plan;
        share_configs(&mut state.execution_plan, 0);
        state.index_plan();
    }
    state.run_index.insert(run_id.clone(), state.runs.len());
    state.current_run_id = Some(run_id.clone());
    state.runs.push(Run {
        run_id,
        run_folder: d.run_folder,
        git_branch: d.git_branch,
        starting_conditions: d.starting_conditions,
        codons: Vec::new(),
        status: RunStatus::Running,
        start_time: d.start_time,
        end_time: None,
        server_pid: d.server_pid,
        failure: None,
        stop: None,
        latest: FxHashMap::default(),
        active: None,
        cost: Money::ZERO,
    });
    Ok(Applied::default())
}

/// A new run needs a fresh id and no current run; a continuation needs a
/// source that exists and keeps the plan it has.
fn check_run_start(state: &State, d: &RunStarted<'_>) -> Result<(), Rejection> {
    non_empty("runId", &d.run_id)?;
    if state.run_index.contains_key(d.run_id.as_ref()) {
        return Err(conflict(
            "run_exists",
            format!("Run '{}' already exists", d.run_id),
        ));
    }
    if let Some(current) = &state.current_run_id {
        return Err(conflict(
            "run_still_active",
            format!(
                "Run '{current}' is still running; end it before starting run '{}'",
                d.run_id
            ),
        ));
    }
    let StartingConditions::Continuation { source, .. } = &d.starting_conditions else {
        return Ok(());
    };
    let Some(src) = state.run(&source.run_id) else {
        return Err(conflict(
            "unknown_source_run",
            format!("Continuation source run '{}' not found", source.run_id),
        ));
    };
    if let Some(after) = &source.after_codon {
        if src.latest(after).is_none() {
            return Err(conflict(
                "unknown_source_codon",
                format!(
                    "Continuation source run '{}' has no codon '{after}'",
                    source.run_id
                ),
            ));
        }
    }
    if d.execution_plan.is_some() {
        return Err(conflict(
            "plan_on_continuation",
            "A continuation run keeps the existing execution plan; omit executionPlan".to_owned(),
        ));
    }
    Ok(())
}

/// Ends a run found dead: its active codon, if any, fails as crashed.
fn run_crashed(state: &mut State, d: RunCrashed<'_>) -> Result<Applied, Rejection> {
    let ri = live_run(state, &d.run_id)?;
    let mut applied = Applied {
        run_ended: true,
        ..Applied::default()
    };
    if let Some(ci) = state.runs[ri].active {
        let reason = FailureReason {
            kind: "crash".to_owned(),
            retriable: false,
            message: Some("Server crashed".to_owned()),
            retry_after_ms: None,
            sentinel_refs: None,
        };
        let at = d.detected_at.clone();
        with_record(state, ri, ci, |rec| {
            let during = rec.status;
            rec.exit_code = Some(-1);
            rec.failure_reason = Some(reason);
            rec.failed_during = Some(during);
            settle(rec, CodonStatus::Failed, at);
        });
        state.runs[ri].active = None;
        applied.codon_terminal = true;
    }
    finish_run(state, ri, d.detected_at, RunStatus::Crashed);
    Ok(applied)
}

/// `RunFailed`: ends the run and records what failed, when it says.
fn run_failed(state: &mut State, d: RunFailed<'_>) -> Result<Applied, Rejection> {
    let applied = end_run(state, &d.run_id, d.end_time, RunStatus::Failed)?;
    if let Some(reason) = d.reason {
        let ri = state.run_index[&*d.run_id];
        state.runs[ri].failure = Some(RunFailure {
            codon_id: d.codon_id,
            reason,
        });
    }
    Ok(applied)
}

/// `RunStopped`: ends the run as stopped, by the user or its budget.
fn run_stopped(state: &mut State, d: RunStopped<'_>) -> Result<Applied, Rejection> {
    if d.by == StopBy::Budget && d.budget.is_none() {
        return Err(conflict(
            "invalid_value",
            "RunStopped by budget needs the budget that stopped it".to_owned(),
        ));
    }
    let applied = end_run(state, &d.run_id, d.end_time, RunStatus::Stopped)?;
    let ri = state.run_index[&*d.run_id];
    state.runs[ri].stop = Some(RunStop {
        by: d.by,
        forced: d.forced,
        reason: d.reason,
        codon_id: d.codon_id,
        budget: d.budget,
    });
    Ok(applied)
}

/// Ends a run that has no active codon (`RunCompleted`, `RunFailed`, `RunStopped`).
fn end_run(
    state: &mut State,
    run_id: &str,
    end_time: String,
    status: RunStatus,
) -> Result<Applied, Rejection> {
    let ri = live_run(state, run_id)?;
    if let Some(active) = state.runs[ri].active() {
        return Err(conflict(
            "run_has_active_codon",
            format!(
                "Run '{run_id}' still has an active codon '{}' ({}); finish it first",
                active.codon_id, active.status
            ),
        ));
    }
    finish_run(state, ri, end_time, status);
    Ok(Applied {
        codon_terminal: false,
        run_ended: true,
    })
}

// --------------------------------------------------------------- codons

/// Appends a `preparing` record and makes it the run's active codon.
fn codon_started(state: &mut State, d: CodonStarted<'_>) -> Result<Applied, Rejection> {
    non_empty("codonId", &d.codon_id)?;
    let ri = live_run(state, &d.run_id)?;
    if let Some(active) = state.runs[ri].active() {
        return Err(conflict(
            "codon_already_active",
            format!(
                "Run '{}' already has an active codon '{}' ({})",
                d.run_id, active.codon_id, active.status
            ),
        ));
    }
    let run = &mut state.runs[ri];
    let index = run.codons.len();
    run.latest.insert(d.codon_id.clone(), index);
    run.active = Some(index);
    run.codons.push(CodonExecution::preparing(
        d.codon_id,
        d.start_time,
        d.loop_context,
    ));
    Ok(Applied::default())
}

/// Moves a codon along the state machine, filling in what the target state
/// promises; a terminal state settles its cost and frees the run.
fn codon_transitioned(state: &mut State, d: CodonTransitioned<'_>) -> Result<Applied, Rejection> {
    let (ri, ci) = check_codon_move(state, &d)?;
    let to = d.to;
    with_record(state, ri, ci, |rec| enter(rec, to, d.metadata, d.timestamp));
    let terminal = to.is_terminal();
    if terminal {
        state.runs[ri].active = None;
    }
    Ok(Applied {
        codon_terminal: terminal,
        run_ended: false,
    })
}

/// The record to move: its status must be `from`, the machine must have the
/// edge, and the metadata must satisfy the target's guard.
fn check_codon_move(state: &State, d: &CodonTransitioned<'_>) -> Result<(usize, usize), Rejection> {
    let (ri, ci) = record(state, &d.run_id, &d.codon_id)?;
    let rec = &state.runs[ri].codons[ci];
    if rec.status != d.from {
        return Err(conflict(
            "status_mismatch",
            format!(
                "Codon '{}' in run '{}' is {}, not {}",
                d.codon_id, d.run_id, rec.status, d.from
            ),
        ));
    }
    if !d.from.can_transition_to(d.to) {
        return Err(Rejection::Transition(TransitionError::Invalid(
            InvalidTransition {
                from: d.from,
                to: d.to,
            },
        )));
    }
    check_metadata(d.from, d.to, d.metadata.as_deref(), &[])
        .map_err(|e| Rejection::Transition(TransitionError::Metadata(e)))?;
    Ok((ri, ci))
}

/// Replaces a codon's sentinel states, unless its sentinels are sealed.
fn sentinel_states_updated(
    state: &mut State,
    d: SentinelStatesUpdated<'_>,
) -> Result<Applied, Rejection> {
    let (ri, ci) = record(state, &d.run_id, &d.codon_id)?;
    let status = state.runs[ri].codons[ci].status;
    if status.is_terminal() {
        return Err(conflict(
            "sentinels_final",
            format!(
                "Codon '{}' in run '{}' is {status}; its sentinel states are final",
                d.codon_id, d.run_id
            ),
        ));
    }
    state.runs[ri].codons[ci].sentinels = Some(Sentinels {
        loaded: Some(d.sentinel_states),
        executed: None,
        total_cost: d.total_cost,
    });
    Ok(Applied::default())
}

/// Records a checkpoint sha in the slot its type names.
fn checkpoint_created(state: &mut State, d: CheckpointCreated<'_>) -> Result<Applied, Rejection> {
    non_empty("sha", &d.sha)?;
    let (ri, ci) = record(state, &d.run_id, &d.codon_id)?;
    let rec = &mut state.runs[ri].codons[ci];
    let slot = match d.checkpoint_type {
        CheckpointType::RigSetup => &mut rec.rig_setup_checkpoint,
        CheckpointType::Completed => &mut rec.completion_checkpoint,
        CheckpointType::Error => &mut rec.error_checkpoint,
        CheckpointType::Skipped => &mut rec.skip_checkpoint,
    };
    *slot = Some(d.sha);
    Ok(Applied::default())
}

/// Records the project's initial checkpoint.
fn initial_checkpoint_set(
    state: &mut State,
    d: InitialCheckpointSet<'_>,
) -> Result<Applied, Rejection> {
    non_empty("sha", &d.sha)?;
    state.initial_checkpoint = Some(d.sha.into_owned());
    Ok(Applied::default())
}

// ------------------------------------------------- a live codon's figures

/// Sets a live codon's cost and tokens to absolute values.
fn costs_updated(state: &mut State, d: CostsUpdated<'_>) -> Result<Applied, Rejection> {
    let (ri, ci) = live_record(state, &d.run_id, &d.codon_id)?;
    with_record(state, ri, ci, |rec| {
        rec.current_cost = Some(d.cost);
        rec.current_tokens = Some(d.tokens);
    });
    Ok(Applied::default())
}

/// Adds to a live codon's cost and tokens; the sum must stay representable.
fn costs_incremented(state: &mut State, d: CostsIncremented<'_>) -> Result<Applied, Rejection> {
    let (ri, ci) = live_record(state, &d.run_id, &d.codon_id)?;
    let current = state.runs[ri].codons[ci].current_cost.unwrap_or_default();
    let Some(cost) = current.checked_add(d.cost_delta) else {
        return Err(conflict(
            "invalid_value",
            format!(
                "Codon '{}' in run '{}' would cost more than {} USD",
                d.codon_id,
                d.run_id,
                Money::MAX_USD
            ),
        ));
    };
    with_record(state, ri, ci, |rec| {
        rec.current_cost = Some(cost);
        rec.current_tokens = Some(rec.current_tokens.unwrap_or_default().plus(d.tokens_delta));
    });
    Ok(Applied::default())
}

/// Sets a live codon's assistant message count.
fn assistant_message_count_updated(
    state: &mut State,
    d: AssistantMessageCountUpdated<'_>,
) -> Result<Applied, Rejection> {
    let (ri, ci) = live_record(state, &d.run_id, &d.codon_id)?;
    state.runs[ri].codons[ci].assistant_message_count = Some(d.new_count);
    Ok(Applied::default())
}

/// Sets a live codon's extension count.
fn extension_count_updated(
    state: &mut State,
    d: ExtensionCountUpdated<'_>,
) -> Result<Applied, Rejection> {
    let (ri, ci) = live_record(state, &d.run_id, &d.codon_id)?;
    state.runs[ri].codons[ci].extension_count = Some(d.extension_count);
    Ok(Applied::default())
}

/// Records the cost the agent reported.
fn codon_final_cost_set(state: &mut State, d: CodonFinalCostSet<'_>) -> Result<Applied, Rejection> {
    let (ri, ci) = live_record(state, &d.run_id, &d.codon_id)?;
    // The agent's own total supersedes the running estimate; later
    // increments (an extended session) add to it.
    with_record(state, ri, ci, |rec| {
        rec.final_cost = Some(d.final_cost);
        rec.final_tokens = Some(d.final_tokens);
        rec.current_cost = Some(d.final_cost);
        rec.current_tokens = Some(d.final_tokens);
    });
    Ok(Applied::default())
}

// ----------------------------------------------------------------- plan

/// Inserts a loop's next iteration after the entry that ended the last one.
fn plan_extended(state: &mut State, d: PlanExtended<'_>) -> Result<Applied, Rejection> {
    let at = check_plan_extension(state, &d)?;
    let added = d.entries.len();
    state
        .plan_ids
        .extend(d.entries.iter().map(|e| e.codon_id.clone()));
    state.execution_plan.splice(at + 1..=at, d.entries);
    share_configs(&mut state.execution_plan[..at + 1 + added], at + 1);
    Ok(Applied::default())
}

/// The index of the entry to extend after; the new entries must be named,
/// and new to the plan and to each other.
fn check_plan_extension(state: &State, d: &PlanExtended<'_>) -> Result<usize, Rejection> {
    live_run(state, &d.run_id)?;
    non_empty("afterCodonId", &d.after_codon_id)?;
    if d.entries.is_empty() {
        return Err(conflict(
            "invalid_value",
            "entries must not be empty".to_owned(),
        ));
    }
    // The first entry of that id. A loop's next iteration follows its last
    // entry, near the plan's end: searched from there when the ids are unique
    // (a fresh plan may repeat one; the set then holds fewer ids than entries).
    let plan = &state.execution_plan;
    let found = if state.plan_ids.len() == plan.len() {
        plan.iter().rposition(|e| e.codon_id == d.after_codon_id)
    } else {
        plan.iter().position(|e| e.codon_id == d.after_codon_id)
    };
    let Some(at) = found else {
        return Err(conflict(
            "unknown_plan_entry",
            format!("No plan entry '{}' to extend after", d.after_codon_id),
        ));
    };
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    for entry in &d.entries {
        non_empty("codonId", &entry.codon_id)?;
        if state.plan_ids.contains(entry.codon_id.as_str()) || !seen.insert(&entry.codon_id) {
            return Err(conflict(
                "plan_conflict",
                format!("The plan already has an entry '{}'", entry.codon_id),
            ));
        }
    }
    Ok(at)
}

/// Drops entries (the rest of a loop that ended early); each must be planned.
fn plan_trimmed(state: &mut State, d: PlanTrimmed<'_>) -> Result<Applied, Rejection> {
    live_run(state, &d.run_id)?;
    if d.codon_ids.is_empty() {
        return Err(conflict(
            "invalid_value",
            "codonIds must not be empty".to_owned(),
        ));
    }
    if let Some(missing) = d
        .codon_ids
        .iter()
        .find(|id| !state.plan_ids.contains(id.as_str()))
    {
        return Err(conflict(
            "unknown_plan_entry",
            format!("No plan entry '{missing}' to remove"),
        ));
    }
    let gone: FxHashSet<&str> = d.codon_ids.iter().map(String::as_str).collect();
    state
        .execution_plan
        .retain(|e| !gone.contains(e.codon_id.as_str()));
    for id in &d.codon_ids {
        state.plan_ids.remove(id.as_str());
    }
    Ok(Applied::default())
}

// -------------------------------------------------------------- helpers

fn non_empty(field: &str, value: &str) -> Result<(), Rejection> {
    if value.is_empty() {
        Err(conflict(
            "invalid_value",
            format!("{field} must not be empty"),
        ))
    } else {
        Ok(())
    }
}

/// The index of a run that exists and is running.
fn live_run(state: &State, run_id: &str) -> Result<usize, Rejection> {
    non_empty("runId", run_id)?;
    let Some(&ri) = state.run_index.get(run_id) else {
        return Err(conflict("unknown_run", format!("Unknown run '{run_id}'")));
    };
    let status = state.runs[ri].status;
    if status != RunStatus::Running {
        return Err(conflict(
            "run_not_active",
            format!("Run '{run_id}' is {}, not running", status.as_str()),
        ));
    }
    Ok(ri)
}

/// The latest record of a codon in a running run.
fn record(state: &State, run_id: &str, codon_id: &str) -> Result<(usize, usize), Rejection> {
    let ri = live_run(state, run_id)?;
    non_empty("codonId", codon_id)?;
    match state.runs[ri].latest.get(codon_id) {
        Some(&ci) => Ok((ri, ci)),
        None => Err(conflict(
            "unknown_codon",
            format!("No codon '{codon_id}' in run '{run_id}'"),
        )),
    }
}

/// The latest record of a codon, which must be running or completing
/// sentinels: the only states in which an agent spends money.
fn live_record(state: &State, run_id: &str, codon_id: &str) -> Result<(usize, usize), Rejection> {
    let (ri, ci) = record(state, run_id, codon_id)?;
    let status = state.runs[ri].codons[ci].status;
    if status.is_live() {
        Ok((ri, ci))
    } else {
        Err(conflict(
            "codon_not_live",
            format!("Codon '{codon_id}' in run '{run_id}' is {status}, not running"),
        ))
    }
}

/// Mutates one record and moves the cached totals by its cost delta.
fn with_record(state: &mut State, ri: usize, ci: usize, f: impl FnOnce(&mut CodonExecution)) {
    let run = &mut state.runs[ri];
    let rec = &mut run.codons[ci];
    let before = rec.cost();
    f(rec);
    let delta = rec.cost() - before;
    if delta != 0 {
        run.cost = run.cost.offset(delta);
        state.total_cost = state.total_cost.offset(delta);
    }
}

fn finish_run(state: &mut State, ri: usize, end_time: String, status: RunStatus) {
    let run = &mut state.runs[ri];
    run.status = status;
    run.end_time = Some(end_time);
    if state.current_run_id.as_deref() == Some(run.run_id.as_str()) {
        state.current_run_id = None;
    }
}
