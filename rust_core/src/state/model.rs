//! The state document: the exact state.json layout (camelCase), plus the
//! indexes that make the reducer O(1) per event.
//!
//! A codon execution is one flat struct whose optional fields fill in as it
//! moves through its states, because each state's data is the previous
//! state's plus a few fields (seed `000`, "Data Available"). Which fields a
//! status must have is checked when a state is loaded
//! ([`crate::state::validate`]), and the reducer only ever produces records
//! that pass that check.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::machine::codon::CodonStatus;
use crate::state::money::Money;

/// The whole persisted state of one execution.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct State {
    /// Every run, stored oldest first; serialised newest first as in
    /// state.json, so starting a run is a push, not a shift.
    #[serde(
        serialize_with = "ser_newest_first",
        deserialize_with = "de_newest_first"
    )]
    pub runs: Vec<Run>,
    /// The active run, `null` when none is.
    pub current_run_id: Option<String>,
    /// The checkpoint of the project before any codon ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_checkpoint: Option<String>,
    /// The flattened plan; the core stores it and does not interpret it.
    #[serde(default)]
    pub execution_plan: Vec<PlanEntry>,
    /// The last journal sequence number this state reflects. Written only in
    /// snapshots ([`Snapshot`]); read back when a snapshot is loaded, so the
    /// journal can be replayed from the next one.
    #[serde(default, skip_serializing)]
    pub journal_seq: Option<u64>,
    /// runId -> position in `runs`.
    #[serde(skip)]
    pub(crate) run_index: FxHashMap<String, usize>,
    /// The codon ids of `execution_plan`, kept in step with it: a loop's
    /// next iteration must be new to the plan, and collecting the ids at
    /// every iteration made a long loop cost O(plan) per codon.
    #[serde(skip)]
    pub(crate) plan_ids: FxHashSet<String>,
    /// Sum of every codon record's cost over every run.
    #[serde(skip)]
    pub(crate) total_cost: Money,
}

/// One `weft run` (or continuation) of the execution.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Run {
    /// `<ms>-<5 base36>`.
    pub run_id: String,
    /// Absolute path of `.weft/runs/<runId>`.
    pub run_folder: String,
    /// `run-<runId>` in the checkpoint repository.
    pub git_branch: String,
    /// Fresh, or continued from a checkpoint of an earlier run.
    pub starting_conditions: StartingConditions,
    /// Append-only; a retry appends a new record for the same codon id and
    /// lookups return the latest.
    pub codons: Vec<CodonExecution>,
    /// running | completed | failed | crashed.
    pub status: RunStatus,
    /// ISO-8601.
    pub start_time: String,
    /// ISO-8601, once the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The process that owned the run.
    pub server_pid: i64,
    /// Why a `failed` run failed (which codon, why), when its `RunFailed` said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// Who stopped a `stopped` run, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<RunStop>,
    /// codonId -> index of its latest record in `codons`.
    #[serde(skip)]
    pub(crate) latest: FxHashMap<String, usize>,
    /// Index of the record that is not terminal yet, if any (at most one).
    #[serde(skip)]
    pub(crate) active: Option<usize>,
    /// Sum of this run's record costs.
    #[serde(skip)]
    pub(crate) cost: Money,
}

/// Lifecycle of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Codons are being executed.
    Running,
    /// Ended normally.
    Completed,
    /// Ended by a failure.
    Failed,
    /// Ended by a stop: the user's, or the run's budget ceiling. Its work
    /// is not done and not failed: the stopped codon stays to do.
    Stopped,
    /// Found dead on a later start.
    Crashed,
}

impl RunStatus {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Stopped => "stopped",
            RunStatus::Crashed => "crashed",
        }
    }
}

/// Why a run failed, as its `RunFailed` said.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunFailure {
    /// The codon whose failure ended the run; none for a run-wide failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codon_id: Option<String>,
    /// In words.
    pub reason: String,
}

/// Who stopped a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopBy {
    /// A signal, `q`, `server.shutdown`.
    User,
    /// The run's budget ceiling (`--max-cost`, `--max-time`, the runtime config).
    Budget,
}

/// The ceiling that stopped a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetStop {
    /// `run` (the ceiling), or the scope of the budget.
    pub scope: String,
    /// `dollars`, `timeSeconds`, `outputTokens`, `contextTokens`.
    pub kind: String,
    /// The cap.
    pub limit: f64,
    /// What was used when it stopped.
    pub used: f64,
    /// Where the cap came from (`--max-cost`, `WEFT_RUNTIME_BUDGET_MAX_DOLLARS`...).
    #[serde(default)]
    pub source: String,
}

/// How a run was stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStop {
    /// The user, or a budget.
    pub by: StopBy,
    /// The agent was killed (a second Ctrl-C, `server.force_shutdown`).
    #[serde(default)]
    pub forced: bool,
    /// In words.
    pub reason: String,
    /// The codon that was stopped and stays to do, if one was running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codon_id: Option<String>,
    /// The ceiling, for a stop by budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStop>,
}

/// How a run began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum StartingConditions {
    /// From scratch.
    #[serde(rename_all = "camelCase")]
    Fresh {
        /// The checkpoint the run started from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        initial_checkpoint_sha: Option<String>,
    },
    /// Picking up from a checkpoint of an earlier run.
    #[serde(rename_all = "camelCase")]
    Continuation {
        /// Where it continues from.
        source: ContinuationSource,
        /// Why it continues.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<ContinuationReason>,
    },
}

/// The point a continuation run resumes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContinuationSource {
    /// The run continued from.
    pub run_id: String,
    /// The codon resumed after; `null` for a rig-setup target (the codon is
    /// run again).
    pub after_codon: Option<String>,
    /// The checkpoint restored.
    pub checkpoint_sha: String,
}

/// Why a continuation run was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContinuationReason {
    /// An automatic retry.
    Retry,
    /// A rollback.
    Rollback,
    /// A plain continue.
    Continue,
}

/// One entry of the execution plan. The resolved codon configuration is kept
/// as plain JSON: the hank loader owns its schema. (Not a `RawValue`: a
/// transition whose `data` precedes its `type` is buffered by serde, and
/// buffered content cannot hold one.)
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanEntry {
    /// Resolved codon configuration. The entries of a loop's iterations share
    /// one (see [`share_configs`]): a 10,000-iteration loop would otherwise
    /// hold 10,000 copies of the same few kilobytes.
    pub codon: Arc<serde_json::Value>,
    /// Runtime id; `<id>#<n>` inside loops.
    pub codon_id: String,
    /// Present for codons inside a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_context: Option<serde_json::Value>,
}

/// Where a codon sits in a loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopContext {
    /// The loop's id.
    pub loop_id: String,
    /// 0-based iteration.
    pub iteration: u32,
    /// Position inside `loop.codons`.
    pub codon_index_in_loop: u32,
    /// A budget the loop carries, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_budget: Option<serde_json::Value>,
}

/// Token counts, summed exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenUsage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
}

impl TokenUsage {
    /// Field-wise saturating sum.
    #[must_use]
    pub fn plus(self, o: TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cache_creation_tokens: self
                .cache_creation_tokens
                .saturating_add(o.cache_creation_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_add(o.cache_read_tokens),
        }
    }
}

/// Why a codon failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureReason {
    /// The error class (`timeout`, `rate-limit`, `api-error`, `crash`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether running the codon again may succeed.
    pub retriable: bool,
    /// A human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A server's Retry-After hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The sentinels involved, for sentinel failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_refs: Option<Vec<String>>,
}

/// A budget that ran out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetExceeded {
    /// What was measured: dollars, time, tokens...
    pub currency: String,
    /// The limit.
    pub limit: f64,
    /// What was used.
    pub used: f64,
}

/// Sentinel activity of one codon: `loaded` while the codon is live,
/// `executed` (the same list, renamed) once it is terminal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sentinels {
    /// Sentinels of a codon that is not terminal yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<Vec<SentinelState>>,
    /// Sentinels of a terminal codon: final, no further updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed: Option<Vec<SentinelState>>,
    /// Their summed cost.
    pub total_cost: Money,
}

/// One sentinel's activity during a codon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SentinelState {
    /// Sentinel id.
    pub id: String,
    /// The model it calls.
    pub model: String,
    /// ISO-8601.
    pub loaded_at: String,
    /// ISO-8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unloaded_at: Option<String>,
    /// LLM calls made.
    pub llm_call_count: u64,
    /// LLM calls that failed.
    #[serde(rename = "failedLLMCalls")]
    pub failed_llm_calls: u64,
    /// ISO-8601 of the last call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_llm_call_at: Option<String>,
    /// Times its trigger matched.
    #[serde(default)]
    pub total_triggers: u64,
    /// What its calls cost.
    pub total_cost: Money,
    /// active | unloaded.
    pub status: SentinelStatus,
    /// Why it was unloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unload_reason: Option<UnloadReason>,
}

/// Whether a sentinel is still listening.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SentinelStatus {
    /// Listening.
    Active,
    /// Done.
    Unloaded,
}

/// Why a sentinel stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnloadReason {
    /// Its codon ended.
    CodonComplete,
    /// An error it could not survive.
    FatalError,
    /// Too many failed calls in a row.
    ConsecutiveFailures,
}

/// One execution of one codon. Which optional fields are set depends on
/// `status`; see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodonExecution {
    /// Runtime codon id.
    pub codon_id: String,
    /// Where it is in its lifecycle.
    pub status: CodonStatus,
    /// ISO-8601.
    pub start_time: String,
    /// For codons inside loops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_context: Option<LoopContext>,
    /// Checkpoint after rig setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rig_setup_checkpoint: Option<String>,
    /// Sentinel activity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinels: Option<Sentinels>,
    /// Agent process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_pid: Option<i64>,
    /// Agent log, relative to the execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_log_path: Option<String>,
    /// The session a continue-previous codon resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_session_id: Option<String>,
    /// The agent's session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_session_id: Option<String>,
    /// Cost so far, while live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_cost: Option<Money>,
    /// Tokens so far, while live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_tokens: Option<TokenUsage>,
    /// Assistant messages so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assistant_message_count: Option<u64>,
    /// Session extensions so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_count: Option<u64>,
    /// ISO-8601, once terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Process exit code, once terminal (0 when completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Authoritative cost: set by the agent's result while live, final once
    /// completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_cost: Option<Money>,
    /// Authoritative tokens, as `final_cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_tokens: Option<TokenUsage>,
    /// Whether the agent's result message arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_message_received: Option<bool>,
    /// Checkpoint of the completed work tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_checkpoint: Option<String>,
    /// Budget that ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exceeded: Option<BudgetExceeded>,
    /// The agent ran out of context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_exceeded: Option<bool>,
    /// The state it failed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_during: Option<CodonStatus>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<FailureReason>,
    /// Cost spent by a failed or skipped codon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_cost: Option<Money>,
    /// Tokens spent by a failed or skipped codon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_tokens: Option<TokenUsage>,
    /// Checkpoint of the work tree at the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_checkpoint: Option<String>,
    /// The state it was skipped from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_during: Option<CodonStatus>,
    /// Checkpoint of the work tree at the skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_checkpoint: Option<String>,
}

impl CodonExecution {
    /// A new record in `preparing`.
    pub fn preparing(
        codon_id: String,
        start_time: String,
        loop_context: Option<LoopContext>,
    ) -> Self {
        CodonExecution {
            codon_id,
            status: CodonStatus::Preparing,
            start_time,
            loop_context,
            rig_setup_checkpoint: None,
            sentinels: None,
            claude_pid: None,
            claude_log_path: None,
            previous_session_id: None,
            claude_session_id: None,
            current_cost: None,
            current_tokens: None,
            assistant_message_count: None,
            extension_count: None,
            end_time: None,
            exit_code: None,
            final_cost: None,
            final_tokens: None,
            result_message_received: None,
            completion_checkpoint: None,
            budget_exceeded: None,
            context_exceeded: None,
            failed_during: None,
            failure_reason: None,
            partial_cost: None,
            partial_tokens: None,
            error_checkpoint: None,
            skipped_during: None,
            skip_checkpoint: None,
        }
    }

    /// The seed's `getCodonCost`: completed -> finalCost, failed ->
    /// partialCost, skipped -> 0, running and completing-sentinels ->
    /// currentCost, otherwise 0.
    pub fn cost(&self) -> Money {
        match self.status {
            CodonStatus::Completed => self.final_cost.unwrap_or_default(),
            CodonStatus::Failed => self.partial_cost.unwrap_or_default(),
            CodonStatus::Running | CodonStatus::CompletingSentinels => {
                self.current_cost.unwrap_or_default()
            }
            CodonStatus::Preparing
            | CodonStatus::Starting
            | CodonStatus::Initializing
            | CodonStatus::Skipped => Money::ZERO,
        }
    }
}

impl Run {
    /// The latest record of `codon_id` in this run.
    pub fn latest(&self, codon_id: &str) -> Option<&CodonExecution> {
        self.latest.get(codon_id).map(|&i| &self.codons[i])
    }

    /// The record that is not terminal yet, if any.
    pub fn active(&self) -> Option<&CodonExecution> {
        self.active.map(|i| &self.codons[i])
    }

    /// What this run's codons cost (cached).
    pub fn cost(&self) -> Money {
        self.cost
    }

    /// Rebuilds this run's indexes and cost from its records.
    pub(crate) fn reindex(&mut self) {
        self.latest.clear();
        self.active = None;
        self.cost = Money::ZERO;
        for (i, c) in self.codons.iter().enumerate() {
            self.latest.insert(c.codon_id.clone(), i);
            if !c.status.is_terminal() {
                self.active = Some(i);
            }
            self.cost += c.cost();
        }
    }
}

impl State {
    /// The run with this id.
    pub fn run(&self, run_id: &str) -> Option<&Run> {
        self.run_index.get(run_id).map(|&i| &self.runs[i])
    }

    /// The current run, if one is active.
    pub fn current_run(&self) -> Option<&Run> {
        self.current_run_id.as_deref().and_then(|id| self.run(id))
    }

    /// What every codon record of every run cost (cached, O(1)).
    pub fn total_cost(&self) -> Money {
        self.total_cost
    }

    /// What the current run cost so far; zero when no run is active.
    pub fn current_run_cost(&self) -> Money {
        self.current_run().map_or(Money::ZERO, Run::cost)
    }

    /// The seed's `getCodonCost` of the latest record of a codon in a run.
    pub fn codon_cost(&self, run_id: &str, codon_id: &str) -> Option<Money> {
        self.run(run_id)?.latest(codon_id).map(CodonExecution::cost)
    }

    /// Rebuilds every index and cached cost from the records, and shares
    /// equal codon configurations between plan entries; run after loading a
    /// document.
    pub fn reindex(&mut self) {
        share_configs(&mut self.execution_plan, 0);
        self.index_plan();
        self.run_index.clear();
        self.total_cost = Money::ZERO;
        for (i, run) in self.runs.iter_mut().enumerate() {
            run.reindex();
            self.run_index.insert(run.run_id.clone(), i);
            self.total_cost += run.cost;
        }
    }

    /// Rebuilds the plan's id set from `execution_plan`.
    pub(crate) fn index_plan(&mut self) {
        self.plan_ids = self
            .execution_plan
            .iter()
            .map(|e| e.codon_id.clone())
            .collect();
    }

    /// Number of codon records over all runs.
    pub fn codon_record_count(&self) -> usize {
        self.runs.iter().map(|r| r.codons.len()).sum()
    }
}

/// A state document that also records the journal sequence number it
/// reflects: the state.json snapshot format.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot<'a> {
    /// The state.
    #[serde(flatten)]
    pub state: &'a State,
    /// The last journal sequence number applied to it.
    pub journal_seq: u64,
}

fn ser_newest_first<S: Serializer>(runs: &[Run], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(runs.iter().rev())
}

fn de_newest_first<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Run>, D::Error> {
    let mut runs = Vec::<Run>::deserialize(d)?;
    runs.reverse();
    Ok(runs)
}

/// How far back [`share_configs`] looks for an equal configuration: a loop's
/// previous iteration sits right before the next one, so a short window
/// finds it for any loop of up to this many codons.
const SHARE_WINDOW: usize = 64;

/// Makes each entry of `plan[from..]` share the configuration of an earlier
/// entry (up to [`SHARE_WINDOW`] back) that has the same `id` and is equal.
pub fn share_configs(plan: &mut [PlanEntry], from: usize) {
    for i in from..plan.len() {
        let start = i.saturating_sub(SHARE_WINDOW);
        let (before, rest) = plan.split_at_mut(i);
        let entry = &mut rest[0];
        let id = entry.codon.get("id");
        if let Some(same) = before[start..].iter().rev().find(|e| {
            Arc::ptr_eq(&e.codon, &entry.codon)
                || (e.codon.get("id") == id && e.codon == entry.codon)
        }) {
            entry.codon = Arc::clone(&same.codon);
        }
    }
}
