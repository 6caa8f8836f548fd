"""A client written against the seeds: ``state.transition``, ``CostsUpdated`` and
``CheckpointCreated``, asked for in the handshake (``seedEvents``), from a real run.

Two raw WebSocket clients join a real run's server (the fake agent, manual mode,
so both are live before the first codon starts): one asks for the seed's shapes,
one does not. What the seed client gets is checked against the journal: a
``state.transition`` for every journaled transition, ``CostsUpdated`` with the
absolute figures the journal's increments add up to, ``CheckpointCreated`` with
every sha the journal recorded; the other client gets none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from tests.builders import lifecycle
from tests.runtime.hanks import codon, fake_environment, read_state, write_file
from tests.server.helpers import READ_TOKEN, raw, running
from tests.server.test_runtime import live_run

from weft.money import nanos
from weft.server import read_token
from weft.server.schema import events_json_schema
from weft.server.seed import SEED_EVENT_TYPES
from weft.store import Journal
from weft.store.execution import DATABASE

CHECKPOINT_OF = {"starting": "rig-setup", "completed": "completed", "failed": "error"}


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


def journaled(execution: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(seq, kind, payload) of every journaled event."""
    journal = Journal.open(execution / ".weft" / DATABASE, readonly=True)
    try:
        return [(e.seq, e.kind, json.loads(e.payload)) for page in journal.pages() for e in page]
    finally:
        journal.close()


async def drain(c: Any) -> None:
    """Reads until the server closes the connection (the run ended)."""
    with contextlib.suppress(Exception):
        while True:
            await c.recv(timeout=60)


async def two_codon_run(tmp_path: Path) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs a and b with a seed client and a plain one connected from the
    start; returns the execution and what each received."""
    async with live_run(
        tmp_path, codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b"))
    ) as live:
        token = read_token(live.execution / ".weft")
        async with raw(live.server.url) as seed, raw(live.server.url) as plain:
            await seed.handshake(mode="readandwrite", token=token, seedEvents=True)
            await plain.handshake(mode="readonly", token=token)
            for _ in ("a", "b"):
                await seed.send({"id": "n", "type": "codon.next"})
                await seed.until("server.idle", timeout=60)
            await seed.send({"id": "s", "type": "server.shutdown"})
            await asyncio.wait_for(live.run, 60)
            await asyncio.gather(drain(seed), drain(plain))
        return live.execution, seed.received, plain.received


async def test_a_seed_client_gets_the_seed_shapes_of_every_transition(tmp_path: Path) -> None:
    execution, got, _ = await two_codon_run(tmp_path)
    journal = journaled(execution)
    joined = min(m["seq"] for m in got if "seq" in m) - 1
    live = [(seq, p) for seq, kind, p in journal if kind == "transition" and seq > joined]
    assert any(p["type"] == "CodonTransitioned" for _, p in live)

    # state.transition: every live transition, its journaled bytes as they are.
    wrapped = [m for m in got if m["type"] == "state.transition"]
    derived = {"CostsUpdated", "CheckpointCreated"}
    own = [m for m in wrapped if m["data"]["transitionType"] not in derived]
    assert [(m["sourceSeq"], m["data"]["transition"]) for m in own] == live
    for m in own:
        data = m["data"]
        assert data["transitionType"] == data["transition"]["type"]
        assert data.get("runId") == data["transition"]["data"].get("runId")
        assert data.get("codonId") == data["transition"]["data"].get("codonId")
    moves = [p for _, p in live if p["type"] == "CodonTransitioned"]
    # Each comes after the event it was made from (with the batch it came in), in order.
    seen: set[int] = set()
    sources: list[int] = []
    for m in got:
        if "seq" in m:
            seen.add(m["seq"])
        elif "sourceSeq" in m:
            assert m["sourceSeq"] in seen, m
            sources.append(m["sourceSeq"])
    assert sources == sorted(sources)

    # CostsUpdated: absolute, the journal's increments added up (as the core does).
    state = read_state(execution)
    run = state["runs"][0]
    totals: dict[str, int] = {}
    expected: list[tuple[str, int]] = []
    for _, p in live:
        d = p["data"]
        if p["type"] == "CostsIncremented":
            totals[d["codonId"]] = totals.get(d["codonId"], 0) + nanos(d["costDelta"])
            expected.append((d["codonId"], totals[d["codonId"]]))
        elif p["type"] == "CodonFinalCostSet":
            totals[d["codonId"]] = nanos(d["finalCost"])
            expected.append((d["codonId"], totals[d["codonId"]]))
    costs = [m["data"] for m in got if m["type"] == "CostsUpdated"]
    assert [(c["codonId"], nanos(c["cost"])) for c in costs] == expected
    assert expected, "the fake agent spent nothing"
    for record in run["codons"]:
        last = [c for c in costs if c["codonId"] == record["codonId"]][-1]
        assert last["cost"] == record["finalCost"] > 0
        assert last["runId"] == run["runId"]
        assert last["tokens"]["outputTokens"] == record["finalTokens"]["outputTokens"]
    # ...and each also as the seed's state.transition.
    wrapped_costs = [
        m["data"]["transition"]["data"]
        for m in wrapped
        if m["data"]["transitionType"] == "CostsUpdated"
    ]
    assert wrapped_costs == costs

    # CheckpointCreated: every sha the journal recorded, with its type and branch.
    recorded = [
        (
            p["data"]["codonId"],
            CHECKPOINT_OF[p["data"]["to"]],
            p["data"]["metadata"]["checkpointSha"],
        )
        for p in moves
        if (p["data"].get("metadata") or {}).get("checkpointSha")
    ]
    checkpoints = [m["data"] for m in got if m["type"] == "CheckpointCreated"]
    assert [(c["codonId"], c["checkpointType"], c["sha"]) for c in checkpoints] == recorded
    assert {c["codonId"]: c["sha"] for c in checkpoints if c["checkpointType"] == "completed"} == {
        r["codonId"]: r["completionCheckpoint"] for r in run["codons"]
    }
    assert {c["branch"] for c in checkpoints} == {run["gitBranch"]}

    # resultingState: the state's figures after the last transition.
    last = wrapped[-1]["data"]["resultingState"]
    assert last["runCount"] == len(state["runs"])
    assert nanos(last["totalCost"]) == sum(nanos(r["finalCost"]) for r in run["codons"])
    assert last["totalCost"] > 0


async def test_what_a_seed_client_gets_validates_against_the_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(events_json_schema())
    _, got, _ = await two_codon_run(tmp_path)
    seed = [m for m in got if m["type"] in SEED_EVENT_TYPES and "sourceSeq" in m]
    assert {m["type"] for m in seed} == set(SEED_EVENT_TYPES)
    for m in seed:
        validator.validate(m)


async def test_a_client_that_does_not_ask_gets_none_of_them(tmp_path: Path) -> None:
    _, seed, plain = await two_codon_run(tmp_path)
    assert not [m for m in plain if m["type"] in SEED_EVENT_TYPES]
    assert not [m for m in plain if "sourceSeq" in m]
    # It got the same journaled events as the seed client, and nothing else more.
    assert [m["seq"] for m in plain if "seq" in m] == [m["seq"] for m in seed if "seq" in m]
    assert [m for m in seed if m["type"] in SEED_EVENT_TYPES]


@pytest.mark.parametrize("value", ["yes", 1, None, [True], {"on": True}])
async def test_a_malformed_seed_events_value_is_refused_with_where_and_what(
    tmp_path: Path, value: Any
) -> None:
    async with running(tmp_path) as h, raw(h.url) as c:
        await c.send(
            {
                "type": "handshake",
                "data": {"mode": "readonly", "token": READ_TOKEN, "seedEvents": value},
            }
        )
        error = await c.recv()
        assert error["type"] == "error"
        assert error["data"]["code"] == "INVALID_COMMAND"
        assert error["data"]["command"] == "handshake"
        assert "seedEvents" in error["data"]["message"]
        assert "bool" in error["data"]["message"]
        # The connection stays open: a good handshake goes through.
        response, _ = await c.handshake(seedEvents=True)
        assert response["type"] == "handshake.response"


async def test_a_resuming_seed_client_gets_the_shapes_of_the_live_events_only(
    tmp_path: Path,
) -> None:
    """Replay is Weft's own events (the journal); the seed's shapes start with
    the live stream, after the catch-up, and are made with the whole journal's
    figures (the fold was seeded from it)."""
    async with running(tmp_path, transitions=True) as h, raw(h.url) as c:
        head = h.manager.last_seq
        await c.handshake(afterSeq=0, seedEvents=True)
        replayed: list[int] = []
        while not replayed or replayed[-1] < head:
            page = await c.until("history.batch")
            replayed += [e["seq"] for e in page["data"]["events"]]
        assert replayed == list(range(1, head + 1))
        assert not [m for m in c.received if m["type"] in SEED_EVENT_TYPES]
        for event in lifecycle("r1", "c"):
            h.manager.transition(event)
        await h.manager.flush()
        while True:
            last = await c.until("state.transition", transitionType="CodonTransitioned")
            if last["data"]["transition"]["data"]["to"] == "completed":
                break
        assert last["sourceSeq"] > head
        seed = [m for m in c.received if "sourceSeq" in m]
        assert min(m["sourceSeq"] for m in seed) == head + 1
        # a and b (before the client joined) count in the run's cost.
        engine = h.store.core
        assert last["data"]["resultingState"]["totalCost"] == engine.total_cost()
        assert last["data"]["resultingState"]["runCount"] == 1
