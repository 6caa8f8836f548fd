"""The StateManager: ordered queue, waiters, listeners and the persistence seam."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest
from tests.builders import lifecycle, run_started
from tests.builders import move as move_in

from weft import core
from weft.errors import (
    InvalidTransitionError,
    MalformedTransitionError,
    MetadataValidationError,
    PersistenceError,
    StateConflictError,
    rejection_error,
)
from weft.state import Processed, StateManager

RUN = "r1"


def started(run_id: str = RUN) -> core.RunStarted:
    return run_started(run_id)


def move(codon: str, frm: str, to: str, **meta: object) -> core.Transition:
    return move_in(RUN, codon, frm, to, **meta)


def to_running(codon: str) -> list[core.Transition]:
    return lifecycle(RUN, codon)[:4]


def spend(codon: str, usd: float) -> core.Transition:
    return core.CostsIncremented(
        run_id=RUN, codon_id=codon, cost_delta=usd, tokens_delta=core.TokenUsage(input_tokens=1)
    )


class Recording:
    """A persistence that records batches, optionally failing on one."""

    def __init__(self, fail_on_batch: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail_on_batch = fail_on_batch

    async def commit(self, batch: Sequence[Processed]) -> None:
        if self.fail_on_batch is not None and len(self.batches) == self.fail_on_batch:
            raise OSError(28, "No space left on device")
        await asyncio.sleep(0)
        self.batches.append([p.seq for p in batch])


async def test_transition_returns_increasing_sequence_numbers_at_once() -> None:
    manager = StateManager()
    seqs = [manager.transition(started()), manager.transition(spend("a", 0.1))]
    assert seqs == [1, 2]
    # Nothing has been applied yet: fire and forget.
    assert manager.last_seq == 0
    await manager.flush()
    assert manager.last_seq == 2


async def test_transition_and_wait_returns_the_outcome_once_applied() -> None:
    manager = StateManager()
    outcome = await manager.transition_and_wait(started())
    assert outcome.ok
    assert outcome.kind == "RunStarted"
    assert manager.core.current_run_id == RUN


async def test_transition_and_wait_raises_the_matching_error() -> None:
    manager = StateManager()
    await manager.transition_and_wait(started())
    for event in to_running("a"):
        await manager.transition_and_wait(event)
    with pytest.raises(MetadataValidationError) as missing:
        await manager.transition_and_wait(move("a", "running", "completed"))
    assert str(missing.value) == (
        "Missing required metadata for transition to completed: checkpointSha"
    )
    assert missing.value.missing == ("checkpointSha",)
    assert missing.value.to_status == "completed"
    assert missing.value.seq == 6
    await manager.transition_and_wait(move("a", "running", "completed", checkpoint_sha="c1"))
    with pytest.raises(InvalidTransitionError) as invalid:
        await manager.transition_and_wait(move("a", "completed", "running"))
    assert str(invalid.value) == "Invalid transition from completed to running"
    assert (invalid.value.from_status, invalid.value.to_status) == ("completed", "running")
    with pytest.raises(StateConflictError) as conflict:
        await manager.transition_and_wait(spend("ghost", 1.0))
    assert conflict.value.code == "unknown_codon"
    assert str(conflict.value) == "No codon 'ghost' in run 'r1'"


async def test_malformed_bytes_are_rejected_and_the_queue_goes_on() -> None:
    manager = StateManager()
    outcomes: list[core.Outcome] = []
    manager.add_listener(lambda p: outcomes.append(p.outcome))
    manager.transition_bytes(b'{"type":"RunStarted","data":{"runId":1}}')
    manager.transition_bytes(b"\xff not json")
    manager.transition(started())
    await manager.flush()
    assert [o.ok for o in outcomes] == [False, False, True]
    assert [o.code for o in outcomes] == ["malformed", "malformed", None]
    assert manager.core.current_run_id == RUN
    assert isinstance(rejection_error(outcomes[0]), MalformedTransitionError)
    assert outcomes[0].message is not None
    assert outcomes[0].message.startswith("Malformed transition: invalid type: integer `1`")


async def test_an_invalid_transition_changes_nothing() -> None:
    manager = StateManager()
    await manager.transition_and_wait(started())
    for event in to_running("a"):
        manager.transition(event)
    manager.transition(spend("a", 0.25))
    await manager.flush()
    before = manager.core.state_json()
    manager.transition(move("a", "running", "failed", exit_code=1))  # lacks failureReason
    manager.transition(move("a", "starting", "initializing", claude_pid=1, claude_log_path="l"))
    await manager.flush()
    assert manager.core.state_json() == before
    assert manager.core.total_cost() == pytest.approx(0.25, abs=0)


async def test_listeners_see_transitions_in_submission_order_under_concurrent_tasks() -> None:
    manager = StateManager(max_batch=7)
    await manager.transition_and_wait(started())
    codons = [f"c{i}" for i in range(20)]
    seen: list[int] = []
    manager.add_listener(lambda p: seen.append(p.seq))
    submitted: list[int] = []

    async def submitter(codon: str) -> None:
        # Each task interleaves with the others at every await.
        for _ in range(25):
            submitted.append(manager.transition(spend(codon, 0.001)))
            await asyncio.sleep(0)

    await asyncio.gather(*(submitter(c) for c in codons))
    await manager.flush()
    assert seen == sorted(submitted)
    assert len(seen) == 500


async def test_listeners_see_transitions_in_submission_order_under_concurrent_threads() -> None:
    manager = StateManager(max_batch=5)
    await manager.transition_and_wait(started())
    for event in to_running("a"):
        await manager.transition_and_wait(event)
    seen: list[int] = []
    manager.add_listener(lambda p: seen.append(p.seq))
    per_thread: dict[int, list[int]] = {}
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        barrier.wait()
        per_thread[n] = [manager.transition(spend("a", 0.01)) for _ in range(200)]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        await asyncio.sleep(0.001)
    for t in threads:
        t.join()
    await manager.flush()
    all_seqs = sorted(s for seqs in per_thread.values() for s in seqs)
    assert seen == all_seqs
    assert len(set(all_seqs)) == 800
    # Each thread's own submissions keep their relative order.
    for seqs in per_thread.values():
        assert seqs == sorted(seqs)
    assert manager.core.codon_cost(RUN, "a") == pytest.approx(8.0, abs=1e-9)


async def test_nothing_is_visible_before_its_batch_is_committed() -> None:
    persistence = Recording()
    manager = StateManager(persistence=persistence, max_batch=3)
    committed_when_seen: list[bool] = []

    def listener(p: Processed) -> None:
        committed_when_seen.append(any(p.seq in b for b in persistence.batches))

    manager.add_listener(listener)
    manager.transition(started())
    for i in range(10):
        manager.transition(spend("none", float(i)))
    await manager.flush()
    assert committed_when_seen == [True] * 11
    assert [s for b in persistence.batches for s in b] == list(range(1, 12))
    assert all(len(b) <= 3 for b in persistence.batches)


async def test_a_persistence_failure_is_fatal_and_keeps_what_was_committed() -> None:
    persistence = Recording(fail_on_batch=1)
    manager = StateManager(persistence=persistence, max_batch=2)
    await manager.transition_and_wait(started())  # batch 0 commits
    seen: list[int] = []
    manager.add_listener(lambda p: seen.append(p.seq))
    with pytest.raises(PersistenceError) as failure:
        await manager.transition_and_wait(spend("a", 1.0))
    assert isinstance(failure.value.__cause__, OSError)
    assert "No space left on device" in str(failure.value)
    assert seen == []
    assert persistence.batches == [[1]]
    with pytest.raises(PersistenceError):
        manager.transition(started("r2"))


async def test_a_failing_listener_does_not_stop_the_queue(caplog: pytest.LogCaptureFixture) -> None:
    manager = StateManager()
    good: list[int] = []

    def bad(p: Processed) -> None:
        raise RuntimeError("listener bug")

    manager.add_listener(bad)
    manager.add_listener(lambda p: good.append(p.seq))
    manager.transition(started())
    manager.transition(core.InitialCheckpointSet(sha="abc"))
    await manager.flush()
    assert good == [1, 2]
    assert "listener bug" in caplog.text


async def test_unsubscribed_listeners_hear_nothing_more() -> None:
    manager = StateManager()
    seen: list[int] = []
    remove = manager.add_listener(lambda p: seen.append(p.seq))
    await manager.transition_and_wait(started())
    remove()
    await manager.transition_and_wait(core.InitialCheckpointSet(sha="abc"))
    assert seen == [1]


async def test_a_listener_of_some_types_hears_only_those_in_order_with_the_others() -> None:
    manager = StateManager()
    heard: list[tuple[str, int]] = []
    manager.add_listener(lambda p: heard.append(("all", p.seq)))
    remove = manager.add_listener(
        lambda p: heard.append(("some", p.seq)), types=("RunStarted", "error")
    )
    manager.add_listener(lambda p: heard.append(("last", p.seq)))
    await manager.transition_and_wait(started())
    await manager.transition_and_wait(core.InitialCheckpointSet(sha="abc"))
    manager.transition(move("a", "running", "failed", exit_code=1))  # refused: an "error"
    await manager.flush()
    assert heard == [
        ("all", 1), ("some", 1), ("last", 1),
        ("all", 2), ("last", 2),
        ("all", 3), ("some", 3), ("last", 3),
    ]  # fmt: skip
    remove()
    heard.clear()
    manager.transition(started("r2"))  # refused (r1 still runs): an "error" again
    await manager.flush()
    assert heard == [("all", 4), ("last", 4)]


async def test_processed_carries_the_exact_bytes_and_event() -> None:
    manager = StateManager()
    items: list[Processed] = []
    manager.add_listener(items.append)
    event = started()
    await manager.transition_and_wait(event)
    assert items[0].event is event
    assert items[0].payload == core.encode(event)
    assert items[0].applied


async def test_close_flushes_and_then_refuses() -> None:
    manager = StateManager()
    manager.transition(started())
    await manager.close()
    assert manager.core.current_run_id == RUN
    with pytest.raises(RuntimeError, match="closed"):
        manager.transition(started("r2"))


def test_using_the_manager_outside_an_event_loop_is_a_clear_error() -> None:
    manager = StateManager()
    with pytest.raises(RuntimeError, match="running event loop"):
        manager.transition(started())


async def test_a_manager_continues_the_sequence_of_a_loaded_core() -> None:
    first = StateManager()
    await first.transition_and_wait(started())
    snapshot = first.core.state_json()
    resumed = StateManager(core.Core(snapshot, next_seq=first.core.next_seq))
    outcome = await resumed.transition_and_wait(core.RunCompleted(run_id=RUN, end_time="t9"))
    assert outcome.seq == 2
    assert resumed.core.current_run_id is None


async def test_the_execution_thread_sees_every_transition_submitted_before_it() -> None:
    manager = StateManager(core.Core())
    manager.transition(run_started("r1"))
    for move in lifecycle("r1", "a"):
        manager.transition(move)
    thread = await manager.execution_thread()
    assert [tc.codon_id for tc in thread.codons] == ["a"]
    assert thread.codons[0].status == "completed"
    await manager.close()


class Gated:
    """A persistence whose commits wait for the test to open the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.committed: list[int] = []

    async def commit(self, batch: Sequence[Processed]) -> None:
        await self.gate.wait()
        self.committed += [p.seq for p in batch]


async def test_applied_waits_until_the_core_applied_everything_submitted() -> None:
    persistence = Gated()
    manager = StateManager(persistence=persistence, max_batch=1)
    manager.transition(started())
    for t in to_running("a"):
        manager.transition(t)
    manager.transition(spend("a", 0.25))
    # The first batch waits at the gate, so the rest cannot be drained yet:
    # applied() must not return before the core holds the spend.
    waiter = asyncio.ensure_future(manager.applied())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    persistence.gate.set()
    await asyncio.wait_for(waiter, 5)
    assert manager.core.codon_cost(RUN, "a") == pytest.approx(0.25)
    await manager.flush()
    assert persistence.committed == list(range(1, 7))


async def test_applied_is_immediate_when_nothing_is_pending_and_raises_after_a_failure() -> None:
    persistence = Recording(fail_on_batch=1)
    manager = StateManager(persistence=persistence, max_batch=1)
    await manager.transition_and_wait(started())
    await asyncio.wait_for(manager.applied(), 1)
    manager.transition(spend("a", 1.0))
    with pytest.raises(PersistenceError):
        await manager.flush()
    with pytest.raises(PersistenceError):
        await manager.applied()
