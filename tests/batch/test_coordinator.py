"""The coordinator's audit trail tells the truth about concurrency: at no point
does ``state_transitions`` show more steps ``S_RUNNING`` than workers, and a
step's end is stamped when the engine saw it end, not when it was recorded."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.batch.support import assert_audit_within_workers, command_step, write_batch

from weft.batch import load_batch
from weft.batch.coordinator import Coordinator, record_plan, wall_clock_ms
from weft.batch.engine import LaunchSpec, LocalEngine
from weft.batch.report import slot_gaps_ms
from weft.batch.scheduler import Outcome
from weft.batch.store import BatchStore

FAST_RETRY = {"base_delay_ms": 1, "max_delay_ms": 2}


@dataclass
class RacyEngine:
    """An engine whose launches end while the coordinator is busy launching
    others: each :meth:`start` first ends some of the launches in flight (their
    slots are freed and their outcomes queued, as a real engine does when a
    step exits during an ``await``); the rest end a moment later. Exit codes
    come from ``codes`` (default 0); each outcome is stamped with the time the
    launch ended."""

    rng: random.Random
    codes: dict[str, list[int]] = field(default_factory=dict)
    completions: asyncio.Queue[tuple[str, Outcome]] = field(default_factory=asyncio.Queue)
    in_flight: list[str] = field(default_factory=list)
    ended_at: dict[str, list[int]] = field(default_factory=dict)

    @property
    def active(self) -> int:
        return len(self.in_flight)

    async def start(self, spec: LaunchSpec) -> tuple[int, str | None]:
        for key in list(self.in_flight):
            if self.rng.random() < 0.6:
                self._end(key)
        self.in_flight.append(spec.key)
        loop = asyncio.get_running_loop()
        loop.call_later(self.rng.random() * 0.01, self._end, spec.key)
        await asyncio.sleep(0)
        return 1, None

    def _end(self, key: str) -> None:
        if key not in self.in_flight:
            return
        self.in_flight.remove(key)
        queue = self.codes.get(key, [])
        ended = wall_clock_ms()
        self.ended_at.setdefault(key, []).append(ended)
        outcome = Outcome(exit_code=queue.pop(0) if queue else 0, ended_at_ms=ended)
        self.completions.put_nowait((key, outcome))

    def adopt(self, spec: LaunchSpec, pid: int | None, pid_start: str | None) -> bool:
        return False

    def cancel(self, key: str) -> None:
        self._end(key)

    async def detach(self) -> None:
        self.in_flight.clear()

    async def close(self) -> None:
        pass


def _open(folder: Path, doc: dict[str, object]) -> BatchStore:
    plan = load_batch(write_batch(folder, doc))
    store = BatchStore.open(folder / "state", writer=True)
    record_plan(store, plan, "sha", wall_clock_ms())
    return store


def _run(coordinator: Coordinator) -> None:
    asyncio.run(asyncio.wait_for(coordinator.run(), 60))


def test_a_slot_freed_before_its_end_is_recorded_starts_nothing(tmp_path: Path) -> None:
    """The audit's bug: with 2 workers it showed 4 steps running at once, the
    engine's freed slots reused before the coordinator recorded the ends."""
    doc = {"workstreams": [{"id": f"w{i}", "steps": [command_step("a")]} for i in range(8)]}
    store = _open(tmp_path, doc)

    class Half(random.Random):
        def random(self) -> float:
            return 0.5  # every launch in flight ends while the next one starts

    engine = RacyEngine(Half())
    _run(Coordinator(store, engine, workers=2))
    assert_audit_within_workers(store.transitions(), 2)
    assert {s.state for s in store.load().steps} == {"S_SUCCESS"}


def test_an_end_is_stamped_when_the_engine_saw_it(tmp_path: Path) -> None:
    store = _open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    engine = RacyEngine(random.Random(1))
    late = [0]

    def clock() -> int:
        # The coordinator records everything 5 s after it happened.
        return wall_clock_ms() + late[0]

    coordinator = Coordinator(store, engine, workers=1, clock=clock)

    async def main() -> None:
        task = asyncio.ensure_future(coordinator.run())
        while not engine.ended_at:
            await asyncio.sleep(0.001)
        late[0] = 5000
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    ended = next(t for t in store.transitions() if t["to"] == "S_SUCCESS" and t["step_id"])
    from weft.clock import iso_from_ms

    assert ended["at"] == iso_from_ms(engine.ended_at["w/a"][0])
    assert_audit_within_workers(store.transitions(), 1)


def test_a_launch_that_ends_at_once_never_ends_before_it_started(tmp_path: Path) -> None:
    """Seen in CI on Ray: a step failing at once ended, in the audit, before its
    S_RUNNING, which was stamped at its commit, a later clock reading than the
    launch decision its end is kept after."""
    store = _open(
        tmp_path, {"workstreams": [{"id": f"w{i}", "steps": [command_step("a")]} for i in range(3)]}
    )
    reading = [wall_clock_ms()]

    def clock() -> int:
        reading[0] += 7  # every reading later than the one before
        return reading[0]

    class Instant(RacyEngine):
        def _end(self, key: str) -> None:
            if key in self.in_flight:
                self.in_flight.remove(key)
                # Its exit file's time: before the coordinator got round to it.
                outcome = Outcome(exit_code=3, ended_at_ms=reading[0] - 100)
                self.completions.put_nowait((key, outcome))

    _run(Coordinator(store, Instant(random.Random(2)), workers=2, clock=clock))
    assert_audit_within_workers(store.transitions(), 2)


@st.composite
def batches(draw: st.DrawFn) -> tuple[dict[str, object], dict[str, list[int]]]:
    """Workstreams of small random DAGs, some steps failing a few times, with
    step and workstream retries and a breaker that opens."""
    workstreams = []
    codes: dict[str, list[int]] = {}
    for w in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 5))
        steps = []
        for i in range(n):
            deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=2))) if i else []
            steps.append(
                command_step(
                    f"s{i}",
                    *(f"s{j}" for j in deps),
                    max_retries=draw(st.integers(0, 2)),
                    retry_backoff=FAST_RETRY,
                )
            )
            codes[f"w{w}/s{i}"] = draw(st.lists(st.sampled_from([0, 1]), max_size=3))
        workstreams.append(
            {"id": f"w{w}", "steps": steps, "max_retries": draw(st.integers(0, 1)),
             "retry_backoff": FAST_RETRY}
        )  # fmt: skip
    # Breakers open and close within milliseconds, so their waits stay short.
    breakers = {"*": {"failure_threshold": draw(st.integers(1, 3)), "cooldown_seconds": 0.005}}
    return {"workstreams": workstreams, "breakers": breakers}, codes


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=batches(), workers=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_replaying_the_audit_never_shows_more_steps_running_than_workers(
    tmp_path_factory: pytest.TempPathFactory,
    batch: tuple[dict[str, object], dict[str, list[int]]],
    workers: int,
    seed: int,
) -> None:
    doc, codes = batch
    store = _open(tmp_path_factory.mktemp("racy"), doc)
    engine = RacyEngine(random.Random(seed), {k: list(v) for k, v in codes.items()})
    _run(Coordinator(store, engine, workers=workers))
    transitions = store.transitions()
    assert_audit_within_workers(transitions, workers)
    from weft.clock import iso_from_ms

    ends = [
        t for t in transitions if t["step_id"] and t["from"] == "S_RUNNING" and t["to"] != t["from"]
    ]
    for t in ends:
        # Stamped with one of the times the engine saw this step end.
        assert t["at"] in {
            iso_from_ms(ms) for ms in engine.ended_at[f"{t['ws_id']}/{t['step_id']}"]
        }
    store.close()


def test_real_processes_on_the_local_engine_stay_within_the_workers(tmp_path: Path) -> None:
    """The same invariant with real subprocesses, whose exits race the launches."""
    steps = [{"id": f"s{i}", "command": ["sh", "-c", f"sleep 0.0{i % 4}"]} for i in range(10)]
    doc = {"workstreams": [{"id": "w", "steps": steps}, {"id": "v", "steps": steps[:4]}]}
    store = _open(tmp_path, doc)
    _run(Coordinator(store, LocalEngine(), workers=2))
    transitions = store.transitions()
    assert_audit_within_workers(transitions, 2)
    rows = {s.key: s for s in store.load().steps}
    assert {s.state for s in rows.values()} == {"S_SUCCESS"}
    store.close()


def _row(i: int, at_ms: int, step: str, frm: str, to: str) -> dict[str, object]:
    from weft.clock import iso_from_ms

    return {"id": i, "ws_id": "w", "step_id": step, "from": frm, "to": to, "at": iso_from_ms(at_ms)}


def test_slot_gaps_are_the_time_from_an_end_to_the_next_launch_in_that_slot() -> None:
    t = 1_800_000_000_000
    rows = [
        _row(1, t, "a", "S_PENDING", "S_RUNNING"),
        _row(2, t + 1, "b", "S_PENDING", "S_RUNNING"),  # 2 workers: both initial slots
        _row(3, t + 100, "a", "S_RUNNING", "S_SUCCESS"),
        _row(4, t + 90, "b", "S_RUNNING", "S_FAILED"),  # ended first, recorded second
        _row(5, t + 90, "b", "S_FAILED", "S_RETRYING"),
        _row(6, t + 104, "c", "S_PENDING", "S_RUNNING"),  # takes b's slot (freed at +90)
        _row(7, t + 107, "b", "S_RETRYING", "S_RUNNING"),  # takes a's (freed at +100)
        _row(8, t + 107, "b", "S_RUNNING", "S_RUNNING"),  # an audit row: no move
    ]
    assert slot_gaps_ms(rows, workers=2) == [14, 7]
    assert slot_gaps_ms(rows, workers=3) == [17], "c took the third slot, b the first freed"
