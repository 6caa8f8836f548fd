"""The execution-thread analyzer (``weft._core``, seed 003) against the
pure-Python oracle (``tests/oracle/thread.py``), plus the seed's example and
the binding's behaviour (errors, the lazy codon sequence, snapshots, the GIL).

Random histories are built through the real reducer, so every state is one a
real execution could reach: chains of fresh, normal and rig-setup
continuations (in both encodings), random final statuses reached from random
phases, retries, loops extended and trimmed while running, skipped codons with
and without assistant messages, checkpoints of every type (some recorded on
the wrong status), crashed runs, and a running codon in the latest run. Each
history is analysed from every run, with checkpoints partly known, unknown,
and unvalidated, through both ways into the core (the live ``Core`` and a
state document), and compared field by field.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.builders import move
from tests.oracle import thread as oracle

from weft import core
from weft.errors import StateValidationError, WeftError

PLAN_POOL = ["a", "b", "c", "d", "e", "l#0", "m#0"]
FAILURE = core.FailureReason(kind="api-error", retriable=True, message="boom")


def loop_context(codon_id: str) -> core.LoopContext | None:
    """``x#n`` is iteration n of loop ``loop-x``."""
    if "#" not in codon_id:
        return None
    name, n = codon_id.split("#")
    return core.LoopContext(loop_id=f"loop-{name}", iteration=int(n), codon_index_in_loop=0)


def plan_entry(codon_id: str) -> core.PlanEntry:
    context = loop_context(codon_id)
    return core.PlanEntry(
        codon={"id": codon_id.split("#")[0], "continuationMode": "continue-previous"},
        codon_id=codon_id,
        loop_context=None if context is None else msgspec.to_builtins(context),
    )


class History:
    """A state grown through the real reducer; every transition must apply."""

    def __init__(self) -> None:
        self.core = core.Core()
        self.serial = 0

    def apply(self, event: core.Transition) -> None:
        outcome = self.core.apply(core.encode(event))
        assert outcome.ok, f"{type(event).__name__} refused: {outcome.message}"

    def sha(self, kind: str) -> str:
        self.serial += 1
        return f"{kind}-{self.serial:04d}"

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = orjson.loads(self.core.state_json())
        return state

    def start(self, run: str, conditions: core.Fresh | core.Continuation, plan: Any) -> None:
        self.apply(
            core.RunStarted(
                run_id=run,
                run_folder=f"/p/.weft/runs/{run}",
                git_branch=f"run-{run}",
                starting_conditions=conditions,
                server_pid=1,
                start_time=f"start-{run}",
                execution_plan=plan,
            )
        )

    def end(self, run: str, how: str) -> None:
        if how == "crashed":
            self.apply(core.RunCrashed(run_id=run, detected_at=f"end-{run}", last_codon_status="x"))
        elif how == "failed":
            self.apply(core.RunFailed(run_id=run, end_time=f"end-{run}"))
        else:
            self.apply(core.RunCompleted(run_id=run, end_time=f"end-{run}"))

    def codon(
        self,
        rng: random.Random,
        run: str,
        codon_id: str,
        outcome: str,
        rig: str | None,
    ) -> None:
        """One codon record, walked to ``outcome`` (or left active)."""
        self.apply(
            core.CodonStarted(
                run_id=run, codon_id=codon_id, start_time="t", loop_context=loop_context(codon_id)
            )
        )
        phases = ["preparing", "starting", "initializing", "running"]
        stop = "running" if outcome == "completed" else rng.choice(phases)
        status = "preparing"
        for to in phases[1:]:
            if status == stop:
                break
            meta: dict[str, Any] = {}
            if to == "starting" and rig is not None:
                meta["checkpoint_sha"] = rig
            elif to == "initializing":
                meta = {"claude_pid": 7, "claude_log_path": "l"}
                if rng.random() < 0.5:
                    meta["previous_session_id"] = f"prev-{rng.randrange(3)}"
            elif to == "running":
                session = f"s-{run}-{codon_id}-{self.serial}" if rng.random() < 0.9 else ""
                meta["claude_session_id"] = session
            self.apply(move(run, codon_id, status, to, **meta))
            status = to
        if status == "running" and rng.random() < 0.6:
            count = rng.choice([0, 1, 3])
            self.apply(
                core.AssistantMessageCountUpdated(run_id=run, codon_id=codon_id, new_count=count)
            )
        if outcome == "completed":
            self.apply(move(run, codon_id, "running", "completed", checkpoint_sha=self.sha("done")))
        elif outcome == "failed":
            sha = self.sha("err") if rng.random() < 0.7 else None
            end: dict[str, Any] = {"exit_code": 1, "failure_reason": FAILURE}
            end |= {"failed_during": status, "checkpoint_sha": sha}
            self.apply(move(run, codon_id, status, "failed", **end))
        elif outcome == "skipped":
            sha = self.sha("skip") if rng.random() < 0.7 else None
            self.apply(
                move(run, codon_id, status, "skipped", skipped_during=status, checkpoint_sha=sha)
            )
        if rng.random() < 0.15:
            # A checkpoint recorded afterwards, sometimes of a type the final
            # status does not vouch for.
            kind = rng.choice(["rig-setup", "completed", "error", "skipped"])
            self.apply(
                core.CheckpointCreated(
                    run_id=run,
                    codon_id=codon_id,
                    checkpoint_type=kind,
                    sha=self.sha("cp"),
                    branch="b",
                )
            )


def conditions(
    h: History, rng: random.Random, state: dict[str, Any]
) -> core.Fresh | core.Continuation:
    """Fresh, or a continuation of a random earlier run, of a random kind."""
    if not state["runs"] or rng.random() < 0.1:
        return core.Fresh()
    source = rng.choice(state["runs"])
    records = source["codons"]
    with_rig = [r for r in records if r.get("rigSetupCheckpoint")]
    kind = rng.choice(["normal"] * 4 + ["rig"] * 3 + ["named-rig", "restart"])
    after: str | None
    if kind == "normal" and records:
        rec = rng.choice(records)
        ends = [
            rec[k]
            for k in ("completionCheckpoint", "errorCheckpoint", "skipCheckpoint")
            if k in rec
        ]
        sha = rng.choice(ends) if ends and rng.random() < 0.85 else h.sha("elsewhere")
        after = rec["codonId"]
    elif kind in ("rig", "named-rig") and with_rig:
        rec = rng.choice(with_rig)
        sha = rec["rigSetupCheckpoint"]
        after = None if kind == "rig" else rec["codonId"]
    else:
        after, sha = None, h.sha("initial")
    source_ref = core.ContinuationSource(
        run_id=source["runId"], after_codon=after, checkpoint_sha=sha
    )
    return core.Continuation(source=source_ref, reason="rollback")


def grow_run(h: History, rng: random.Random, run: str, last: bool) -> None:
    """One run: its start, 0-5 codons (retries, plan changes), its end."""
    start = conditions(h, rng, h.state())
    plan = None
    if isinstance(start, core.Fresh):
        plan = [plan_entry(i) for i in rng.sample(PLAN_POOL, k=rng.randint(1, 5))]
    h.start(run, start, plan)
    plan_ids = [e["codonId"] for e in h.state()["executionPlan"]]
    cursor = rng.randrange(len(plan_ids) + 1)
    n = rng.randint(0, 5)
    active = False
    previous_rig: dict[str, str] = {}
    for k in range(n):
        if cursor < len(plan_ids) and rng.random() < 0.8:
            codon_id = plan_ids[cursor]
        else:
            codon_id = rng.choice([*PLAN_POOL, "unplanned"])
        weights = ["completed"] * 4 + ["failed"] * 2 + ["skipped"] * 2
        outcome = rng.choice(weights + (["active"] if k == n - 1 else []))
        rig = None
        if rng.random() < 0.5:
            # A retry in the same run may reuse the rig checkpoint.
            rig = previous_rig.get(codon_id) if rng.random() < 0.5 else None
            rig = rig or h.sha("rig")
            previous_rig[codon_id] = rig
        h.codon(rng, run, codon_id, outcome, rig)
        active = outcome == "active"
        if outcome != "failed" or rng.random() < 0.3:
            cursor += 1
        if not active and rng.random() < 0.15:
            plan_ids = change_plan(h, rng, run, plan_ids)
    if last and rng.random() < 0.5:
        return  # the latest run is still running
    h.end(run, "crashed" if active else rng.choice(["completed", "completed", "failed", "crashed"]))


def change_plan(h: History, rng: random.Random, run: str, plan_ids: list[str]) -> list[str]:
    """Extends the plan with a loop iteration, or trims an entry."""
    if not plan_ids:
        return plan_ids
    fresh_ids = [f"l#{n}" for n in range(1, 9) if f"l#{n}" not in plan_ids][:1]
    # (With every iteration id taken there is nothing to extend by: the core
    # refuses an empty extension, so the plan is trimmed instead.)
    if fresh_ids and rng.random() < 0.6:
        after = rng.choice(plan_ids)
        entries = [plan_entry(i) for i in fresh_ids]
        h.apply(core.PlanExtended(run_id=run, after_codon_id=after, entries=entries))
    else:
        h.apply(core.PlanTrimmed(run_id=run, codon_ids=[rng.choice(plan_ids)]))
    return [e["codonId"] for e in h.state()["executionPlan"]]


def build(seeds: list[int]) -> History:
    h = History()
    for i, seed in enumerate(seeds):
        grow_run(h, random.Random(seed), f"r{i + 1}", last=i == len(seeds) - 1)
    return h


def recorded_shas(state: dict[str, Any]) -> list[str]:
    keys = ("rigSetupCheckpoint", "completionCheckpoint", "errorCheckpoint", "skipCheckpoint")
    return [rec[k] for run in state["runs"] for rec in run["codons"] for k in keys if k in rec]


def as_document(t: oracle.ExecutionThread) -> dict[str, Any]:
    """The oracle's thread in the seed's JSON shape (what ``to_json`` writes)."""
    return {
        "codons": [
            {
                "codon": tc.codon,
                "runId": tc.run_id,
                "runStatus": tc.run_status,
                "runStartTime": tc.run_start_time,
                "runEndTime": tc.run_end_time,
                "gitBranch": tc.git_branch,
                "globalIndex": tc.global_index,
                "runIndex": tc.run_index,
                "codonIndexInRun": tc.codon_index_in_run,
                "validatedCheckpoints": [
                    {"type": c.type, "sha": c.sha} for c in tc.validated_checkpoints
                ],
                "continuationSessionId": tc.continuation_session_id,
            }
            for tc in t.codons
        ],
        "totalRuns": t.total_runs,
        "hasRunningCodon": t.has_running_codon,
        "nextCodonId": t.next_codon_id,
        "failed": t.failed,
    }


FIELDS = [
    "run_id",
    "run_status",
    "run_start_time",
    "run_end_time",
    "git_branch",
    "global_index",
    "run_index",
    "codon_index_in_run",
    "continuation_session_id",
]


def assert_same(
    rust: core.ExecutionThread,
    expected: oracle.ExecutionThread,
    state: dict[str, Any],
    *,
    with_json: bool = True,
) -> None:
    """Every field of the two threads is equal."""
    summary = (rust.total_runs, rust.has_running_codon, rust.next_codon_id, rust.failed)
    assert summary == (
        expected.total_runs,
        expected.has_running_codon,
        expected.next_codon_id,
        expected.failed,
    )
    assert len(rust) == len(rust.codons) == len(expected.codons)
    for got, want in zip(rust.codons, expected.codons, strict=True):
        assert got.codon == want.codon
        assert (got.codon_id, got.status) == (want.codon["codonId"], want.codon["status"])
        for field in FIELDS:
            assert getattr(got, field) == getattr(want, field), field
        got_checkpoints = [(c.type, c.sha) for c in got.validated_checkpoints]
        assert got_checkpoints == [(c.type, c.sha) for c in want.validated_checkpoints]
    plan_ids = [e["codonId"] for e in state["executionPlan"]]
    for codon_id in [*plan_ids, "unplanned"]:
        want_session = oracle.find_continuation_session_id(expected, codon_id, state)
        assert rust.find_continuation_session_id(codon_id) == want_session, codon_id
        assert core.find_continuation_session_id(rust, codon_id) == want_session
    if with_json:
        assert orjson.loads(rust.to_json()) == as_document(expected)


@settings(max_examples=300)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_the_core_agrees_with_the_oracle_on_random_histories(seeds: list[int], pick: int) -> None:
    h = build(seeds)
    state_json = h.core.state_json()
    state = orjson.loads(state_json)
    rng = random.Random(pick)
    known = frozenset(s for s in recorded_shas(state) if rng.random() < 0.7)
    targets: list[str | None] = [None, *(run["runId"] for run in state["runs"])]
    for target in targets:
        for checkpoints, validate in ((known, True), (None, True), (known, False)):
            expected = oracle.analyze_execution_thread(state, checkpoints, target, validate)
            live = h.core.execution_thread(checkpoints, target, validate)
            assert_same(live, expected, state, with_json=target is None)
            from_json = core.analyze_execution_thread(state_json, checkpoints, target, validate)
            assert_same(from_json, expected, state, with_json=False)


@settings(max_examples=100)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=6), st.integers(0, 2**32 - 1))
def test_hand_edited_chains_agree_with_the_oracle(seeds: list[int], pick: int) -> None:
    """Sources the reducer would refuse (a codon the source never ran, a
    source that continues a later run) are read the same way."""
    state = build(seeds).state()
    rng = random.Random(pick)
    continuations = [r for r in state["runs"] if r["startingConditions"]["type"] == "continuation"]
    for run in continuations:
        source = run["startingConditions"]["source"]
        edit = rng.choice(["ghost codon", "cycle", "none"])
        if edit == "ghost codon":
            source["afterCodon"] = "ghost"
        elif edit == "cycle":
            source["runId"] = rng.choice(state["runs"])["runId"]
    state_json = orjson.dumps(state)
    for target in [None, *(run["runId"] for run in state["runs"])]:
        expected = oracle.analyze_execution_thread(state, None, target, False)
        assert_same(core.analyze_execution_thread(state_json, None, target, False), expected, state)


# -- the seed's example ---------------------------------------------------------------

PLAN = ["codon-1", "codon-2", "codon-3"]


def ok(h: History, run: str, codon_id: str) -> None:
    h.codon(random.Random(0), run, codon_id, "completed", None)


def seed_example() -> History:
    """Run 1: codon-1 ok, codon-2 ok, codon-3 failed; roll back to codon-1."""
    h = History()
    h.start("run-001", core.Fresh(), [plan_entry(i) for i in PLAN])
    ok(h, "run-001", "codon-1")
    ok(h, "run-001", "codon-2")
    h.codon(random.Random(0), "run-001", "codon-3", "failed", None)
    h.end("run-001", "failed")
    codon_1 = h.state()["runs"][0]["codons"][0]
    source = core.ContinuationSource(
        run_id="run-001", after_codon="codon-1", checkpoint_sha=codon_1["completionCheckpoint"]
    )
    h.start("run-002", core.Continuation(source=source, reason="rollback"), None)
    return h


def test_the_seed_example_keeps_codon_1_of_run_1_and_the_rest_of_run_2() -> None:
    h = seed_example()
    before = h.core.execution_thread()
    assert [(tc.codon_id, tc.run_id) for tc in before.codons] == [("codon-1", "run-001")]
    assert before.next_codon_id == "codon-2"
    assert not before.failed

    ok(h, "run-002", "codon-2")
    ok(h, "run-002", "codon-3")
    h.end("run-002", "completed")
    thread = h.core.execution_thread()
    story = [(tc.codon_id, tc.run_id, tc.run_index, tc.global_index) for tc in thread.codons]
    assert story == [
        ("codon-3", "run-002", 0, 0),
        ("codon-2", "run-002", 0, 1),
        ("codon-1", "run-001", 1, 2),
    ]
    assert thread.total_runs == 2
    assert not thread.failed, "run 1's failed codon-3 is superseded"
    assert thread.next_codon_id is None
    superseded = {tc.codon_id for tc in thread.codons if tc.run_index > 0}
    assert superseded == {"codon-1"}
    as_of_run_1 = h.core.execution_thread(target_run_id="run-001")
    assert as_of_run_1.failed
    assert [tc.codon_id for tc in as_of_run_1.codons] == ["codon-3", "codon-2", "codon-1"]


def test_the_newest_success_and_its_confirmed_checkpoint() -> None:
    h = seed_example()
    state = h.state()
    codon_1 = state["runs"][-1]["codons"][0]
    thread = h.core.execution_thread(checkpoints=[codon_1["completionCheckpoint"]])
    last = next(tc for tc in thread.codons if tc.status == "completed")
    assert len(last.validated_checkpoints) == 1
    assert (last.validated_checkpoints[0].type, last.validated_checkpoints[0].sha) == (
        "completed",
        codon_1["completionCheckpoint"],
    )
    # The same sha missing from git: nothing to roll back to.
    assert h.core.execution_thread(checkpoints=set()).codons[0].validated_checkpoints == ()
    unchecked = h.core.execution_thread(validate_checkpoints=False).codons[0]
    assert [c.sha for c in unchecked.validated_checkpoints] == [codon_1["completionCheckpoint"]]


# -- the binding --------------------------------------------------------------------------


def test_the_codons_are_a_lazy_read_only_sequence() -> None:
    h = seed_example()
    ok(h, "run-002", "codon-2")
    codons = h.core.execution_thread().codons
    assert len(codons) == 2
    assert codons[-1] == codons[1] != codons[0]
    assert len({codons[0], codons[0]}) == 1
    assert [tc.codon_id for tc in codons[::-1]] == ["codon-1", "codon-2"]
    assert [tc.codon_id for tc in reversed(codons)] == ["codon-1", "codon-2"]
    assert [tc.codon_id for tc in codons] == ["codon-2", "codon-1"]
    with pytest.raises(IndexError, match="out of range"):
        codons[2]
    with pytest.raises(IndexError):
        codons[-3]
    other = h.core.execution_thread().codons
    assert other[0] != codons[0], "views of different threads differ"


def test_a_live_thread_is_a_snapshot() -> None:
    h = seed_example()
    h.codon(random.Random(1), "run-002", "codon-2", "active", None)
    thread = h.core.execution_thread()
    running = thread.codons[0]
    assert thread.has_running_codon
    status = running.status
    h.apply(
        core.CodonTransitioned(
            run_id="run-002",
            codon_id="codon-2",
            from_status=status,
            to_status="failed",
            timestamp="t",
            metadata=core.TransitionMetadata(
                exit_code=1, failure_reason=FAILURE, failed_during=status
            ),
        )
    )
    h.end("run-002", "failed")
    assert running.status == status
    assert running.codon["status"] == status
    assert running.run_status == "running"
    assert h.core.execution_thread().failed


def test_bad_input_raises_weft_errors() -> None:
    with pytest.raises(StateValidationError, match="not a valid state document"):
        core.analyze_execution_thread("{not json")
    with pytest.raises(StateValidationError, match="missing field `runs`"):
        core.analyze_execution_thread(b"{}")
    h = seed_example()
    with pytest.raises(WeftError, match=r"Unknown run 'nope'.*run-002, run-001"):
        h.core.execution_thread(target_run_id="nope")
    with pytest.raises(WeftError, match="Unknown run 'nope'"):
        core.analyze_execution_thread(h.core.state_json(), target_run_id="nope")
    with pytest.raises(TypeError, match="not a single string"):
        h.core.execution_thread(checkpoints="abc123")


def test_an_empty_state_has_an_empty_thread() -> None:
    thread = core.Core().execution_thread()
    assert (len(thread), thread.total_runs, thread.next_codon_id, thread.failed) == (
        0,
        0,
        None,
        False,
    )
    assert orjson.loads(thread.to_json())["codons"] == []


def test_the_analysis_of_a_document_lets_other_threads_run() -> None:
    """While a large document is parsed and analysed, the interpreter is free:
    another Python thread keeps running in the middle of the call (with the
    GIL held it could only run just before and just after)."""
    h = seed_example()
    ok(h, "run-002", "codon-2")
    h.end("run-002", "completed")
    state = h.state()
    template = state["runs"][0]
    runs = []
    for i in range(RUNS_FOR_A_LONG_CALL):
        source = {"runId": f"x{i - 1}", "afterCodon": "codon-2", "checkpointSha": "s"}
        start = {"type": "continuation", "source": source} if i else {"type": "fresh"}
        runs.append(
            dict(template, runId=f"x{i}", codons=template["codons"] * 10, startingConditions=start)
        )
    document = orjson.dumps(dict(state, runs=runs[::-1], currentRunId=None))

    stamps: list[int] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter_ns())
            time.sleep(0.0005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter_ns()
        thread = core.analyze_execution_thread(document)
        end = time.perf_counter_ns()
    finally:
        stop.set()
        ticker.join()
    assert len(thread) == RUNS_FOR_A_LONG_CALL * len(template["codons"]) * 10
    quarter = (end - start) // 4
    middle = [t for t in stamps if start + quarter < t < end - quarter]
    assert middle, f"no other thread ran during the middle of a {(end - start) / 1e6:.0f} ms call"


# Enough records (100k) that the call lasts well over the interpreter's 5 ms
# switch interval even on a fast machine.
RUNS_FOR_A_LONG_CALL = 10_000
