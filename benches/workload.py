"""Deterministic workloads shared by the benchmarks.

The mixed stream looks like a real execution: each codon is started, walked
to running, accrues many cost and message-count updates, gets its final
cost and checkpoint, and completes; about 1 in 25 events is one a buggy
caller would send (a stale cost update for a finished codon, a wrong
``from``), so the rejection path is measured too.
"""

from __future__ import annotations

import json
from typing import Any

RUN = "1763683200000-bench"


def _p(kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "data": data}


def _move(codon: str, frm: str, to: str, **meta: Any) -> dict[str, Any]:
    return _p(
        "CodonTransitioned",
        runId=RUN,
        codonId=codon,
        **{"from": frm, "to": to},
        timestamp="2026-11-20T12:00:00Z",
        metadata=meta or None,
    )


def run_started() -> dict[str, Any]:
    """The RunStarted that opens every workload."""
    return _p(
        "RunStarted",
        runId=RUN,
        runFolder=f"/w/.weft/runs/{RUN}",
        gitBranch=f"run-{RUN}",
        startingConditions={"type": "fresh"},
        serverPid=1,
        startTime="2026-11-20T12:00:00Z",
    )


def codon_events(i: int, updates: int, mistakes: bool = True) -> list[dict[str, Any]]:
    """One codon's whole life, with ``updates`` cost/count updates while running,
    and (with ``mistakes``) the refused transitions a buggy caller would send."""
    c = f"codon-{i}"
    events = [
        _p("CodonStarted", runId=RUN, codonId=c, startTime="2026-11-20T12:00:00Z"),
        _move(c, "preparing", "starting"),
        _move(c, "starting", "initializing", claudePid=4242, claudeLogPath=f"{c}.log"),
        _move(c, "initializing", "running", claudeSessionId=f"s-{i}"),
    ]
    for k in range(updates):
        events.append(
            _p(
                "CostsIncremented",
                runId=RUN,
                codonId=c,
                costDelta=0.000731 + k * 1e-6,
                tokensDelta={"inputTokens": 812, "outputTokens": 97, "cacheReadTokens": 4000},
            )
        )
        events.append(_p("AssistantMessageCountUpdated", runId=RUN, codonId=c, newCount=k + 1))
        if mistakes and k % 12 == 11:
            # A wrong `from`: rejected, changes nothing.
            events.append(_move(c, "starting", "initializing", claudePid=1, claudeLogPath="x"))
    events += [
        _p(
            "CodonFinalCostSet",
            runId=RUN,
            codonId=c,
            finalCost=0.0412,
            finalTokens={"inputTokens": 20000, "outputTokens": 2400},
        ),
        _p(
            "CheckpointCreated",
            runId=RUN,
            codonId=c,
            checkpointType="completed",
            sha=f"{i:040x}",
            branch=f"run-{RUN}",
        ),
        _move(c, "running", "completed", checkpointSha=f"{i:040x}", resultMessageReceived=True),
    ]
    if mistakes:
        # A stale update after completion: rejected.
        events.append(_p("CostsIncremented", runId=RUN, codonId=c, costDelta=0.001, tokensDelta={}))
    return events


def mixed_stream(total: int, updates_per_codon: int = 24, mistakes: bool = True) -> list[bytes]:
    """``total`` encoded transitions: one run, many codon lifecycles. Without
    ``mistakes`` every one applies (a journal's worth), but the last codon may
    be cut off mid-life."""
    events = [run_started()]
    i = 0
    while len(events) < total:
        events += codon_events(i, updates_per_codon, mistakes)
        i += 1
    return [json.dumps(e, separators=(",", ":")).encode() for e in events[:total]]


def as_array(payloads: list[bytes]) -> bytes:
    """A JSON array of encoded transitions, as ``apply_batch`` takes."""
    return b"[" + b",".join(payloads) + b"]"


def records_stream(records: int) -> bytes:
    """Enough transitions to leave ``records`` codon records in one run.

    Most codons are skipped straight from preparing; every tenth runs and
    accrues a cost, so the cost cache has real work.
    """
    events = [run_started()]
    for i in range(records):
        c = f"codon-{i}"
        events.append(_p("CodonStarted", runId=RUN, codonId=c, startTime="t"))
        if i % 10:
            events.append(_move(c, "preparing", "skipped", skippedDuring="preparing"))
            continue
        events += [
            _move(c, "preparing", "starting"),
            _move(c, "starting", "initializing", claudePid=1, claudeLogPath="l"),
            _move(c, "initializing", "running", claudeSessionId="s"),
            _p("CostsIncremented", runId=RUN, codonId=c, costDelta=0.01, tokensDelta={}),
        ]
        if i + 1 < records:
            events.append(_move(c, "running", "completed", checkpointSha="abc"))
    return as_array([json.dumps(e, separators=(",", ":")).encode() for e in events])
