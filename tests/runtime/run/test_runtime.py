"""The runtime end to end, on the real fake agent.

Each test writes a small hank, runs it through :class:`Runtime` and checks
what the run left: the state recovered from the store, the journal items the
listeners saw, the argv the fake recorded, the checkpoint commits (read with
pygit2) and the workspace.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from tests.builders import run_started
from tests.runtime.hanks import (
    Seen,
    attempts,
    checkpoint_message,
    checkpoint_parent,
    checkpoint_tree,
    codon,
    codon_records,
    delete_file,
    fake_environment,
    journal,
    loop,
    pid_running,
    read_state,
    recorded,
    run_hank,
    runs_oldest_first,
    scenario,
    workspace_files,
    write_file,
    write_hank,
)

from weft.config.runtime import RuntimeSessionSettings
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.store import ExecutionStore

Hook = Callable[[Runtime], Callable[[str, dict[str, Any]], None]]

_background: set[asyncio.Task[Any]] = set()
"""Commands sent from listeners; held so they are not collected before they run."""


def spawn(command: Coroutine[Any, Any, Any]) -> None:
    """Runs ``command`` (a Runtime command) soon, from a listener."""
    task = asyncio.get_running_loop().create_task(command)
    _background.add(task)
    task.add_done_callback(_background.discard)


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test runs the fast fake agent with its sessions under ``tmp_path``."""
    fake_environment(monkeypatch, tmp_path)


async def run(
    hank: Path,
    execution: Path,
    options: RuntimeOptions | None = None,
    *,
    hooks: tuple[Hook, ...] = (),
) -> tuple[RunOutcome, Seen]:
    """Prepares (or resumes) ``execution`` for ``hank`` and runs it to the end."""
    return await run_hank(hank, execution, options, hooks=hooks)


def when(
    kind: str, codon_id: str, action: Callable[[Runtime], Any], *, to: str | None = None
) -> Hook:
    """A hook that calls ``action(runtime)`` (a coroutine) once, at the first
    ``kind`` item of ``codon_id`` (a CodonTransitioned one: moving ``to``)."""

    def hook(runtime: Runtime) -> Callable[[str, dict[str, Any]], None]:
        fired = False

        def on(item_kind: str, data: dict[str, Any]) -> None:
            nonlocal fired
            if fired or item_kind != kind or data.get("codonId") != codon_id:
                return
            if to is not None and data.get("to") != to:
                return
            fired = True
            spawn(action(runtime))

        return on

    return hook


def when_running(codon_id: str, action: Callable[[Runtime], Any]) -> Hook:
    """A hook that calls ``action(runtime)`` once ``codon_id`` is running."""
    return when("CodonTransitioned", codon_id, action, to="running")


def after_work(codon_id: str, action: Callable[[Runtime], Any]) -> Hook:
    """A hook that calls ``action(runtime)`` once ``codon_id``'s first tool call
    (a directive's file work) has its result."""
    return when("tool.result", codon_id, action)


def cost_of(execution: Path, run_id: str, codon_id: str) -> float | None:
    """The core's cost of a codon's latest record in a run."""
    store = ExecutionStore.open(execution, readonly=True)
    try:
        return store.core.codon_cost(run_id, codon_id)
    finally:
        store.journal.close()


LIFECYCLE = ["starting", "initializing", "running", "completing-sentinels", "completed"]


# --------------------------------------------------------------------------- sessions


async def test_three_codons_fresh_then_continue_previous_then_fresh(tmp_path: Path) -> None:
    rec = {name: tmp_path / f"argv-{name}.json" for name in "abc"}
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "Start the notes.\n" + write_file("notes.md", "one"), record=rec["a"]),
        codon(
            "b",
            "Extend the notes.\n" + write_file("more.md", "two"),
            mode="continue-previous",
            record=rec["b"],
        ),
        codon(
            "c",
            "Review the notes.\n" + write_file("review.md", "three"),
            model="fake/opus",
            record=rec["c"],
        ),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)

    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    assert outcome.codons == {"a": "completed", "b": "completed", "c": "completed"}
    state = read_state(execution)
    (only_run,) = state["runs"]
    assert only_run["status"] == "completed"
    assert only_run["startingConditions"]["type"] == "fresh"
    records = codon_records(state)
    for name in "abc":
        assert seen.moves(name) == LIFECYCLE, name
        assert records[name]["status"] == "completed"
        assert records[name]["resultMessageReceived"] is True
    session = {name: records[name]["claudeSessionId"] for name in "abc"}

    argv = {name: recorded(path)["argv"] for name, path in rec.items()}
    assert f"--resume={session['a']}" in argv["b"]
    assert not any(arg.startswith("--resume") for arg in argv["a"] + argv["c"])
    assert records["b"]["previousSessionId"] == session["a"]
    assert session["c"] not in (session["a"], session["b"])
    assert argv["c"][argv["c"].index("--model") + 1] != argv["a"][argv["a"].index("--model") + 1]
    # The resumed session saw the earlier prompt: the fake quotes it in its reply.
    replies = [d["content"] for d in seen.of("assistant.action") if d["codonId"] == "b"]
    assert any("Start the notes." in text for text in replies), replies

    assert workspace_files(execution) == {"notes.md": "one", "more.md": "two", "review.md": "three"}
    started = [d["codonId"] for d in seen.of("CodonStarted")]
    assert started == ["a", "b", "c"]
    assert seen.types()[-3:] == ["RunCompleted", "state.snapshot", "server.idle"]
    # The files an agent wrote are reported before its codon goes on.
    for name, file in (("a", "notes.md"), ("b", "more.md"), ("c", "review.md")):
        updated = [
            i for i, (_, kind, data, _) in enumerate(seen.items)
            if kind == "file.updated" and data.get("path") == file
        ]  # fmt: skip
        assert updated, f"no file.updated for {file}"
        assert updated[0] < seen.position("CodonTransitioned", name, to="completed"), name


async def test_checkpoints_hold_exactly_the_covered_files_deletions_included(
    tmp_path: Path,
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            write_file("keep/x.md", "x")
            + write_file("keep/sub/y.txt", "y")
            + write_file("other.md", "not covered yet")
            + write_file("scratch.log", "never covered"),
            files=["keep/**"],
        ),
        codon(
            "b",
            delete_file("keep/x.md") + write_file("other.md", "covered now"),
            files=["other.md"],
        ),
        codon("c", write_file("keep/sub/y.txt", "y2") + write_file("keep/z.md", "z"), files=[]),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)
    assert outcome.status == "completed"
    records = codon_records(read_state(execution))
    sha = {name: records[name]["completionCheckpoint"] for name in "abc"}

    assert checkpoint_tree(execution, sha["a"]) == {"keep/x.md": b"x", "keep/sub/y.txt": b"y"}
    # b's patterns are the union of a's and its own; x.md is gone from the tree.
    assert checkpoint_tree(execution, sha["b"]) == {
        "keep/sub/y.txt": b"y",
        "other.md": b"covered now",
    }
    assert checkpoint_tree(execution, sha["c"]) == {
        "keep/sub/y.txt": b"y2",
        "keep/z.md": b"z",
        "other.md": b"covered now",
    }
    assert checkpoint_parent(execution, sha["b"]) == sha["a"]
    assert checkpoint_parent(execution, sha["c"]) == sha["b"]
    assert checkpoint_parent(execution, sha["a"]) == read_state(execution)["initialCheckpoint"]
    assert "scratch.log" in workspace_files(execution)
    completed = {d["codonId"]: d["checkpointSha"] for d in seen.of("codon.completed")}
    assert completed == sha
    assert outcome.checkpoints == 3


async def test_a_deleted_covered_file_is_gone_from_the_next_checkpoint(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("keep/x.md", "x") + write_file("keep/y.md", "y"), files=["keep/**"]),
        codon("b", delete_file("keep/x.md"), files=["keep/**"]),
        codon("c", delete_file("keep/y.md") + write_file("n.md", "n"), files=["n.md"]),
    )
    execution = tmp_path / "x"
    outcome, _ = await run(hank, execution)
    assert outcome.status == "completed"
    assert workspace_files(execution) == {"n.md": "n"}
    records = codon_records(read_state(execution))
    assert checkpoint_tree(execution, records["b"]["completionCheckpoint"]) == {"keep/y.md": b"y"}
    assert checkpoint_tree(execution, records["c"]["completionCheckpoint"]) == {"n.md": b"n"}


# --------------------------------------------------------------------------- rig setup


async def test_an_allowed_rig_failure_goes_on_and_a_failing_rig_stops_before_the_agent(
    tmp_path: Path,
) -> None:
    rec_b = tmp_path / "argv-b.json"
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            write_file("a.md", "a"),
            rigSetup=[
                {
                    "type": "command",
                    "command": {"run": "echo tried > tried.md; exit 3"},
                    "allowFailure": True,
                },
                {"type": "command", "command": {"run": "echo set > rig.md"}},
            ],
        ),
        codon(
            "b",
            write_file("b.md", "b"),
            record=rec_b,
            rigSetup=[{"type": "command", "command": {"run": "echo boom >&2; exit 4"}}],
        ),
        codon("c", write_file("c.md", "c")),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)

    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert outcome.codons == {"a": "completed", "b": "failed"}
    records = codon_records(read_state(execution))
    a, b = records["a"], records["b"]
    assert a["status"] == "completed"
    assert checkpoint_tree(execution, a["rigSetupCheckpoint"]) == {
        "rig.md": b"set\n",
        "tried.md": b"tried\n",
    }
    assert b["status"] == "failed"
    assert b["failedDuring"] == "preparing"
    assert b["failureReason"]["type"] == "rig_setup"
    assert "claudePid" not in b
    assert not rec_b.exists(), "the agent must not start after a failed rig"
    assert "c" not in records
    assert seen.moves("b") == ["failed"]
    assert not (execution / "agentRoot" / "b.md").exists()


async def test_ignore_rig_failures_runs_the_agent_anyway(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            write_file("a.md", "a"),
            rigSetup=[{"type": "command", "command": {"run": "exit 4"}}],
        ),
    )
    execution = tmp_path / "x"
    outcome, _ = await run(hank, execution, RuntimeOptions(ignore_rig_failures=True))
    assert outcome.status == "completed"
    assert workspace_files(execution) == {"a.md": "a"}


# --------------------------------------------------------------------------- failure policies

POLICY_ONLY = RuntimeOptions(sessions=RuntimeSessionSettings(max_total_errors=1))
"""The session supervisor gives up at the first failure, so the hank's
``onFailure`` / ``retryConfig`` act on it (tests/runtime/codon/test_sessions.py
covers the cool-downs and resumes before that)."""


async def test_abort_ends_the_run_at_the_failed_codon(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", write_file("b.md", "half") + scenario("error_result"), onFailure="abort"),
        codon("c", write_file("c.md", "c")),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution, POLICY_ONLY)

    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert outcome.codons == {"a": "completed", "b": "failed"}
    state = read_state(execution)
    assert runs_oldest_first(state)[0]["status"] == "failed"
    b = codon_records(state)["b"]
    assert b["failedDuring"] == "running"
    assert b["failureReason"] == {
        "type": "error_result",
        "retriable": True,
        "message": "Tool execution crashed",
    }
    assert b["exitCode"] == 1
    assert "Tool execution crashed" in outcome.message
    # The error checkpoint keeps the half-done work for inspection.
    assert checkpoint_tree(execution, b["errorCheckpoint"])["b.md"] == b"half"
    assert [d["codonId"] for d in seen.of("CodonStarted")] == ["a", "b"]
    assert seen.of("codon.retry") == []
    assert "RunFailed" in seen.types()


async def test_retry_waits_the_backoff_and_gives_up_after_max_attempts(tmp_path: Path) -> None:
    delay = 120
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            scenario("crash_mid_run"),
            onFailure="retry",
            retryConfig={"maxAttempts": 3, "delayMs": delay},
        ),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution, POLICY_ONLY)

    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    tries = attempts(read_state(execution))
    assert [t["codonId"] for t in tries] == ["a", "a", "a"]
    assert all(t["status"] == "failed" for t in tries)
    assert all(t["failureReason"]["type"] == "crash_mid_run" for t in tries)
    assert all(t["failureReason"]["retriable"] is True for t in tries)

    retries = seen.of("codon.retry")
    assert [(r["attempt"], r["maxAttempts"], r["delayMs"]) for r in retries] == [
        (2, 3, delay),
        (3, 3, 2 * delay),
    ]
    # Each new attempt starts no sooner than the announced delay after the failure.
    steps = [(kind, t) for _, kind, _, t in seen.items if kind in ("codon.retry", "CodonStarted")]
    assert [kind for kind, _ in steps] == [
        "CodonStarted",
        "codon.retry",
        "CodonStarted",
        "codon.retry",
        "CodonStarted",
    ]
    waited_ms = [(steps[i + 1][1] - steps[i][1]) / 1e6 for i in (1, 3)]
    # A few ms of slack: the event loop's timers and the wall clock differ slightly.
    assert waited_ms[0] >= delay - 5
    assert waited_ms[1] >= 2 * delay - 5


async def test_retry_succeeds_once_the_failure_goes_away(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    prompt = hank_dir / "prompts" / "a.md"
    hank = write_hank(
        hank_dir,
        codon(
            "a",
            prompt_file="prompts/a.md",
            onFailure="retry",
            retryConfig={"maxAttempts": 3, "delayMs": 200},
        ),
        codon("b", write_file("b.md", "b")),
        files={"prompts/a.md": write_file("a.md", "first try") + scenario("crash_mid_run")},
    )

    def heal(_: Runtime) -> Callable[[str, dict[str, Any]], None]:
        def on(kind: str, data: dict[str, Any]) -> None:
            # The prompt is read again for each attempt, after the retry delay.
            if kind == "codon.retry":
                prompt.write_text(write_file("a.md", "second try"))

        return on

    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution, POLICY_ONLY, hooks=(heal,))

    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    tries = attempts(read_state(execution))
    assert [(t["codonId"], t["status"]) for t in tries] == [
        ("a", "failed"),
        ("a", "completed"),
        ("b", "completed"),
    ]
    assert len(seen.of("codon.retry")) == 1
    assert checkpoint_tree(execution, tries[1]["completionCheckpoint"]) == {"a.md": b"second try"}
    # The retry's checkpoints continue the run's branch after the failed attempt's.
    failed_sha = tries[0]["errorCheckpoint"]
    assert checkpoint_parent(execution, tries[1]["completionCheckpoint"]) == failed_sha


async def test_retry_does_not_repeat_a_failure_that_cannot_be_retried(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            scenario("auth_error"),
            onFailure="retry",
            retryConfig={"maxAttempts": 3, "delayMs": 10},
        ),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)
    assert outcome.exit_code == 1
    (only,) = attempts(read_state(execution))
    assert only["failureReason"]["type"] == "auth"
    assert only["failureReason"]["retriable"] is False
    assert seen.of("codon.retry") == []


async def test_ignore_records_the_failure_and_goes_on(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", scenario("crash_mid_run"), onFailure="ignore"),
        codon("c", write_file("c.md", "c")),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution, POLICY_ONLY)

    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    assert outcome.codons == {"a": "completed", "b": "failed", "c": "completed"}
    state = read_state(execution)
    assert runs_oldest_first(state)[0]["status"] == "completed"
    b = codon_records(state)["b"]
    assert b["status"] == "failed"
    assert b["failureReason"]["type"] == "crash_mid_run"
    assert b["failedDuring"] == "running"
    assert any("onFailure=ignore" in d["message"] for d in seen.of("info"))
    assert workspace_files(execution) == {"a.md": "a", "c.md": "c"}


async def test_force_stop_fails_the_codon_for_good(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            scenario("hang_after_init"),
            onFailure="retry",
            retryConfig={"maxAttempts": 3, "delayMs": 10},
        ),
        codon("b"),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(
        hank, execution, hooks=(when_running("a", lambda rt: rt.command("codon.forceStop")),)
    )
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    (a,) = attempts(read_state(execution))
    assert a["failureReason"]["type"] == "force_stopped"
    assert a["failureReason"]["retriable"] is False
    assert a["failedDuring"] == "running"
    assert not pid_running(a["claudePid"])
    assert seen.of("codon.retry") == []


# --------------------------------------------------------------------------- skip


async def test_skip_mid_codon_costs_nothing_checkpoints_and_goes_on(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "before the skip") + scenario("hang_after_init")),
        codon("b", write_file("b.md", "b")),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(
        hank, execution, hooks=(after_work("a", lambda rt: rt.command("codon.skip")),)
    )

    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    assert outcome.codons == {"a": "skipped", "b": "completed"}
    state = read_state(execution)
    run_id = runs_oldest_first(state)[0]["runId"]
    a, b = codon_records(state)["a"], codon_records(state)["b"]
    assert a["status"] == "skipped"
    assert a["skippedDuring"] == "running"
    assert checkpoint_tree(execution, a["skipCheckpoint"]) == {"a.md": b"before the skip"}
    assert "skip" in checkpoint_message(execution, a["skipCheckpoint"]).lower()
    assert not pid_running(a["claudePid"])
    # The agent did spend before the skip, but a skipped codon costs nothing.
    assert a.get("partialCost", 0) > 0
    assert cost_of(execution, run_id, "a") == 0
    (skipped,) = [d for d in seen.of("codon.completed") if d["codonId"] == "a"]
    assert skipped["cost"] == 0
    assert skipped["status"] == "skipped"
    assert outcome.cost == pytest.approx(b["finalCost"])
    assert b["status"] == "completed"
    assert checkpoint_parent(execution, b["completionCheckpoint"]) == a["skipCheckpoint"]


async def test_skip_during_a_long_rig_command_stops_it_at_once(tmp_path: Path) -> None:
    marker = tmp_path / "rig-finished"
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            write_file("a.md", "never written"),
            rigSetup=[
                {
                    "type": "command",
                    "command": {"run": f"echo started; sleep 30; touch {marker}"},
                }
            ],
        ),
        codon("b", write_file("b.md", "b")),
    )
    execution = tmp_path / "x"
    started = time.monotonic()
    outcome, _ = await run(
        hank, execution, hooks=(when("rig.output", "a", lambda rt: rt.command("codon.skip")),)
    )

    assert time.monotonic() - started < 15
    assert outcome.codons == {"a": "skipped", "b": "completed"}
    a = codon_records(read_state(execution))["a"]
    assert a["skippedDuring"] == "preparing"
    assert "claudePid" not in a  # the agent never started
    assert not marker.exists()
    assert workspace_files(execution) == {"b.md": "b"}


# --------------------------------------------------------------------------- loops


async def test_a_loop_expands_one_iteration_at_a_time(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        loop(
            "l",
            codon("x", "@@fake:append path=log.md@@\nx\n@@end@@\n"),
            codon("y", "@@fake:append path=log.md@@\ny\n@@end@@\n"),
            limit=3,
        ),
        codon("z", write_file("z.md", "z")),
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)

    assert outcome.status == "completed"
    expected = ["x#0", "y#0", "x#1", "y#1", "x#2", "y#2", "z"]
    assert [d["codonId"] for d in seen.of("CodonStarted")] == expected
    (started,) = seen.of("RunStarted")
    assert [e["codonId"] for e in started["executionPlan"]] == ["x#0", "y#0", "z"]

    extended = seen.of("PlanExtended")
    assert [e["afterCodonId"] for e in extended] == ["y#0", "y#1"]
    assert [[x["codonId"] for x in e["entries"]] for e in extended] == [
        ["x#1", "y#1"],
        ["x#2", "y#2"],
    ]
    for n, here in enumerate(seen.positions("PlanExtended")):
        # Planned after the iteration's last codon completed, before the next one starts,
        # and nothing of the next iteration while this one still runs.
        mid = seen.position("CodonTransitioned", f"x#{n}", to="completed")
        done = seen.position("CodonTransitioned", f"y#{n}", to="completed")
        nxt = seen.position("CodonStarted", f"x#{n + 1}")
        assert mid < done < here < nxt

    iterations = seen.of("loop.iteration.completed")
    assert [(i["iteration"], i["isFinal"]) for i in iterations] == [
        (0, False),
        (1, False),
        (2, True),
    ]
    assert iterations[-1]["terminationReason"] == "iteration_limit"
    state = read_state(execution)
    assert [e["codonId"] for e in state["executionPlan"]] == expected
    assert workspace_files(execution)["log.md"].split() == ["x", "y"] * 3


# --------------------------------------------------------------------------- stop and continue


async def test_graceful_stop_fails_the_codon_retriably_and_the_next_run_continues(
    tmp_path: Path,
) -> None:
    hank_dir = tmp_path / "hank"
    prompt = hank_dir / "prompts" / "b.md"
    hank = write_hank(
        hank_dir,
        codon("a", write_file("a.md", "a"), files=["a.md"]),
        codon("b", prompt_file="prompts/b.md", files=["b/**"]),
        codon("c", write_file("c.md", "c")),
        files={
            "prompts/b.md": write_file("b/partial.md", "half") + scenario("hang_after_init"),
        },
    )
    execution = tmp_path / "x"
    outcome, _ = await run(hank, execution, hooks=(after_work("b", lambda rt: rt.stop()),))

    assert (outcome.status, outcome.exit_code) == ("stopped", 130)
    state = read_state(execution)
    first = runs_oldest_first(state)[0]
    # Stopped by you, not failed: journaled as RunStopped, b stays to do.
    assert first["status"] == "stopped"
    assert first["stop"] == {
        "by": "user",
        "forced": False,
        "reason": "stopped by you",
        "codonId": "b",
    }
    b = codon_records(state)["b"]
    assert b["failureReason"]["type"] == "interrupted"
    assert b["failureReason"]["retriable"] is True
    assert b["failedDuring"] == "running"
    assert checkpoint_tree(execution, b["errorCheckpoint"]) == {
        "a.md": b"a",
        "b/partial.md": b"half",
    }
    assert not pid_running(b["claudePid"])
    assert "c" not in codon_records(state)
    assert not (execution / ".weft" / "runtime.lock").exists()

    prompt.write_text(write_file("b/done.md", "whole"))
    outcome2, seen2 = await run(hank, execution)
    assert (outcome2.status, outcome2.exit_code) == ("completed", 0)
    assert outcome2.codons == {"b": "completed", "c": "completed"}
    state = read_state(execution)
    second = runs_oldest_first(state)[1]
    conditions = second["startingConditions"]
    assert conditions["type"] == "continuation"
    assert conditions["source"]["runId"] == first["runId"]
    assert conditions["source"]["afterCodon"] == "a"
    assert (
        conditions["source"]["checkpointSha"] == codon_records(state)["a"]["completionCheckpoint"]
    )
    # b's half-done file (covered by b's patterns only) was put back to a's
    # checkpoint before b ran again.
    assert workspace_files(execution) == {"a.md": "a", "b/done.md": "whole", "c.md": "c"}
    assert [d["codonId"] for d in seen2.of("CodonStarted")] == ["b", "c"]


async def test_a_stop_in_the_middle_of_a_codon_ends_the_run_as_stopped(
    tmp_path: Path,
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a") + scenario("hang_after_init")),
        codon("b"),
    )
    execution = tmp_path / "x"
    outcome, _ = await run(hank, execution, hooks=(after_work("a", lambda rt: rt.stop()),))
    assert codon_records(read_state(execution))["a"]["failureReason"]["type"] == "interrupted"
    assert outcome.status == "stopped"
    assert outcome.exit_code == 128 + signal.SIGINT
    ended = runs_oldest_first(read_state(execution))[0]
    assert (ended["status"], ended["stop"]["by"], ended["stop"]["codonId"]) == (
        "stopped",
        "user",
        "a",
    )


async def test_a_stop_between_codons_ends_the_run_as_stopped(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank", codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b"))
    )

    def next_then_stop(runtime: Runtime) -> Callable[[str, dict[str, Any]], None]:
        waits = 0

        def on(kind: str, data: dict[str, Any]) -> None:
            nonlocal waits
            if kind == "server.idle":
                waits += 1
                spawn(runtime.command("codon.next") if waits == 1 else runtime.stop())

        return on

    execution = tmp_path / "x"
    outcome, seen = await run(
        hank, execution, RuntimeOptions(autostart=False), hooks=(next_then_stop,)
    )
    assert (outcome.status, outcome.exit_code) == ("stopped", 128 + signal.SIGINT)
    assert outcome.codons == {"a": "completed"}
    assert [d["codonId"] for d in seen.of("CodonStarted")] == ["a"]
    ended = runs_oldest_first(read_state(execution))[0]
    # Nothing was running: the next codon (b) is what stays to do.
    assert (ended["status"], ended["stop"]["by"], ended["stop"]["codonId"]) == (
        "stopped",
        "user",
        "b",
    )


async def test_a_finished_execution_has_nothing_to_do(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    first, _ = await run(hank, execution)
    assert first.exit_code == 0
    again, seen = await run(hank, execution)
    assert (again.status, again.exit_code) == ("nothing_to_do", 0)
    assert seen.of("RunStarted") == []
    assert len(read_state(execution)["runs"]) == 1


async def test_without_autostart_each_codon_waits_for_codon_next(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank", codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b"))
    )

    def step(runtime: Runtime) -> Callable[[str, dict[str, Any]], None]:
        def on(kind: str, data: dict[str, Any]) -> None:
            if kind != "server.idle":
                return
            if data["reason"] == "all-codons-completed":
                # Manual mode stays up until it is told to stop.
                spawn(runtime.command("server.shutdown"))
            else:
                # Nothing starts until the command comes.
                asyncio.get_running_loop().call_later(
                    0.05, lambda: spawn(runtime.command("codon.next"))
                )

        return on

    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution, RuntimeOptions(autostart=False), hooks=(step,))
    assert outcome.status == "completed"
    kinds = [k for k in seen.types() if k in ("server.idle", "CodonStarted")]
    assert kinds == ["server.idle", "CodonStarted", "server.idle", "CodonStarted", "server.idle"]
    idle = [d["reason"] for d in seen.of("server.idle")]
    assert idle == ["startup", "codon-completed", "all-codons-completed"]
    assert outcome.exit_code == 0


async def test_every_event_reaches_the_journal_in_listener_order(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", scenario("crash_mid_run"), onFailure="ignore"),
    )
    execution = tmp_path / "x"
    _, seen = await run(hank, execution)
    assert [(k, d) for _, k, d, _ in seen.items] == journal(execution)


async def test_a_new_execution_opens_its_checkpoint_repository_without_repairs(
    tmp_path: Path,
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    _, seen = await run(hank, execution)
    assert [p.name for p in (execution / ".weft").iterdir() if "quarantine" in p.name] == []
    assert not any("damaged" in d["message"] for d in seen.of("info"))


async def test_a_refused_transition_ends_the_run_as_an_internal_error(tmp_path: Path) -> None:
    # The runtime is the only writer: a refusal means its picture of the state
    # is wrong. It hears refusals as "error" items (its listener takes no other).
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")), codon("b"))

    async def refused(runtime: Runtime) -> None:
        assert runtime._manager is not None
        runtime._manager.transition(run_started("another"))  # one run is running already

    outcome, _ = await run(hank, tmp_path / "x", hooks=(when_running("a", refused),))
    assert outcome.status == "failed"
    assert outcome.message is not None
    assert outcome.message.startswith("internal error: RunStarted was refused"), outcome.message
