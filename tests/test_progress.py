"""The one fold of a run's progress (weft.progress): fed a real run's journal its
figures are the core's cost cache; a loop iteration's line agrees with its
codons' lines; and the wire events ``weft attach`` gets fold to the same
figures as the processed items ``weft run`` gets, with no second core."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.builders import lifecycle, run_started
from tests.runtime import hanks
from tests.runtime.hanks import codon, fake_environment, loop, write_file, write_hank

from weft import core
from weft.cli.view import HeadlessView, format_tokens
from weft.cli.view.notes import fold_wire
from weft.client import Event as WireEvent
from weft.events.stream import (
    BudgetExceededEvent,
    ErrorEvent,
    RollbackStartedEvent,
    TokenUsageEvent,
    decode_event,
)
from weft.outcome import Ending
from weft.progress import RunProgress, nanos
from weft.server.fanout import envelope
from weft.state import Processed, StateManager
from weft.store import ExecutionStore

RUN = "r1"


async def run_hank(tmp_path: Path, *items: dict[str, Any]) -> Path:
    """Runs a hank of ``items`` on the fake agent to its end; returns the execution."""
    hank = write_hank(tmp_path / "hank", *items)
    execution = tmp_path / "x"
    outcome, _ = await hanks.run_hank(hank, execution)
    assert outcome.status == "completed", outcome.message
    return execution


def fold_journal(execution: Path) -> tuple[RunProgress, ExecutionStore, list[Any]]:
    """The fold of every journal row (decoded to its typed event), the store
    opened read-only (close its journal), and the typed events."""
    store = ExecutionStore.open(execution, readonly=True)
    progress = RunProgress()
    events = []
    for page in store.journal.pages():
        for row in page:
            event = decode_event(row.payload.encode())
            assert event is not None, row.payload[:200]
            events.append(event)
            progress.fold(event, int(row.id[:13]) * 1_000_000, row.seq, row.codon_id)
    return progress, store, events


def record_tokens(record: dict[str, Any]) -> int:
    for key in ("finalTokens", "partialTokens", "currentTokens"):
        if key in record:
            return sum(record[key].values())
    return 0


@pytest.fixture
def real_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real run: a two-iteration loop of two codons, then one more codon."""
    fake_environment(monkeypatch, tmp_path)
    items = (
        loop(
            "l",
            codon("a", "@@fake:append path=log.md@@\na\n@@end@@\n"),
            codon("b", "@@fake:append path=log.md@@\nb\n@@end@@\n"),
            limit=2,
        ),
        codon("z", write_file("z.md", "z")),
    )
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run_hank(tmp_path, *items))


def test_a_real_runs_journal_folds_to_the_cores_cost_cache(real_run: Path) -> None:
    progress, store, _ = fold_journal(real_run)
    try:
        run_id = progress.run_id
        assert run_id is not None
        assert progress.run_status == "completed"
        run_cost = store.core.run_cost(run_id)
        assert run_cost is not None
        assert run_cost > 0
        assert progress.total_cost_nanos == nanos(run_cost)
        assert nanos(store.core.total_cost()) == progress.total_cost_nanos  # one run only
        state = json.loads(store.core.state_json())
    finally:
        store.journal.close()
    records = {r["codonId"]: r for r in state["runs"][0]["codons"]}
    assert [c.codon_id for c in progress.codons] == ["a#0", "b#0", "a#1", "b#1", "z"]
    for c in progress.codons:
        assert c.cost_nanos == nanos(store.core.codon_cost(run_id, c.codon_id) or 0), c.codon_id
        assert c.tokens == record_tokens(records[c.codon_id]) > 0, c.codon_id
        assert c.status == records[c.codon_id]["status"] == "completed"


def test_a_loop_iteration_line_agrees_with_its_codons(real_run: Path) -> None:
    progress, store, events = fold_journal(real_run)
    store.journal.close()
    iterations = [e for e in events if type(e).__name__ == "LoopIterationCompletedEvent"]
    assert [(i.iteration, i.is_final) for i in iterations] == [(0, False), (1, True)]
    for it in iterations:
        codons = [progress.codon(f"{x}#{it.iteration}") for x in ("a", "b")]
        assert all(c is not None for c in codons)
        # Every token kind, every attempt: the same count the codon lines show.
        assert it.tokens_used == sum(c.tokens for c in codons if c is not None)
        assert nanos(it.cost_usd) == sum(c.cost_nanos for c in codons if c is not None)
        assert it.duration_ms >= 0
    # And as a person reads them: the loop line says the sum of its codon lines.
    lines = iter_headless(real_run)
    for it in iterations:
        total = sum(
            progress.codon(f"{x}#{it.iteration}").tokens  # type: ignore[union-attr]
            for x in ("a", "b")
        )
        (line,) = [ln for ln in lines if f"loop l iteration {it.iteration} done" in ln]
        assert f"{format_tokens(total)} tokens" in line


def iter_headless(execution: Path) -> list[str]:
    """The headless lines of the journal's events, fed as wire events."""
    out: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            out.extend(text.splitlines())

        def flush(self) -> None:
            pass

    view = HeadlessView(Sink())  # type: ignore[arg-type]
    store = ExecutionStore.open(execution, readonly=True)
    try:
        for page in store.journal.pages():
            for row in page:
                doc = json.loads(row.payload)
                view.on_wire(WireEvent(id=row.id, seq=row.seq, timestamp=row.timestamp, **doc))
    finally:
        store.journal.close()
    return out


# ----------------------------------------------------------------------------- wire = processed


def move(codon_id: str, frm: str, to: str, **meta: Any) -> core.CodonTransitioned:
    return core.CodonTransitioned(
        run_id=RUN,
        codon_id=codon_id,
        from_status=frm,  # type: ignore[arg-type]
        to_status=to,  # type: ignore[arg-type]
        timestamp="t",
        metadata=core.TransitionMetadata(**meta) if meta else None,
    )


async def scripted(attempts: list[tuple[list[int], int | None, str]]) -> list[Processed]:
    """A StateManager fed a run of ``attempts`` (spending, final figure, end),
    one refused transition included; its processed items."""
    manager = StateManager()
    items: list[Processed] = []
    manager.add_listener(items.append)
    manager.transition(
        core.RunStarted(
            run_id=RUN,
            run_folder="f",
            git_branch="b",
            starting_conditions=core.Fresh(),
            server_pid=1,
            start_time="t",
        )
    )
    for k, (increments, final, end) in enumerate(attempts):
        c = f"c{k % 2}"
        manager.transition(core.CodonStarted(run_id=RUN, codon_id=c, start_time="t"))
        manager.transition(move(c, "preparing", "starting"))
        manager.transition(move(c, "starting", "initializing", claude_pid=7, claude_log_path="l"))
        manager.transition(move(c, "initializing", "running", claude_session_id="s"))
        for n in increments:
            usage = core.TokenUsage(input_tokens=n % 1000, cache_read_tokens=n % 7)
            manager.transition(
                core.CostsIncremented(
                    run_id=RUN, codon_id=c, cost_delta=n / 1e9, tokens_delta=usage
                )
            )
            manager.emit(
                TokenUsageEvent(
                    codon_id=c,
                    input_tokens=n % 1000,
                    output_tokens=0,
                    cache_creation_tokens=0,
                    cache_read_tokens=n % 7,
                    total_cost=n / 1e9,
                ),
                run_id=RUN,
                codon_id=c,
            )
        if final is not None:
            manager.transition(
                core.CodonFinalCostSet(
                    run_id=RUN,
                    codon_id=c,
                    final_cost=final / 1e9,
                    final_tokens=core.TokenUsage(output_tokens=5),
                )
            )
        meta: dict[str, Any] = {
            "completed": {"checkpoint_sha": f"s{k}"},
            "failed": {
                "exit_code": 1,
                "failure_reason": core.FailureReason(kind="x", retriable=False),
                "failed_during": "running",
            },
            "skipped": {"skipped_during": "running"},
        }[end]
        manager.transition(move(c, "running", end, **meta))
        manager.transition(move(c, "running", "completed", checkpoint_sha="x"))  # refused
    manager.transition(core.RunCompleted(run_id=RUN, end_time="t"))
    await manager.flush()
    await manager.close()
    return items


_wire = msgspec.json.Decoder(WireEvent)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**7), max_size=4),
            st.one_of(st.none(), st.integers(0, 10**8)),
            st.sampled_from(["completed", "failed", "skipped"]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_wire_events_fold_like_processed_items(
    attempts: list[tuple[list[int], int | None, str]],
) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        items = runner.run(scripted(attempts))
    live, attached = RunProgress(), RunProgress()
    for item in items:
        live.apply(item)
        # What a client receives: the fan-out's envelope, decoded by weft.client.
        fold_wire(attached, _wire.decode(envelope(item)))
    assert attached.rejected == live.rejected == len(attempts)
    assert attached.errors == live.errors == 0
    assert attached.total_cost_nanos == live.total_cost_nanos
    assert attached.total_tokens == live.total_tokens
    assert [(c.codon_id, c.status, c.tokens, c.cost_nanos) for c in attached.codons] == [
        (c.codon_id, c.status, c.tokens, c.cost_nanos) for c in live.codons
    ]
    assert attached.run_status == live.run_status == "completed"


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**7), max_size=4),
            st.one_of(st.none(), st.integers(0, 10**8)),
            st.sampled_from(["completed", "failed", "skipped"]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_spent_never_drops_real_money(attempts: list[tuple[list[int], int | None, str]]) -> None:
    """``spent`` is what every attempt spent, skipped ones included (the core
    keeps a skipped attempt's money as its partialCost, but counts it $0)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        items = runner.run(scripted(attempts))
    progress = RunProgress()
    for item in items:
        progress.apply(item)
    expected = 0
    for increments, final, _ in attempts:
        expected += (
            nanos(final / 1e9) if final is not None else sum(nanos(n / 1e9) for n in increments)
        )
    assert progress.spent_nanos == expected
    assert progress.spent_nanos >= progress.total_cost_nanos
    skipped = sum(
        nanos(f / 1e9) if f is not None else sum(nanos(n / 1e9) for n in inc)
        for inc, f, end in attempts
        if end == "skipped"
    )
    assert progress.spent_nanos - progress.total_cost_nanos == skipped
    assert progress.unpriced == 0


def test_a_usage_without_a_cost_marks_the_codon_unpriced() -> None:
    progress = RunProgress()
    usage = TokenUsageEvent(
        codon_id="a", input_tokens=10, output_tokens=5, cache_creation_tokens=0,
        cache_read_tokens=0, total_cost=None,
    )  # fmt: skip
    progress.fold(core.CodonStarted(run_id=RUN, codon_id="a", start_time="t"), 1, 1)
    progress.fold(usage, 2, 2, "a")
    codon = progress.codon("a")
    assert codon is not None
    assert codon.unpriced
    assert progress.unpriced == 1


def _ended(*events: Any) -> str | None:
    """The run status the fold gives after ``events`` and a ``RunFailed``."""
    progress = RunProgress()
    for n, event in enumerate(
        [run_started(RUN), *events, core.RunFailed(run_id=RUN, end_time="t")]
    ):
        progress.fold(event, n, n + 1, None)
    return progress.run_status


def _failed(codon_id: str, kind: str) -> list[Any]:
    started = core.CodonStarted(run_id=RUN, codon_id=codon_id, start_time="t")
    reason = core.FailureReason(kind=kind, retriable=False, message="m")
    return [started, move(codon_id, "preparing", "failed", failure_reason=reason)]


def test_a_journal_from_before_run_stopped_reads_a_stop_as_stopped() -> None:
    """Older journals recorded a stop as a bare RunFailed; the fold tells them apart."""
    done = lifecycle(RUN, "a")
    # Stopped between codons, or while one ran (its failure is the stop's).
    assert _ended(*done) == "stopped"
    assert _ended(*done, *_failed("b", "interrupted")) == "stopped"
    # Ended by a codon's own failure, a fatal error, or the run's budget.
    assert _ended(*done, *_failed("b", "error_result")) == "failed"
    assert _ended(*done, *_failed("b", "force_stopped")) == "failed"
    assert _ended(*done, ErrorEvent(message="disk", fatal=True, severity="fatal")) == "failed"
    run_budget = BudgetExceededEvent(
        scope="run",
        scope_id="run",
        limit_kind="dollars",
        limit=1.0,
        used=1.2,
        on_exceeded="complete",
        message="Budget exceeded",
    )
    assert _ended(*done, run_budget) == "failed"
    # A failure its codon's onFailure ignored: the next codon started, then a stop.
    assert _ended(*_failed("a", "error_result"), *lifecycle(RUN, "b")) == "stopped"
    assert _ended(*_failed("a", "error_result"), *_failed("a", "interrupted")) == "stopped"


def _ended_by(*events: Any) -> RunProgress:
    progress = RunProgress()
    for n, event in enumerate([run_started(RUN), *events]):
        progress.fold(event, n, n + 1, None)
    return progress


def test_each_journaled_ending_is_its_own_outcome() -> None:
    done = lifecycle(RUN, "a")
    failed = _ended_by(*done, core.RunFailed(run_id=RUN, end_time="t", codon_id="b", reason="x"))
    assert failed.run_status == "failed"
    assert failed.ending == Ending("failed", codon_id="b", reason="x")
    user = _ended_by(
        *done, core.RunStopped(run_id=RUN, end_time="t", by="user", forced=True, reason="r")
    )
    assert user.run_status == "stopped"
    assert user.ending is not None
    assert user.ending.forced
    cap = core.BudgetStop(scope="run", kind="dollars", limit=0.05, used=0.06, source="--max-cost")
    budget = _ended_by(
        *done,
        core.RunStopped(
            run_id=RUN, end_time="t", by="budget", reason="over", codon_id="b", budget=cap
        ),
    )
    assert budget.run_status == "budget"
    assert budget.ending is not None
    assert budget.ending.word == "budget-stopped"
    assert budget.ending.codon_id == "b"
    assert budget.ending.budget == msgspec.structs.asdict(cap)
    assert _ended_by(*done, core.RunCompleted(run_id=RUN, end_time="t")).ending == Ending(
        "completed"
    )


def test_a_rollback_puts_the_codons_it_undid_back_to_do() -> None:
    """``rollback.started`` comes before the run it starts: that run has the undone
    codons to do again, not done in an earlier run."""
    progress = RunProgress()
    events: list[Any] = [
        run_started(RUN),
        *lifecycle(RUN, "a"),
        *lifecycle(RUN, "b"),
        RollbackStartedEvent(
            from_run=RUN, to_run="r2", to_codon="a", to_checkpoint="0" * 40,
            checkpoint_type="completed", codons_to_process=["b"],
        ),
        core.RunStopped(run_id=RUN, end_time="t", by="user", reason="rolled back"),
        run_started("r2"),
    ]  # fmt: skip
    for n, event in enumerate(events):
        progress.fold(event, n, n + 1, None)
    a, b = progress.codon("a"), progress.codon("b")
    assert a is not None
    assert b is not None
    assert (a.earlier, a.to_do) == ("completed", False)
    assert (b.earlier, b.to_do) == (None, True)
