"""``progress.snapshot``: the server's one fold, published to the clients that ask.

Each test checks the message's figures against :class:`weft.progress.RunProgress`
folded over the same journal, read back from disk: the server's fold and the
reference fold must agree figure for figure (codon states, attempts, costs,
tokens, the outcome, the totals).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.builders import lifecycle, move, run_started
from tests.server.figures import expected, folded, refused, said, unpriced_usage
from tests.server.helpers import raw, running

from weft.events.stream import BudgetExceededEvent, InfoEvent
from weft.events.transitions import (
    BudgetStop,
    FailureReason,
    PlanEntry,
    RunCompleted,
    RunStarted,
    RunStopped,
)
from weft.progress import PENDING


async def snapshot_at(client: Any, seq: int, timeout: float = 10.0) -> dict[str, Any]:
    """Reads until a ``progress.snapshot`` that includes event ``seq``."""
    while True:
        message = await client.until("progress.snapshot", timeout)
        if message["data"]["seq"] >= seq:
            data: dict[str, Any] = message["data"]
            return data


async def test_a_client_that_does_not_ask_gets_no_snapshot(tmp_path: Path) -> None:
    async with running(tmp_path, transitions=True) as h, raw(h.url) as client:
        await client.handshake(liveBatches=True)
        for t in lifecycle("r1", "c"):
            h.manager.transition(t)
        await h.manager.flush()
        await asyncio.sleep(0.6)  # longer than a snapshot waits
        await client.send({"id": "p", "type": "ping"})
        await client.until("pong")
        assert "progress.snapshot" not in {m["type"] for m in client.received}


async def test_the_snapshot_is_the_fold_of_the_journal_at_join_and_after_batches(
    tmp_path: Path,
) -> None:
    """A client resuming from 0 gets the journal, then a snapshot equal to the
    fold of it; live batches bring snapshots equal to the fold of the journal
    then: a budget stop, an unpriced codon, a codon a stop cut short."""
    async with running(tmp_path, transitions=True, events=3) as h, raw(h.url) as client:
        await client.handshake(afterSeq=0, liveBatches=True, progress=True)
        first = await client.until("progress.snapshot")
        # It comes after the replay: every event it includes was given first.
        given = [e["seq"] for m in client.received for e in m.get("data", {}).get("events", [])]
        assert given
        assert max(given) == h.manager.last_seq == first["data"]["seq"]
        assert said(first["data"]) == expected(folded(h.store.journal.path))
        assert [c["status"] for c in first["data"]["codons"]] == ["completed", "completed"]
        assert first["data"]["ending"]["word"] == "running"

        m = h.manager
        m.transition(RunCompleted(run_id="r1", end_time="2026-11-21T00:00:05Z"))
        plan = [PlanEntry(codon={"name": n.title()}, codon_id=n) for n in ("a", "free", "cut")]
        m.transition(
            RunStarted(
                run_id="r2",
                run_folder="/x/.weft/runs/r2",
                git_branch="run-r2",
                starting_conditions=run_started("r2").starting_conditions,
                server_pid=1,
                start_time="2026-11-21T00:00:00Z",
                execution_plan=plan,
            )
        )
        for t in lifecycle("r2", "a"):
            m.transition(t)
        # "free": a model without a price (tokens, no cost).
        for t in lifecycle("r2", "free", costs=0)[:-1]:
            m.transition(t)
        m.emit(unpriced_usage("free"), run_id="r2", codon_id="free")
        m.transition(lifecycle("r2", "free")[-1])
        for t in lifecycle("r2", "cut", costs=1)[:-1]:
            m.transition(t)
        m.emit(
            BudgetExceededEvent(
                scope="run",
                scope_id="run",
                limit_kind="dollars",
                limit=0.005,
                used=0.0061,
                on_exceeded="fail",
                message="run budget $0.005 reached",
            )
        )
        reason = FailureReason(kind="interrupted", retriable=False, message="Stopped by its budget")
        m.transition(
            move(
                "r2",
                "cut",
                "running",
                "failed",
                failure_reason=reason,
                failed_during="running",
                exit_code=1,
            )
        )
        m.transition(
            RunStopped(
                run_id="r2",
                end_time="2026-11-21T00:00:09Z",
                by="budget",
                codon_id="cut",
                reason="the run's --max-cost $0.005 was reached",
                budget=BudgetStop(
                    scope="run", kind="dollars", limit=0.005, used=0.0061, source="--max-cost"
                ),
            )
        )
        await m.flush()
        last = await snapshot_at(client, m.last_seq)
        assert refused(h.store.journal.path) == 1  # the one the harness journals on purpose
        assert said(last) == expected(folded(h.store.journal.path))
        by_id = {c["codonId"]: c for c in last["codons"]}
        assert by_id["free"]["cost"] is None
        assert by_id["free"]["costText"] == "unpriced"
        assert by_id["cut"]["status"] == "stopped"
        assert by_id["cut"]["toDo"] is True
        assert by_id["a"]["toDo"] is False
        ending = last["ending"]
        assert (ending["kind"], ending["word"], ending["codonId"]) == (
            "budget",
            "budget-stopped",
            "cut",
        )
        assert ending["budget"]["source"] == "--max-cost"
        assert last["totals"]["unpricedCodons"] == 1
        assert last["totals"]["costText"].startswith("≥ $")
        assert [(r["runId"], r["word"]) for r in last["runs"]] == [
            ("r1", "completed"),
            ("r2", "budget-stopped"),
        ]
        assert last["series"], "the totals over time"


async def test_snapshots_are_coalesced_not_one_per_event(tmp_path: Path) -> None:
    async with running(tmp_path) as h, raw(h.url) as client:
        await client.handshake(liveBatches=True, progress=True)
        await client.until("progress.snapshot")
        h.manager.transition(run_started("r1"))
        for round_ in range(20):
            h.manager.emit(InfoEvent(message=f"m{round_}"))
            for t in lifecycle("r1", f"c{round_}"):
                h.manager.transition(t)
            await h.manager.flush()
            await asyncio.sleep(0.01)
        last = await snapshot_at(client, h.manager.last_seq)
        assert [c["status"] for c in last["codons"]] == ["completed"] * 20
        snapshots = [m for m in client.received if m["type"] == "progress.snapshot"]
        # 20 batches in about 0.2 s: a snapshot every 0.25 s at most, plus the first.
        assert len(snapshots) <= 4, len(snapshots)


async def test_the_run_s_last_figures_go_out_before_the_server_closes(tmp_path: Path) -> None:
    async with running(tmp_path, transitions=True) as h, raw(h.url) as client:
        await client.handshake(liveBatches=True, progress=True)
        await client.until("progress.snapshot")
        h.manager.transition(RunCompleted(run_id="r1", end_time="2026-11-21T00:00:09Z"))
        await h.manager.flush()
        await h.server.close()  # at once, within the snapshot's wait
        last = await snapshot_at(client, h.manager.last_seq)
        assert last["ending"]["kind"] == "completed"
        assert said(last) == expected(folded(h.store.journal.path))


async def test_a_client_joining_a_replay_server_gets_the_snapshot(tmp_path: Path) -> None:
    """``weft ui``'s replay server (no run, a journal that never grows)."""
    from weft.web.machine import start_replay

    async with running(tmp_path, transitions=True) as h:
        h.manager.transition(RunCompleted(run_id="r1", end_time="2026-11-21T00:00:09Z"))
        h.manager.emit(unpriced_usage("b"), codon_id="b")
        await h.manager.flush()
        database = Path(h.store.journal.path)
        replay = await start_replay(database)
        try:
            async with raw(replay.url) as client:
                await client.handshake(
                    token=replay.read_token, afterSeq=0, liveBatches=True, progress=True
                )
                snap = await client.until("progress.snapshot")
        finally:
            await replay.close()
    assert said(snap["data"]) == expected(folded(database))
    assert snap["data"]["ending"]["word"] == "completed"
    assert [c["status"] for c in snap["data"]["codons"]] == ["completed", "completed"]
    assert PENDING not in [c["status"] for c in snap["data"]["codons"]]
