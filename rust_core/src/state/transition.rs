//! The seventeen transition types: the only way the state changes.
//!
//! Each arrives as `{"type": "...", "data": {...}}`, the same bytes that go
//! to the journal. Ids are borrowed from the input where they are only
//! looked up, so the hot events (cost and message counts) allocate nothing
//! while decoding. Every time is an argument (ISO-8601 text), never read
//! from a clock, so replaying a journal reproduces the state exactly.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::machine::codon::{CodonStatus, TransitionMetadata};
use crate::state::model::{
    BudgetStop, LoopContext, PlanEntry, SentinelState, StartingConditions, StopBy, TokenUsage,
};
use crate::state::money::Money;

/// A borrowed-when-possible string.
pub type Str<'a> = Cow<'a, str>;

/// One state transition.
// A decoded transition lives on the stack only while it is applied, so its
// size matters less than the allocation boxing the large variants would add.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Deserialize)]
#[serde(tag = "type", content = "data", deny_unknown_fields)]
pub enum Transition<'a> {
    /// Creates a run and makes it current.
    #[serde(borrow)]
    RunStarted(RunStarted<'a>),
    /// Ends the current run successfully.
    #[serde(borrow)]
    RunCompleted(RunEnded<'a>),
    /// Ends the current run as failed.
    #[serde(borrow)]
    RunFailed(RunFailed<'a>),
    /// Ends the current run as stopped (by the user, or by its budget ceiling).
    #[serde(borrow)]
    RunStopped(RunStopped<'a>),
    /// Marks a run found dead on a later start.
    #[serde(borrow)]
    RunCrashed(RunCrashed<'a>),
    /// Appends a `preparing` record for a codon.
    #[serde(borrow)]
    CodonStarted(CodonStarted<'a>),
    /// Moves a codon along the state machine.
    #[serde(borrow)]
    CodonTransitioned(CodonTransitioned<'a>),
    /// Sets a live codon's cost and tokens to absolute values.
    #[serde(borrow)]
    CostsUpdated(CostsUpdated<'a>),
    /// Adds to a live codon's cost and tokens.
    #[serde(borrow)]
    CostsIncremented(CostsIncremented<'a>),
    /// Sets a live codon's assistant message count.
    #[serde(borrow)]
    AssistantMessageCountUpdated(AssistantMessageCountUpdated<'a>),
    /// Sets a live codon's extension count.
    #[serde(borrow)]
    ExtensionCountUpdated(ExtensionCountUpdated<'a>),
    /// Records the authoritative cost the agent reported.
    #[serde(borrow)]
    CodonFinalCostSet(CodonFinalCostSet<'a>),
    /// Replaces a codon's sentinel states.
    #[serde(borrow)]
    SentinelStatesUpdated(SentinelStatesUpdated<'a>),
    /// Records a checkpoint on a codon's latest record.
    #[serde(borrow)]
    CheckpointCreated(CheckpointCreated<'a>),
    /// Records the project's initial checkpoint.
    #[serde(borrow)]
    InitialCheckpointSet(InitialCheckpointSet<'a>),
    /// Inserts entries into the execution plan (a loop's next iteration).
    #[serde(borrow)]
    PlanExtended(PlanExtended<'a>),
    /// Removes entries from the execution plan (the rest of a loop that ended early).
    #[serde(borrow)]
    PlanTrimmed(PlanTrimmed<'a>),
}

impl Transition<'_> {
    /// The type name, as on the wire.
    pub const fn kind(&self) -> &'static str {
        match self {
            Transition::RunStarted(_) => "RunStarted",
            Transition::RunCompleted(_) => "RunCompleted",
            Transition::RunFailed(_) => "RunFailed",
            Transition::RunStopped(_) => "RunStopped",
            Transition::RunCrashed(_) => "RunCrashed",
            Transition::CodonStarted(_) => "CodonStarted",
            Transition::CodonTransitioned(_) => "CodonTransitioned",
            Transition::CostsUpdated(_) => "CostsUpdated",
            Transition::CostsIncremented(_) => "CostsIncremented",
            Transition::AssistantMessageCountUpdated(_) => "AssistantMessageCountUpdated",
            Transition::ExtensionCountUpdated(_) => "ExtensionCountUpdated",
            Transition::CodonFinalCostSet(_) => "CodonFinalCostSet",
            Transition::SentinelStatesUpdated(_) => "SentinelStatesUpdated",
            Transition::CheckpointCreated(_) => "CheckpointCreated",
            Transition::InitialCheckpointSet(_) => "InitialCheckpointSet",
            Transition::PlanExtended(_) => "PlanExtended",
            Transition::PlanTrimmed(_) => "PlanTrimmed",
        }
    }

    /// The run, the codon, and for a codon move its two ends: what the
    /// transition is about, for the audit trail.
    pub fn subject(&self) -> Subject<'_> {
        let (run, codon) = match self {
            Transition::RunStarted(d) => (Some(&*d.run_id), None),
            Transition::RunCompleted(d) => (Some(&*d.run_id), None),
            Transition::RunFailed(d) => (Some(&*d.run_id), None),
            Transition::RunStopped(d) => (Some(&*d.run_id), None),
            Transition::RunCrashed(d) => (Some(&*d.run_id), None),
            Transition::CodonStarted(d) => (Some(&*d.run_id), Some(d.codon_id.as_str())),
            Transition::CodonTransitioned(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::CostsUpdated(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::CostsIncremented(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::AssistantMessageCountUpdated(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::ExtensionCountUpdated(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::CodonFinalCostSet(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::SentinelStatesUpdated(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::CheckpointCreated(d) => (Some(&*d.run_id), Some(&*d.codon_id)),
            Transition::InitialCheckpointSet(_) => (None, None),
            Transition::PlanExtended(d) => (Some(&*d.run_id), Some(&*d.after_codon_id)),
            Transition::PlanTrimmed(d) => (Some(&*d.run_id), None),
        };
        let moves = match self {
            Transition::CodonTransitioned(d) => Some((d.from, d.to)),
            _ => None,
        };
        Subject { run, codon, moves }
    }

    /// Every type name, in declaration order.
    pub const KINDS: [&'static str; 17] = [
        "RunStarted",
        "RunCompleted",
        "RunFailed",
        "RunStopped",
        "RunCrashed",
        "CodonStarted",
        "CodonTransitioned",
        "CostsUpdated",
        "CostsIncremented",
        "AssistantMessageCountUpdated",
        "ExtensionCountUpdated",
        "CodonFinalCostSet",
        "SentinelStatesUpdated",
        "CheckpointCreated",
        "InitialCheckpointSet",
        "PlanExtended",
        "PlanTrimmed",
    ];
}

/// What a transition is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subject<'t> {
    /// The run it names.
    pub run: Option<&'t str>,
    /// The codon it names.
    pub codon: Option<&'t str>,
    /// For `CodonTransitioned`: from and to.
    pub moves: Option<(CodonStatus, CodonStatus)>,
}

/// Data of `RunStarted`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStarted<'a> {
    /// New run id.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// Absolute run folder.
    pub run_folder: String,
    /// Checkpoint branch of the run.
    pub git_branch: String,
    /// Fresh or continuation.
    pub starting_conditions: StartingConditions,
    /// The process that owns the run.
    pub server_pid: i64,
    /// ISO-8601.
    pub start_time: String,
    /// The plan of a fresh run; a continuation keeps the existing one.
    #[serde(default)]
    pub execution_plan: Option<Vec<PlanEntry>>,
}

/// Data of `RunCompleted`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunEnded<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// ISO-8601.
    pub end_time: String,
}

/// Data of `RunFailed`: the seed's two fields, and what failed (Weft's).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunFailed<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// ISO-8601.
    pub end_time: String,
    /// The codon whose failure ended the run.
    #[serde(default)]
    pub codon_id: Option<String>,
    /// Why, in words (absent in journals older than Weft's outcomes).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Data of `RunStopped`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStopped<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// ISO-8601.
    pub end_time: String,
    /// The user, or a budget.
    pub by: StopBy,
    /// The agent was killed.
    #[serde(default)]
    pub forced: bool,
    /// In words.
    pub reason: String,
    /// The codon that was stopped and stays to do.
    #[serde(default)]
    pub codon_id: Option<String>,
    /// The ceiling, for a stop by budget.
    #[serde(default)]
    pub budget: Option<BudgetStop>,
}

/// Data of `RunCrashed`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCrashed<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// ISO-8601: the run's last sign of life, which becomes its and its active
    /// codon's endTime (the journal row's timestamp says when the crash was noticed).
    pub detected_at: String,
    /// What the lock or the state said the codon was doing (informational).
    pub last_codon_status: String,
}

/// Data of `CodonStarted`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodonStarted<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    pub codon_id: String,
    /// ISO-8601.
    pub start_time: String,
    /// For codons inside loops.
    #[serde(default)]
    pub loop_context: Option<LoopContext>,
}

/// Data of `CodonTransitioned`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodonTransitioned<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// The status the caller believes the codon is in.
    pub from: CodonStatus,
    /// The status requested.
    pub to: CodonStatus,
    /// ISO-8601; becomes `endTime` on a terminal transition.
    pub timestamp: String,
    /// What the target's guard requires, and more. Boxed: it is the largest
    /// part of any transition and most transitions carry none.
    #[serde(default)]
    pub metadata: Option<Box<TransitionMetadata>>,
}

/// Data of `CostsUpdated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CostsUpdated<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// New total cost.
    pub cost: Money,
    /// New total tokens.
    pub tokens: TokenUsage,
}

/// Data of `CostsIncremented`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CostsIncremented<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// Cost to add.
    pub cost_delta: Money,
    /// Tokens to add.
    pub tokens_delta: TokenUsage,
}

/// Data of `AssistantMessageCountUpdated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssistantMessageCountUpdated<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// The new count.
    pub new_count: u64,
}

/// Data of `ExtensionCountUpdated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtensionCountUpdated<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// The new count.
    pub extension_count: u64,
}

/// Data of `CodonFinalCostSet`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodonFinalCostSet<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// Authoritative cost.
    pub final_cost: Money,
    /// Authoritative tokens.
    pub final_tokens: TokenUsage,
}

/// Data of `SentinelStatesUpdated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SentinelStatesUpdated<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// Every sentinel of the codon.
    pub sentinel_states: Vec<SentinelState>,
    /// Their summed cost.
    pub total_cost: Money,
}

/// Kind of checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointType {
    /// After rig setup.
    RigSetup,
    /// After a successful codon.
    Completed,
    /// At a failure.
    Error,
    /// At a skip.
    Skipped,
}

/// Data of `CheckpointCreated`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointCreated<'a> {
    /// The run.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The codon.
    #[serde(borrow)]
    pub codon_id: Str<'a>,
    /// What the checkpoint captured.
    pub checkpoint_type: CheckpointType,
    /// Commit sha.
    pub sha: String,
    /// Branch it was committed on (informational).
    pub branch: String,
}

/// Data of `InitialCheckpointSet`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitialCheckpointSet<'a> {
    /// Commit sha.
    #[serde(borrow)]
    pub sha: Str<'a>,
}

/// Decodes one transition from its JSON bytes.
pub fn decode(bytes: &[u8]) -> Result<Transition<'_>, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Splits a JSON array of transitions into each element's raw bytes, so one
/// malformed element rejects only itself.
pub fn split_batch(bytes: &[u8]) -> Result<Vec<&RawValue>, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Data of `PlanExtended`: lazy loop expansion inserts the next iteration's
/// entries right after the codon that finished the previous one.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanExtended<'a> {
    /// The running run in which the loop advanced.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The plan entry after which the new entries go.
    #[serde(borrow)]
    pub after_codon_id: Str<'a>,
    /// The new entries, in order.
    pub entries: Vec<PlanEntry>,
}

/// Data of `PlanTrimmed`: a loop that terminated early drops the rest of its
/// iteration from the plan, so a restart does not run it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanTrimmed<'a> {
    /// The running run in which the loop ended.
    #[serde(borrow)]
    pub run_id: Str<'a>,
    /// The entries to remove.
    pub codon_ids: Vec<String>,
}
