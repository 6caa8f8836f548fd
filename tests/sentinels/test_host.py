"""Sentinels in ``weft run``: :class:`weft.sentinels.host.RuntimeSentinels`
driven by the real runtime, the fake agent and the fake model provider.

Each test writes a small hank, runs it through :class:`Runtime` and checks
the journal, the codon records and the files the sentinels wrote.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    Seen,
    codon,
    codon_records,
    fake_environment,
    journal,
    read_state,
    run_hank,
    runs_oldest_first,
    scenario,
    subprocess_environment,
    wait_for,
    weft_run_argv,
    write_file,
    write_hank,
)
from tests.sentinels.offline import without_model_keys

from weft.config.runtime import RuntimeSessionSettings
from weft.errors import StoreError
from weft.events.stream import SENTINEL_EVENT_TYPES
from weft.runtime.run.runtime import RunOutcome, RuntimeOptions


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fast fake agent, and no model key: nothing here may reach a network."""
    fake_environment(monkeypatch, tmp_path)
    without_model_keys(monkeypatch)


async def run(
    hank: Path, execution: Path, options: RuntimeOptions | None = None
) -> tuple[RunOutcome, Seen]:
    return await run_hank(hank, execution, options, check_environment=False)


def sentinel(ident: str, **fields: Any) -> dict[str, Any]:
    """An inline sentinel entry on the fake model (``settings`` goes to the entry)."""
    settings = fields.pop("settings", None)
    config: dict[str, Any] = {
        "id": ident,
        "name": f"Sentinel {ident}",
        "model": "fake/haiku",
        "trigger": {"type": "event", "on": ["tool.result"]},
        "execution": {"strategy": "immediate"},
        "userPromptText": "Events: <%= it.events.map(e => e.type).join(',') %>",
        **fields,
    }
    entry: dict[str, Any] = {"sentinelConfig": config}
    if settings is not None:
        entry["settings"] = settings
    return entry


PAUSE = "@@fake:sleep ms=200@@\n"
"""Between two writes of a file: each is looked at before the next one lands
(file.updated reports the file as it is when its tool result is committed)."""
WORK = (
    write_file("notes.md", "one")
    + PAUSE
    + "@@fake:edit path=notes.md old=one new=two@@\n"
    + PAUSE
    + write_file("notes.md", "two")  # same content again: no second event
)


async def test_sentinels_run_in_weft_run_and_their_state_and_cost_are_recorded(
    tmp_path: Path,
) -> None:
    everything = sentinel(
        "everything",
        trigger={"type": "event", "on": ["*"]},
        execution={"strategy": "count", "threshold": 1000},
        # The fake model says what the directive in the rendered prompt tells it.
        userPromptText="@@sentinel:say <%= it.events.map(e => e.type).join(' ') %>@@",
        output={"format": "text", "file": "everything.md"},
    )
    tools = sentinel("tools", settings={"outputPaths": {"lastValueFile": "out/last.json"}})
    moves = sentinel(
        "moves",
        trigger={
            "type": "event",
            "on": ["state.transition"],
            "conditions": [
                {"path": "transitionType", "operator": "equals", "value": "CodonTransitioned"}
            ],
        },
        userPromptText="@@sentinel:say <%= it.events[0].data.transition.data.to %>@@",
    )
    hank = write_hank(tmp_path / "hank", codon("a", WORK, sentinels=[everything, tools, moves]))
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)
    assert outcome.status == "completed", outcome.message

    outputs = seen.of("sentinel.output")
    by_id: dict[str, list[dict[str, Any]]] = {}
    for o in outputs:
        by_id.setdefault(o["sentinelId"], []).append(o)
    # "tools" speaks once per tool result; "everything" at each of the two
    # drains: in completing-sentinels, and after codon.completed.
    assert len(by_id["tools"]) == len(seen.of("tool.result")) == 3
    first, second = by_id["everything"]
    fed = first["content"].split()
    # It saw the codon's committed events, never a sentinel or connection event.
    assert {"tool.result", "state.transition", "file.updated"} <= set(fed)
    assert "codon.completed" in second["content"].split()
    assert not set(fed + second["content"].split()) & SENTINEL_EVENT_TYPES

    # Order (reference §4.6): loaded before the agent starts, unloaded after codon.completed.
    types = seen.types()
    assert types.index("sentinel.loaded") < types.index("codon.started")
    assert types.index("codon.completed") < types.index("sentinel.unloaded")
    # Transitions are seen as the reference's state.transition events.
    # (the move to starting is submitted before the load and committed after it)
    said = [o["content"] for o in by_id["moves"]]
    assert said == ["starting", "initializing", "running", "completing-sentinels", "completed"]
    unloaded = seen.of("sentinel.unloaded")
    assert sorted((u["sentinelId"], u["reason"]) for u in unloaded) == [
        ("everything", "codon-complete"),
        ("moves", "codon-complete"),
        ("tools", "codon-complete"),
    ]

    # The codon record holds the sealed states: spend apart from the agent's.
    record = codon_records(read_state(execution))["a"]
    states = {s["id"]: s for s in record["sentinels"]["executed"]}
    assert states["tools"]["llmCallCount"] == 3
    assert all(s["status"] == "unloaded" for s in states.values())
    assert all(s["unloadReason"] == "codon-complete" for s in states.values())
    # The record is sealed at the terminal move; what the second drain spent
    # is in its sentinel.output events and in each sentinel.unloaded's total.
    completed_at = seen.position("codon.completed")
    sealed = [d for i, (_, k, d, _) in enumerate(seen.items) if k == "sentinel.output"
              and i < completed_at]  # fmt: skip
    assert record["sentinels"]["totalCost"] == pytest.approx(
        math.fsum(o["cost"] for o in sealed), abs=1e-9
    )
    spent = math.fsum(o["cost"] for o in outputs)
    assert spent > record["sentinels"]["totalCost"] > 0
    assert math.fsum(u["finalCost"] for u in unloaded) == pytest.approx(spent, abs=1e-9)
    assert record["finalCost"] == pytest.approx(seen.of("codon.completed")[0]["cost"])

    # Files: the log under .weft, the last value where the codon settings said.
    log = execution / ".weft/sentinels/outputs/everything/everything.md"
    assert "tool.result" in log.read_text()
    assert (execution / "agentRoot/out/last.json").read_text().startswith('"')


async def test_the_last_codons_second_drain_ends_before_the_run_and_the_budget_counts_it(
    tmp_path: Path,
) -> None:
    """The second drain runs in the background between codons; the run's end
    waits for it, so its outputs come before RunCompleted and the run's
    ``budget.summary`` counts every sentinel's spend."""
    closing = sentinel(
        "closing",
        trigger={"type": "event", "on": ["codon.completed"]},
        userPromptText="@@sentinel:sleep ms=150@@ closing <%= it.codon.id %>",
    )
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "First.", sentinels=[closing]),
        codon("b", "Second.", sentinels=[closing]),
    )
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message

    types = seen.types()
    ended = seen.position("RunCompleted")
    outputs = [i for i, k in enumerate(types) if k == "sentinel.output"]
    # One per codon, on its own codon.completed: b's sentinel was loaded
    # before a's codon.completed was committed, and is not fed it.
    assert [seen.items[i][2]["codonId"] for i in outputs] == ["a", "b"]
    assert max(outputs) < ended
    assert max(seen.positions("sentinel.unloaded")) < ended
    summary = seen.of("budget.summary")[-1]
    agents = math.fsum(c["cost"] for c in seen.of("codon.completed"))
    sentinels = math.fsum(o["cost"] for o in seen.of("sentinel.output"))
    assert sentinels > 0
    assert summary["actualDollars"] == pytest.approx(agents + sentinels, abs=1e-9)


async def test_a_finished_codons_second_drain_does_not_write_the_next_codons_record(
    tmp_path: Path,
) -> None:
    """a's sentinel answers codon.completed slowly, in the background while b
    runs: its states stay a's (sealed), and b's record holds b's sentinel."""
    closing = sentinel(
        "closing",
        trigger={"type": "event", "on": ["codon.completed"]},
        userPromptText="@@sentinel:sleep ms=400@@ closing <%= it.codon.id %>",
    )
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "First.", sentinels=[closing]),
        codon(
            "b", write_file("b.md", "b") + "@@fake:sleep ms=900@@\n", sentinels=[sentinel("watch")]
        ),
    )
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    for update in seen.of("SentinelStatesUpdated"):
        ids = {s["id"] for s in update["sentinelStates"]}
        assert ids == ({"closing"} if update["codonId"] == "a" else {"watch"}), update
    records = codon_records(read_state(tmp_path / "x"))
    assert [s["id"] for s in records["b"]["sentinels"]["executed"]] == ["watch"]
    assert records["b"]["sentinels"]["executed"][0]["llmCallCount"] == 1


async def test_a_link_the_agent_makes_never_carries_a_sentinel_output_outside(
    tmp_path: Path,
) -> None:
    """The output paths pass their check at load; then the agent replaces the
    folder by a link out of the execution: the write is refused (a
    file-write-failed sentinel.error) and nothing lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    watch = sentinel(
        "watch",
        trigger={"type": "event", "on": ["codon.completed"]},
        userPromptText="@@sentinel:say leaked@@",
        settings={
            "outputPaths": {"logFile": "reports/log.md", "lastValueFile": "reports/last.json"}
        },
    )
    hank = write_hank(
        tmp_path / "hank",
        codon("a", f"@@fake:bash ln -s {outside} reports@@\n", sentinels=[watch]),
        codon("b", "Second.", sentinels=[watch]),
    )
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    assert list(outside.iterdir()) == []
    errors = [(e["sentinelId"], e["errorType"]) for e in seen.of("sentinel.error")]
    assert ("watch", "file-write-failed") in errors
    assert seen.of("sentinel.output") == []


async def test_a_quiet_sentinels_spend_counts_in_the_budget_all_the_same(tmp_path: Path) -> None:
    """reportToWebsocket says which events go out, not whether money counts:
    a sentinel with outputs and lifecycle off still spends against the
    budget, and the run's budget.summary has it."""
    quiet = sentinel("quiet", reportToWebsocket={"outputs": False, "lifecycle": False})
    hank = write_hank(tmp_path / "hank", codon("a", WORK, sentinels=[quiet]))
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    assert seen.of("sentinel.output") == []
    record = codon_records(read_state(tmp_path / "x"))["a"]
    spent = record["sentinels"]["totalCost"]
    assert spent > 0
    agents = math.fsum(c["cost"] for c in seen.of("codon.completed"))
    summary = seen.of("budget.summary")[-1]
    assert summary["actualDollars"] == pytest.approx(agents + spent, abs=1e-9)


async def test_file_updated_events_come_from_the_agents_writes_deduplicated(
    tmp_path: Path,
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", WORK))
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    updates = [(u["path"], u["action"], u.get("bytes", 0)) for u in seen.of("file.updated")]
    assert updates == [
        ("notes.md", "created", 3),
        ("notes.md", "modified", 3),
    ]  # the third write changed nothing: not reported
    created = seen.of("file.updated")[0]
    assert len(created["sha256"]) == 64
    assert created["source"]["kind"] == "tool_use"


async def test_a_condition_on_the_content_of_an_updated_file(tmp_path: Path) -> None:
    watch = sentinel(
        "watch",
        trigger={
            "type": "event",
            "on": ["file.updated"],
            "conditions": [{"path": "content", "operator": "contains", "value": "DROP"}],
        },
        userPromptText="<%= it.events[0].data.path %>",
    )
    prompt = write_file("a.sql", "SELECT 1;") + write_file("b.sql", "DROP TABLE users;")
    hank = write_hank(tmp_path / "hank", codon("a", prompt, sentinels=[watch]))
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    # Two files were written; only the one whose text matches woke the sentinel.
    assert [u["path"] for u in seen.of("file.updated")] == ["a.sql", "b.sql"]
    (output,) = seen.of("sentinel.output")
    assert output["eventCount"] == 1
    assert "content" not in seen.of("file.updated")[1]  # virtual: never journaled


async def test_a_required_sentinel_that_cannot_load_fails_its_codon(tmp_path: Path) -> None:
    keyless = sentinel(
        "keyless", model="anthropic/claude-haiku-4-5", settings={"failCodonIfNotLoaded": True}
    )
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a"), sentinels=[keyless, sentinel("fine")]),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)

    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    record = codon_records(read_state(execution))["a"]
    assert record["failedDuring"] == "starting"
    reason = record["failureReason"]
    assert reason["type"] == "sentinel_load_failure"
    assert not reason["retriable"]
    assert "keyless" in reason["message"]
    assert "ANTHROPIC_API_KEY" in reason["message"]
    assert "failCodonIfNotLoaded" in reason["message"]
    (error,) = seen.of("sentinel.error")
    assert (error["sentinelId"], error["errorType"]) == ("keyless", "load-failed")
    assert seen.of("codon.started") == []  # the agent never ran
    # The sentinel that did load is unloaded with its codon.
    assert [u["sentinelId"] for u in seen.of("sentinel.unloaded")] == ["fine"]


async def test_an_optional_sentinel_that_cannot_load_is_reported_and_the_codon_runs(
    tmp_path: Path,
) -> None:
    keyless = sentinel("keyless", model="anthropic/claude-haiku-4-5")
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a"), sentinels=[keyless]))
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    (error,) = seen.of("sentinel.error")
    assert error["errorType"] == "load-failed"
    assert "ANTHROPIC_API_KEY" in error["message"]


async def test_the_sentinel_model_setting_runs_real_model_sentinels_offline(
    tmp_path: Path,
) -> None:
    real = sentinel(
        "real", model="anthropic/claude-haiku-4-5", settings={"failCodonIfNotLoaded": True}
    )
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a"), sentinels=[real]))
    outcome, seen = await run(hank, tmp_path / "x", RuntimeOptions(sentinel_model="fake/sonnet"))
    assert outcome.status == "completed", outcome.message
    (loaded,) = seen.of("sentinel.loaded")
    assert loaded["model"] == "fake/sonnet"
    (output,) = seen.of("sentinel.output")
    assert output["model"] == "fake/sonnet"


async def test_a_continued_run_does_not_repeat_the_outputs_of_finished_codons(
    tmp_path: Path,
) -> None:
    prompt = tmp_path / "hank" / "b.md"
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a"), sentinels=[sentinel("watch")]),
        codon(
            "b",
            prompt_file="b.md",
            onFailure="abort",
            sentinels=[sentinel("watch")],
        ),
        files={"b.md": write_file("b.md", "half") + scenario("error_result")},
    )
    execution = tmp_path / "x"
    # The session supervisor hands the failure over at once (no resume).
    once = RuntimeOptions(sessions=RuntimeSessionSettings(max_total_errors=1))
    first, _ = await run(hank, execution, once)
    assert first.status == "failed"
    prompt.write_text(write_file("b.md", "b"))
    second, seen = await run(hank, execution, RuntimeOptions())
    assert second.status == "completed", second.message

    # The second run fed its sentinels only its own events: codon a's output is
    # in the journal once, codon b's attempt of each run has its own.
    per_codon: dict[str, int] = {}
    for kind, data in journal(execution):
        if kind == "sentinel.output":
            per_codon[data["codonId"]] = per_codon.get(data["codonId"], 0) + 1
    assert per_codon["a"] == 1
    assert {o["codonId"] for o in seen.of("sentinel.output")} == {"b"}
    runs = runs_oldest_first(read_state(execution))
    assert [r["status"] for r in runs] == ["failed", "completed"]


def _journaled(execution: Path, kind: str) -> bool:
    """Whether the execution's journal holds an event of ``kind`` yet."""
    if not (execution / ".weft" / "weft.db").exists():
        return False
    try:
        return any(k == kind for k, _ in journal(execution))
    except StoreError:  # created, no table yet
        return False


def test_a_crash_in_the_middle_of_a_sentinel_call_loses_nothing_journaled(
    tmp_path: Path,
) -> None:
    """weft is SIGKILLed while a sentinel's model call is under way (in the
    drain of completing-sentinels): what was journaled stays, the next run
    crashes-marks the run and runs the codon again, and its sentinel speaks
    once for that attempt."""
    slow = {
        "sentinelConfig": "slow.json",
        "settings": {"reportToWebsocket": {"triggers": True}},
    }
    config = {
        "id": "slow",
        "name": "Slow",
        "model": "fake/haiku",
        "trigger": {"type": "event", "on": ["tool.result"]},
        "execution": {"strategy": "count", "threshold": 100},
        "userPromptFile": "slow.md",
        "output": {"format": "jsonl", "file": "slow.jsonl"},
    }
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a"), sentinels=[slow]),
        files={
            "slow.json": json.dumps(config),
            "slow.md": "@@sentinel:sleep ms=60000@@ <%= it.events.length %> results",
        },
    )
    execution = tmp_path / "x"
    env = subprocess_environment(tmp_path)
    proc = subprocess.Popen(
        weft_run_argv(hank, execution),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _journaled(execution, "sentinel.triggered"), timeout=60,
                 what="the sentinel's trigger")  # fmt: skip
    finally:
        proc.kill()
        proc.wait(timeout=60)
    before = journal(execution)
    kinds = [k for k, _ in before]
    assert kinds.count("sentinel.loaded") == kinds.count("sentinel.triggered") == 1
    assert "sentinel.output" not in kinds  # the call never returned
    assert "tool.result" in kinds  # what the sentinel was fed is there too

    (tmp_path / "hank" / "slow.md").write_text("@@sentinel:say seen@@")
    again = subprocess.run(
        weft_run_argv(hank, execution), env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stdout + again.stderr
    after = journal(execution)
    assert after[: len(before)] == before  # nothing journaled was lost or rewritten
    outputs = [d for k, d in after if k == "sentinel.output"]
    assert [o["content"] for o in outputs] == ["seen"]  # once, for the second attempt
    first, second = runs_oldest_first(read_state(execution))
    assert first["status"] == "crashed"
    assert second["status"] == "completed"
    log = execution / ".weft" / "sentinels" / "outputs" / "slow" / "slow.jsonl"
    assert len(log.read_text().splitlines()) == 1
