"""The scheduler against a real store: dependency order, blocking, retries,
backoff, abandonment, breakers and the recovery commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.batch.support import Driver, command_step

from weft.batch.scheduler import Outcome
from weft.batch.store import BatchStore


def one_ws(*steps: dict[str, object], **ws: object) -> dict[str, object]:
    return {"workstreams": [{"id": "w", "steps": list(steps), **ws}]}


def test_dependencies_run_in_order_and_the_workstream_succeeds(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a"),
            command_step("b", "a"),
            command_step("c", "a"),
            command_step("z", "b", "c"),
        ),
    )
    assert d.tick() == ["w/a"]
    assert d.tick() == [], "b and c wait for a"
    d.finish("w/a", 0)
    assert sorted(d.tick()) == ["w/b", "w/c"]
    d.finish("w/b", 0)
    assert d.tick() == []
    d.finish("w/c", 0)
    assert d.tick() == ["w/z"]
    d.finish("w/z", 0)
    d.tick()
    assert d.states()["w"] == "S_SUCCESS"
    assert d.scheduler.done


def test_a_failure_blocks_exactly_its_dependents_then_abandons(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a"), command_step("b", "a"), command_step("x"), command_step("y", "x")
        ),
    )
    d.run({"w/a": [1]})
    s = d.states()
    assert (s["w/a"], s["w/b"], s["w/x"], s["w/y"]) == (
        "S_FAILED",
        "S_PENDING",
        "S_SUCCESS",
        "S_SUCCESS",
    )
    assert s["w"] == "S_ABANDONED"
    trail = [
        (t["step_id"], t["from"], t["to"]) for t in d.store.transitions() if t["step_id"] is None
    ]
    assert trail == [
        (None, "S_PENDING", "S_RUNNING"),
        (None, "S_RUNNING", "S_FAILED"),
        (None, "S_FAILED", "S_ABANDONED"),
    ]


def test_step_retries_wait_the_exponential_backoff(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step(
                "a", max_retries=3, retry_backoff={"base_delay_ms": 100, "max_delay_ms": 1000}
            )
        ),
    )
    start = d.now
    d.run({"w/a": [1, 1, 1, 0]})
    assert d.states()["w/a"] == "S_SUCCESS"
    assert d.launched == ["w/a"] * 4
    waits = [
        t["metadata"]["ready_at_ms"] - start
        for t in d.store.transitions()
        if t["to"] == "S_RETRYING" and t["step_id"] == "a"
    ]
    # Each retry is made at the ready time of the one before, so the waits add up.
    assert waits == [100, 100 + 200, 100 + 200 + 400]


def test_retries_exhausted_then_workstream_retry_starts_failed_steps_over(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a", max_retries=1),
            command_step("b", "a"),
            max_retries=1,
            retry_backoff={"base_delay_ms": 50, "max_delay_ms": 50},
        ),
    )
    d.run({"w/a": [1, 1, 0]})
    s = d.states()
    assert (s["w"], s["w/a"], s["w/b"]) == ("S_SUCCESS", "S_SUCCESS", "S_SUCCESS")
    ws_trail = [t["to"] for t in d.store.transitions() if t["step_id"] is None]
    assert ws_trail == ["S_RUNNING", "S_FAILED", "S_RETRYING", "S_RUNNING", "S_SUCCESS"]
    resets = [t for t in d.store.transitions() if t["step_id"] == "a" and t["to"] == "S_PENDING"]
    assert len(resets) == 1
    assert resets[0]["metadata"]["reason"] == "workstream retry attempt 1"


def test_abandoning_names_workstream_and_step_retries_with_their_counts(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a", max_retries=2, retry_backoff={"base_delay_ms": 1}),
            command_step("x"),
            max_retries=1,
            retry_backoff={"base_delay_ms": 1},
        ),
    )
    d.run({"w/a": [1] * 6})
    assert d.states()["w"] == "S_ABANDONED"
    last = d.store.transitions("w")[-1]
    assert last["to"] == "S_ABANDONED"
    # 1 workstream retry used of 1; a ran 3 times per attempt (2 step retries), 6 in all.
    assert last["metadata"]["reason"] == (
        "workstream retries spent (1 of 1); step a failed after 2 of 2 step retries (6 launches)"
    )
    assert (last["metadata"]["workstream_retries"], last["metadata"]["max_workstream_retries"]) == (
        1,
        1,
    )


def test_breaker_opens_across_steps_and_closes_after_the_cooldown(tmp_path: Path) -> None:
    doc = {
        "breakers": {"svc": {"failure_threshold": 2, "cooldown_seconds": 10}},
        "workstreams": [
            {"id": f"w{i}", "steps": [command_step("s", tool="svc")]} for i in range(4)
        ],
    }
    d = Driver.open(tmp_path, doc, workers=1)
    assert d.tick() == ["w0/s"]
    d.finish("w0/s", 1)
    assert d.tick() == ["w1/s"]
    d.finish("w1/s", 1)
    tick = d.scheduler.tick(d.now, 1)
    d.commit(tick.changes)
    assert tick.launches == []
    assert tick.waiting["w2/s"] == "svc circuit is open, retry in 10 seconds"
    assert tick.wake_at_ms == d.now + 10_000
    d.now += 10_000
    assert d.tick() == ["w2/s"], "the test request"
    assert d.scheduler.breakers["svc"].state == "HALF_OPEN"
    d.finish("w2/s", 0)
    assert d.scheduler.breakers["svc"].state == "CLOSED"
    assert d.tick() == ["w3/s"]
    moves = [(t["from"], t["to"]) for t in d.store.breaker_transitions()]
    assert moves == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")]


def test_reset_breaker_is_recovery_3(tmp_path: Path) -> None:
    doc = {
        "breakers": {"svc": {"failure_threshold": 1, "cooldown_seconds": 600}},
        "workstreams": [
            {"id": f"w{i}", "steps": [command_step("s", tool="svc")]} for i in range(2)
        ],
    }
    d = Driver.open(tmp_path, doc, workers=1)
    d.tick()
    d.finish("w0/s", 1)
    assert d.tick() == []
    changes, result = d.scheduler.reset_breaker("svc", d.now)
    d.commit(changes)
    assert result == "breaker svc: OPEN -> CLOSED"
    assert d.tick() == ["w1/s"]
    assert d.store.breaker_transitions()[-1]["metadata"]["recovery"] == 3


def test_abandon_is_honoured_at_the_first_legal_move(tmp_path: Path) -> None:
    doc = {
        "workstreams": [
            {"id": "pending", "steps": [command_step("s")]},
            {"id": "running", "steps": [command_step("s"), command_step("t", "s")]},
        ]
    }
    d = Driver.open(tmp_path, doc, workers=1)
    d.commit(d.scheduler.request_abandon("pending")[0])
    launched = d.tick()
    assert launched == ["running/s"]
    changes, result = d.scheduler.request_abandon("running")
    d.commit(changes)
    assert "abandon requested (in S_RUNNING)" in result
    tick = d.scheduler.tick(d.now, 0)
    d.commit(tick.changes)
    assert tick.cancels == ["running/s"]
    d.finish("running/s", 143)
    s = d.states()
    assert (s["pending"], s["running"], s["running/s"], s["running/t"]) == (
        "S_ABANDONED",
        "S_ABANDONED",
        "S_FAILED",
        "S_PENDING",
    )
    pending_trail = [(t["from"], t["to"]) for t in d.store.transitions("pending")]
    assert pending_trail == [("S_PENDING", "S_RUNNING"), ("S_RUNNING", "S_ABANDONED")]
    # The request moved nothing: audited as a note, not as a self-move.
    requests = [n for n in d.store.notes() if n["name"] == "pending"]
    assert [(n["subject"], n["state"]) for n in requests] == [("workstream", "S_PENDING")]
    assert requests[0]["metadata"]["reason"] == "abandon requested by the user"
    assert (
        d.scheduler.request_abandon("pending")[1]
        == "workstream pending is already S_ABANDONED (terminal)"
    )


def test_retry_step_is_recovery_2(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, one_ws(command_step("a"), command_step("slow")), workers=2)
    assert sorted(d.tick()) == ["w/a", "w/slow"]
    d.finish("w/a", 1)
    assert d.tick() == []
    changes, result = d.scheduler.retry_step("w/a")
    d.commit(changes)
    assert result == "step w/a: reset to S_PENDING (retry_count 0)"
    assert d.tick() == ["w/a"]
    d.finish("w/a", 0)
    d.finish("w/slow", 0)
    d.tick()
    assert d.states()["w"] == "S_SUCCESS"
    assert (
        d.scheduler.retry_step("w/a")[1]
        == "step w/a is S_SUCCESS; only a step in S_FAILED is retried"
    )
    assert "no step" in d.scheduler.retry_step("w/nope")[1]


def test_the_store_refuses_a_change_made_on_a_stale_view(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, one_ws(command_step("a")))
    d.tick()
    stale = d.scheduler.finished("w/a", Outcome(exit_code=0), d.now)
    d.commit(stale)
    from weft.errors import StoreError

    with pytest.raises(StoreError, match="is in S_SUCCESS, not S_RUNNING"):
        d.store.commit(stale, d.now)


def test_a_restored_scheduler_continues_where_the_store_is(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, one_ws(command_step("a", max_retries=2), command_step("b", "a")))
    d.tick()
    d.finish("w/a", 1)
    again = Driver(d.store)
    step = again.scheduler.step("w/a")
    assert (step.machine.state, step.machine.retry_ready_at_ms) == (
        "S_RETRYING",
        d.scheduler.step("w/a").machine.retry_ready_at_ms,
    )
    again.now = d.now
    again.run()
    assert again.states()["w"] == "S_SUCCESS"


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[list[int]], set[int]]:
    n = draw(st.integers(1, 9))
    deps = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    failing = draw(st.sets(st.integers(0, n - 1), max_size=n))
    return deps, failing


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag=dags(), workers=st.integers(1, 3))
def test_random_dags_run_each_step_once_after_its_deps_and_failures_block_dependents(
    tmp_path_factory: pytest.TempPathFactory, dag: tuple[list[list[int]], set[int]], workers: int
) -> None:
    deps, failing = dag
    folder = tmp_path_factory.mktemp("dag")
    steps = [command_step(f"s{i}", *(f"s{j}" for j in ds)) for i, ds in enumerate(deps)]
    d = Driver.open(folder, one_ws(*steps), workers=workers)
    d.run({f"w/s{i}": [1] for i in failing})

    # Which steps may run: those whose every ancestor ran and succeeded.
    runnable: set[int] = set()
    for i, ds in enumerate(deps):
        if all(j in runnable and j not in failing for j in ds):
            runnable.add(i)
    assert sorted(d.launched) == sorted(f"w/s{i}" for i in runnable), "each runnable step once"
    for i in runnable:
        assert {f"w/s{j}" for j in deps[i]} <= d.succeeded_at_launch[f"w/s{i}"]
    states = d.states()
    for i in range(len(deps)):
        expected = "S_PENDING" if i not in runnable else "S_FAILED" if i in failing else "S_SUCCESS"
        assert states[f"w/s{i}"] == expected
    assert states["w"] == ("S_SUCCESS" if not (failing & runnable) else "S_ABANDONED")
    _audit_replays_to_the_rows(d.store)
    d.store.close()


def _audit_replays_to_the_rows(store: BatchStore) -> None:
    """The audit table is complete: following it from S_PENDING ends on every
    row's stored state, each move starting where the previous one ended."""
    last: dict[tuple[str, str | None], str] = {}
    for t in store.transitions():
        key = (t["ws_id"], t["step_id"])
        assert last.get(key, "S_PENDING") == t["from"], t
        last[key] = t["to"]
    stored = store.load()
    for w in stored.workstreams:
        assert last.get((w.ws_id, None), "S_PENDING") == w.state
    for s in stored.steps:
        assert last.get((s.ws_id, s.step_id), "S_PENDING") == s.state


def test_the_batch_budget_stops_new_steps_and_abandons_what_is_left(tmp_path: Path) -> None:
    doc = {
        "budget": {"max_dollars": 1.0},
        "workstreams": [
            {"id": f"w{i}", "steps": [command_step("a"), command_step("b", "a")]} for i in range(3)
        ],
    }
    d = Driver.open(tmp_path, doc, workers=1)
    from weft.batch.coordinator import Coordinator
    from weft.batch.engine import LocalEngine

    d.scheduler = Coordinator(d.store, LocalEngine(), workers=1).scheduler
    assert d.scheduler.max_dollars == 1.0
    assert d.tick() == ["w0/a"]
    d.running.remove("w0/a")
    d.commit(d.scheduler.finished("w0/a", Outcome(exit_code=0, cost_usd=0.6), d.now))
    assert d.tick() == ["w0/b"]
    d.running.remove("w0/b")
    d.commit(d.scheduler.finished("w0/b", Outcome(exit_code=0, cost_usd=0.5), d.now))
    assert d.tick() == [], "over budget: nothing starts"
    d.tick()
    s = d.states()
    assert (s["w0"], s["w1"], s["w2"]) == ("S_SUCCESS", "S_ABANDONED", "S_ABANDONED")
    reasons = [n["metadata"]["reason"] for n in d.store.notes() if n["name"] == "w1"]
    assert reasons == ["batch budget spent ($1.1000 of $1.0000)"]


def test_a_step_past_its_timeout_is_stopped_once_and_fails_then_retries(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a", timeout_seconds=5, max_retries=1),
            command_step("b", "a"),
        ),
    )
    started = d.now
    assert d.tick() == ["w/a"]
    tick = d.scheduler.tick(started + 4999, 1)
    assert tick.cancels == []
    assert tick.wake_at_ms == started + 5000, "woken at the deadline"
    d.now = started + 5000
    tick = d.scheduler.tick(d.now, 1)
    assert tick.cancels == ["w/a"]
    d.commit(tick.changes)
    assert d.scheduler.tick(d.now + 100, 1).cancels == [], "stopped once"
    # The launch ends with exit code 0 all the same (it trapped SIGTERM): still a failure.
    d.finish("w/a", 0)
    assert d.states()["w/a"] == "S_RETRYING"
    row = next(s for s in d.store.load().steps if s.key == "w/a")
    assert row.error == "timed out after 5s (stopped)"
    trail = [t for t in d.store.transitions() if t["step_id"] == "a"]
    reasons = [t["metadata"]["reason"] for t in trail]
    stops = [n["metadata"]["reason"] for n in d.store.notes() if n["name"] == "w/a"]
    assert stops == ["timed out after 5s: stopping"], "a note: stopping it moved nothing"
    assert any(t["to"] == "S_FAILED" and t["metadata"].get("timed_out") for t in trail)
    assert "timed out after 5s" in reasons
    # The retry runs in time: the workstream goes on.
    d.run()
    assert d.states() == {"w": "S_SUCCESS", "w/a": "S_SUCCESS", "w/b": "S_SUCCESS"}


def test_skip_lets_a_failed_steps_dependents_run_and_is_audited(tmp_path: Path) -> None:
    d = Driver.open(
        tmp_path,
        one_ws(
            command_step("a"),
            command_step("b", "a"),
            max_retries=1,
            retry_backoff={"base_delay_ms": 60000, "max_delay_ms": 60000},
        ),
    )
    assert d.tick() == ["w/a"]
    d.finish("w/a", 1)
    d.tick()
    assert d.states()["w"] == "S_RETRYING"
    changes, result = d.scheduler.skip_step("w/a")
    d.commit(changes)
    assert result == "step w/a: skipped (S_FAILED -> S_SUCCESS; its dependents may run)"
    assert changes[0].metadata == {"reason": "skipped by the user", "skipped": True, "recovery": 2}
    assert d.scheduler.skip_step("w/a") == ([], "step w/a is S_SUCCESS; done")
    assert d.scheduler.skip_step("w/x") == ([], "no step 'w/x' in this batch")
    d.run()  # the workstream's retry: a stays skipped, b runs
    assert d.states() == {"w": "S_SUCCESS", "w/a": "S_SUCCESS", "w/b": "S_SUCCESS"}
    assert d.launched == ["w/a", "w/b"]
