"""Helpers for the batch tests: batch files from dicts, a hand-driven coordinator."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weft.batch import load_batch
from weft.batch.coordinator import record_plan
from weft.batch.scheduler import Outcome, Scheduler
from weft.batch.store import BatchStore, Change


def write_batch(folder: Path, doc: dict[str, Any], name: str = "batch.json") -> Path:
    """Writes ``doc`` as a JSON batch file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def command_step(step_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    """A command step (never actually run by :class:`Driver`)."""
    return {"id": step_id, "command": ["true"], "depends_on": list(deps), **extra}


@dataclass
class Driver:
    """The scheduler driven by hand against a real store: launches are recorded,
    outcomes are fed back, time is a number the test moves."""

    store: BatchStore
    workers: int = 2
    now: int = 1_000_000
    scheduler: Scheduler = field(init=False)
    launched: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    succeeded: set[str] = field(default_factory=set)
    succeeded_at_launch: dict[str, set[str]] = field(default_factory=dict)
    """For each launch, the steps that had succeeded when it was launched."""

    def __post_init__(self) -> None:
        self.scheduler = Scheduler(self.store.load())

    @classmethod
    def open(cls, folder: Path, doc: dict[str, Any], workers: int = 2) -> Driver:
        """A new batch from ``doc`` with its store in ``folder/state``."""
        plan = load_batch(write_batch(folder, doc))
        store = BatchStore.open(folder / "state", writer=True)
        record_plan(store, plan, "sha", 0)
        return cls(store, workers)

    def commit(self, changes: list[Change]) -> None:
        self.store.commit(changes, self.now)

    def tick(self) -> list[str]:
        """One scheduler turn; the steps it launched."""
        tick = self.scheduler.tick(self.now, self.workers - len(self.running))
        self.commit(tick.changes)
        self._launched(tick.launches)
        return tick.launches

    def _launched(self, keys: list[str]) -> None:
        for key in keys:
            self.succeeded_at_launch[key] = set(self.succeeded)
        self.launched += keys
        self.running += keys

    def finish(self, key: str, exit_code: int | None) -> None:
        self.running.remove(key)
        self.commit(self.scheduler.finished(key, Outcome(exit_code=exit_code), self.now))
        if self.scheduler.step(key).machine.state == "S_SUCCESS":
            self.succeeded.add(key)

    def run(self, exit_codes: dict[str, list[int]] | None = None, limit: int = 10_000) -> None:
        """Runs to the end: each launch ends at once with the next code listed for
        its key (default 0); time jumps to the next wake-up when nothing runs."""
        codes = {k: list(v) for k, v in (exit_codes or {}).items()}
        for _ in range(limit):
            tick = self.scheduler.tick(self.now, self.workers - len(self.running))
            self.commit(tick.changes)
            self._launched(tick.launches)
            assert len(self.running) <= self.workers
            if self.running:
                key = self.running[0]
                queue = codes.get(key, [])
                self.finish(key, queue.pop(0) if queue else 0)
                continue
            if self.scheduler.done:
                return
            if tick.changes:
                continue
            assert tick.wake_at_ms is not None, "stuck: nothing runs and nothing is due"
            self.now = max(self.now, tick.wake_at_ms)
        raise AssertionError("the batch did not finish")

    def states(self) -> dict[str, str]:
        """Every workstream's and step's stored state."""
        stored = self.store.load()
        out = {w.ws_id: w.state for w in stored.workstreams}
        out.update({s.key: s.state for s in stored.steps})
        return out


EXAMPLE_FINAL_STATES: dict[str, tuple[str, list[tuple[str, str, int]]]] = {
    **{
        f"sweep-{name}": (
            "S_SUCCESS",
            [("check", "S_SUCCESS", 1), ("analyse", "S_SUCCESS", 1), ("report", "S_SUCCESS", 1)],
        )
        for name in ("alpha", "beta", "gamma")
    },
    "flaky": ("S_ABANDONED", [("fetch", "S_FAILED", 3), ("publish", "S_PENDING", 0)]),
}
"""How ``examples/batch/sweep.toml`` ends, on any engine: (state, [(step, state, launches)])."""


def final_states(summary: dict[str, Any]) -> dict[str, tuple[str, list[tuple[str, str, int]]]]:
    """The states of a ``weft batch`` JSON summary, in :data:`EXAMPLE_FINAL_STATES`'s shape."""
    return {
        ws["id"]: (ws["state"], [(s["id"], s["state"], s["launches"]) for s in ws["steps"]])
        for ws in summary["workstreams"]
    }


def running_counts(transitions: list[dict[str, Any]]) -> list[int]:
    """Replays the audit table (``BatchStore.transitions()``, in id order): how
    many steps are ``S_RUNNING`` after each row."""
    running: set[tuple[str, str]] = set()
    counts = []
    for t in transitions:
        if t["step_id"] is not None:
            key = (t["ws_id"], t["step_id"])
            if t["to"] == "S_RUNNING":
                running.add(key)
            else:
                running.discard(key)
        counts.append(len(running))
    return counts


def assert_audit_within_workers(transitions: list[dict[str, Any]], workers: int) -> None:
    """At no point of the audit trail, in the order it was written or in the
    order of its times, are more steps running than ``workers``; every end is
    stamped at or after its launch."""
    by_time = sorted(transitions, key=lambda t: (t["at"], t["id"]))
    for order, rows in (("id", transitions), ("time", by_time)):
        counts = running_counts(rows)
        assert max(counts, default=0) <= workers, (
            f"by {order}: {max(counts)} steps S_RUNNING with {workers} workers"
        )
    started: dict[tuple[str, str], str] = {}
    for t in transitions:
        if t["step_id"] is None:
            continue
        key = (t["ws_id"], t["step_id"])
        if t["to"] == "S_RUNNING" and t["from"] != "S_RUNNING":
            started[key] = t["at"]
        elif t["from"] == "S_RUNNING" and t["to"] != "S_RUNNING":
            assert t["at"] >= started[key], f"{key} ended before it started: {t}"


def assert_no_self_moves(store: BatchStore) -> None:
    """Every row of the transition tables moves a state: whatever moved nothing
    is an audit note (``audit_notes``), never a row whose from-state is its to-state."""
    for t in [*store.transitions(), *store.breaker_transitions()]:
        assert t["from"] != t["to"], f"a self-move in the audit trail: {t}"
