"""The seed shapes' maker without sockets: its figures are the core's.

Transitions built with Weft's own structs go through the compiled core, and the
:class:`~weft.server.seed.SeedFeed` is handed each as the StateManager would
(the core's outcome, the encoded bytes). After every one, the feed's
``resultingState`` must be the core's total and current run cost, and each
``CostsUpdated`` the record's current cost in the core's state: retries,
a crashed run, a rig-setup checkpoint and a failed codon's error checkpoint included.
"""

from __future__ import annotations

import json
from typing import Any

from tests.builders import lifecycle, move, run_started

from weft import core
from weft.events.transitions import (
    CodonFinalCostSet,
    CodonStarted,
    CostsIncremented,
    FailureReason,
    RunCompleted,
    RunCrashed,
    TokenUsage,
    Transition,
    encode,
)
from weft.server.seed import SeedFeed
from weft.state import Processed


def attempt_that_fails(run: str, codon: str) -> list[Transition]:
    return [
        CodonStarted(run_id=run, codon_id=codon, start_time="t"),
        move(run, codon, "preparing", "starting", checkpoint_sha=f"rig-{codon}"),
        move(run, codon, "starting", "initializing", claude_pid=7, claude_log_path="l"),
        move(run, codon, "initializing", "running", claude_session_id="s"),
        CostsIncremented(
            run_id=run, codon_id=codon, cost_delta=0.0123, tokens_delta=TokenUsage(input_tokens=5)
        ),
        move(
            run,
            codon,
            "running",
            "failed",
            exit_code=1,
            failure_reason=FailureReason(kind="rate_limit", retriable=True),
            failed_during="running",
            checkpoint_sha=f"err-{codon}",
        ),
    ]


def script() -> list[Transition]:
    events: list[Transition] = [run_started("r1")]
    events += attempt_that_fails("r1", "a")
    events += lifecycle("r1", "a", costs=2)  # the retry: a new attempt
    b = lifecycle("r1", "b", costs=3)
    events += b[:-1]
    events.append(
        CodonFinalCostSet(
            run_id="r1", codon_id="b", final_cost=0.05, final_tokens=TokenUsage(output_tokens=9)
        )
    )
    events.append(b[-1])
    events.append(RunCompleted(run_id="r1", end_time="t"))
    events.append(run_started("r2"))
    events += lifecycle("r2", "c", costs=2)[:-1]  # running when the process dies
    events.append(RunCrashed(run_id="r2", detected_at="t", last_codon_status="running"))
    return events


def messages(feed: SeedFeed, item: Processed) -> list[dict[str, Any]]:
    return [json.loads(m) for m in feed.on_processed(item)]


def test_the_seed_figures_are_the_core_s_after_every_transition() -> None:
    engine = core.Core()
    feed = SeedFeed()
    checkpoints: list[tuple[str, str, str]] = []
    costs: list[tuple[str, float]] = []
    for seq, event in enumerate(script(), start=1):
        payload = encode(event)
        outcome = engine.apply(payload)
        assert outcome.ok, outcome
        got = messages(feed, Processed(seq, payload, event, outcome, seq * 1_000_000))
        wrapped = [m for m in got if m["type"] == "state.transition"]
        assert wrapped[-1]["data"]["transition"] == json.loads(payload) or (
            wrapped[-1]["data"]["transitionType"] == "CostsUpdated"
        )
        state = wrapped[-1]["data"]["resultingState"]
        assert state["totalCost"] == engine.total_cost()
        doc = json.loads(engine.state_json())
        assert state["currentRunId"] == doc["currentRunId"]
        assert state["runCount"] == len(doc["runs"])
        if doc["currentRunId"] is not None:
            assert state["currentRunCost"] == engine.run_cost(doc["currentRunId"])
        for m in got:
            d = m["data"]
            assert m["sourceSeq"] == seq
            if m["type"] == "CheckpointCreated":
                checkpoints.append((d["codonId"], d["checkpointType"], d["sha"]))
                assert d["branch"] == f"run-{d['runId']}"
            elif m["type"] == "CostsUpdated":
                costs.append((d["codonId"], d["cost"]))
                record = next(
                    c
                    for r in doc["runs"]
                    if r["runId"] == d["runId"]
                    for c in reversed(r["codons"])
                    if c["codonId"] == d["codonId"]
                )
                assert d["cost"] == record["currentCost"]
    assert checkpoints == [
        ("a", "rig-setup", "rig-a"),
        ("a", "error", "err-a"),
        ("a", "completed", "sha-a"),
        ("b", "completed", "sha-b"),
    ]
    final = costs.index(("b", 0.05))
    assert costs[final - 1] == ("b", 0.006)  # the increments added up, then the agent's total
    assert costs[final + 1 :] == [("c", 0.001), ("c", 0.003)]


def test_a_refused_transition_and_a_stream_event_make_nothing() -> None:
    engine = core.Core()
    feed = SeedFeed()
    start = run_started("r1")
    payload = encode(start)
    assert messages(feed, Processed(1, payload, start, engine.apply(payload), 0))
    refused = move("r1", "nope", "running", "completed", checkpoint_sha="x")
    payload = encode(refused)
    outcome = engine.apply(payload)
    assert not outcome.ok
    assert messages(feed, Processed(2, payload, refused, outcome, 0)) == []
