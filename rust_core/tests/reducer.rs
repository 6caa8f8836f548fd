//! Integration tests of the state reducer, the cost cache, the state.json
//! round trip, load-time validation and the ordered transition queue,
//! through the public API only. The spec is seed `000` (the codon state
//! machine) and section 5 of the hankweave runtime reference.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use weft_core::machine::codon::{CodonStatus, InvalidTransition, MetadataError, TransitionError};
use weft_core::queue::{apply_bytes, process, Queue, Submission};
use weft_core::state::model::{CodonExecution, Run, RunStatus, State};
use weft_core::state::money::Money;
use weft_core::state::reducer::{apply, Applied, Rejection};
use weft_core::state::transition::{decode, Transition};
use weft_core::state::validate::{self, Environment, Issue, Validation};

// ---------------------------------------------------------------------------
// Times. Every time is an argument, so each event gets a distinct one and the
// tests can tell which event set which field.

const RUN_START: &str = "2025-06-01T10:00:00.000Z";
const RUN_END: &str = "2025-06-01T11:00:00.000Z";
const DETECTED: &str = "2025-06-01T12:00:00.000Z";
const CODON_START: &str = "2025-06-01T10:01:00.000Z";
const STEP: &str = "2025-06-01T10:02:00.000Z";

// ---------------------------------------------------------------------------
// Transition builders: each returns the JSON bytes the Python side would send.

/// `{"type": kind, "data": data}` with `type` first, as the Python side
/// writes it (`json!` objects sort their keys, which would put `data` first).
fn tr(kind: &str, data: Value) -> Vec<u8> {
    format!(r#"{{"type":"{kind}","data":{data}}}"#).into_bytes()
}

fn fresh() -> Value {
    json!({ "type": "fresh" })
}

fn continuation(source: &str, after: Option<&str>, sha: &str) -> Value {
    json!({
        "type": "continuation",
        "source": { "runId": source, "afterCodon": after, "checkpointSha": sha },
        "reason": "retry",
    })
}

fn run_started(run: &str) -> Vec<u8> {
    run_started_with(run, fresh(), None)
}

fn run_started_with(run: &str, conditions: Value, plan: Option<Value>) -> Vec<u8> {
    let mut data = json!({
        "runId": run,
        "runFolder": format!("/proj/.weft/runs/{run}"),
        "gitBranch": format!("run-{run}"),
        "startingConditions": conditions,
        "serverPid": 4321,
        "startTime": RUN_START,
    });
    if let Some(plan) = plan {
        data["executionPlan"] = plan;
    }
    tr("RunStarted", data)
}

fn plan(ids: &[&str]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| json!({ "codon": { "id": id, "model": "sonnet" }, "codonId": id }))
            .collect(),
    )
}

fn run_completed(run: &str) -> Vec<u8> {
    tr("RunCompleted", json!({ "runId": run, "endTime": RUN_END }))
}

fn run_failed(run: &str) -> Vec<u8> {
    tr("RunFailed", json!({ "runId": run, "endTime": RUN_END }))
}

fn run_stopped(run: &str) -> Vec<u8> {
    tr(
        "RunStopped",
        json!({ "runId": run, "endTime": RUN_END, "by": "user", "reason": "stopped by you" }),
    )
}

fn run_crashed(run: &str) -> Vec<u8> {
    tr(
        "RunCrashed",
        json!({ "runId": run, "detectedAt": DETECTED, "lastCodonStatus": "unknown" }),
    )
}

fn codon_started(run: &str, codon: &str) -> Vec<u8> {
    tr(
        "CodonStarted",
        json!({ "runId": run, "codonId": codon, "startTime": CODON_START }),
    )
}

fn transitioned(run: &str, codon: &str, from: &str, to: &str, metadata: Value) -> Vec<u8> {
    tr(
        "CodonTransitioned",
        json!({
            "runId": run, "codonId": codon, "from": from, "to": to,
            "timestamp": STEP, "metadata": metadata,
        }),
    )
}

/// Metadata that satisfies the guard of `to` (and nothing more).
fn guard_meta(from: &str, to: &str) -> Value {
    match to {
        "initializing" => json!({ "claudePid": 4242, "claudeLogPath": "logs/c.log" }),
        "running" => json!({ "claudeSessionId": "sess-1" }),
        "completed" => json!({ "checkpointSha": "sha-done", "resultMessageReceived": true }),
        "failed" => json!({
            "exitCode": 1,
            "failureReason": { "type": "api-error", "retriable": true, "message": "boom" },
            "failedDuring": from,
        }),
        "skipped" => json!({ "skippedDuring": from }),
        _ => json!({}),
    }
}

fn tokens(input: u64, output: u64, creation: u64, read: u64) -> Value {
    json!({
        "inputTokens": input,
        "outputTokens": output,
        "cacheCreationTokens": creation,
        "cacheReadTokens": read,
    })
}

fn zero_tokens() -> Value {
    tokens(0, 0, 0, 0)
}

fn costs_updated(run: &str, codon: &str, cost: f64, tok: Value) -> Vec<u8> {
    tr(
        "CostsUpdated",
        json!({ "runId": run, "codonId": codon, "cost": cost, "tokens": tok }),
    )
}

fn costs_incremented(run: &str, codon: &str, delta: f64, tok: Value) -> Vec<u8> {
    tr(
        "CostsIncremented",
        json!({ "runId": run, "codonId": codon, "costDelta": delta, "tokensDelta": tok }),
    )
}

fn message_count(run: &str, codon: &str, n: u64) -> Vec<u8> {
    tr(
        "AssistantMessageCountUpdated",
        json!({ "runId": run, "codonId": codon, "newCount": n }),
    )
}

fn extension_count(run: &str, codon: &str, n: u64) -> Vec<u8> {
    tr(
        "ExtensionCountUpdated",
        json!({ "runId": run, "codonId": codon, "extensionCount": n }),
    )
}

fn final_cost_set(run: &str, codon: &str, cost: f64, tok: Value) -> Vec<u8> {
    tr(
        "CodonFinalCostSet",
        json!({ "runId": run, "codonId": codon, "finalCost": cost, "finalTokens": tok }),
    )
}

fn sentinel(id: &str, cost: f64) -> Value {
    json!({
        "id": id,
        "model": "haiku",
        "loadedAt": CODON_START,
        "llmCallCount": 3,
        "failedLLMCalls": 1,
        "totalTriggers": 5,
        "totalCost": cost,
        "status": "active",
    })
}

fn sentinels_updated(run: &str, codon: &str, states: Value, total: f64) -> Vec<u8> {
    tr(
        "SentinelStatesUpdated",
        json!({ "runId": run, "codonId": codon, "sentinelStates": states, "totalCost": total }),
    )
}

fn checkpoint(run: &str, codon: &str, kind: &str, sha: &str) -> Vec<u8> {
    tr(
        "CheckpointCreated",
        json!({
            "runId": run, "codonId": codon, "checkpointType": kind,
            "sha": sha, "branch": format!("run-{run}"),
        }),
    )
}

fn initial_checkpoint(sha: &str) -> Vec<u8> {
    tr("InitialCheckpointSet", json!({ "sha": sha }))
}

fn plan_extended(run: &str, after: &str, entries: Value) -> Vec<u8> {
    tr(
        "PlanExtended",
        json!({ "runId": run, "afterCodonId": after, "entries": entries }),
    )
}

fn loop_entry(id: &str, iteration: u32) -> Value {
    json!({
        "codon": { "id": id },
        "codonId": format!("{id}#{iteration}"),
        "loopContext": { "loopId": "L", "iteration": iteration, "codonIndexInLoop": 0 },
    })
}

// ---------------------------------------------------------------------------
// Applying.

/// Applies a transition that must be accepted.
fn ok(state: &mut State, bytes: &[u8]) -> Applied {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let t = decode(bytes).unwrap_or_else(|e| panic!("{text} does not decode: {e}"));
    apply(state, t).unwrap_or_else(|r| panic!("{text} rejected ({}): {r}", r.code()))
}

/// Everything observable about a state, including its indexes and caches.
#[derive(Debug, PartialEq)]
struct Fingerprint {
    bytes: Vec<u8>,
    total: Money,
    current: Money,
    current_run: Option<String>,
    runs: Vec<String>,
}

fn fingerprint(state: &State) -> Fingerprint {
    let runs = state
        .runs
        .iter()
        .map(|run| {
            let looked_up = state.run(&run.run_id).map(|r| std::ptr::eq(r, run));
            let index_of = |c: Option<&CodonExecution>| {
                c.and_then(|c| run.codons.iter().position(|x| std::ptr::eq(x, c)))
            };
            let ids: BTreeSet<&str> = run.codons.iter().map(|c| c.codon_id.as_str()).collect();
            let latest: Vec<String> = ids
                .iter()
                .map(|id| {
                    format!(
                        "{id}@{:?}={:?}",
                        index_of(run.latest(id)),
                        state.codon_cost(&run.run_id, id)
                    )
                })
                .collect();
            format!(
                "{} lookup={looked_up:?} cost={:?} active={:?} latest={latest:?}",
                run.run_id,
                run.cost(),
                index_of(run.active()),
            )
        })
        .collect();
    Fingerprint {
        bytes: serde_json::to_vec(state).unwrap(),
        total: state.total_cost(),
        current: state.current_run_cost(),
        current_run: state.current_run().map(|r| r.run_id.clone()),
        runs,
    }
}

/// Applies a transition that must be refused, checks that nothing changed
/// (the document byte for byte, the indexes and the cost cache) and returns
/// the code and the message.
fn reject(state: &mut State, bytes: &[u8]) -> (&'static str, String) {
    let before = fingerprint(state);
    let (_, result) = apply_bytes(state, bytes);
    let err = result.expect_err(&format!("{} was accepted", String::from_utf8_lossy(bytes)));
    assert_eq!(
        fingerprint(state),
        before,
        "a rejected transition changed the state: {err}"
    );
    (err.code(), err.to_string())
}

/// The lifecycle order of the non-terminal states.
const PATH: [&str; 5] = [
    "preparing",
    "starting",
    "initializing",
    "running",
    "completing-sentinels",
];

fn status_of(state: &State, run: &str, codon: &str) -> &'static str {
    state.run(run).and_then(|r| r.latest(codon)).map_or_else(
        || panic!("no codon {codon} in {run}"),
        |c| c.status.as_str(),
    )
}

/// Walks the latest record of `codon` forward to the non-terminal `target`.
fn advance(state: &mut State, run: &str, codon: &str, target: &str) {
    let from = PATH
        .iter()
        .position(|s| *s == status_of(state, run, codon))
        .unwrap();
    let to = PATH.iter().position(|s| *s == target).unwrap();
    for pair in PATH[from..=to].windows(2) {
        ok(
            state,
            &transitioned(run, codon, pair[0], pair[1], guard_meta(pair[0], pair[1])),
        );
    }
}

/// Starts a codon and walks it to `target` (non-terminal).
fn start_at(state: &mut State, run: &str, codon: &str, target: &str) {
    ok(state, &codon_started(run, codon));
    advance(state, run, codon, target);
}

/// Moves the latest record of `codon` from where it is to a terminal state.
fn finish(state: &mut State, run: &str, codon: &str, to: &str) -> Applied {
    let from = status_of(state, run, codon);
    ok(
        state,
        &transitioned(run, codon, from, to, guard_meta(from, to)),
    )
}

/// The JSON of record `index` of `run`.
fn rec(state: &State, run: &str, index: usize) -> Value {
    serde_json::to_value(&state.run(run).unwrap().codons[index]).unwrap()
}

/// The JSON of run `run`.
fn run_json(state: &State, run: &str) -> Value {
    serde_json::to_value(state.run(run).unwrap()).unwrap()
}

fn usd(v: f64) -> Money {
    Money::from_usd(v).unwrap()
}

/// A state with run `r1` current and codon `c` at `status` (any status).
fn one(status: &str) -> State {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    if PATH.contains(&status) {
        advance(&mut s, "r1", "c", status);
    } else {
        advance(&mut s, "r1", "c", "running");
        finish(&mut s, "r1", "c", status);
    }
    s
}

// ---------------------------------------------------------------------------
// The cost cache against a recomputation.

/// The seed's `getCodonCost`, computed from a record's JSON.
fn spec_cost(record: &Value) -> Money {
    let field = match record["status"].as_str().unwrap() {
        "completed" => "finalCost",
        "failed" => "partialCost",
        "running" | "completing-sentinels" => "currentCost",
        _ => return Money::ZERO,
    };
    record[field].as_f64().map_or(Money::ZERO, usd)
}

/// Checks every cached cost against a state rebuilt from its own JSON and
/// against an independent sum of the records.
fn assert_cache_exact(state: &State) {
    let bytes = serde_json::to_vec(state).unwrap();
    let mut fresh: State = serde_json::from_slice(&bytes).unwrap();
    fresh.reindex();
    assert_eq!(state.total_cost(), fresh.total_cost(), "total");
    assert_eq!(
        state.current_run_cost(),
        fresh.current_run_cost(),
        "current run"
    );
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let mut total = Money::ZERO;
    for run_doc in doc["runs"].as_array().unwrap() {
        let run_id = run_doc["runId"].as_str().unwrap();
        let mut run_total = Money::ZERO;
        for c in run_doc["codons"].as_array().unwrap() {
            run_total += spec_cost(c);
        }
        total += run_total;
        let live = state.run(run_id).unwrap();
        assert_eq!(live.cost(), run_total, "run {run_id}");
        assert_eq!(fresh.run(run_id).unwrap().cost(), run_total, "run {run_id}");
        for c in &live.codons {
            let id = c.codon_id.as_str();
            assert_eq!(
                state.codon_cost(run_id, id),
                fresh.codon_cost(run_id, id),
                "codon {run_id}/{id}"
            );
            let latest = run_doc["codons"]
                .as_array()
                .unwrap()
                .iter()
                .rfind(|r| r["codonId"] == id)
                .unwrap();
            assert_eq!(state.codon_cost(run_id, id), Some(spec_cost(latest)));
        }
    }
    assert_eq!(state.total_cost(), total, "independent total");
}

/// Removes the `remove` fields from a JSON object, then sets the `set` ones.
fn edit(mut v: Value, remove: &[&str], set: &[(&str, Value)]) -> Value {
    let obj = v.as_object_mut().unwrap();
    for k in remove {
        assert!(obj.remove(*k).is_some(), "no field {k} to remove");
    }
    for (k, val) in set {
        obj.insert((*k).to_owned(), val.clone());
    }
    v
}

// ===========================================================================
// The seventeen transitions and their effects.

#[test]
fn the_seventeen_transition_types_all_decode() {
    let batch = [
        run_started("r1"),
        run_completed("r1"),
        run_failed("r1"),
        run_stopped("r1"),
        run_crashed("r1"),
        codon_started("r1", "c"),
        transitioned("r1", "c", "preparing", "starting", json!({})),
        costs_updated("r1", "c", 0.1, zero_tokens()),
        costs_incremented("r1", "c", 0.1, zero_tokens()),
        message_count("r1", "c", 1),
        extension_count("r1", "c", 1),
        final_cost_set("r1", "c", 0.1, zero_tokens()),
        sentinels_updated("r1", "c", json!([]), 0.0),
        checkpoint("r1", "c", "rig-setup", "abc"),
        initial_checkpoint("abc"),
        plan_extended("r1", "a", json!([])),
        tr("PlanTrimmed", json!({ "runId": "r1", "codonIds": [] })),
    ];
    let kinds: Vec<&str> = batch.iter().map(|b| decode(b).unwrap().kind()).collect();
    assert_eq!(kinds, Transition::KINDS.to_vec());
}

#[test]
fn run_started_creates_a_running_run_makes_it_current_and_sets_the_plan() {
    let mut s = State::default();
    let entries = json!([
        { "codon": { "id": "plan", "model": "sonnet" }, "codonId": "plan" },
        {
            "codon": { "id": "step" },
            "codonId": "step#0",
            "loopContext": { "loopId": "L", "iteration": 0, "codonIndexInLoop": 0 },
        },
    ]);
    let applied = ok(
        &mut s,
        &run_started_with(
            "r1",
            json!({ "type": "fresh", "initialCheckpointSha": "sha0" }),
            Some(entries.clone()),
        ),
    );
    assert_eq!(applied, Applied::default());
    assert_eq!(s.current_run_id.as_deref(), Some("r1"));
    assert_eq!(s.current_run().unwrap().run_id, "r1");
    assert_eq!(
        run_json(&s, "r1"),
        json!({
            "runId": "r1",
            "runFolder": "/proj/.weft/runs/r1",
            "gitBranch": "run-r1",
            "startingConditions": { "type": "fresh", "initialCheckpointSha": "sha0" },
            "codons": [],
            "status": "running",
            "startTime": RUN_START,
            "serverPid": 4321,
        })
    );
    assert_eq!(serde_json::to_value(&s).unwrap()["executionPlan"], entries);
    assert_eq!(s.current_run_cost(), Money::ZERO);
    assert_eq!(s.total_cost(), Money::ZERO);
}

#[test]
fn the_plan_entries_are_kept_as_given() {
    let mut s = State::default();
    // Key order and spacing that serde_json would not produce itself: the
    // entries keep their content (not their bytes).
    let raw = r#"{"type":"RunStarted","data":{"runId":"r1","runFolder":"/f","gitBranch":"run-r1","startingConditions":{"type":"fresh"},"serverPid":1,"startTime":"t","executionPlan":[{"codon":{"z": 1, "a":[1,  2]},"codonId":"x","loopContext":{"loopId":"L", "iteration":3}}]}}"#;
    ok(&mut s, raw.as_bytes());
    assert_eq!(
        serde_json::to_value(&s).unwrap()["executionPlan"],
        json!([{"codon": {"z": 1, "a": [1, 2]}, "codonId": "x",
                "loopContext": {"loopId": "L", "iteration": 3}}])
    );
}

#[test]
fn a_fresh_run_without_a_plan_keeps_the_existing_plan() {
    let mut s = State::default();
    ok(
        &mut s,
        &run_started_with("r1", fresh(), Some(plan(&["a", "b"]))),
    );
    ok(&mut s, &run_completed("r1"));
    ok(&mut s, &run_started("r2"));
    assert_eq!(
        serde_json::to_value(&s).unwrap()["executionPlan"],
        plan(&["a", "b"])
    );
    ok(&mut s, &run_completed("r2"));
    ok(&mut s, &run_started_with("r3", fresh(), Some(plan(&["c"]))));
    assert_eq!(
        serde_json::to_value(&s).unwrap()["executionPlan"],
        plan(&["c"])
    );
}

#[test]
fn a_continuation_run_records_its_source_and_keeps_the_plan() {
    let mut s = State::default();
    ok(
        &mut s,
        &run_started_with("r1", fresh(), Some(plan(&["a", "b"]))),
    );
    start_at(&mut s, "r1", "a", "running");
    finish(&mut s, "r1", "a", "completed");
    ok(&mut s, &run_failed("r1"));

    let applied = ok(
        &mut s,
        &run_started_with("r2", continuation("r1", Some("a"), "sha-done"), None),
    );
    assert_eq!(applied, Applied::default());
    assert_eq!(s.current_run_id.as_deref(), Some("r2"));
    assert_eq!(
        run_json(&s, "r2")["startingConditions"],
        json!({
            "type": "continuation",
            "source": { "runId": "r1", "afterCodon": "a", "checkpointSha": "sha-done" },
            "reason": "retry",
        })
    );
    assert_eq!(
        serde_json::to_value(&s).unwrap()["executionPlan"],
        plan(&["a", "b"])
    );
    ok(&mut s, &run_completed("r2"));

    // afterCodon null: resume before a codon (a rig-setup target); the
    // source needs no codons at all, and no reason is fine.
    let cond = json!({
        "type": "continuation",
        "source": { "runId": "r2", "afterCodon": null, "checkpointSha": "sha-rig" },
    });
    ok(&mut s, &run_started_with("r3", cond.clone(), None));
    assert_eq!(run_json(&s, "r3")["startingConditions"], cond);
}

#[test]
fn run_completed_failed_and_stopped_end_the_run_and_clear_the_current_run() {
    for (end, status) in [
        (run_completed as fn(&str) -> Vec<u8>, "completed"),
        (run_failed, "failed"),
        (run_stopped, "stopped"),
    ] {
        let mut s = State::default();
        ok(&mut s, &run_started("r1"));
        start_at(&mut s, "r1", "a", "running");
        ok(&mut s, &costs_updated("r1", "a", 0.25, tokens(1, 2, 3, 4)));
        finish(&mut s, "r1", "a", "completed");
        let record = rec(&s, "r1", 0);
        assert_eq!(s.current_run_cost(), usd(0.25));

        let applied = ok(&mut s, &end("r1"));
        assert_eq!(
            applied,
            Applied {
                codon_terminal: false,
                run_ended: true
            }
        );
        assert_eq!(s.current_run_id, None);
        assert!(s.current_run().is_none());
        let run = run_json(&s, "r1");
        assert_eq!(run["status"], status);
        assert_eq!(run["endTime"], RUN_END);
        assert_eq!(rec(&s, "r1", 0), record);
        // The run keeps its cost; only the current-run query drops to zero.
        assert_eq!(s.current_run_cost(), Money::ZERO);
        assert_eq!(s.run("r1").unwrap().cost(), usd(0.25));
        assert_eq!(s.total_cost(), usd(0.25));
        assert_cache_exact(&s);
    }
}

#[test]
fn run_failed_and_run_stopped_record_what_ended_the_run() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    let failed = tr(
        "RunFailed",
        json!({ "runId": "r1", "endTime": RUN_END, "codonId": "a", "reason": "exit 1" }),
    );
    ok(&mut s, &failed);
    assert_eq!(
        run_json(&s, "r1")["failure"],
        json!({ "codonId": "a", "reason": "exit 1" })
    );
    assert!(run_json(&s, "r1").get("stop").is_none());

    ok(&mut s, &run_started("r2"));
    let budget = json!({ "scope": "run", "kind": "dollars", "limit": 0.05, "used": 0.0512,
                         "source": "--max-cost" });
    let stopped = tr(
        "RunStopped",
        json!({ "runId": "r2", "endTime": RUN_END, "by": "budget", "reason": "over",
                "codonId": "grind#42", "budget": budget }),
    );
    ok(&mut s, &stopped);
    let run = run_json(&s, "r2");
    assert_eq!(run["status"], "stopped");
    assert_eq!(
        run["stop"],
        json!({ "by": "budget", "forced": false, "reason": "over", "codonId": "grind#42",
                "budget": budget })
    );
    // The state round-trips through its JSON with the new fields.
    let again: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    let runs = serde_json::to_value(&again).unwrap()["runs"].clone();
    assert_eq!(runs[0]["stop"], run["stop"]);
    assert_eq!(runs[1]["failure"]["reason"], "exit 1");
}

#[test]
fn a_stop_by_budget_without_its_budget_is_refused_and_changes_nothing() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    let before = serde_json::to_string(&s).unwrap();
    let bytes = tr(
        "RunStopped",
        json!({ "runId": "r1", "endTime": RUN_END, "by": "budget", "reason": "over" }),
    );
    let (code, message) = reject(&mut s, &bytes);
    assert_eq!(code, "invalid_value");
    assert_eq!(
        message,
        "RunStopped by budget needs the budget that stopped it"
    );
    assert_eq!(serde_json::to_string(&s).unwrap(), before);
    // A run stopped by the user needs none; an unknown `by` is malformed.
    let odd = tr(
        "RunStopped",
        json!({ "runId": "r1", "endTime": RUN_END, "by": "cosmic-ray", "reason": "?" }),
    );
    assert_eq!(reject(&mut s, &odd).0, "malformed");
    ok(&mut s, &run_stopped("r1"));
}

#[test]
fn run_crashed_fails_the_active_codon_whatever_its_status() {
    for during in PATH {
        let mut s = State::default();
        ok(&mut s, &run_started("r1"));
        start_at(&mut s, "r1", "c", during);
        let live = during == "running" || during == "completing-sentinels";
        if live {
            ok(
                &mut s,
                &costs_updated("r1", "c", 0.75, tokens(10, 20, 3, 4)),
            );
            ok(&mut s, &message_count("r1", "c", 2));
        }
        ok(
            &mut s,
            &sentinels_updated("r1", "c", json!([sentinel("s1", 0.05)]), 0.05),
        );
        let before = rec(&s, "r1", 0);

        let applied = ok(&mut s, &run_crashed("r1"));
        assert_eq!(
            applied,
            Applied {
                codon_terminal: true,
                run_ended: true
            },
            "{during}"
        );
        let (cost, tok) = if live {
            (json!(0.75), tokens(10, 20, 3, 4))
        } else {
            (json!(0.0), zero_tokens())
        };
        let remove: &[&str] = if live {
            &["currentCost", "currentTokens", "sentinels"]
        } else {
            &["sentinels"]
        };
        let expected = edit(
            before,
            remove,
            &[
                ("status", json!("failed")),
                ("failedDuring", json!(during)),
                ("exitCode", json!(-1)),
                (
                    "failureReason",
                    json!({ "type": "crash", "retriable": false, "message": "Server crashed" }),
                ),
                ("endTime", json!(DETECTED)),
                ("partialCost", cost),
                ("partialTokens", tok),
                (
                    "sentinels",
                    json!({ "executed": [sentinel("s1", 0.05)], "totalCost": 0.05 }),
                ),
            ],
        );
        assert_eq!(rec(&s, "r1", 0), expected, "{during}");
        let run = run_json(&s, "r1");
        assert_eq!(run["status"], "crashed");
        assert_eq!(run["endTime"], DETECTED);
        assert_eq!(s.current_run_id, None);
        assert!(s.run("r1").unwrap().active().is_none());
        let spent = if live { usd(0.75) } else { Money::ZERO };
        assert_eq!(s.total_cost(), spent);
        assert_eq!(s.codon_cost("r1", "c"), Some(spent));
        assert_cache_exact(&s);
        assert!(validate::check(&s, &Environment::default()).is_valid());
    }
}

#[test]
fn run_crashed_without_an_active_codon_only_ends_the_run() {
    let mut s = one("completed");
    let record = rec(&s, "r1", 0);
    let applied = ok(&mut s, &run_crashed("r1"));
    assert_eq!(
        applied,
        Applied {
            codon_terminal: false,
            run_ended: true
        }
    );
    assert_eq!(rec(&s, "r1", 0), record);
    assert_eq!(run_json(&s, "r1")["status"], "crashed");
    assert_eq!(run_json(&s, "r1")["endTime"], DETECTED);
    assert_eq!(s.current_run_id, None);
}

#[test]
fn run_crashed_on_a_stale_run_that_is_not_current_keeps_the_current_run() {
    // A run left `running` by a dead server: loaded with currentRunId null.
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    start_at(&mut s, "r1", "a", "running");
    ok(&mut s, &costs_updated("r1", "a", 0.3, zero_tokens()));
    let mut doc = serde_json::to_value(&s).unwrap();
    doc["currentRunId"] = Value::Null;
    let (mut s, report) =
        validate::load(&serde_json::to_vec(&doc).unwrap(), &Environment::default()).unwrap();
    assert_eq!(report, Validation::default());

    ok(&mut s, &run_started("r2"));
    let applied = ok(&mut s, &run_crashed("r1"));
    assert_eq!(
        applied,
        Applied {
            codon_terminal: true,
            run_ended: true
        }
    );
    assert_eq!(s.current_run_id.as_deref(), Some("r2"));
    assert_eq!(run_json(&s, "r1")["status"], "crashed");
    assert_eq!(rec(&s, "r1", 0)["partialCost"], json!(0.3));
    assert_eq!(s.total_cost(), usd(0.3));
    assert_eq!(s.current_run_cost(), Money::ZERO);
    assert_cache_exact(&s);
}

#[test]
fn codon_started_appends_a_preparing_record() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    let applied = ok(&mut s, &codon_started("r1", "plan"));
    assert_eq!(applied, Applied::default());
    assert_eq!(
        rec(&s, "r1", 0),
        json!({ "codonId": "plan", "status": "preparing", "startTime": CODON_START })
    );
    let run = s.run("r1").unwrap();
    assert_eq!(run.active().unwrap().codon_id, "plan");
    assert_eq!(run.latest("plan").unwrap().status, CodonStatus::Preparing);
    assert_eq!(s.codon_cost("r1", "plan"), Some(Money::ZERO));
    assert_eq!(s.codon_cost("r1", "other"), None);
    assert_eq!(s.codon_cost("nope", "plan"), None);

    finish(&mut s, "r1", "plan", "skipped");
    let loop_context = json!({
        "loopId": "L", "iteration": 2, "codonIndexInLoop": 1, "loopBudget": { "dollars": 5 },
    });
    ok(
        &mut s,
        &tr(
            "CodonStarted",
            json!({
                "runId": "r1", "codonId": "step#2", "startTime": STEP,
                "loopContext": loop_context,
            }),
        ),
    );
    assert_eq!(
        rec(&s, "r1", 1),
        json!({
            "codonId": "step#2", "status": "preparing", "startTime": STEP,
            "loopContext": loop_context,
        })
    );
}

#[test]
fn the_forward_path_fills_in_each_state_data() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    let mut expected = json!({ "codonId": "c", "status": "preparing", "startTime": CODON_START });

    let applied = ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "preparing",
            "starting",
            json!({ "checkpointSha": "sha-rig" }),
        ),
    );
    assert_eq!(applied, Applied::default());
    expected = edit(
        expected,
        &[],
        &[
            ("status", json!("starting")),
            ("rigSetupCheckpoint", json!("sha-rig")),
        ],
    );
    assert_eq!(rec(&s, "r1", 0), expected);

    ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "starting",
            "initializing",
            json!({
                "claudePid": 987_654, "claudeLogPath": "runs/r1/c.log",
                "previousSessionId": "sess-0",
            }),
        ),
    );
    expected = edit(
        expected,
        &[],
        &[
            ("status", json!("initializing")),
            ("claudePid", json!(987_654)),
            ("claudeLogPath", json!("runs/r1/c.log")),
            ("previousSessionId", json!("sess-0")),
        ],
    );
    assert_eq!(rec(&s, "r1", 0), expected);

    ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "initializing",
            "running",
            json!({ "claudeSessionId": "sess-1" }),
        ),
    );
    expected = edit(
        expected,
        &[],
        &[
            ("status", json!("running")),
            ("claudeSessionId", json!("sess-1")),
            ("currentCost", json!(0.0)),
            ("currentTokens", zero_tokens()),
            ("assistantMessageCount", json!(0)),
            ("extensionCount", json!(0)),
        ],
    );
    assert_eq!(rec(&s, "r1", 0), expected);

    ok(
        &mut s,
        &costs_updated("r1", "c", 0.5, tokens(100, 50, 10, 5)),
    );
    ok(&mut s, &message_count("r1", "c", 3));
    ok(
        &mut s,
        &transitioned("r1", "c", "running", "completing-sentinels", json!({})),
    );
    expected = edit(
        expected,
        &[],
        &[
            ("status", json!("completing-sentinels")),
            ("currentCost", json!(0.5)),
            ("currentTokens", tokens(100, 50, 10, 5)),
            ("assistantMessageCount", json!(3)),
        ],
    );
    assert_eq!(rec(&s, "r1", 0), expected);
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.5)));

    let applied = ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "completing-sentinels",
            "completed",
            json!({ "checkpointSha": "sha-done", "resultMessageReceived": true }),
        ),
    );
    assert_eq!(
        applied,
        Applied {
            codon_terminal: true,
            run_ended: false
        }
    );
    expected = edit(
        expected,
        &["currentCost", "currentTokens"],
        &[
            ("status", json!("completed")),
            ("endTime", json!(STEP)),
            ("exitCode", json!(0)),
            ("finalCost", json!(0.5)),
            ("finalTokens", tokens(100, 50, 10, 5)),
            ("resultMessageReceived", json!(true)),
            ("completionCheckpoint", json!("sha-done")),
        ],
    );
    assert_eq!(rec(&s, "r1", 0), expected);
    assert!(s.run("r1").unwrap().active().is_none());
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.5)));
    assert_eq!(s.total_cost(), usd(0.5));
    // The run does not end with its codon.
    assert_eq!(s.current_run_id.as_deref(), Some("r1"));
    assert!(validate::check(&s, &Environment::default()).is_valid());
}

#[test]
fn completion_defaults_result_message_to_false_and_keeps_the_extras() {
    let mut s = one("running");
    ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "running",
            "completed",
            json!({
                "checkpointSha": "sha-done",
                "exitCode": 0,
                "extensionCount": 2,
                "contextExceeded": true,
                "budgetExceeded": { "currency": "dollars", "limit": 5.0, "used": 5.5 },
            }),
        ),
    );
    let r = rec(&s, "r1", 0);
    assert_eq!(r["resultMessageReceived"], json!(false));
    assert_eq!(r["exitCode"], json!(0));
    assert_eq!(r["extensionCount"], json!(2));
    assert_eq!(r["contextExceeded"], json!(true));
    assert_eq!(
        r["budgetExceeded"],
        json!({ "currency": "dollars", "limit": 5.0, "used": 5.5 })
    );
    assert_eq!(r["finalCost"], json!(0.0));
    assert_eq!(r["finalTokens"], zero_tokens());
}

#[test]
fn metadata_may_be_absent_or_null_and_an_empty_rig_sha_is_not_recorded() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    let no_meta = tr(
        "CodonTransitioned",
        json!({
            "runId": "r1", "codonId": "c", "from": "preparing", "to": "starting",
            "timestamp": STEP,
        }),
    );
    ok(&mut s, &no_meta);
    assert_eq!(
        rec(&s, "r1", 0),
        json!({ "codonId": "c", "status": "starting", "startTime": CODON_START })
    );

    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    ok(
        &mut s,
        &transitioned("r1", "c", "preparing", "starting", Value::Null),
    );
    assert_eq!(rec(&s, "r1", 0)["status"], "starting");

    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    ok(
        &mut s,
        &transitioned(
            "r1",
            "c",
            "preparing",
            "starting",
            json!({ "checkpointSha": "" }),
        ),
    );
    assert_eq!(rec(&s, "r1", 0).get("rigSetupCheckpoint"), None);
}

/// Puts codon `c` of run `r1` at `status` with some spending: a final cost
/// of 0.3 reported by the agent, then 0.1 more, and one sentinel.
fn spent(status: &str) -> State {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    start_at(&mut s, "r1", "c", status);
    if status == "running" || status == "completing-sentinels" {
        ok(&mut s, &final_cost_set("r1", "c", 0.3, tokens(30, 3, 0, 0)));
        ok(
            &mut s,
            &costs_incremented("r1", "c", 0.1, tokens(10, 1, 0, 0)),
        );
        ok(&mut s, &message_count("r1", "c", 4));
    }
    ok(
        &mut s,
        &sentinels_updated("r1", "c", json!([sentinel("s1", 0.02)]), 0.02),
    );
    s
}

const TERMINAL: Applied = Applied {
    codon_terminal: true,
    run_ended: false,
};

/// What failing or skipping does to a record `spent` built: the live cost
/// becomes the partial cost, the sentinels are sealed, plus `fields`.
fn settled(before: Value, live: bool, fields: &[(&str, Value)]) -> Value {
    let remove: &[&str] = if live {
        &[
            "currentCost",
            "currentTokens",
            "finalCost",
            "finalTokens",
            "sentinels",
        ]
    } else {
        &["sentinels"]
    };
    let (cost, tok) = if live {
        (json!(0.4), tokens(40, 4, 0, 0))
    } else {
        (json!(0.0), zero_tokens())
    };
    let mut set: Vec<(&str, Value)> = vec![
        ("endTime", json!(STEP)),
        ("partialCost", cost),
        ("partialTokens", tok),
        (
            "sentinels",
            json!({ "executed": [sentinel("s1", 0.02)], "totalCost": 0.02 }),
        ),
    ];
    set.extend(fields.iter().cloned());
    edit(before, remove, &set)
}

#[test]
fn failing_moves_the_live_cost_to_partial_cost_from_every_status() {
    let reason = json!({
        "type": "timeout", "retriable": true, "message": "too slow", "retryAfterMs": 5000,
    });
    for during in PATH {
        let mut s = spent(during);
        let live = during == "running" || during == "completing-sentinels";
        let before = rec(&s, "r1", 0);
        let applied = ok(
            &mut s,
            &transitioned(
                "r1",
                "c",
                during,
                "failed",
                json!({
                    "exitCode": 137, "failureReason": reason, "failedDuring": during,
                    "checkpointSha": "sha-err",
                }),
            ),
        );
        assert_eq!(applied, TERMINAL);
        let expected = settled(
            before,
            live,
            &[
                ("status", json!("failed")),
                ("exitCode", json!(137)),
                ("failureReason", reason.clone()),
                ("failedDuring", json!(during)),
                ("errorCheckpoint", json!("sha-err")),
            ],
        );
        assert_eq!(rec(&s, "r1", 0), expected, "{during}");
        let counted = if live { usd(0.4) } else { Money::ZERO };
        assert_eq!(s.codon_cost("r1", "c"), Some(counted));
        assert_eq!(s.total_cost(), counted);
        assert_eq!(s.current_run_cost(), counted);
        assert!(s.run("r1").unwrap().active().is_none());
        assert_cache_exact(&s);
        assert!(validate::check(&s, &Environment::default()).is_valid());
    }
}

#[test]
fn skipping_keeps_a_partial_cost_but_counts_zero_from_every_status() {
    for during in PATH {
        let mut s = spent(during);
        let live = during == "running" || during == "completing-sentinels";
        let before = rec(&s, "r1", 0);
        let applied = ok(
            &mut s,
            &transitioned(
                "r1",
                "c",
                during,
                "skipped",
                json!({ "skippedDuring": during, "checkpointSha": "sha-skip" }),
            ),
        );
        assert_eq!(applied, TERMINAL);
        let expected = settled(
            before,
            live,
            &[
                ("status", json!("skipped")),
                ("skippedDuring", json!(during)),
                ("skipCheckpoint", json!("sha-skip")),
            ],
        );
        assert_eq!(rec(&s, "r1", 0), expected, "{during}");
        assert_eq!(s.codon_cost("r1", "c"), Some(Money::ZERO));
        assert_eq!(s.total_cost(), Money::ZERO);
        assert_eq!(s.run("r1").unwrap().cost(), Money::ZERO);
        assert_cache_exact(&s);
        assert!(validate::check(&s, &Environment::default()).is_valid());
    }
}

#[test]
fn costs_updated_sets_and_costs_incremented_adds() {
    for status in ["running", "completing-sentinels"] {
        let mut s = one(status);
        ok(
            &mut s,
            &costs_updated("r1", "c", 0.5, tokens(100, 50, 10, 5)),
        );
        assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(0.5));
        assert_eq!(rec(&s, "r1", 0)["currentTokens"], tokens(100, 50, 10, 5));
        assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.5)));

        ok(
            &mut s,
            &costs_incremented("r1", "c", 0.25, tokens(1, 2, 3, 4)),
        );
        assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(0.75));
        assert_eq!(rec(&s, "r1", 0)["currentTokens"], tokens(101, 52, 13, 9));
        assert_eq!(s.total_cost(), usd(0.75));

        // Absolute again, lower than before: the cache moves down.
        let applied = ok(&mut s, &costs_updated("r1", "c", 0.125, tokens(7, 0, 0, 0)));
        assert_eq!(applied, Applied::default());
        assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(0.125));
        assert_eq!(rec(&s, "r1", 0)["currentTokens"], tokens(7, 0, 0, 0));
        assert_eq!(s.total_cost(), usd(0.125));
        assert_eq!(s.current_run_cost(), usd(0.125));
        assert_eq!(rec(&s, "r1", 0)["status"], status);
        assert_cache_exact(&s);
    }
}

#[test]
fn token_fields_may_be_omitted_and_default_to_zero() {
    let mut s = one("running");
    ok(
        &mut s,
        &costs_incremented("r1", "c", 0.0, json!({ "outputTokens": 9 })),
    );
    assert_eq!(rec(&s, "r1", 0)["currentTokens"], tokens(0, 9, 0, 0));
    ok(&mut s, &costs_incremented("r1", "c", 1.0, json!({})));
    assert_eq!(rec(&s, "r1", 0)["currentTokens"], tokens(0, 9, 0, 0));
    assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(1.0));
}

#[test]
fn message_and_extension_counts_are_set_not_added() {
    for status in ["running", "completing-sentinels"] {
        let mut s = one(status);
        assert_eq!(ok(&mut s, &message_count("r1", "c", 5)), Applied::default());
        ok(&mut s, &message_count("r1", "c", 3));
        assert_eq!(
            ok(&mut s, &extension_count("r1", "c", 2)),
            Applied::default()
        );
        ok(&mut s, &extension_count("r1", "c", 1));
        let r = rec(&s, "r1", 0);
        assert_eq!(r["assistantMessageCount"], json!(3));
        assert_eq!(r["extensionCount"], json!(1));
        assert_eq!(r["status"], status);
        assert_eq!(s.total_cost(), Money::ZERO);
    }
}

#[test]
fn the_final_cost_supersedes_the_estimate_and_later_increments_add_to_it() {
    let mut s = one("running");
    ok(&mut s, &costs_updated("r1", "c", 0.2, tokens(20, 2, 0, 0)));
    let applied = ok(
        &mut s,
        &final_cost_set("r1", "c", 0.35, tokens(35, 5, 1, 1)),
    );
    assert_eq!(applied, Applied::default());
    let r = rec(&s, "r1", 0);
    assert_eq!(r["finalCost"], json!(0.35));
    assert_eq!(r["finalTokens"], tokens(35, 5, 1, 1));
    assert_eq!(r["currentCost"], json!(0.35));
    assert_eq!(r["currentTokens"], tokens(35, 5, 1, 1));
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.35)));
    assert_eq!(s.total_cost(), usd(0.35));

    // An extended session keeps spending.
    ok(
        &mut s,
        &costs_incremented("r1", "c", 0.05, tokens(5, 1, 0, 0)),
    );
    assert_eq!(rec(&s, "r1", 0)["finalCost"], json!(0.35));
    assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(0.4));
    finish(&mut s, "r1", "c", "completed");
    let r = rec(&s, "r1", 0);
    assert_eq!(r["finalCost"], json!(0.4));
    assert_eq!(r["finalTokens"], tokens(40, 6, 1, 1));
    assert_eq!(r.get("currentCost"), None);
    assert_eq!(s.total_cost(), usd(0.4));
    assert_cache_exact(&s);
}

#[test]
fn sentinel_states_are_replaced_while_live_and_renamed_executed_at_the_end() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "c"));
    let applied = ok(
        &mut s,
        &sentinels_updated("r1", "c", json!([sentinel("s1", 0.0)]), 0.0),
    );
    assert_eq!(applied, Applied::default());
    assert_eq!(
        rec(&s, "r1", 0)["sentinels"],
        json!({ "loaded": [sentinel("s1", 0.0)], "totalCost": 0.0 })
    );

    advance(&mut s, "r1", "c", "running");
    let unloaded = json!({
        "id": "s2",
        "model": "haiku",
        "loadedAt": CODON_START,
        "unloadedAt": STEP,
        "llmCallCount": 7,
        "failedLLMCalls": 2,
        "lastLlmCallAt": STEP,
        "totalTriggers": 9,
        "totalCost": 0.2,
        "status": "unloaded",
        "unloadReason": "consecutive-failures",
    });
    let states = json!([sentinel("s1", 0.1), unloaded]);
    ok(&mut s, &sentinels_updated("r1", "c", states.clone(), 0.3));
    assert_eq!(
        rec(&s, "r1", 0)["sentinels"],
        json!({ "loaded": states, "totalCost": 0.3 })
    );
    // Sentinel spending is not the codon's cost.
    assert_eq!(s.codon_cost("r1", "c"), Some(Money::ZERO));

    // totalTriggers defaults to 0 when omitted.
    let mut minimal = sentinel("s3", 0.0);
    minimal.as_object_mut().unwrap().remove("totalTriggers");
    ok(&mut s, &sentinels_updated("r1", "c", json!([minimal]), 0.0));
    assert_eq!(
        rec(&s, "r1", 0)["sentinels"]["loaded"][0]["totalTriggers"],
        json!(0)
    );

    ok(&mut s, &sentinels_updated("r1", "c", states.clone(), 0.3));
    finish(&mut s, "r1", "c", "completed");
    assert_eq!(
        rec(&s, "r1", 0)["sentinels"],
        json!({ "executed": states, "totalCost": 0.3 })
    );
    assert_eq!(
        validate::check(&s, &Environment::default()),
        Validation::default()
    );
}

#[test]
fn checkpoint_created_stores_each_type_in_its_own_field() {
    let mut s = one("running");
    for (kind, field) in [
        ("rig-setup", "rigSetupCheckpoint"),
        ("completed", "completionCheckpoint"),
        ("error", "errorCheckpoint"),
        ("skipped", "skipCheckpoint"),
    ] {
        let sha = format!("sha-{kind}");
        let applied = ok(&mut s, &checkpoint("r1", "c", kind, &sha));
        assert_eq!(applied, Applied::default());
        assert_eq!(rec(&s, "r1", 0)[field], json!(sha));
    }
    ok(&mut s, &checkpoint("r1", "c", "error", "sha-error-2"));
    assert_eq!(rec(&s, "r1", 0)["errorCheckpoint"], json!("sha-error-2"));
    assert_eq!(rec(&s, "r1", 0)["status"], "running");

    // The latest record may be terminal: the checkpoint still lands on it.
    finish(&mut s, "r1", "c", "failed");
    ok(&mut s, &checkpoint("r1", "c", "error", "sha-after"));
    assert_eq!(rec(&s, "r1", 0)["errorCheckpoint"], json!("sha-after"));
}

#[test]
fn initial_checkpoint_set_records_and_replaces_the_project_checkpoint() {
    let mut s = State::default();
    assert_eq!(
        serde_json::to_value(&s).unwrap().get("initialCheckpoint"),
        None
    );
    assert_eq!(ok(&mut s, &initial_checkpoint("sha-a")), Applied::default());
    assert_eq!(s.initial_checkpoint.as_deref(), Some("sha-a"));
    ok(&mut s, &initial_checkpoint("sha-b"));
    assert_eq!(
        serde_json::to_value(&s).unwrap()["initialCheckpoint"],
        json!("sha-b")
    );
}

#[test]
fn a_retry_appends_a_record_and_every_lookup_uses_the_latest() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    start_at(&mut s, "r1", "c", "running");
    ok(&mut s, &costs_updated("r1", "c", 0.6, zero_tokens()));
    finish(&mut s, "r1", "c", "failed");
    let first = rec(&s, "r1", 0);

    ok(&mut s, &codon_started("r1", "c"));
    let run = s.run("r1").unwrap();
    assert_eq!(run.codons.len(), 2);
    assert!(std::ptr::eq(run.latest("c").unwrap(), &run.codons[1]));
    assert!(std::ptr::eq(run.active().unwrap(), &run.codons[1]));
    // The cost query answers for the latest record; the total has both.
    assert_eq!(s.codon_cost("r1", "c"), Some(Money::ZERO));
    assert_eq!(s.total_cost(), usd(0.6));

    ok(&mut s, &checkpoint("r1", "c", "rig-setup", "sha-rig-2"));
    advance(&mut s, "r1", "c", "running");
    ok(&mut s, &costs_updated("r1", "c", 0.25, zero_tokens()));
    finish(&mut s, "r1", "c", "completed");
    assert_eq!(rec(&s, "r1", 0), first);
    let second = rec(&s, "r1", 1);
    assert_eq!(second["status"], "completed");
    assert_eq!(second["rigSetupCheckpoint"], "sha-rig-2");
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.25)));
    assert_eq!(s.total_cost(), usd(0.85));
    assert_eq!(s.run("r1").unwrap().cost(), usd(0.85));
    assert_cache_exact(&s);
}

// ===========================================================================
// Rejections: every code, its exact message, and nothing changed.

/// r0 completed (a: completed 0.5, s: skipped), r1 failed, r2 crashed (x:
/// failed by the crash), r3 current with done: completed 0.25, gone: failed
/// during initializing, live: running at 0.125.
fn busy() -> State {
    let mut s = State::default();
    ok(&mut s, &initial_checkpoint("sha-init"));
    ok(
        &mut s,
        &run_started_with("r0", fresh(), Some(plan(&["a", "s"]))),
    );
    start_at(&mut s, "r0", "a", "running");
    ok(&mut s, &costs_updated("r0", "a", 0.5, zero_tokens()));
    finish(&mut s, "r0", "a", "completed");
    start_at(&mut s, "r0", "s", "starting");
    finish(&mut s, "r0", "s", "skipped");
    ok(&mut s, &run_completed("r0"));
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &run_failed("r1"));
    ok(&mut s, &run_started("r2"));
    start_at(&mut s, "r2", "x", "running");
    ok(&mut s, &costs_updated("r2", "x", 0.2, zero_tokens()));
    ok(&mut s, &run_crashed("r2"));
    ok(
        &mut s,
        &run_started_with("r3", continuation("r0", Some("a"), "sha-done"), None),
    );
    start_at(&mut s, "r3", "done", "running");
    ok(&mut s, &costs_updated("r3", "done", 0.25, zero_tokens()));
    finish(&mut s, "r3", "done", "completed");
    start_at(&mut s, "r3", "gone", "initializing");
    finish(&mut s, "r3", "gone", "failed");
    start_at(&mut s, "r3", "live", "running");
    ok(&mut s, &costs_updated("r3", "live", 0.125, zero_tokens()));
    s
}

/// r0 completed as in [`busy`], and no current run.
fn idle() -> State {
    let mut s = State::default();
    ok(&mut s, &run_started("r0"));
    start_at(&mut s, "r0", "a", "running");
    ok(&mut s, &costs_updated("r0", "a", 0.5, zero_tokens()));
    finish(&mut s, "r0", "a", "completed");
    ok(&mut s, &run_completed("r0"));
    s
}

/// The state a rejection case starts from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fixture {
    Busy,
    Idle,
    Preparing,
    Starting,
    Initializing,
}

use Fixture::{Busy, Idle, Initializing, Preparing, Starting};

impl Fixture {
    fn build(self) -> State {
        match self {
            Busy => busy(),
            Idle => idle(),
            Preparing => one("preparing"),
            Starting => one("starting"),
            Initializing => one("initializing"),
        }
    }
}

struct Case {
    fixture: Fixture,
    bytes: Vec<u8>,
    code: &'static str,
    message: &'static str,
}

fn case(fixture: Fixture, bytes: Vec<u8>, code: &'static str, message: &'static str) -> Case {
    Case {
        fixture,
        bytes,
        code,
        message,
    }
}

fn rejection_cases() -> Vec<Case> {
    let reason = json!({ "type": "api-error", "retriable": true });
    vec![
        // malformed: the bytes are not a transition.
        case(
            Busy,
            b"not json".to_vec(),
            "malformed",
            "Malformed transition: expected ident at line 1 column 2",
        ),
        case(
            Busy,
            tr("RunPaused", json!({ "runId": "r3" })),
            "malformed",
            "Malformed transition: unknown variant `RunPaused`, expected one of `RunStarted`, \
             `RunCompleted`, `RunFailed`, `RunStopped`, `RunCrashed`, `CodonStarted`, `CodonTransitioned`, \
             `CostsUpdated`, `CostsIncremented`, `AssistantMessageCountUpdated`, \
             `ExtensionCountUpdated`, `CodonFinalCostSet`, `SentinelStatesUpdated`, \
             `CheckpointCreated`, `InitialCheckpointSet`, `PlanExtended`, `PlanTrimmed` at line 1 column 19",
        ),
        case(
            Busy,
            tr("InitialCheckpointSet", json!({ "sha": "a", "extra": 1 })),
            "malformed",
            "Malformed transition: unknown field `extra`, expected `sha` at line 1 column 46",
        ),
        case(
            Busy,
            br#"{"type":"InitialCheckpointSet","data":{"sha":"a"},"seq":1}"#.to_vec(),
            "malformed",
            "Malformed transition: invalid value: string \"seq\", expected \"type\" or \"data\" \
             at line 1 column 55",
        ),
        case(
            Busy,
            tr("RunCompleted", json!({ "runId": "r3" })),
            "malformed",
            "Malformed transition: missing field `endTime` at line 1 column 44",
        ),
        case(
            Busy,
            costs_incremented("r3", "live", -0.5, zero_tokens()),
            "malformed",
            "Malformed transition: a cost cannot be negative (got -0.5) at line 1 column 68",
        ),
        case(
            Busy,
            costs_updated("r3", "live", 2e6, zero_tokens()),
            "malformed",
            "Malformed transition: a cost above 1000000 USD is not plausible (got 2000000) \
             at line 1 column 64",
        ),
        case(
            Busy,
            transitioned("r3", "live", "running", "paused", json!({})),
            "malformed",
            "Malformed transition: unknown variant `paused`, expected one of `preparing`, \
             `starting`, `initializing`, `running`, `completing-sentinels`, `completed`, \
             `failed`, `skipped` at line 1 column 149",
        ),
        case(
            Starting,
            transitioned(
                "r1",
                "c",
                "starting",
                "initializing",
                json!({ "claudePid": "4242", "claudeLogPath": "l" }),
            ),
            "malformed",
            "Malformed transition: invalid type: string \"4242\", expected i64 at line 1 column 118",
        ),
        case(
            Busy,
            transitioned("r3", "live", "running", "failed", json!({ "exit": 1 })),
            "malformed",
            "Malformed transition: unknown field `exit`, expected one of `claudePid`, \
             `claudeLogPath`, `previousSessionId`, `claudeSessionId`, `exitCode`, \
             `failureReason`, `failedDuring`, `skippedDuring`, `resultMessageReceived`, \
             `checkpointSha`, `contextExceeded`, `extensionCount`, `budgetExceeded` \
             at line 1 column 88",
        ),
        // invalid_transition: not an edge of the graph.
        case(
            Busy,
            transitioned("r3", "live", "running", "preparing", json!({})),
            "invalid_transition",
            "Invalid transition from running to preparing",
        ),
        case(
            Busy,
            transitioned("r3", "done", "completed", "running", guard_meta("", "running")),
            "invalid_transition",
            "Invalid transition from completed to running",
        ),
        case(
            Busy,
            transitioned("r3", "gone", "failed", "failed", guard_meta("failed", "failed")),
            "invalid_transition",
            "Invalid transition from failed to failed",
        ),
        case(
            Preparing,
            transitioned("r1", "c", "preparing", "running", guard_meta("", "running")),
            "invalid_transition",
            "Invalid transition from preparing to running",
        ),
        case(
            Initializing,
            transitioned("r1", "c", "initializing", "completed", json!({})),
            "invalid_transition",
            "Invalid transition from initializing to completed",
        ),
        // invalid_metadata: an edge, but the guard is not met.
        case(
            Starting,
            transitioned("r1", "c", "starting", "initializing", json!({})),
            "invalid_metadata",
            "Missing required metadata for transition to initializing: claudePid, claudeLogPath",
        ),
        case(
            Starting,
            transitioned("r1", "c", "starting", "initializing", json!({ "claudePid": 1 })),
            "invalid_metadata",
            "Missing required metadata for transition to initializing: claudeLogPath",
        ),
        case(
            Initializing,
            transitioned("r1", "c", "initializing", "running", json!({})),
            "invalid_metadata",
            "Missing required metadata for transition to running: claudeSessionId",
        ),
        case(
            Busy,
            transitioned("r3", "live", "running", "completed", json!({})),
            "invalid_metadata",
            "Missing required metadata for transition to completed: checkpointSha",
        ),
        case(
            Busy,
            transitioned("r3", "live", "running", "completed", Value::Null),
            "invalid_metadata",
            "Missing required metadata for transition to completed: checkpointSha",
        ),
        case(
            Busy,
            transitioned(
                "r3",
                "live",
                "running",
                "completed",
                json!({ "checkpointSha": "" }),
            ),
            "invalid_metadata",
            "Missing required metadata for transition to completed: checkpointSha",
        ),
        case(
            Busy,
            transitioned(
                "r3",
                "live",
                "running",
                "completed",
                json!({ "checkpointSha": "abc", "exitCode": 2 }),
            ),
            "invalid_metadata",
            "Invalid metadata for transition to completed: exitCode must be 0",
        ),
        case(
            Preparing,
            transitioned("r1", "c", "preparing", "failed", json!({})),
            "invalid_metadata",
            "Missing required metadata for transition to failed: exitCode, failureReason, \
             failedDuring",
        ),
        case(
            Busy,
            transitioned(
                "r3",
                "live",
                "running",
                "failed",
                json!({ "exitCode": 1, "failureReason": reason, "failedDuring": "exploding" }),
            ),
            "invalid_metadata",
            "Invalid metadata for transition to failed: failedDuring must be a codon status",
        ),
        case(
            Busy,
            transitioned(
                "r3",
                "live",
                "running",
                "failed",
                json!({ "failedDuring": "nope" }),
            ),
            "invalid_metadata",
            "Missing required metadata for transition to failed: exitCode, failureReason; \
             invalid: failedDuring must be a codon status",
        ),
        case(
            Busy,
            transitioned("r3", "live", "running", "skipped", json!({})),
            "invalid_metadata",
            "Missing required metadata for transition to skipped: skippedDuring",
        ),
        case(
            Busy,
            transitioned(
                "r3",
                "live",
                "running",
                "skipped",
                json!({ "skippedDuring": "later" }),
            ),
            "invalid_metadata",
            "Invalid metadata for transition to skipped: skippedDuring must be a codon status",
        ),
        // invalid_value: an empty id or sha.
        case(
            Idle,
            run_started(""),
            "invalid_value",
            "runId must not be empty",
        ),
        case(
            Busy,
            run_completed(""),
            "invalid_value",
            "runId must not be empty",
        ),
        case(
            Busy,
            codon_started("r3", ""),
            "invalid_value",
            "codonId must not be empty",
        ),
        // The codon id is checked before the run.
        case(
            Busy,
            codon_started("ghost", ""),
            "invalid_value",
            "codonId must not be empty",
        ),
        case(
            Busy,
            costs_updated("r3", "", 0.1, zero_tokens()),
            "invalid_value",
            "codonId must not be empty",
        ),
        case(
            Busy,
            checkpoint("r3", "live", "error", ""),
            "invalid_value",
            "sha must not be empty",
        ),
        case(
            Busy,
            initial_checkpoint(""),
            "invalid_value",
            "sha must not be empty",
        ),
        // unknown_run.
        case(
            Busy,
            codon_started("ghost", "c"),
            "unknown_run",
            "Unknown run 'ghost'",
        ),
        case(
            Busy,
            run_completed("ghost"),
            "unknown_run",
            "Unknown run 'ghost'",
        ),
        case(
            Busy,
            run_crashed("ghost"),
            "unknown_run",
            "Unknown run 'ghost'",
        ),
        case(
            Busy,
            costs_incremented("ghost", "live", 0.1, zero_tokens()),
            "unknown_run",
            "Unknown run 'ghost'",
        ),
        // run_not_active: the run ended.
        case(
            Busy,
            codon_started("r0", "c"),
            "run_not_active",
            "Run 'r0' is completed, not running",
        ),
        case(
            Busy,
            run_completed("r1"),
            "run_not_active",
            "Run 'r1' is failed, not running",
        ),
        case(
            Busy,
            run_crashed("r2"),
            "run_not_active",
            "Run 'r2' is crashed, not running",
        ),
        case(
            Busy,
            checkpoint("r0", "a", "completed", "sha"),
            "run_not_active",
            "Run 'r0' is completed, not running",
        ),
        case(
            Busy,
            sentinels_updated("r2", "x", json!([]), 0.0),
            "run_not_active",
            "Run 'r2' is crashed, not running",
        ),
        // run_exists: ids are never reused, even of ended runs.
        case(
            Busy,
            run_started("r0"),
            "run_exists",
            "Run 'r0' already exists",
        ),
        case(
            Busy,
            run_started("r3"),
            "run_exists",
            "Run 'r3' already exists",
        ),
        case(
            Idle,
            run_started("r0"),
            "run_exists",
            "Run 'r0' already exists",
        ),
        // run_still_active.
        case(
            Busy,
            run_started("r9"),
            "run_still_active",
            "Run 'r3' is still running; end it before starting run 'r9'",
        ),
        case(
            Busy,
            run_started_with("r9", continuation("nope", None, "sha"), None),
            "run_still_active",
            "Run 'r3' is still running; end it before starting run 'r9'",
        ),
        // Continuation sources.
        case(
            Idle,
            run_started_with("r9", continuation("nope", None, "sha"), None),
            "unknown_source_run",
            "Continuation source run 'nope' not found",
        ),
        case(
            Idle,
            run_started_with("r9", continuation("r0", Some("zzz"), "sha"), None),
            "unknown_source_codon",
            "Continuation source run 'r0' has no codon 'zzz'",
        ),
        case(
            Idle,
            run_started_with("r9", continuation("r0", Some("a"), "sha"), Some(plan(&["a"]))),
            "plan_on_continuation",
            "A continuation run keeps the existing execution plan; omit executionPlan",
        ),
        case(
            Idle,
            run_started_with("r9", continuation("r0", None, "sha"), Some(json!([]))),
            "plan_on_continuation",
            "A continuation run keeps the existing execution plan; omit executionPlan",
        ),
        // codon_already_active.
        case(
            Busy,
            codon_started("r3", "next"),
            "codon_already_active",
            "Run 'r3' already has an active codon 'live' (running)",
        ),
        case(
            Busy,
            codon_started("r3", "live"),
            "codon_already_active",
            "Run 'r3' already has an active codon 'live' (running)",
        ),
        case(
            Preparing,
            codon_started("r1", "d"),
            "codon_already_active",
            "Run 'r1' already has an active codon 'c' (preparing)",
        ),
        // run_has_active_codon.
        case(
            Busy,
            run_completed("r3"),
            "run_has_active_codon",
            "Run 'r3' still has an active codon 'live' (running); finish it first",
        ),
        case(
            Initializing,
            run_failed("r1"),
            "run_has_active_codon",
            "Run 'r1' still has an active codon 'c' (initializing); finish it first",
        ),
        // unknown_codon: not in this run (a is in r0, not r3).
        case(
            Busy,
            transitioned("r3", "a", "completed", "failed", json!({})),
            "unknown_codon",
            "No codon 'a' in run 'r3'",
        ),
        case(
            Busy,
            costs_updated("r3", "nope", 0.1, zero_tokens()),
            "unknown_codon",
            "No codon 'nope' in run 'r3'",
        ),
        case(
            Busy,
            sentinels_updated("r3", "nope", json!([]), 0.0),
            "unknown_codon",
            "No codon 'nope' in run 'r3'",
        ),
        case(
            Busy,
            checkpoint("r3", "nope", "rig-setup", "sha"),
            "unknown_codon",
            "No codon 'nope' in run 'r3'",
        ),
        // status_mismatch: checked before the graph.
        case(
            Busy,
            transitioned("r3", "live", "initializing", "running", guard_meta("", "running")),
            "status_mismatch",
            "Codon 'live' in run 'r3' is running, not initializing",
        ),
        case(
            Busy,
            transitioned("r3", "live", "completed", "running", json!({})),
            "status_mismatch",
            "Codon 'live' in run 'r3' is running, not completed",
        ),
        case(
            Busy,
            transitioned("r3", "done", "running", "completed", guard_meta("", "completed")),
            "status_mismatch",
            "Codon 'done' in run 'r3' is completed, not running",
        ),
        // codon_not_live: costs and counts need a running agent.
        case(
            Busy,
            costs_updated("r3", "done", 0.1, zero_tokens()),
            "codon_not_live",
            "Codon 'done' in run 'r3' is completed, not running",
        ),
        case(
            Busy,
            costs_incremented("r3", "gone", 0.1, zero_tokens()),
            "codon_not_live",
            "Codon 'gone' in run 'r3' is failed, not running",
        ),
        case(
            Busy,
            message_count("r3", "done", 3),
            "codon_not_live",
            "Codon 'done' in run 'r3' is completed, not running",
        ),
        case(
            Busy,
            extension_count("r3", "gone", 1),
            "codon_not_live",
            "Codon 'gone' in run 'r3' is failed, not running",
        ),
        case(
            Busy,
            final_cost_set("r3", "done", 0.9, zero_tokens()),
            "codon_not_live",
            "Codon 'done' in run 'r3' is completed, not running",
        ),
        case(
            Preparing,
            costs_incremented("r1", "c", 0.1, zero_tokens()),
            "codon_not_live",
            "Codon 'c' in run 'r1' is preparing, not running",
        ),
        case(
            Initializing,
            message_count("r1", "c", 1),
            "codon_not_live",
            "Codon 'c' in run 'r1' is initializing, not running",
        ),
        case(
            Starting,
            final_cost_set("r1", "c", 0.1, zero_tokens()),
            "codon_not_live",
            "Codon 'c' in run 'r1' is starting, not running",
        ),
        // sentinels_final.
        case(
            Busy,
            sentinels_updated("r3", "done", json!([sentinel("s", 0.1)]), 0.1),
            "sentinels_final",
            "Codon 'done' in run 'r3' is completed; its sentinel states are final",
        ),
        case(
            Busy,
            sentinels_updated("r3", "gone", json!([]), 0.0),
            "sentinels_final",
            "Codon 'gone' in run 'r3' is failed; its sentinel states are final",
        ),
    ]
}

#[test]
fn every_rejection_has_its_code_and_exact_message_and_changes_nothing() {
    let mut codes = BTreeSet::new();
    let mut wrong = Vec::new();
    for (i, c) in rejection_cases().into_iter().enumerate() {
        let mut s = c.fixture.build();
        let (code, message) = reject(&mut s, &c.bytes);
        if (code, message.as_str()) != (c.code, c.message) {
            wrong.push(format!(
                "case {i} {}:\n  got      {code}: {message}\n  expected {}: {}",
                String::from_utf8_lossy(&c.bytes),
                c.code,
                c.message
            ));
        }
        codes.insert(code);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let all: BTreeSet<&str> = [
        "malformed",
        "invalid_transition",
        "invalid_metadata",
        "invalid_value",
        "unknown_run",
        "run_not_active",
        "run_exists",
        "run_still_active",
        "unknown_source_run",
        "unknown_source_codon",
        "plan_on_continuation",
        "codon_already_active",
        "run_has_active_codon",
        "unknown_codon",
        "status_mismatch",
        "codon_not_live",
        "sentinels_final",
    ]
    .into_iter()
    .collect();
    assert_eq!(codes, all);
}

#[test]
fn the_fixtures_are_what_the_rejection_cases_assume() {
    let s = busy();
    assert_eq!(s.current_run_id.as_deref(), Some("r3"));
    let status = |run: &str| run_json(&s, run)["status"].clone();
    assert_eq!(
        [status("r0"), status("r1"), status("r2"), status("r3")],
        [
            json!("completed"),
            json!("failed"),
            json!("crashed"),
            json!("running")
        ]
    );
    assert_eq!(status_of(&s, "r3", "done"), "completed");
    assert_eq!(status_of(&s, "r3", "gone"), "failed");
    assert_eq!(status_of(&s, "r3", "live"), "running");
    assert_eq!(s.total_cost(), usd(0.5 + 0.2 + 0.25 + 0.125));
    assert_eq!(s.current_run_cost(), usd(0.375));
    assert_eq!(
        validate::check(&s, &Environment::default()),
        Validation::default()
    );
    assert_eq!(idle().current_run_id, None);
}

#[test]
fn rejections_carry_typed_reasons() {
    let mut s = busy();
    let bytes = transitioned("r3", "done", "completed", "running", json!({}));
    assert_eq!(
        apply_bytes(&mut s, &bytes),
        (
            Some("CodonTransitioned"),
            Err(Rejection::Transition(TransitionError::Invalid(
                InvalidTransition {
                    from: CodonStatus::Completed,
                    to: CodonStatus::Running,
                }
            )))
        )
    );
    let bytes = transitioned("r3", "live", "running", "failed", json!({ "exitCode": 1 }));
    assert_eq!(
        apply_bytes(&mut s, &bytes).1,
        Err(Rejection::Transition(TransitionError::Metadata(
            MetadataError {
                from: CodonStatus::Running,
                to: CodonStatus::Failed,
                missing: vec!["failureReason", "failedDuring"],
                invalid: vec![],
            }
        )))
    );
    assert_eq!(
        apply_bytes(&mut s, &run_completed("r3")).1,
        Err(Rejection::Conflict {
            code: "run_has_active_codon",
            message: "Run 'r3' still has an active codon 'live' (running); finish it first"
                .to_owned(),
        })
    );
    let (kind, result) = apply_bytes(&mut s, b"[]");
    assert_eq!(kind, None);
    assert!(matches!(result, Err(Rejection::Malformed(_))), "{result:?}");
}

#[test]
fn a_state_survives_a_long_run_of_rejections_and_then_works() {
    let mut s = busy();
    let before = fingerprint(&s);
    for c in rejection_cases() {
        if c.fixture == Busy {
            reject(&mut s, &c.bytes);
        }
    }
    assert_eq!(fingerprint(&s), before);
    ok(
        &mut s,
        &costs_incremented("r3", "live", 0.125, zero_tokens()),
    );
    finish(&mut s, "r3", "live", "completed");
    ok(&mut s, &run_completed("r3"));
    assert_eq!(s.total_cost(), usd(1.2));
    assert_cache_exact(&s);
}

// ===========================================================================
// The cost cache.

#[test]
fn adding_a_tenth_ten_times_gives_exactly_one_dollar() {
    let mut s = one("running");
    for _ in 0..10 {
        ok(&mut s, &costs_incremented("r1", "c", 0.1, zero_tokens()));
    }
    assert_eq!(rec(&s, "r1", 0)["currentCost"], json!(1.0));
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(1.0)));
    assert_eq!(s.total_cost().nanos(), 1_000_000_000);
    assert_eq!(serde_json::to_string(&s.total_cost()).unwrap(), "1.0");
    finish(&mut s, "r1", "c", "completed");
    assert_eq!(rec(&s, "r1", 0)["finalCost"], json!(1.0));

    // 0.1 + 0.2 is 0.30000000000000004 in floats, 0.3 here.
    start_at(&mut s, "r1", "d", "running");
    ok(&mut s, &costs_incremented("r1", "d", 0.1, zero_tokens()));
    ok(&mut s, &costs_incremented("r1", "d", 0.2, zero_tokens()));
    assert_eq!(
        serde_json::to_string(&s.codon_cost("r1", "d").unwrap()).unwrap(),
        "0.3"
    );
    assert_eq!(s.total_cost(), usd(1.3));
    assert_cache_exact(&s);
}

#[test]
fn the_cost_of_a_record_follows_its_status() {
    // preparing, starting, initializing: 0; running and completing-sentinels:
    // currentCost; completed: finalCost; failed: partialCost; skipped: 0.
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    for (codon, status) in [
        ("p", "preparing"),
        ("st", "starting"),
        ("i", "initializing"),
    ] {
        start_at(&mut s, "r1", codon, status);
        assert_eq!(s.codon_cost("r1", codon), Some(Money::ZERO));
        finish(&mut s, "r1", codon, "failed");
        assert_eq!(s.codon_cost("r1", codon), Some(Money::ZERO));
    }
    start_at(&mut s, "r1", "ok", "completing-sentinels");
    ok(&mut s, &costs_updated("r1", "ok", 0.5, zero_tokens()));
    assert_eq!(s.codon_cost("r1", "ok"), Some(usd(0.5)));
    finish(&mut s, "r1", "ok", "completed");
    start_at(&mut s, "r1", "bad", "running");
    ok(&mut s, &costs_updated("r1", "bad", 0.25, zero_tokens()));
    finish(&mut s, "r1", "bad", "failed");
    start_at(&mut s, "r1", "skip", "running");
    ok(&mut s, &costs_updated("r1", "skip", 4.0, zero_tokens()));
    assert_eq!(s.total_cost(), usd(4.75));
    finish(&mut s, "r1", "skip", "skipped");
    assert_eq!(s.codon_cost("r1", "ok"), Some(usd(0.5)));
    assert_eq!(s.codon_cost("r1", "bad"), Some(usd(0.25)));
    assert_eq!(s.codon_cost("r1", "skip"), Some(Money::ZERO));
    assert_eq!(rec(&s, "r1", 5)["partialCost"], json!(4.0));
    assert_eq!(s.total_cost(), usd(0.75));
    assert_eq!(s.run("r1").unwrap().cost(), usd(0.75));
    assert_cache_exact(&s);
}

#[test]
fn retries_count_every_record_in_the_total_and_the_latest_in_codon_cost() {
    let mut s = State::default();
    ok(&mut s, &run_started("r1"));
    start_at(&mut s, "r1", "c", "running");
    ok(&mut s, &costs_updated("r1", "c", 0.3, zero_tokens()));
    finish(&mut s, "r1", "c", "failed");
    start_at(&mut s, "r1", "c", "running");
    ok(&mut s, &costs_updated("r1", "c", 0.2, zero_tokens()));
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.2)));
    assert_eq!(s.total_cost(), usd(0.5));
    finish(&mut s, "r1", "c", "completed");
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.2)));
    assert_eq!(s.total_cost(), usd(0.5));
    assert_eq!(s.current_run_cost(), usd(0.5));
    ok(&mut s, &run_completed("r1"));

    // A continuation run retries the codon again: a record in another run.
    ok(
        &mut s,
        &run_started_with("r2", continuation("r1", Some("c"), "sha-done"), None),
    );
    start_at(&mut s, "r2", "c", "running");
    ok(&mut s, &costs_updated("r2", "c", 0.125, zero_tokens()));
    assert_eq!(s.codon_cost("r1", "c"), Some(usd(0.2)));
    assert_eq!(s.codon_cost("r2", "c"), Some(usd(0.125)));
    assert_eq!(s.current_run_cost(), usd(0.125));
    assert_eq!(s.run("r1").unwrap().cost(), usd(0.5));
    assert_eq!(s.total_cost(), usd(0.625));
    assert_cache_exact(&s);
}

/// A small deterministic generator (PCG multiplier), so failures replay.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    fn cost(&mut self) -> f64 {
        match self.below(7) {
            0 => 0.1,
            1 => 1e-9,
            2 => 0.031_971,
            3 => 0.0234,
            4 => 0.0,
            _ => self.below(1_000_000) as f64 / 1e6,
        }
    }

    fn tokens(&mut self) -> Value {
        tokens(
            self.below(5000),
            self.below(500),
            self.below(100),
            self.below(100),
        )
    }
}

const SIM_CODONS: [&str; 4] = ["plan", "build", "review", "loop#0"];

/// The next event of a random but plausible execution, and the rejection
/// code it must get (`None`: it must be applied).
fn next_event(rng: &mut Lcg, s: &State, runs: &mut u32) -> (Vec<u8>, Option<&'static str>) {
    let Some(run) = s.current_run() else {
        *runs += 1;
        let id = format!("r{runs}");
        if *runs > 1 && rng.below(2) == 0 {
            let src = format!("r{}", 1 + rng.below(u64::from(*runs - 1)));
            let codons = &s.run(&src).unwrap().codons;
            let after = if codons.is_empty() || rng.below(3) == 0 {
                None
            } else {
                Some(rng.pick(codons).codon_id.clone())
            };
            let cond = continuation(&src, after.as_deref(), "sha-src");
            return (run_started_with(&id, cond, None), None);
        }
        return (
            run_started_with(&id, fresh(), Some(plan(&SIM_CODONS))),
            None,
        );
    };
    let r = run.run_id.as_str();
    if rng.below(8) == 0 {
        return probe(rng, s);
    }
    let Some(active) = run.active() else {
        return match rng.below(12) {
            0 => (run_completed(r), None),
            1 => (run_failed(r), None),
            2 => (run_crashed(r), None),
            _ => (codon_started(r, SIM_CODONS[rng.below(4) as usize]), None),
        };
    };
    let c = active.codon_id.as_str();
    let status = active.status.as_str();
    let mut options = Vec::new();
    if let Some(next) = PATH
        .iter()
        .position(|p| *p == status)
        .and_then(|i| PATH.get(i + 1))
    {
        for _ in 0..3 {
            options.push(transitioned(r, c, status, next, guard_meta(status, next)));
        }
    }
    if active.status.is_live() {
        options.push(transitioned(
            r,
            c,
            status,
            "completed",
            guard_meta(status, "completed"),
        ));
        options.push(transitioned(
            r,
            c,
            status,
            "completed",
            guard_meta(status, "completed"),
        ));
        options.push(costs_updated(r, c, rng.cost(), rng.tokens()));
        for _ in 0..4 {
            options.push(costs_incremented(r, c, rng.cost(), rng.tokens()));
        }
        options.push(final_cost_set(r, c, rng.cost(), rng.tokens()));
        options.push(message_count(r, c, rng.below(50)));
        options.push(extension_count(r, c, rng.below(3)));
    }
    options.push(transitioned(
        r,
        c,
        status,
        "failed",
        guard_meta(status, "failed"),
    ));
    options.push(transitioned(
        r,
        c,
        status,
        "skipped",
        guard_meta(status, "skipped"),
    ));
    let costs: Vec<f64> = (0..rng.below(3)).map(|_| rng.cost()).collect();
    let total = costs.iter().fold(Money::ZERO, |acc, c| acc + usd(*c));
    let sentinel_list: Vec<Value> = costs
        .iter()
        .enumerate()
        .map(|(i, c)| sentinel(&format!("s{i}"), *c))
        .collect();
    options.push(sentinels_updated(
        r,
        c,
        Value::Array(sentinel_list),
        total.usd(),
    ));
    let kind = *rng.pick(&["rig-setup", "completed", "error", "skipped"]);
    options.push(checkpoint(r, c, kind, &format!("sha-{}", rng.below(1000))));
    if rng.below(10) == 0 {
        options.push(run_crashed(r));
    }
    let i = rng.below(options.len() as u64) as usize;
    (options.swap_remove(i), None)
}

/// A transition the current state must refuse, with its code.
fn probe(rng: &mut Lcg, s: &State) -> (Vec<u8>, Option<&'static str>) {
    let run = s.current_run().unwrap();
    let r = run.run_id.as_str();
    let active = run.active();
    match (rng.below(8), active) {
        (0, _) => (codon_started("ghost", "x"), Some("unknown_run")),
        (1, _) => (
            costs_updated(r, "never", 0.1, zero_tokens()),
            Some("unknown_codon"),
        ),
        (2, _) => (run_started("zz"), Some("run_still_active")),
        (3, _) => (
            costs_incremented(r, "plan", -1.0, zero_tokens()),
            Some("malformed"),
        ),
        (4, _) => match s.runs.iter().find(|x| x.status != RunStatus::Running) {
            Some(ended) => (codon_started(&ended.run_id, "x"), Some("run_not_active")),
            None => (run_started("r1"), Some("run_exists")),
        },
        (5, Some(a)) => (
            transitioned(r, &a.codon_id, a.status.as_str(), "failed", json!({})),
            Some("invalid_metadata"),
        ),
        (6, Some(_)) => (codon_started(r, "x"), Some("codon_already_active")),
        (7, Some(a)) => {
            let other = *rng.pick(&PATH);
            if other == a.status.as_str() {
                (run_completed(r), Some("run_has_active_codon"))
            } else {
                (
                    transitioned(r, &a.codon_id, other, "failed", guard_meta(other, "failed")),
                    Some("status_mismatch"),
                )
            }
        }
        (_, None) => match run.codons.last() {
            Some(last) => (message_count(r, &last.codon_id, 1), Some("codon_not_live")),
            None => (message_count(r, "plan", 1), Some("unknown_codon")),
        },
        (_, Some(a)) if a.status.is_live() => (
            transitioned(r, &a.codon_id, a.status.as_str(), "preparing", json!({})),
            Some("invalid_transition"),
        ),
        (_, Some(a)) => (
            costs_updated(r, &a.codon_id, 0.1, zero_tokens()),
            Some("codon_not_live"),
        ),
    }
}

#[test]
fn a_long_mixed_sequence_keeps_every_cached_cost_exact() {
    for seed in [1, 7, 42, 2024, 0xDEAD_BEEF] {
        let mut rng = Lcg(seed);
        let mut s = State::default();
        let mut runs = 0;
        let mut applied = 0;
        let mut refused = BTreeSet::new();
        for step in 0..600 {
            let (bytes, expected) = next_event(&mut rng, &s, &mut runs);
            match expected {
                None => {
                    ok(&mut s, &bytes);
                    applied += 1;
                }
                Some(code) => {
                    let (got, message) = reject(&mut s, &bytes);
                    assert_eq!(got, code, "seed {seed} step {step}: {message}");
                    refused.insert(got);
                }
            }
            // Cheap invariants every step; the full recomputation (which
            // serializes the whole state) every third step.
            let by_run = s.runs.iter().fold(Money::ZERO, |acc, r| acc + r.cost());
            assert_eq!(s.total_cost(), by_run, "seed {seed} step {step}");
            assert_eq!(
                s.current_run_cost(),
                s.current_run().map_or(Money::ZERO, Run::cost)
            );
            if step % 3 == 0 {
                assert_cache_exact(&s);
            }
        }
        assert_cache_exact(&s);
        assert!(applied > 400, "seed {seed}: only {applied} applied");
        assert!(refused.len() >= 8, "seed {seed}: {refused:?}");
        assert!(s.codon_record_count() > 50, "seed {seed}");
        assert!(runs > 5, "seed {seed}");
        assert!(s.total_cost() > Money::ZERO);
        // The reducer only produces states that load cleanly ...
        assert_eq!(
            validate::check(&s, &Environment::default()),
            Validation::default(),
            "seed {seed}"
        );
        // ... and that survive a save/load cycle byte for byte.
        let bytes = serde_json::to_vec(&s).unwrap();
        let (back, report) = validate::load(&bytes, &Environment::default()).unwrap();
        assert_eq!(report, Validation::default());
        assert_eq!(fingerprint(&back), fingerprint(&s), "seed {seed}");
    }
}

// ===========================================================================
// state.json round trip.

/// Every object key in a JSON document, outside the verbatim plan codons.
fn keys(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                out.insert(k.clone());
                if k != "codon" {
                    keys(val, out);
                }
            }
        }
        Value::Array(xs) => xs.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

#[test]
fn a_state_round_trips_byte_for_byte() {
    let mut s = busy();
    ok(
        &mut s,
        &sentinels_updated("r3", "live", json!([sentinel("s1", 0.031_971)]), 0.031_971),
    );
    ok(
        &mut s,
        &final_cost_set("r3", "live", 123.456_789_012, tokens(1, 2, 3, 4)),
    );
    let bytes = serde_json::to_vec(&s).unwrap();
    let mut back: State = serde_json::from_slice(&bytes).unwrap();
    back.reindex();
    assert_eq!(serde_json::to_vec(&back).unwrap(), bytes);
    assert_eq!(fingerprint(&back), fingerprint(&s));
    // Pretty-printed (as the Python side writes state.json) loads the same.
    let pretty = serde_json::to_vec_pretty(&s).unwrap();
    let (loaded, report) = validate::load(&pretty, &Environment::default()).unwrap();
    assert_eq!(report, Validation::default());
    assert_eq!(serde_json::to_vec(&loaded).unwrap(), bytes);

    // The reloaded state accepts the next transitions exactly as the live one.
    let mut live = s;
    let mut reloaded = loaded;
    for t in [
        costs_incremented("r3", "live", 0.5, tokens(1, 1, 1, 1)),
        codon_started("r3", "x"),
        transitioned(
            "r3",
            "live",
            "running",
            "completed",
            guard_meta("running", "completed"),
        ),
        codon_started("r3", "live"),
        transitioned(
            "r3",
            "live",
            "preparing",
            "skipped",
            guard_meta("preparing", "skipped"),
        ),
        run_completed("r3"),
        run_started_with("r4", continuation("r3", Some("done"), "sha"), None),
    ] {
        assert_eq!(apply_bytes(&mut live, &t), apply_bytes(&mut reloaded, &t));
        assert_eq!(fingerprint(&live), fingerprint(&reloaded));
    }
}

#[test]
fn runs_are_written_newest_first_and_kept_oldest_first() {
    let s = busy();
    let ids: Vec<&str> = s.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["r0", "r1", "r2", "r3"]);
    let doc = serde_json::to_value(&s).unwrap();
    let written: Vec<&str> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(written, ["r3", "r2", "r1", "r0"]);
    let back: State = serde_json::from_value(doc).unwrap();
    let ids: Vec<&str> = back.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["r0", "r1", "r2", "r3"]);
}

#[test]
fn the_document_uses_the_reference_camel_case_names() {
    let mut s = busy();
    ok(
        &mut s,
        &sentinels_updated("r3", "live", json!([sentinel("s1", 0.0)]), 0.0),
    );
    finish(&mut s, "r3", "live", "completed");
    start_at(&mut s, "r3", "next", "running");
    ok(
        &mut s,
        &sentinels_updated("r3", "next", json!([sentinel("s2", 0.0)]), 0.0),
    );
    ok(&mut s, &message_count("r3", "next", 1));
    let doc = serde_json::to_value(&s).unwrap();
    let top: Vec<&String> = doc.as_object().unwrap().keys().collect();
    assert_eq!(
        top,
        ["currentRunId", "executionPlan", "initialCheckpoint", "runs"]
    );
    let mut all = BTreeSet::new();
    keys(&doc, &mut all);
    for name in [
        "runs",
        "currentRunId",
        "initialCheckpoint",
        "executionPlan",
        "codonId",
        "runId",
        "runFolder",
        "gitBranch",
        "startingConditions",
        "afterCodon",
        "checkpointSha",
        "serverPid",
        "startTime",
        "endTime",
        "claudePid",
        "claudeLogPath",
        "claudeSessionId",
        "currentCost",
        "currentTokens",
        "assistantMessageCount",
        "extensionCount",
        "exitCode",
        "finalCost",
        "finalTokens",
        "resultMessageReceived",
        "completionCheckpoint",
        "failedDuring",
        "failureReason",
        "partialCost",
        "partialTokens",
        "skippedDuring",
        "inputTokens",
        "outputTokens",
        "cacheCreationTokens",
        "cacheReadTokens",
        "loaded",
        "executed",
        "totalCost",
        "loadedAt",
        "llmCallCount",
        "failedLLMCalls",
        "totalTriggers",
    ] {
        assert!(all.contains(name), "{name} missing from {all:?}");
    }
    let snake: Vec<&String> = all.iter().filter(|k| k.contains('_')).collect();
    assert!(snake.is_empty(), "{snake:?}");
    // A document with no run, no current run and no plan.
    assert_eq!(
        serde_json::to_value(State::default()).unwrap(),
        json!({ "runs": [], "currentRunId": null, "executionPlan": [] })
    );
}

#[test]
fn extreme_but_plausible_amounts_round_trip_exactly() {
    for amount in [1e-9, 0.031_971, 123.456_789_012, 999_999.999_999_999] {
        let mut s = one("running");
        ok(&mut s, &costs_updated("r1", "c", amount, zero_tokens()));
        finish(&mut s, "r1", "c", "completed");
        let bytes = serde_json::to_vec(&s).unwrap();
        let (back, _) = validate::load(&bytes, &Environment::default()).unwrap();
        assert_eq!(serde_json::to_vec(&back).unwrap(), bytes, "{amount}");
        assert_eq!(back.total_cost(), usd(amount));
        assert_eq!(rec(&back, "r1", 0)["finalCost"], json!(amount));
    }
}

// ===========================================================================
// Load-time validation.

fn issue(kind: &'static str, message: &str, path: &str) -> Issue {
    Issue {
        kind,
        message: message.to_owned(),
        path: path.to_owned(),
    }
}

fn doc_of(s: &State) -> Value {
    serde_json::to_value(s).unwrap()
}

/// `validate::load` of a document that must be refused: its errors, after
/// checking that `check` on the parsed state (when it parses) agrees.
fn load_errors(doc: &Value) -> (Vec<Issue>, Vec<Issue>) {
    let bytes = serde_json::to_vec(doc).unwrap();
    let report = validate::load(&bytes, &Environment::default())
        .map(|_| ())
        .expect_err("the document was accepted");
    if let Ok(parsed) = serde_json::from_slice::<State>(&bytes) {
        assert_eq!(validate::check(&parsed, &Environment::default()), report);
    }
    assert!(!report.is_valid());
    (report.errors, report.warnings)
}

fn load_bytes_errors(bytes: &[u8]) -> Vec<Issue> {
    let report = validate::load(bytes, &Environment::default())
        .map(|_| ())
        .expect_err("the document was accepted");
    assert!(report.warnings.is_empty());
    report.errors
}

#[test]
fn corrupted_data_for_documents_that_are_not_states() {
    let cases: [(&[u8], &str); 8] = [
        (
            b"{",
            "not a valid state document: EOF while parsing an object at line 1 column 1",
        ),
        (
            b"",
            "not a valid state document: EOF while parsing a value at line 1 column 0",
        ),
        (
            br#"{"runs":{},"currentRunId":null,"executionPlan":[]}"#,
            "not a valid state document: invalid type: map, expected a sequence at line 1 column 8",
        ),
        (
            br#"{"runs":[],"currentRunId":7,"executionPlan":[]}"#,
            "not a valid state document: invalid type: integer `7`, expected a string \
             at line 1 column 27",
        ),
        (
            br#"{"runs":[],"currentRunId":null,"executionPlan":{}}"#,
            "not a valid state document: invalid type: map, expected a sequence \
             at line 1 column 47",
        ),
        (br#"{"runs":[],"currentRunId":null}"#, ""),
        (
            br#"{"runs":[],"currentRunId":null,"executionPlan":[],"version":2}"#,
            "not a valid state document: unknown field `version`, expected one of `runs`, \
             `currentRunId`, `initialCheckpoint`, `executionPlan`, `journalSeq` at line 1 column 59",
        ),
        (
            br#"{"currentRunId":null,"executionPlan":[]}"#,
            "not a valid state document: missing field `runs` at line 1 column 40",
        ),
    ];
    let mut wrong = Vec::new();
    for (bytes, message) in cases {
        if message.is_empty() {
            // executionPlan may be absent: it defaults to empty.
            let (s, report) = validate::load(bytes, &Environment::default()).unwrap();
            assert!(report.is_valid());
            assert!(s.execution_plan.is_empty());
            continue;
        }
        let got = load_bytes_errors(bytes);
        if got != [issue("corrupted_data", message, "")] {
            wrong.push(format!("{}: {got:?}", String::from_utf8_lossy(bytes)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn corrupted_data_for_bad_records() {
    let mut doc = doc_of(&one("running"));
    doc["runs"][0]["codons"][0]["status"] = json!("paused");
    let errors = load_errors(&doc).0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, "corrupted_data");
    assert!(
        errors[0]
            .message
            .starts_with("not a valid state document: unknown variant `paused`"),
        "{errors:?}"
    );

    let mut doc = doc_of(&one("running"));
    doc["runs"][0]["codons"][0]["currentCost"] = json!(-0.5);
    let errors = load_errors(&doc).0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, "corrupted_data");
    assert!(
        errors[0]
            .message
            .starts_with("not a valid state document: a cost cannot be negative (got -0.5)"),
        "{errors:?}"
    );
}

#[test]
fn corrupted_data_for_duplicate_runs_and_a_current_run_that_ended() {
    let mut doc = doc_of(&idle());
    let copy = doc["runs"][0].clone();
    doc["runs"].as_array_mut().unwrap().push(copy);
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "corrupted_data",
            "run 'r0' appears more than once",
            "runs[0]"
        )]
    );

    let mut doc = doc_of(&idle());
    doc["currentRunId"] = json!("r0");
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "corrupted_data",
            "currentRunId 'r0' names a run that is completed, not running",
            "currentRunId"
        )]
    );
}

#[test]
fn missing_run_for_a_dangling_current_run_or_continuation_source() {
    let mut doc = doc_of(&idle());
    doc["currentRunId"] = json!("ghost");
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "missing_run",
            "currentRunId 'ghost' names no run",
            "currentRunId"
        )]
    );

    // busy: r3 continues r0, the oldest run, which is last in the document.
    let mut doc = doc_of(&busy());
    doc["runs"].as_array_mut().unwrap().pop();
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "missing_run",
            "run 'r3' continues run 'r0', which is not in the state",
            "runs[0].startingConditions.source.runId"
        )]
    );
}

#[test]
fn invalid_codon_when_a_record_lacks_what_its_status_promises() {
    let live = [
        "claudePid",
        "claudeLogPath",
        "claudeSessionId",
        "currentCost",
        "currentTokens",
        "assistantMessageCount",
    ];
    let cases: Vec<(&str, &[&str])> = vec![
        ("initializing", &["claudePid", "claudeLogPath"]),
        ("running", &live),
        ("completing-sentinels", &live),
        (
            "completed",
            &[
                "endTime",
                "finalCost",
                "finalTokens",
                "completionCheckpoint",
            ],
        ),
        (
            "failed",
            &[
                "endTime",
                "exitCode",
                "failureReason",
                "failedDuring",
                "partialCost",
            ],
        ),
        ("skipped", &["endTime", "skippedDuring", "partialCost"]),
    ];
    for (status, fields) in cases {
        let base = doc_of(&one(status));
        assert!(
            validate::load(&serde_json::to_vec(&base).unwrap(), &Environment::default()).is_ok()
        );
        for field in fields {
            let mut doc = base.clone();
            let record = doc["runs"][0]["codons"][0].as_object_mut().unwrap();
            assert!(record.remove(*field).is_some(), "{status} has no {field}");
            assert_eq!(
                load_errors(&doc),
                (
                    vec![issue(
                        "invalid_codon",
                        &format!("codon 'c' is {status} but lacks {field}"),
                        "runs[0].codons[0]"
                    )],
                    vec![]
                ),
                "{status} without {field}"
            );
        }
    }
    // preparing and starting promise nothing beyond the basics.
    for status in ["preparing", "starting"] {
        let doc = doc_of(&one(status));
        let record = doc["runs"][0]["codons"][0].as_object().unwrap();
        assert_eq!(record.len(), 3, "{record:?}");
        assert!(
            validate::load(&serde_json::to_vec(&doc).unwrap(), &Environment::default()).is_ok()
        );
    }
}

#[test]
fn invalid_codon_for_a_completed_exit_code_or_checkpoint_that_is_wrong() {
    let base = doc_of(&one("completed"));
    for (field, value, lacks) in [
        ("exitCode", json!(3), "exitCode 0"),
        ("exitCode", Value::Null, "exitCode 0"),
        ("completionCheckpoint", json!(""), "completionCheckpoint"),
    ] {
        let mut doc = base.clone();
        let record = doc["runs"][0]["codons"][0].as_object_mut().unwrap();
        if value.is_null() {
            record.remove(field);
        } else {
            record.insert(field.to_owned(), value);
        }
        assert_eq!(
            load_errors(&doc).0,
            [issue(
                "invalid_codon",
                &format!("codon 'c' is completed but lacks {lacks}"),
                "runs[0].codons[0]"
            )]
        );
    }
    // Several at once, in a fixed order.
    let mut doc = base.clone();
    let record = doc["runs"][0]["codons"][0].as_object_mut().unwrap();
    record.remove("finalCost");
    record.remove("endTime");
    record.remove("completionCheckpoint");
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "invalid_codon",
            "codon 'c' is completed but lacks endTime, finalCost, completionCheckpoint",
            "runs[0].codons[0]"
        )]
    );
}

#[test]
fn invalid_codon_for_a_terminal_failed_or_skipped_during() {
    let mut doc = doc_of(&one("failed"));
    doc["runs"][0]["codons"][0]["failedDuring"] = json!("skipped");
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "invalid_codon",
            "codon 'c' has failedDuring skipped, which is a terminal state",
            "runs[0].codons[0].failedDuring"
        )]
    );
    let mut doc = doc_of(&one("skipped"));
    doc["runs"][0]["codons"][0]["skippedDuring"] = json!("completed");
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "invalid_codon",
            "codon 'c' has skippedDuring completed, which is a terminal state",
            "runs[0].codons[0].skippedDuring"
        )]
    );
}

#[test]
fn invalid_codon_for_two_active_codons_or_an_active_codon_in_an_ended_run() {
    let mut doc = doc_of(&one("preparing"));
    let mut second = doc["runs"][0]["codons"][0].clone();
    second["codonId"] = json!("d");
    doc["runs"][0]["codons"]
        .as_array_mut()
        .unwrap()
        .push(second);
    assert_eq!(
        load_errors(&doc).0,
        [issue(
            "invalid_codon",
            "2 codons are active at once; at most one may be",
            "runs[0].codons"
        )]
    );

    for status in ["completed", "failed", "crashed"] {
        let mut doc = doc_of(&one("running"));
        doc["runs"][0]["status"] = json!(status);
        doc["runs"][0]["endTime"] = json!(RUN_END);
        doc["currentRunId"] = Value::Null;
        assert_eq!(
            load_errors(&doc).0,
            [issue(
                "invalid_codon",
                &format!("the run is {status} but a codon is still active"),
                "runs[0].codons"
            )]
        );
    }
}

#[test]
fn invalid_codon_for_sentinels_that_are_not_exactly_loaded_or_executed() {
    let live = doc_of(&spent("running"));
    let path = "runs[0].codons[0].sentinels";

    let mut both = live.clone();
    both["runs"][0]["codons"][0]["sentinels"]["executed"] = json!([]);
    assert_eq!(
        load_errors(&both),
        (
            vec![issue(
                "invalid_codon",
                "codon 'c' must have exactly one of sentinels.loaded and sentinels.executed",
                path
            )],
            vec![]
        )
    );

    let mut neither = live.clone();
    neither["runs"][0]["codons"][0]["sentinels"]
        .as_object_mut()
        .unwrap()
        .remove("loaded");
    assert_eq!(
        load_errors(&neither),
        (
            vec![issue(
                "invalid_codon",
                "codon 'c' must have exactly one of sentinels.loaded and sentinels.executed",
                path
            )],
            // The missing list sums to zero, not to the recorded total.
            vec![issue(
                "cost_mismatch",
                "codon 'c' records sentinel cost 0.02 but its sentinels sum to 0",
                "runs[0].codons[0].sentinels.totalCost"
            )]
        )
    );

    let mut executed_while_live = live.clone();
    let sentinels = executed_while_live["runs"][0]["codons"][0]["sentinels"]
        .as_object_mut()
        .unwrap();
    let list = sentinels.remove("loaded").unwrap();
    sentinels.insert("executed".to_owned(), list);
    assert_eq!(
        load_errors(&executed_while_live).0,
        [issue(
            "invalid_codon",
            "codon 'c' is running but its sentinels are executed",
            path
        )]
    );

    let mut s = spent("running");
    finish(&mut s, "r1", "c", "completed");
    let mut loaded_when_done = doc_of(&s);
    let sentinels = loaded_when_done["runs"][0]["codons"][0]["sentinels"]
        .as_object_mut()
        .unwrap();
    let list = sentinels.remove("executed").unwrap();
    sentinels.insert("loaded".to_owned(), list);
    assert_eq!(
        load_errors(&loaded_when_done).0,
        [issue(
            "invalid_codon",
            "codon 'c' is completed but its sentinels are loaded",
            path
        )]
    );
}

#[test]
fn every_error_is_reported_in_one_pass() {
    let mut doc = doc_of(&busy());
    doc["currentRunId"] = json!("ghost");
    // r0 (last in the document): its completed codon loses its checkpoint.
    doc["runs"][3]["codons"][0]
        .as_object_mut()
        .unwrap()
        .remove("completionCheckpoint");
    // r3 (first): its running codon loses its session id.
    doc["runs"][0]["codons"][2]
        .as_object_mut()
        .unwrap()
        .remove("claudeSessionId");
    assert_eq!(
        load_errors(&doc).0,
        [
            issue(
                "invalid_codon",
                "codon 'a' is completed but lacks completionCheckpoint",
                "runs[3].codons[0]"
            ),
            issue(
                "invalid_codon",
                "codon 'live' is running but lacks claudeSessionId",
                "runs[0].codons[2]"
            ),
            issue(
                "missing_run",
                "currentRunId 'ghost' names no run",
                "currentRunId"
            ),
        ]
    );
}

/// Checks `state` knowing the checkpoint repository holds `shas` (when
/// given) and `runs/` holds `folders` (when given).
fn check_with(state: &State, shas: Option<&[&str]>, folders: Option<&[String]>) -> Validation {
    let known = shas.map(|list| list.iter().map(|s| (*s).to_owned()).collect());
    let env = Environment {
        checkpoints: known.as_ref(),
        run_folders: folders,
    };
    validate::check(state, &env)
}

#[test]
fn orphaned_folders_are_warnings() {
    let s = busy();
    let folders: Vec<String> = ["r0", "r1", "tmp", "r2", "r3", "r7"]
        .iter()
        .map(|f| (*f).to_owned())
        .collect();
    let report = check_with(&s, None, Some(&folders));
    assert!(report.is_valid());
    assert_eq!(
        report.warnings,
        [
            issue(
                "orphaned_folder",
                "runs/tmp has no run in the state",
                "runs/tmp"
            ),
            issue(
                "orphaned_folder",
                "runs/r7 has no run in the state",
                "runs/r7"
            ),
        ]
    );
    // load returns the state, indexed, with the warnings.
    let env = Environment {
        checkpoints: None,
        run_folders: Some(&folders),
    };
    let (loaded, report) = validate::load(&serde_json::to_vec(&s).unwrap(), &env).unwrap();
    assert_eq!(report.warnings.len(), 2);
    assert!(report.errors.is_empty());
    assert_eq!(loaded.total_cost(), s.total_cost());
    assert_eq!(loaded.current_run_cost(), usd(0.375));
}

/// A state that records a sha in every place one can be recorded.
fn with_every_checkpoint() -> State {
    let mut s = State::default();
    ok(&mut s, &initial_checkpoint("sha-init"));
    ok(&mut s, &run_started("r1"));
    ok(&mut s, &codon_started("r1", "a"));
    ok(
        &mut s,
        &transitioned(
            "r1",
            "a",
            "preparing",
            "starting",
            json!({ "checkpointSha": "sha-rig-a" }),
        ),
    );
    advance(&mut s, "r1", "a", "running");
    finish(&mut s, "r1", "a", "completed");
    start_at(&mut s, "r1", "b", "running");
    ok(&mut s, &checkpoint("r1", "b", "error", "sha-err-b"));
    finish(&mut s, "r1", "b", "failed");
    start_at(&mut s, "r1", "c", "running");
    ok(&mut s, &checkpoint("r1", "c", "skipped", "sha-skip-c"));
    finish(&mut s, "r1", "c", "skipped");
    ok(&mut s, &run_completed("r1"));
    ok(
        &mut s,
        &run_started_with("r2", continuation("r1", Some("a"), "sha-src"), None),
    );
    s
}

#[test]
fn missing_checkpoints_are_warnings_and_only_checked_when_shas_are_given() {
    let s = with_every_checkpoint();
    let missing = |sha: &str, path: &str| {
        issue(
            "missing_checkpoint",
            &format!("checkpoint {sha} is not in the checkpoint repository"),
            path,
        )
    };
    let report = check_with(&s, Some(&["sha-init", "sha-done", "sha-src"]), None);
    assert!(report.is_valid());
    assert_eq!(
        report.warnings,
        [
            missing("sha-rig-a", "runs[1].codons[0].rigSetupCheckpoint"),
            missing("sha-err-b", "runs[1].codons[1].errorCheckpoint"),
            missing("sha-skip-c", "runs[1].codons[2].skipCheckpoint"),
        ]
    );

    let report = check_with(&s, Some(&[]), None);
    assert_eq!(
        report.warnings,
        [
            missing("sha-init", "initialCheckpoint"),
            missing("sha-rig-a", "runs[1].codons[0].rigSetupCheckpoint"),
            missing("sha-done", "runs[1].codons[0].completionCheckpoint"),
            missing("sha-err-b", "runs[1].codons[1].errorCheckpoint"),
            missing("sha-skip-c", "runs[1].codons[2].skipCheckpoint"),
            missing("sha-src", "runs[0].startingConditions.source.checkpointSha"),
        ]
    );

    let all = [
        "sha-init",
        "sha-rig-a",
        "sha-done",
        "sha-err-b",
        "sha-skip-c",
        "sha-src",
    ];
    assert_eq!(check_with(&s, Some(&all), None), Validation::default());
    // Without the repository's shas the check is skipped.
    assert_eq!(check_with(&s, None, None), Validation::default());
    assert_eq!(
        validate::check(&s, &Environment::default()),
        Validation::default()
    );
}

#[test]
fn a_sentinel_total_that_is_not_the_sum_is_a_cost_mismatch_warning() {
    let mut s = one("running");
    // 0.1 + 0.2 sums exactly to 0.3: no warning.
    let states = json!([sentinel("s1", 0.1), sentinel("s2", 0.2)]);
    ok(&mut s, &sentinels_updated("r1", "c", states.clone(), 0.3));
    assert_eq!(
        validate::check(&s, &Environment::default()),
        Validation::default()
    );
    // The reducer takes the total as given; the loader warns.
    ok(&mut s, &sentinels_updated("r1", "c", states, 0.5));
    let expected = vec![issue(
        "cost_mismatch",
        "codon 'c' records sentinel cost 0.5 but its sentinels sum to 0.3",
        "runs[0].codons[0].sentinels.totalCost",
    )];
    let report = validate::check(&s, &Environment::default());
    assert!(report.is_valid());
    assert_eq!(report.warnings, expected);
    // Still a warning once the list is executed.
    finish(&mut s, "r1", "c", "completed");
    let (_, report) =
        validate::load(&serde_json::to_vec(&s).unwrap(), &Environment::default()).unwrap();
    assert_eq!(report.warnings, expected);
    assert!(report.errors.is_empty());
}

// ===========================================================================
// The queue.

#[test]
fn the_queue_numbers_transitions_in_submission_order() {
    let mut q: Queue<Vec<u8>> = Queue::new(100);
    assert!(q.is_empty());
    assert_eq!(q.next_seq(), 100);
    assert_eq!(q.submit(run_started("r1")), 100);
    assert_eq!(q.submit(codon_started("r1", "c")), 101);
    assert_eq!(q.submit(initial_checkpoint("x")), 102);
    assert_eq!(q.len(), 3);
    assert_eq!(q.reserve(2), None);
    let first = q.take(2);
    assert_eq!(
        first,
        vec![(100, run_started("r1")), (101, codon_started("r1", "c"))]
    );
    assert_eq!(q.submit(run_completed("r1")), 103);
    let rest = q.take(usize::MAX);
    assert_eq!(
        rest,
        vec![(102, initial_checkpoint("x")), (103, run_completed("r1"))]
    );
    assert!(q.is_empty());
    assert_eq!(q.take(5), vec![]);
    assert_eq!(q.reserve(3), Some(104));
    assert_eq!(q.submit(b"x".to_vec()), 107);
}

#[test]
fn processing_reports_each_outcome_in_place_and_goes_on() {
    let batch: Vec<Vec<u8>> = vec![
        codon_started("r1", "c"),
        run_started("r1"),
        codon_started("r1", "c"),
        b"{garbage".to_vec(),
        codon_started("r1", "d"),
        transitioned("r1", "c", "preparing", "starting", json!({})),
        initial_checkpoint(""),
        transitioned("r1", "c", "starting", "initializing", json!({})),
        initial_checkpoint("sha-0"),
        run_completed("r1"),
        transitioned(
            "r1",
            "c",
            "starting",
            "failed",
            guard_meta("starting", "failed"),
        ),
        run_completed("r1"),
        run_completed("r1"),
    ];
    let mut q = Queue::new(1);
    for b in &batch {
        q.submit(Submission::Transition(b.clone()));
    }
    let taken = q.take(usize::MAX);
    let mut s = State::default();
    let out = process(&mut s, &taken);

    let conflict = |code: &'static str, message: &str| {
        Err(Rejection::Conflict {
            code,
            message: message.to_owned(),
        })
    };
    let done = Ok(Applied::default());
    let expected: Vec<(Option<&str>, Result<Applied, Rejection>)> = vec![
        (
            Some("CodonStarted"),
            conflict("unknown_run", "Unknown run 'r1'"),
        ),
        (Some("RunStarted"), done.clone()),
        (Some("CodonStarted"), done.clone()),
        (
            None,
            Err(Rejection::Malformed(
                "key must be a string at line 1 column 2".to_owned(),
            )),
        ),
        (
            Some("CodonStarted"),
            conflict(
                "codon_already_active",
                "Run 'r1' already has an active codon 'c' (preparing)",
            ),
        ),
        (Some("CodonTransitioned"), done.clone()),
        (
            Some("InitialCheckpointSet"),
            conflict("invalid_value", "sha must not be empty"),
        ),
        (
            Some("CodonTransitioned"),
            Err(Rejection::Transition(TransitionError::Metadata(
                MetadataError {
                    from: CodonStatus::Starting,
                    to: CodonStatus::Initializing,
                    missing: vec!["claudePid", "claudeLogPath"],
                    invalid: vec![],
                },
            ))),
        ),
        (Some("InitialCheckpointSet"), done.clone()),
        (
            Some("RunCompleted"),
            conflict(
                "run_has_active_codon",
                "Run 'r1' still has an active codon 'c' (starting); finish it first",
            ),
        ),
        (
            Some("CodonTransitioned"),
            Ok(Applied {
                codon_terminal: true,
                run_ended: false,
            }),
        ),
        (
            Some("RunCompleted"),
            Ok(Applied {
                codon_terminal: false,
                run_ended: true,
            }),
        ),
        (
            Some("RunCompleted"),
            conflict("run_not_active", "Run 'r1' is completed, not running"),
        ),
    ];
    let expected: Vec<(u64, Option<&str>, Result<Applied, Rejection>)> = expected
        .into_iter()
        .zip(1..)
        .map(|((kind, result), seq)| (seq, kind, result))
        .collect();
    let got: Vec<_> = out
        .iter()
        .map(|p| (p.seq, p.kind, p.result.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(out.iter().all(|p| p.transition));
    assert_eq!(s.journal_seq, Some(13));

    // The same as applying the accepted ones directly, in order.
    let mut direct = State::default();
    for (b, p) in batch.iter().zip(&out) {
        if p.result.is_ok() {
            ok(&mut direct, b);
        }
    }
    assert_eq!(fingerprint(&s), fingerprint(&direct));
    assert_eq!(run_json(&s, "r1")["status"], "completed");
    assert_eq!(s.initial_checkpoint.as_deref(), Some("sha-0"));
}

#[test]
fn processing_keeps_the_sequence_numbers_it_is_given() {
    let mut s = State::default();
    let batch: Vec<(u64, Submission<&[u8]>)> = vec![
        (40, Submission::Transition(b"[]")),
        (41, Submission::Transition(b"{}")),
        (99, Submission::Transition(b"null")),
    ];
    let out = process(&mut s, &batch);
    assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [40, 41, 99]);
    assert!(out
        .iter()
        .all(|p| p.kind.is_none() && p.result.as_ref().unwrap_err().code() == "malformed"));
    assert_eq!(fingerprint(&s), fingerprint(&State::default()));
    assert_eq!(
        process(&mut s, &Vec::<(u64, Submission<Vec<u8>>)>::new()),
        vec![]
    );
}

// ===========================================================================
// Regressions: bugs these tests found in the first version of the core.

#[test]
fn the_reducer_never_produces_a_record_the_loader_rejects() {
    for (to, meta) in [
        (
            "failed",
            json!({
                "exitCode": 1, "failureReason": { "type": "x", "retriable": false },
                "failedDuring": "completed",
            }),
        ),
        ("skipped", json!({ "skippedDuring": "failed" })),
    ] {
        let mut s = one("running");
        let (_, result) = apply_bytes(&mut s, &transitioned("r1", "c", "running", to, meta));
        match result {
            // Either refused by the guard ...
            Err(e) => assert_eq!(e.code(), "invalid_metadata", "{to}"),
            // ... or the record it produced must load.
            Ok(_) => assert_eq!(
                validate::check(&s, &Environment::default()).errors,
                [],
                "{to}"
            ),
        }
    }
}

#[test]
fn a_state_the_reducer_accepted_can_always_be_reloaded() {
    let mut s = one("running");
    let first = apply_bytes(
        &mut s,
        &costs_incremented("r1", "c", 600_000.0, zero_tokens()),
    );
    assert!(first.1.is_ok());
    let second = apply_bytes(
        &mut s,
        &costs_incremented("r1", "c", 600_000.0, zero_tokens()),
    );
    if second.1.is_ok() {
        let bytes = serde_json::to_vec(&s).unwrap();
        let loaded = validate::load(&bytes, &Environment::default());
        assert!(loaded.is_ok(), "{:?}", loaded.err());
    }
}

#[test]
fn a_fresh_run_initial_checkpoint_sha_is_checked() {
    let mut s = State::default();
    ok(
        &mut s,
        &run_started_with(
            "r1",
            json!({ "type": "fresh", "initialCheckpointSha": "sha-gone" }),
            None,
        ),
    );
    assert_eq!(
        check_with(&s, Some(&[]), None).warnings,
        [issue(
            "missing_checkpoint",
            "checkpoint sha-gone is not in the checkpoint repository",
            "runs[0].startingConditions.initialCheckpointSha"
        )]
    );
}

#[test]
fn data_before_type_is_accepted_for_transitions_without_a_plan() {
    let mut s = State::default();
    ok(
        &mut s,
        br#"{"data":{"runId":"r1","runFolder":"/f","gitBranch":"b","startingConditions":{"type":"fresh"},"serverPid":1,"startTime":"t"},"type":"RunStarted"}"#,
    );
    ok(
        &mut s,
        br#"{"data":{"sha":"x"},"type":"InitialCheckpointSet"}"#,
    );
    assert_eq!(s.current_run_id.as_deref(), Some("r1"));
    assert_eq!(s.initial_checkpoint.as_deref(), Some("x"));
}

#[test]
fn data_before_type_is_accepted_for_a_run_with_a_plan() {
    let mut s = State::default();
    let bytes = br#"{"data":{"runId":"r1","runFolder":"/f","gitBranch":"b","startingConditions":{"type":"fresh"},"serverPid":1,"startTime":"t","executionPlan":[{"codon":{"a":1},"codonId":"a"}]},"type":"RunStarted"}"#;
    let (kind, result) = apply_bytes(&mut s, bytes);
    assert_eq!((kind, result), (Some("RunStarted"), Ok(Applied::default())));
}

// ===========================================================================
// PlanExtended: lazy loop expansion.

fn plan_ids(s: &State) -> Vec<String> {
    s.execution_plan
        .iter()
        .map(|e| e.codon_id.clone())
        .collect()
}

fn with_loop_plan() -> State {
    let mut s = State::default();
    let plan = json!([
        { "codon": { "id": "setup" }, "codonId": "setup" },
        loop_entry("step", 0),
        { "codon": { "id": "report" }, "codonId": "report" },
    ]);
    ok(
        &mut s,
        &run_started_with("r1", json!({ "type": "fresh" }), Some(plan)),
    );
    s
}

#[test]
fn plan_extended_inserts_the_entries_right_after_the_anchor() {
    let mut s = with_loop_plan();
    let applied = ok(
        &mut s,
        &plan_extended("r1", "step#0", json!([loop_entry("step", 1)])),
    );
    assert_eq!(applied, Applied::default());
    assert_eq!(plan_ids(&s), ["setup", "step#0", "step#1", "report"]);
    ok(
        &mut s,
        &plan_extended(
            "r1",
            "step#1",
            json!([loop_entry("step", 2), loop_entry("more", 2)]),
        ),
    );
    assert_eq!(
        plan_ids(&s),
        ["setup", "step#0", "step#1", "step#2", "more#2", "report"]
    );
    let doc = serde_json::to_value(&s).unwrap();
    assert_eq!(doc["executionPlan"][2], loop_entry("step", 1));
}

#[test]
fn a_loops_iterations_share_one_codon_config() {
    let mut s = with_loop_plan();
    for i in 1..4 {
        ok(
            &mut s,
            &plan_extended(
                "r1",
                &format!("step#{}", i - 1),
                json!([loop_entry("step", i)]),
            ),
        );
    }
    let step = |i: usize| &s.execution_plan[1 + i].codon;
    for i in 1..4 {
        assert!(
            std::sync::Arc::ptr_eq(step(0), step(i)),
            "step#{i} has its own copy"
        );
    }
    // Different codons keep their own configs.
    assert!(!std::sync::Arc::ptr_eq(&s.execution_plan[0].codon, step(0)));
    // A reloaded state shares them again (reindex runs after a load).
    let text = serde_json::to_string(&s).unwrap();
    let mut reloaded: State = serde_json::from_str(&text).unwrap();
    reloaded.reindex();
    assert!(std::sync::Arc::ptr_eq(
        &reloaded.execution_plan[1].codon,
        &reloaded.execution_plan[4].codon
    ));
    assert_eq!(serde_json::to_string(&reloaded).unwrap(), text);
}

#[test]
fn equal_ids_with_different_configs_are_not_shared() {
    let mut s = with_loop_plan();
    let mut changed = loop_entry("step", 1);
    changed["codon"]["model"] = json!("other");
    ok(&mut s, &plan_extended("r1", "step#0", json!([changed])));
    assert!(!std::sync::Arc::ptr_eq(
        &s.execution_plan[1].codon,
        &s.execution_plan[2].codon
    ));
    assert_eq!(s.execution_plan[2].codon["model"], json!("other"));
}

#[test]
fn plan_extended_survives_a_save_and_reload() {
    let mut s = with_loop_plan();
    ok(
        &mut s,
        &plan_extended("r1", "step#0", json!([loop_entry("step", 1)])),
    );
    let text = serde_json::to_string(&s).unwrap();
    let reloaded: State = serde_json::from_str(&text).unwrap();
    assert_eq!(plan_ids(&reloaded), ["setup", "step#0", "step#1", "report"]);
}

#[test]
fn plan_extended_refusals_change_nothing() {
    let mut s = with_loop_plan();
    let cases: [(Vec<u8>, &str, &str); 7] = [
        (
            plan_extended("r1", "ghost", json!([loop_entry("step", 1)])),
            "unknown_plan_entry",
            "No plan entry 'ghost' to extend after",
        ),
        (
            plan_extended("r1", "setup", json!([loop_entry("step", 0)])),
            "plan_conflict",
            "The plan already has an entry 'step#0'",
        ),
        (
            plan_extended(
                "r1",
                "step#0",
                json!([loop_entry("step", 1), loop_entry("step", 1)]),
            ),
            "plan_conflict",
            "The plan already has an entry 'step#1'",
        ),
        (
            plan_extended("r1", "step#0", json!([])),
            "invalid_value",
            "entries must not be empty",
        ),
        (
            plan_extended("r1", "", json!([loop_entry("step", 1)])),
            "invalid_value",
            "afterCodonId must not be empty",
        ),
        (
            plan_extended("r9", "step#0", json!([loop_entry("step", 1)])),
            "unknown_run",
            "Unknown run 'r9'",
        ),
        (
            plan_extended("r1", "step#0", json!([{ "codon": {}, "codonId": "" }])),
            "invalid_value",
            "codonId must not be empty",
        ),
    ];
    for (bytes, code, message) in cases {
        assert_eq!(reject(&mut s, &bytes), (code, message.to_owned()));
    }
    ok(&mut s, &run_completed("r1"));
    assert_eq!(
        reject(
            &mut s,
            &plan_extended("r1", "step#0", json!([loop_entry("step", 1)]))
        ),
        (
            "run_not_active",
            "Run 'r1' is completed, not running".to_owned()
        )
    );
}

fn plan_trimmed(run: &str, ids: &[&str]) -> Vec<u8> {
    tr("PlanTrimmed", json!({ "runId": run, "codonIds": ids }))
}

#[test]
fn plan_trimmed_removes_the_entries_and_keeps_the_order_of_the_rest() {
    let mut s = with_loop_plan();
    ok(
        &mut s,
        &plan_extended(
            "r1",
            "step#0",
            json!([loop_entry("step", 1), loop_entry("more", 1)]),
        ),
    );
    ok(&mut s, &plan_trimmed("r1", &["more#1", "step#1"]));
    assert_eq!(plan_ids(&s), ["setup", "step#0", "report"]);
}

#[test]
fn plan_trimmed_refusals_change_nothing() {
    let mut s = with_loop_plan();
    assert_eq!(
        reject(&mut s, &plan_trimmed("r1", &["step#0", "ghost"])),
        (
            "unknown_plan_entry",
            "No plan entry 'ghost' to remove".to_owned()
        )
    );
    assert_eq!(
        reject(&mut s, &plan_trimmed("r1", &[])),
        ("invalid_value", "codonIds must not be empty".to_owned())
    );
    assert_eq!(
        reject(&mut s, &plan_trimmed("", &["step#0"])),
        ("invalid_value", "runId must not be empty".to_owned())
    );
}
