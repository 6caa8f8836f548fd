//! Integration tests of the execution-thread analyzer (seed `003`), through
//! the public API only. Every history is built by the reducer from
//! transitions, as a real execution builds it.

use serde_json::{json, Value};
use weft_core::queue::apply_bytes;
use weft_core::state::model::State;
use weft_core::thread::{
    analyze, checkpoint_type_name, find_continuation_session_id, ExecutionThread, UnknownRun,
};

const T: &str = "2025-06-01T10:00:00.000Z";

/// A state grown transition by transition; every transition must apply.
struct History {
    state: State,
}

impl History {
    fn new() -> Self {
        History {
            state: State::default(),
        }
    }

    fn apply(&mut self, kind: &str, data: Value) -> &mut Self {
        let bytes = format!(r#"{{"type":"{kind}","data":{data}}}"#).into_bytes();
        let (_, result) = apply_bytes(&mut self.state, &bytes);
        if let Err(e) = result {
            panic!("{kind} was refused: {e}");
        }
        self
    }

    fn start(&mut self, run: &str, conditions: Value, plan: Option<&[&str]>) -> &mut Self {
        let mut data = json!({
            "runId": run,
            "runFolder": format!("/p/.weft/runs/{run}"),
            "gitBranch": format!("run-{run}"),
            "startingConditions": conditions,
            "serverPid": 7,
            "startTime": format!("start-{run}"),
        });
        if let Some(ids) = plan {
            data["executionPlan"] = plan_entries(ids);
        }
        self.apply("RunStarted", data)
    }

    fn fresh(&mut self, run: &str, plan: &[&str]) -> &mut Self {
        self.start(run, json!({ "type": "fresh" }), Some(plan))
    }

    fn continues(&mut self, run: &str, from: &str, after: Option<&str>, sha: &str) -> &mut Self {
        let conditions = json!({
            "type": "continuation",
            "source": { "runId": from, "afterCodon": after, "checkpointSha": sha },
            "reason": "rollback",
        });
        self.start(run, conditions, None)
    }

    fn end(&mut self, run: &str, kind: &str) -> &mut Self {
        if kind == "RunCrashed" {
            return self.apply(
                kind,
                json!({ "runId": run, "detectedAt": format!("end-{run}"), "lastCodonStatus": "unknown" }),
            );
        }
        self.apply(
            kind,
            json!({ "runId": run, "endTime": format!("end-{run}") }),
        )
    }

    fn step(&mut self, run: &str, codon: &str, from: &str, to: &str, meta: Value) -> &mut Self {
        self.apply(
            "CodonTransitioned",
            json!({
                "runId": run, "codonId": codon, "from": from, "to": to,
                "timestamp": T, "metadata": meta,
            }),
        )
    }

    /// Starts a codon and brings it to running, with a rig-setup checkpoint
    /// `rig-<run>-<codon>` when `rig` is set.
    fn running(&mut self, run: &str, codon: &str, rig: bool) -> &mut Self {
        let mut started = json!({ "runId": run, "codonId": codon, "startTime": T });
        if let Some(context) = loop_context(codon) {
            started["loopContext"] = context;
        }
        self.apply("CodonStarted", started);
        let starting = if rig {
            json!({ "checkpointSha": format!("rig-{run}-{codon}") })
        } else {
            json!({})
        };
        self.step(run, codon, "preparing", "starting", starting)
            .step(
                run,
                codon,
                "starting",
                "initializing",
                json!({ "claudePid": 1, "claudeLogPath": "l", "previousSessionId": format!("prev-{codon}") }),
            )
            .step(
                run,
                codon,
                "initializing",
                "running",
                json!({ "claudeSessionId": format!("s-{run}-{codon}") }),
            )
    }

    /// A codon that completes with checkpoint `done-<run>-<codon>`.
    fn ok(&mut self, run: &str, codon: &str) -> &mut Self {
        self.running(run, codon, false).step(
            run,
            codon,
            "running",
            "completed",
            json!({ "checkpointSha": format!("done-{run}-{codon}") }),
        )
    }

    /// A codon that fails with checkpoint `err-<run>-<codon>`.
    fn fails(&mut self, run: &str, codon: &str, rig: bool) -> &mut Self {
        self.running(run, codon, rig).step(
            run,
            codon,
            "running",
            "failed",
            json!({
                "exitCode": 1, "failedDuring": "running",
                "failureReason": { "type": "api-error", "retriable": true },
                "checkpointSha": format!("err-{run}-{codon}"),
            }),
        )
    }

    /// A codon skipped while running, after `messages` assistant messages.
    fn skipped(&mut self, run: &str, codon: &str, messages: u64) -> &mut Self {
        self.running(run, codon, false)
            .apply(
                "AssistantMessageCountUpdated",
                json!({ "runId": run, "codonId": codon, "newCount": messages }),
            )
            .step(
                run,
                codon,
                "running",
                "skipped",
                json!({ "skippedDuring": "running" }),
            )
    }

    fn thread(&self) -> ExecutionThread {
        analyze(&self.state, None).expect("the latest run exists")
    }

    fn thread_of(&self, run: &str) -> ExecutionThread {
        analyze(&self.state, Some(run)).expect("the run exists")
    }

    /// `codonId@runId` of every thread codon, newest first.
    fn story(&self, thread: &ExecutionThread) -> Vec<String> {
        thread
            .codons(&self.state)
            .map(|tc| format!("{}@{}", tc.codon.codon_id, tc.run.run_id))
            .collect()
    }
}

/// `x#n` is iteration n of loop `loop-x`.
fn loop_context(codon_id: &str) -> Option<Value> {
    let (loop_id, n) = codon_id.split_once('#')?;
    Some(json!({
        "loopId": format!("loop-{loop_id}"),
        "iteration": n.parse::<u32>().unwrap(),
        "codonIndexInLoop": 0,
    }))
}

fn plan_entries(ids: &[&str]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| {
                let mut entry = json!({ "codon": { "id": id.split('#').next() }, "codonId": id });
                if let Some(context) = loop_context(id) {
                    entry["loopContext"] = context;
                }
                entry
            })
            .collect(),
    )
}

const PLAN: &[&str] = &["codon-1", "codon-2", "codon-3"];

/// The seed's example: run 1 ran codon-1 and codon-2, codon-3 failed; after
/// a rollback to codon-1, run 2 ran codon-2 and codon-3.
fn seed_example() -> History {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .ok("r1", "codon-2")
        .fails("r1", "codon-3", false)
        .end("r1", "RunFailed")
        .continues("r2", "r1", Some("codon-1"), "done-r1-codon-1");
    h
}

#[test]
fn the_seed_example_stitches_codon_1_of_run_1_to_run_2() {
    let mut h = seed_example();
    let t = h.thread();
    assert_eq!(h.story(&t), ["codon-1@r1"]);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-2"));
    assert!(!t.failed, "run 1's failed codon-3 is superseded");

    h.ok("r2", "codon-2")
        .ok("r2", "codon-3")
        .end("r2", "RunCompleted");
    let t = h.thread();
    assert_eq!(h.story(&t), ["codon-3@r2", "codon-2@r2", "codon-1@r1"]);
    let positions: Vec<_> = t
        .codons(&h.state)
        .map(|tc| (tc.global_index, tc.run_index, tc.codon_index_in_run))
        .collect();
    assert_eq!(positions, [(0, 0, 1), (1, 0, 0), (2, 1, 0)]);
    assert_eq!(t.total_runs(), 2);
    assert!(!t.failed && !t.has_running_codon);
    assert_eq!(t.next_codon_id, None, "the plan is done");
    let newest = t.codon(&h.state, 0).unwrap();
    assert_eq!(newest.run.status.as_str(), "completed");
    assert_eq!(newest.run.end_time.as_deref(), Some("end-r2"));
    assert_eq!(newest.continuation_session_id(), Some("prev-codon-3"));
}

#[test]
fn a_target_run_gives_the_thread_as_it_ended_there() {
    let mut h = seed_example();
    h.ok("r2", "codon-2")
        .ok("r2", "codon-3")
        .end("r2", "RunCompleted");
    let t = h.thread_of("r1");
    assert_eq!(h.story(&t), ["codon-3@r1", "codon-2@r1", "codon-1@r1"]);
    assert!(t.failed, "as of run 1, the newest codon had failed");
    assert_eq!(t.next_codon_id, None);
    assert_eq!(t.total_runs(), 1);
    assert_eq!(
        analyze(&h.state, Some("r9")).unwrap_err(),
        UnknownRun("r9".into())
    );
}

#[test]
fn a_rig_setup_continuation_excludes_the_codon_it_reruns() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .fails("r1", "codon-2", true)
        .end("r1", "RunFailed")
        .continues("r2", "r1", None, "rig-r1-codon-2");
    let t = h.thread();
    assert_eq!(h.story(&t), ["codon-1@r1"]);
    assert!(!t.failed);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-2"), "run it again");

    h.ok("r2", "codon-2");
    let t = h.thread();
    assert_eq!(h.story(&t), ["codon-2@r2", "codon-1@r1"]);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-3"));
}

#[test]
fn a_rig_setup_target_that_names_its_codon_reads_the_same() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .fails("r1", "codon-2", true)
        .end("r1", "RunFailed")
        .continues("r2", "r1", Some("codon-2"), "rig-r1-codon-2");
    let t = h.thread();
    assert_eq!(h.story(&t), ["codon-1@r1"]);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-2"));
}

#[test]
fn a_restart_from_before_the_first_codon_keeps_nothing_of_the_source() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .end("r1", "RunCompleted")
        .continues("r2", "r1", None, "initial-sha");
    let t = h.thread();
    assert!(t.is_empty());
    assert_eq!(t.total_runs(), 2);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-1"));
}

#[test]
fn only_checkpoints_known_to_exist_are_validated() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .fails("r1", "codon-1", true)
        .ok("r1", "codon-1");
    let t = h.thread();
    let kinds = |i: usize, known: &[&str]| -> Vec<(&'static str, String)> {
        t.codon(&h.state, i)
            .unwrap()
            .validated_checkpoints(|sha| known.contains(&sha))
            .into_iter()
            .map(|c| (checkpoint_type_name(c.kind), c.sha.to_owned()))
            .collect()
    };
    assert_eq!(
        kinds(1, &["rig-r1-codon-1", "err-r1-codon-1"]),
        [
            ("rig-setup", "rig-r1-codon-1".to_owned()),
            ("error", "err-r1-codon-1".to_owned())
        ]
    );
    // The rig checkpoint was deleted from git: only the error one is left.
    assert_eq!(
        kinds(1, &["err-r1-codon-1"]),
        [("error", "err-r1-codon-1".to_owned())]
    );
    assert_eq!(
        kinds(0, &["done-r1-codon-1"]),
        [("completed", "done-r1-codon-1".to_owned())]
    );
    assert!(kinds(0, &[]).is_empty());
}

#[test]
fn loop_iterations_follow_the_lazily_expanded_plan() {
    let mut h = History::new();
    h.fresh("r1", &["setup", "x#0", "y#0", "done"])
        .ok("r1", "setup")
        .ok("r1", "x#0");
    assert_eq!(h.thread().next_codon_id.as_deref(), Some("y#0"));
    h.ok("r1", "y#0").apply(
        "PlanExtended",
        json!({ "runId": "r1", "afterCodonId": "y#0", "entries": plan_entries(&["x#1", "y#1"]) }),
    );
    assert_eq!(h.thread().next_codon_id.as_deref(), Some("x#1"));
    h.ok("r1", "x#1")
        .apply("PlanTrimmed", json!({ "runId": "r1", "codonIds": ["y#1"] }));
    assert_eq!(h.thread().next_codon_id.as_deref(), Some("done"));
    // Each codon carries its iteration into the thread, newest first.
    let iterations: Vec<_> = h
        .thread()
        .codons(&h.state)
        .map(|tc| tc.codon.loop_context.as_ref().map(|l| l.iteration))
        .collect();
    assert_eq!(iterations, [Some(1), Some(0), Some(0), None]);
}

#[test]
fn a_run_that_crashed_mid_codon_fails_the_thread() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .running("r1", "codon-2", false);
    let t = h.thread();
    assert!(t.has_running_codon && !t.failed);
    assert_eq!(t.next_codon_id, None, "a codon is running");

    h.end("r1", "RunCrashed");
    let t = h.thread();
    assert!(t.failed && !t.has_running_codon);
    let newest = t.codon(&h.state, 0).unwrap();
    assert_eq!(newest.codon.codon_id, "codon-2");
    assert_eq!(newest.run.status.as_str(), "crashed");
    assert_eq!(t.next_codon_id, None);
}

#[test]
fn a_run_that_crashed_between_codons_still_fails_the_thread() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .end("r1", "RunCrashed");
    let t = h.thread();
    assert!(t.failed, "the current run crashed");
    // Continuing after codon-1 puts the crash behind: a new, running run.
    h.continues("r2", "r1", Some("codon-1"), "done-r1-codon-1");
    let t = h.thread();
    assert!(!t.failed);
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-2"));
}

#[test]
fn superseded_failures_do_not_fail_the_thread() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .fails("r1", "codon-2", false)
        .ok("r1", "codon-2")
        .end("r1", "RunFailed");
    let t = h.thread();
    assert!(!t.failed, "codon-2's failure was retried away");
    assert_eq!(t.next_codon_id.as_deref(), Some("codon-3"));
    assert_eq!(t.len(), 3);
}

#[test]
fn the_continuation_session_comes_from_the_newest_usable_run_of_the_previous_codon() {
    let mut h = History::new();
    h.fresh("r1", PLAN)
        .ok("r1", "codon-1")
        .skipped("r1", "codon-2", 0)
        .end("r1", "RunCompleted")
        .continues("r2", "r1", Some("codon-2"), "nope");
    let t = h.thread();
    // codon-2 was skipped before it said anything: not resumable.
    assert_eq!(find_continuation_session_id(&t, &h.state, "codon-3"), None);
    assert_eq!(
        find_continuation_session_id(&t, &h.state, "codon-2"),
        Some("s-r1-codon-1")
    );
    assert_eq!(find_continuation_session_id(&t, &h.state, "codon-1"), None);

    h.skipped("r2", "codon-2", 2);
    let t = h.thread();
    assert_eq!(
        find_continuation_session_id(&t, &h.state, "codon-3"),
        Some("s-r2-codon-2")
    );
}

#[test]
fn an_empty_fresh_run_starts_the_plan() {
    let mut h = seed_example();
    h.end("r2", "RunCompleted").fresh("r3", &["z", "codon-1"]);
    let t = h.thread();
    assert!(t.is_empty());
    assert_eq!(t.total_runs(), 1);
    assert_eq!(t.next_codon_id.as_deref(), Some("z"));
}
