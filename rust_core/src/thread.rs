//! The execution thread (seed `003`): the history of every run of a
//! continuation chain, stitched into one story.
//!
//! Runs can be rolled back and continued, so the state holds several
//! timelines: run 1 ran `a`, `b`, `c` and `c` failed; after a rollback to
//! `a`, run 2 ran `b` and `c` again. The thread is the authoritative history:
//! `a` from run 1, then `b` and `c` from run 2. Run 1's `b` and `c` were
//! superseded. Recovery, rollback planning and the continue-previous session
//! lookup all read the thread, never a single run.
//!
//! # Building it
//!
//! [`analyze`] starts at the latest run (or a target run), takes all its
//! records, and walks up `startingConditions.source` until it reaches a fresh
//! run. How much of each source run belongs to the thread is its [`Cut`]:
//!
//! * **Normal continuation** (`afterCodon` names a codon): the source's
//!   records up to and including the one execution resumed after. That is
//!   the latest record of `afterCodon` whose completion, error or skip
//!   checkpoint is `checkpointSha` (the record whose work tree was restored),
//!   or failing that the latest record of `afterCodon`. A source without a
//!   record of `afterCodon` (hand-edited states only; the reducer refuses
//!   it) contributes all of its records.
//! * **Rig-setup continuation** (`afterCodon: null`): the codon being re-run
//!   is not named, but its rig-setup checkpoint is the `checkpointSha`. The
//!   re-run record is the earliest record of the source whose
//!   `rigSetupCheckpoint` is that sha (retries in one run reuse the rig
//!   checkpoint, and the restored tree predates all of them). The source
//!   contributes the records before it. When no record carries the sha, the
//!   run restarted from before the source's first codon (its own starting
//!   checkpoint), so the source contributes nothing and the walk goes on.
//!   Hankweave's older encoding, `afterCodon` naming the codon *and*
//!   `checkpointSha` being that codon's rig-setup checkpoint, is read the
//!   same way.
//!
//! The walk stops at a fresh run, at a source run the state lacks, or at a
//! run it already visited (a cycle only a hand-edited state can hold).
//!
//! # What it tells
//!
//! * `failed`: the newest codon of the thread failed, or the run the thread
//!   starts from crashed. Failures in superseded records or older runs do not
//!   count: they are history, not the present.
//! * `has_running_codon`: some codon of the thread is not terminal.
//! * `next_codon_id`: `None` when the thread failed or a codon is running.
//!   Otherwise, a rig-setup continuation that has not started anything yet
//!   re-runs its codon; else the plan decides: the first entry after the
//!   newest codon's entry (from the start of the plan when the thread is
//!   empty or the newest codon is no longer planned) that the thread has not
//!   finished (completed or skipped). Loop iterations are ordinary entries
//!   (`id#n`), so lazy expansion needs nothing special. `None` when the plan
//!   is done.
//!
//! Checkpoint validation and record access are left to the caller: a thread
//! is a list of positions in the state ([`ThreadEntry`]), and
//! [`ThreadCodon::validated_checkpoints`] filters a record's checkpoints
//! through whatever the caller knows exists in git. Building a thread of
//! 100,000 codons therefore copies no record and looks up no sha.

use std::fmt;

use crate::machine::codon::CodonStatus;
use crate::state::model::{
    CodonExecution, ContinuationSource, Run, RunStatus, StartingConditions, State,
};
use crate::state::transition::CheckpointType;

/// One codon of a thread: where its record is in the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadEntry {
    /// Position of its run in `State::runs` (stored oldest first).
    pub run: usize,
    /// Position of the record in that run's `codons`: the seed's
    /// `codonIndexInRun`.
    pub codon: usize,
    /// Which run of the chain it came from: 0 is the run the thread starts
    /// from, 1 its source, and so on.
    pub run_index: usize,
}

/// The analysis of one continuation chain. It refers to the state it was
/// built from by position; read it against that same state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionThread {
    /// The thread's codons, newest first: `entries[i]` has `globalIndex` i.
    pub entries: Vec<ThreadEntry>,
    /// The runs of the chain, newest first: `chain[runIndex]` is a position
    /// in `State::runs`. Runs that contributed no record are included.
    pub chain: Vec<usize>,
    /// Some codon of the thread is not terminal.
    pub has_running_codon: bool,
    /// What to run next, if anything (see the module docs).
    pub next_codon_id: Option<String>,
    /// The newest codon failed, or the starting run crashed.
    pub failed: bool,
}

impl ExecutionThread {
    /// Number of runs in the continuation chain (the seed's `totalRuns`).
    pub fn total_runs(&self) -> usize {
        self.chain.len()
    }

    /// Number of codons in the thread.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the thread holds no codon.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The codon with this `globalIndex` (0 is the newest).
    pub fn codon<'s>(&self, state: &'s State, global_index: usize) -> Option<ThreadCodon<'s>> {
        let e = *self.entries.get(global_index)?;
        Some(ThreadCodon::new(state, e, global_index))
    }

    /// Every codon, newest first.
    pub fn codons<'a, 's: 'a>(
        &'a self,
        state: &'s State,
    ) -> impl ExactSizeIterator<Item = ThreadCodon<'s>> + 'a {
        self.entries
            .iter()
            .enumerate()
            .map(move |(i, &e)| ThreadCodon::new(state, e, i))
    }
}

/// A codon of the thread with its run and its position in the history: the
/// seed's `ThreadCodon`, borrowing from the state.
#[derive(Clone, Copy, Debug)]
pub struct ThreadCodon<'s> {
    /// The codon's record.
    pub codon: &'s CodonExecution,
    /// The run it belongs to (`runId`, `runStatus`, `runStartTime`,
    /// `runEndTime`, `gitBranch`).
    pub run: &'s Run,
    /// 0 is the newest codon of the thread.
    pub global_index: usize,
    /// 0 is the run the thread starts from.
    pub run_index: usize,
    /// Position of the record within its run.
    pub codon_index_in_run: usize,
}

impl<'s> ThreadCodon<'s> {
    fn new(state: &'s State, e: ThreadEntry, global_index: usize) -> Self {
        let run = &state.runs[e.run];
        ThreadCodon {
            codon: &run.codons[e.codon],
            run,
            global_index,
            run_index: e.run_index,
            codon_index_in_run: e.codon,
        }
    }

    /// The session this codon continued from (its `previousSessionId`).
    pub fn continuation_session_id(&self) -> Option<&'s str> {
        self.codon.previous_session_id.as_deref()
    }

    /// The record's checkpoints that `exists` confirms, in the order
    /// rig-setup, then the one its final status recorded.
    pub fn validated_checkpoints(&self, exists: impl Fn(&str) -> bool) -> Vec<CheckpointInfo<'s>> {
        recorded_checkpoints(self.codon)
            .filter(|c| exists(c.sha))
            .collect()
    }
}

/// A checkpoint of a codon record: the seed's `CheckpointInfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointInfo<'s> {
    /// What the checkpoint captured.
    pub kind: CheckpointType,
    /// Its commit sha.
    pub sha: &'s str,
}

/// The wire name of a checkpoint type (`rig-setup`, `completed`, `error`,
/// `skipped`).
pub const fn checkpoint_type_name(kind: CheckpointType) -> &'static str {
    match kind {
        CheckpointType::RigSetup => "rig-setup",
        CheckpointType::Completed => "completed",
        CheckpointType::Error => "error",
        CheckpointType::Skipped => "skipped",
    }
}

/// The checkpoints a record holds that its status vouches for: the
/// rig-setup checkpoint if the rig ran, then the completion checkpoint of a
/// completed record, the error checkpoint of a failed one, or the skip
/// checkpoint of a skipped one. An empty sha is no checkpoint.
pub fn recorded_checkpoints(rec: &CodonExecution) -> impl Iterator<Item = CheckpointInfo<'_>> {
    let terminal = match rec.status {
        CodonStatus::Completed => rec
            .completion_checkpoint
            .as_deref()
            .map(|sha| (CheckpointType::Completed, sha)),
        CodonStatus::Failed => rec
            .error_checkpoint
            .as_deref()
            .map(|sha| (CheckpointType::Error, sha)),
        CodonStatus::Skipped => rec
            .skip_checkpoint
            .as_deref()
            .map(|sha| (CheckpointType::Skipped, sha)),
        _ => None,
    };
    rec.rig_setup_checkpoint
        .as_deref()
        .map(|sha| (CheckpointType::RigSetup, sha))
        .into_iter()
        .chain(terminal)
        .filter(|(_, sha)| !sha.is_empty())
        .map(|(kind, sha)| CheckpointInfo { kind, sha })
}

/// How much of its source run a continuation keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The source's records `..keep` belong to the thread.
    pub keep: usize,
    /// For a rig-setup continuation whose re-run record was found: that
    /// record's position (always `keep`).
    pub rerun: Option<usize>,
}

/// What a continuation from `source` keeps of `parent`, the run it names
/// (see the module docs for the rules).
pub fn continuation_cut(parent: &Run, source: &ContinuationSource) -> Cut {
    let sha = source.checkpoint_sha.as_str();
    let records = &parent.codons;
    let rig_setup = |i: usize| Cut {
        keep: i,
        rerun: Some(i),
    };
    let through = |i: usize| Cut {
        keep: i + 1,
        rerun: None,
    };
    let Some(after) = source.after_codon.as_deref() else {
        return records
            .iter()
            .position(|r| r.rig_setup_checkpoint.as_deref() == Some(sha))
            .map_or(
                Cut {
                    keep: 0,
                    rerun: None,
                },
                rig_setup,
            );
    };
    let is_after = |r: &CodonExecution| r.codon_id == after;
    let ended_at_sha = |r: &CodonExecution| {
        [
            &r.completion_checkpoint,
            &r.error_checkpoint,
            &r.skip_checkpoint,
        ]
        .into_iter()
        .any(|c| c.as_deref() == Some(sha))
    };
    if let Some(i) = records.iter().rposition(|r| is_after(r) && ended_at_sha(r)) {
        return through(i);
    }
    if let Some(i) = records
        .iter()
        .position(|r| is_after(r) && r.rig_setup_checkpoint.as_deref() == Some(sha))
    {
        return rig_setup(i);
    }
    records.iter().rposition(is_after).map_or(
        Cut {
            keep: records.len(),
            rerun: None,
        },
        through,
    )
}

/// A target run the state does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRun(pub String);

impl fmt::Display for UnknownRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unknown run '{}'", self.0)
    }
}

impl std::error::Error for UnknownRun {}

/// Builds the thread that ends in `target_run_id`, or in the latest run.
/// A state without runs gives an empty thread with no next codon.
///
/// `state` must be indexed, as every state the reducer or
/// [`crate::state::validate::load`] produces is.
pub fn analyze(state: &State, target_run_id: Option<&str>) -> Result<ExecutionThread, UnknownRun> {
    let start = match target_run_id {
        Some(id) => *state
            .run_index
            .get(id)
            .ok_or_else(|| UnknownRun(id.to_owned()))?,
        None => match state.runs.len().checked_sub(1) {
            Some(latest) => latest,
            None => return Ok(ExecutionThread::default()),
        },
    };
    let mut thread = ExecutionThread::default();
    let mut visited = vec![false; state.runs.len()];
    let mut pos = start;
    let mut keep = state.runs[start].codons.len();
    // The codon the starting run re-runs, when it is a rig-setup continuation.
    let mut rerun: Option<&str> = None;
    loop {
        visited[pos] = true;
        let run_index = thread.chain.len();
        thread.chain.push(pos);
        let run = &state.runs[pos];
        for codon in (0..keep).rev() {
            thread.has_running_codon |= !run.codons[codon].status.is_terminal();
            thread.entries.push(ThreadEntry {
                run: pos,
                codon,
                run_index,
            });
        }
        let StartingConditions::Continuation { source, .. } = &run.starting_conditions else {
            break;
        };
        let Some(&parent) = state.run_index.get(&source.run_id) else {
            break;
        };
        if visited[parent] {
            break;
        }
        let cut = continuation_cut(&state.runs[parent], source);
        if run_index == 0 {
            rerun = cut
                .rerun
                .map(|i| state.runs[parent].codons[i].codon_id.as_str());
        }
        keep = cut.keep;
        pos = parent;
    }

    let first = &state.runs[start];
    let newest = thread
        .entries
        .first()
        .map(|e| &state.runs[e.run].codons[e.codon]);
    thread.failed = first.status == RunStatus::Crashed
        || newest.is_some_and(|c| c.status == CodonStatus::Failed);
    thread.next_codon_id = if thread.failed || thread.has_running_codon {
        None
    } else if let (Some(id), true) = (rerun, first.codons.is_empty()) {
        Some(id.to_owned())
    } else {
        next_in_plan(state, &thread.entries, newest)
    };
    Ok(thread)
}

/// The first plan entry after the newest codon's entry that the thread has
/// not finished; from the start of the plan when there is no newest codon or
/// it is not planned.
fn next_in_plan(
    state: &State,
    entries: &[ThreadEntry],
    newest: Option<&CodonExecution>,
) -> Option<String> {
    let plan = &state.execution_plan;
    let from = newest
        .and_then(|c| plan.iter().position(|p| p.codon_id == c.codon_id))
        .map_or(0, |i| i + 1);
    let candidates = &plan[from..];
    if candidates.is_empty() {
        return None;
    }
    // One pass over the thread marks which candidates it finished; the plan
    // is small, the thread may hold a hundred thousand records.
    let mut finished = vec![false; candidates.len()];
    let index: rustc_hash::FxHashMap<&str, usize> = candidates
        .iter()
        .enumerate()
        .map(|(i, p)| (p.codon_id.as_str(), i))
        .collect();
    for e in entries {
        let rec = &state.runs[e.run].codons[e.codon];
        if matches!(rec.status, CodonStatus::Completed | CodonStatus::Skipped) {
            if let Some(&i) = index.get(rec.codon_id.as_str()) {
                finished[i] = true;
            }
        }
    }
    candidates
        .iter()
        .zip(finished)
        .find(|(_, done)| !done)
        .map(|(p, _)| p.codon_id.clone())
}

/// Whether a record's session may be resumed by a continue-previous codon:
/// it has a (non-empty) session id, and it completed, or it was skipped after at least one
/// assistant message. A failed session may be half-written.
pub fn is_continuable(rec: &CodonExecution) -> bool {
    rec.claude_session_id
        .as_deref()
        .is_some_and(|s| !s.is_empty())
        && match rec.status {
            CodonStatus::Completed => true,
            CodonStatus::Skipped => rec.assistant_message_count.unwrap_or(0) >= 1,
            _ => false,
        }
}

/// The id planned right before `codon_id` in `plan_ids` (in plan order), or
/// `None` when it is first or not planned.
pub fn previous_in_plan<'p>(
    plan_ids: impl IntoIterator<Item = &'p str>,
    codon_id: &str,
) -> Option<&'p str> {
    let mut previous = None;
    for id in plan_ids {
        if id == codon_id {
            return previous;
        }
        previous = Some(id);
    }
    None
}

/// The session of the newest continuable record of `previous` among
/// `records` (given newest first).
pub fn continuation_session<'a>(
    records: impl IntoIterator<Item = &'a CodonExecution>,
    previous: &str,
) -> Option<&'a str> {
    records
        .into_iter()
        .find(|r| r.codon_id == previous && is_continuable(r))
        .and_then(|r| r.claude_session_id.as_deref())
}

/// The seed's `findContinuationSessionId`: the session a continue-previous
/// `codon_id` resumes, which is the newest continuable execution, anywhere
/// in the thread, of the codon planned right before it.
pub fn find_continuation_session_id<'s>(
    thread: &ExecutionThread,
    state: &'s State,
    codon_id: &str,
) -> Option<&'s str> {
    let plan_ids = state.execution_plan.iter().map(|p| p.codon_id.as_str());
    let previous = previous_in_plan(plan_ids, codon_id)?;
    continuation_session(thread.codons(state).map(|tc| tc.codon), previous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::model::{ContinuationReason, PlanEntry};

    fn record(id: &str, status: CodonStatus) -> CodonExecution {
        let mut r = CodonExecution::preparing(id.to_owned(), "t0".to_owned(), None);
        r.status = status;
        r
    }

    fn run(id: &str, conditions: StartingConditions, codons: Vec<CodonExecution>) -> Run {
        let mut r: Run = serde_json::from_value(serde_json::json!({
            "runId": id,
            "runFolder": format!("/x/{id}"),
            "gitBranch": format!("run-{id}"),
            "startingConditions": {"type": "fresh"},
            "codons": [],
            "status": "completed",
            "startTime": "t",
            "serverPid": 1,
        }))
        .unwrap();
        r.starting_conditions = conditions;
        r.codons = codons;
        r
    }

    fn fresh() -> StartingConditions {
        StartingConditions::Fresh {
            initial_checkpoint_sha: None,
        }
    }

    fn from(run: &str, after: Option<&str>, sha: &str) -> StartingConditions {
        StartingConditions::Continuation {
            source: ContinuationSource {
                run_id: run.to_owned(),
                after_codon: after.map(str::to_owned),
                checkpoint_sha: sha.to_owned(),
            },
            reason: Some(ContinuationReason::Rollback),
        }
    }

    fn state(runs: Vec<Run>, plan: &[&str]) -> State {
        let mut s = State {
            runs,
            execution_plan: plan
                .iter()
                .map(|id| PlanEntry {
                    codon: std::sync::Arc::new(serde_json::json!({})),
                    codon_id: (*id).to_owned(),
                    loop_context: None,
                })
                .collect(),
            ..State::default()
        };
        s.reindex();
        s
    }

    fn ids(thread: &ExecutionThread, s: &State) -> Vec<String> {
        thread
            .codons(s)
            .map(|tc| format!("{}@{}", tc.codon.codon_id, tc.run.run_id))
            .collect()
    }

    fn with_rig(mut r: CodonExecution, sha: &str) -> CodonExecution {
        r.rig_setup_checkpoint = Some(sha.to_owned());
        r
    }

    fn with_done(mut r: CodonExecution, sha: &str) -> CodonExecution {
        r.completion_checkpoint = Some(sha.to_owned());
        r
    }

    #[test]
    fn an_empty_state_has_an_empty_thread() {
        let t = analyze(&State::default(), None).unwrap();
        assert_eq!(t, ExecutionThread::default());
        assert_eq!(
            analyze(&State::default(), Some("r1")),
            Err(UnknownRun("r1".into()))
        );
    }

    #[test]
    fn a_normal_cut_ends_at_the_record_whose_checkpoint_was_restored() {
        // b failed (error e1), was retried and completed (done d2): resuming
        // from e1 keeps the failed attempt as the newest record.
        let parent = run(
            "p",
            fresh(),
            vec![
                record("a", CodonStatus::Completed),
                {
                    let mut r = record("b", CodonStatus::Failed);
                    r.error_checkpoint = Some("e1".into());
                    r
                },
                with_done(record("b", CodonStatus::Completed), "d2"),
                record("c", CodonStatus::Completed),
            ],
        );
        let source = |sha: &str| ContinuationSource {
            run_id: "p".into(),
            after_codon: Some("b".into()),
            checkpoint_sha: sha.into(),
        };
        assert_eq!(continuation_cut(&parent, &source("e1")).keep, 2);
        assert_eq!(continuation_cut(&parent, &source("d2")).keep, 3);
        // An unknown sha falls back to the latest record of b.
        assert_eq!(continuation_cut(&parent, &source("zz")).keep, 3);
        let missing = ContinuationSource {
            after_codon: Some("q".into()),
            ..source("d2")
        };
        assert_eq!(continuation_cut(&parent, &missing).keep, 4);
    }

    #[test]
    fn a_rig_setup_cut_drops_every_attempt_of_the_rerun_codon() {
        let parent = run(
            "p",
            fresh(),
            vec![
                record("a", CodonStatus::Completed),
                with_rig(record("b", CodonStatus::Failed), "rig-b"),
                with_rig(record("b", CodonStatus::Failed), "rig-b"),
            ],
        );
        let source = |after: Option<&str>, sha: &str| ContinuationSource {
            run_id: "p".into(),
            after_codon: after.map(str::to_owned),
            checkpoint_sha: sha.into(),
        };
        let rerun_b = Cut {
            keep: 1,
            rerun: Some(1),
        };
        assert_eq!(continuation_cut(&parent, &source(None, "rig-b")), rerun_b);
        assert_eq!(
            continuation_cut(&parent, &source(Some("b"), "rig-b")),
            rerun_b
        );
        assert_eq!(
            continuation_cut(&parent, &source(None, "initial")),
            Cut {
                keep: 0,
                rerun: None
            }
        );
    }

    #[test]
    fn the_walk_stops_at_a_cycle_and_at_a_missing_source() {
        let s = state(
            vec![
                run(
                    "r1",
                    from("r2", None, "x"),
                    vec![record("a", CodonStatus::Completed)],
                ),
                run(
                    "r2",
                    from("r1", None, "x"),
                    vec![record("b", CodonStatus::Completed)],
                ),
            ],
            &[],
        );
        let t = analyze(&s, None).unwrap();
        assert_eq!(t.total_runs(), 2);
        assert_eq!(ids(&t, &s), ["b@r2"]);
        let s = state(
            vec![run(
                "r1",
                from("gone", Some("a"), "x"),
                vec![record("a", CodonStatus::Completed)],
            )],
            &[],
        );
        let t = analyze(&s, None).unwrap();
        assert_eq!((t.total_runs(), t.len()), (1, 1));
    }

    #[test]
    fn a_rig_setup_continuation_runs_its_codon_again_next() {
        let s = state(
            vec![
                run(
                    "r1",
                    fresh(),
                    vec![
                        record("a", CodonStatus::Completed),
                        with_rig(record("b", CodonStatus::Completed), "rig-b"),
                    ],
                ),
                run("r2", from("r1", None, "rig-b"), vec![]),
            ],
            &["a", "b", "c"],
        );
        let t = analyze(&s, None).unwrap();
        assert_eq!(ids(&t, &s), ["a@r1"]);
        assert_eq!(t.next_codon_id.as_deref(), Some("b"));
    }

    #[test]
    fn the_plan_skips_what_the_thread_finished() {
        // The newest codon is not planned (the plan changed), so the search
        // starts at the top and passes over the finished `a` and `b`.
        let s = state(
            vec![run(
                "r1",
                fresh(),
                vec![
                    record("a", CodonStatus::Completed),
                    record("b", CodonStatus::Skipped),
                    record("old", CodonStatus::Completed),
                ],
            )],
            &["a", "b", "c"],
        );
        let t = analyze(&s, None).unwrap();
        assert_eq!(t.next_codon_id.as_deref(), Some("c"));
    }

    #[test]
    fn a_failed_newest_codon_or_a_crashed_run_fails_the_thread() {
        let mut crashed = run("r1", fresh(), vec![record("a", CodonStatus::Completed)]);
        crashed.status = RunStatus::Crashed;
        let s = state(vec![crashed], &["a", "b"]);
        let t = analyze(&s, None).unwrap();
        assert!(t.failed);
        assert_eq!(t.next_codon_id, None);
        let s = state(
            vec![run(
                "r1",
                fresh(),
                vec![
                    record("a", CodonStatus::Failed),
                    record("a", CodonStatus::Completed),
                ],
            )],
            &["a", "b"],
        );
        let t = analyze(&s, None).unwrap();
        assert!(!t.failed, "a superseded attempt does not count");
        assert_eq!(t.next_codon_id.as_deref(), Some("b"));
    }

    #[test]
    fn checkpoints_follow_the_status_and_the_filter() {
        let mut r = with_rig(record("a", CodonStatus::Failed), "rig");
        r.error_checkpoint = Some("err".into());
        r.completion_checkpoint = Some("done".into()); // not vouched for by `failed`
        let got: Vec<_> = recorded_checkpoints(&r)
            .map(|c| (checkpoint_type_name(c.kind), c.sha))
            .collect();
        assert_eq!(got, [("rig-setup", "rig"), ("error", "err")]);
        let s = state(vec![run("r1", fresh(), vec![r])], &[]);
        let t = analyze(&s, None).unwrap();
        let tc = t.codon(&s, 0).unwrap();
        let kept = tc.validated_checkpoints(|sha| sha == "err");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].kind, CheckpointType::Error);
        assert!(tc.validated_checkpoints(|_| false).is_empty());
    }

    #[test]
    fn only_completed_or_talkative_skipped_sessions_continue() {
        let mut done = record("a", CodonStatus::Completed);
        assert!(!is_continuable(&done), "no session");
        done.claude_session_id = Some("s".into());
        assert!(is_continuable(&done));
        let mut skipped = record("a", CodonStatus::Skipped);
        skipped.claude_session_id = Some("s".into());
        assert!(!is_continuable(&skipped));
        skipped.assistant_message_count = Some(1);
        assert!(is_continuable(&skipped));
        let mut failed = record("a", CodonStatus::Failed);
        failed.claude_session_id = Some("s".into());
        failed.assistant_message_count = Some(3);
        assert!(!is_continuable(&failed));
        assert_eq!(previous_in_plan(["a", "b", "c"], "c"), Some("b"));
        assert_eq!(previous_in_plan(["a", "b"], "a"), None);
        assert_eq!(previous_in_plan(["a", "b"], "z"), None);
    }
}
