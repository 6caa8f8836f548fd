"""Rollback and recovery on the fake agent: the work tree equals the target
commit, a continuation run starts there, the thread supersedes what was
undone, and refusals change nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pygit2
import pytest
from tests.runtime.hanks import (
    checkpoint_tree,
    codon,
    codon_records,
    fake_environment,
    journal,
    read_state,
    run_hank,
    runs_oldest_first,
    scenario,
    workspace_files,
    write_file,
    write_hank,
)

from weft.cli import main
from weft.config import load_hank
from weft.plan import ExecutionPlan
from weft.runtime.run.rollback import possibly_started
from weft.runtime.run.runtime import RunOutcome
from weft.store import ExecutionStore


@pytest.fixture(autouse=True)
def _fast_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def run(hank: Path, execution: Path, *, changed: bool = False) -> RunOutcome:
    outcome: RunOutcome = (await run_hank(hank, execution, yes=changed))[0]
    return outcome


def thread_of(execution: Path) -> list[tuple[str, str]]:
    store = ExecutionStore.open(execution, readonly=True)
    try:
        thread = store.core.execution_thread(checkpoints=None, target_run_id=None)
        return [(tc.codon_id, tc.run_id) for tc in thread.codons]
    finally:
        store.journal.close()


def three_codons(tmp_path: Path, *, fail_c: bool = False) -> Path:
    return write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "A"), files=["*.md"]),
        codon("b", write_file("b.md", "B"), files=["*.md"]),
        codon(
            "c",
            write_file("c.md", "C") + (scenario("auth_error") if fail_c else ""),
            files=["*.md"],
        ),
    )


async def test_rollback_to_a_codon_restores_its_tree_and_the_next_run_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = three_codons(tmp_path)
    execution = tmp_path / "x"
    assert (await run(hank, execution)).status == "completed"
    first = codon_records(read_state(execution))
    (execution / "agentRoot" / "stray.md").write_text("made by hand after the run")

    assert await asyncio.to_thread(main, ["rollback", str(execution), "--codon", "a"]) == 0
    assert "superseded" in capsys.readouterr().out
    # Exactly the target's covered files: b.md, c.md and the stray file are gone.
    assert workspace_files(execution) == {"a.md": "A"}
    assert checkpoint_tree(execution, first["a"]["completionCheckpoint"]) == {"a.md": b"A"}

    state = read_state(execution)
    runs = runs_oldest_first(state)
    assert len(runs) == 2
    conditions = runs[1]["startingConditions"]
    assert conditions["reason"] == "rollback"
    assert conditions["source"] == {
        "runId": runs[0]["runId"],
        "afterCodon": "a",
        "checkpointSha": first["a"]["completionCheckpoint"],
    }
    assert [codon_id for codon_id, _ in thread_of(execution)] == ["a"]

    # The next run continues after a: b and c run again in a third run.
    outcome = await run(hank, execution)
    assert outcome.codons == {"b": "completed", "c": "completed"}
    runs = runs_oldest_first(read_state(execution))
    assert [c for c, _ in thread_of(execution)] == ["c", "b", "a"]
    assert {run_id for _, run_id in thread_of(execution)} == {runs[0]["runId"], runs[2]["runId"]}
    # History is never deleted: the first run still holds its three records.
    assert [r["codonId"] for r in runs[0]["codons"]] == ["a", "b", "c"]


async def test_a_failed_thread_rolls_back_to_its_last_success_on_the_next_run(
    tmp_path: Path,
) -> None:
    execution = tmp_path / "x"
    outcome = await run(three_codons(tmp_path, fail_c=True), execution)
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    # What a half-done attempt leaves behind: covered by the patterns, in no checkpoint.
    (execution / "agentRoot" / "half-done.md").write_text("partial")

    fixed = three_codons(tmp_path)  # the same hank without the failure
    outcome = await run(fixed, execution, changed=True)
    assert outcome.codons == {"c": "completed"}
    runs = runs_oldest_first(read_state(execution))
    assert runs[1]["startingConditions"]["reason"] == "rollback"
    assert runs[1]["startingConditions"]["source"]["afterCodon"] == "b"
    assert [c for c, _ in thread_of(execution)] == ["c", "b", "a"]
    assert workspace_files(execution) == {"a.md": "A", "b.md": "B", "c.md": "C"}


async def test_rollback_to_a_rig_setup_checkpoint_reruns_that_codon(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "a",
            write_file("work.md", "agent work"),
            files=["*.md", "rig.txt"],
            rigSetup=[{"type": "command", "command": {"run": "echo rig > rig.txt"}}],
        ),
        codon("b", write_file("b.md", "B"), files=["*.md"]),
    )
    execution = tmp_path / "x"
    assert (await run(hank, execution)).status == "completed"

    code = await asyncio.to_thread(
        main, ["rollback", str(execution), "--codon", "a", "--type", "rig-setup"]
    )
    assert code == 0
    assert workspace_files(execution) == {"rig.txt": "rig\n"}
    runs = runs_oldest_first(read_state(execution))
    assert runs[1]["startingConditions"]["source"]["afterCodon"] is None

    outcome = await run(hank, execution)
    assert outcome.codons == {"a": "completed", "b": "completed"}


async def test_refusals_change_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hank = three_codons(tmp_path)
    execution = tmp_path / "x"
    assert (await run(hank, execution)).status == "completed"
    before = read_state(execution)
    files = workspace_files(execution)

    for args, message in [
        (["--codon", "nope"], "not on the execution thread"),
        (["--codon", "a", "--type", "rig-setup"], "has no rig-setup checkpoint"),
        (["--checkpoint", "0000000"], "no confirmed checkpoint starts with"),
        (["--checkpoint", "ab"], "at least 4 characters"),
    ]:
        assert await asyncio.to_thread(main, ["rollback", str(execution), *args]) == 1
        assert message in capsys.readouterr().err
    assert read_state(execution)["runs"] == before["runs"]
    assert workspace_files(execution) == files


async def test_thread_and_checkpoints_commands_print_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    execution = tmp_path / "x"
    assert (await run(three_codons(tmp_path), execution)).status == "completed"
    assert await asyncio.to_thread(main, ["rollback", str(execution), "--last-success"]) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["thread", str(execution)]) == 0
    out = capsys.readouterr().out
    assert "next codon: -" in out  # rolled back to c itself: nothing left to run
    assert await asyncio.to_thread(main, ["checkpoints", str(execution)]) == 0
    header, *listed = capsys.readouterr().out.splitlines()
    assert header.startswith("TIME")
    assert len(listed) == 3
    assert all("thread" in line for line in listed)


async def test_without_any_confirmed_success_the_tree_is_saved_and_a_fresh_run_starts(
    tmp_path: Path,
) -> None:
    failing = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "A") + scenario("auth_error"), files=["*.md"]),
    )
    execution = tmp_path / "x"
    assert (await run(failing, execution)).status == "failed"
    (execution / "agentRoot" / "draft.md").write_text("work worth keeping")

    fixed = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "A"), files=["*.md"]))
    outcome = await run(fixed, execution, changed=True)
    assert outcome.codons == {"a": "completed"}
    runs = runs_oldest_first(read_state(execution))
    assert runs[1]["startingConditions"]["type"] == "fresh"
    events = [data["message"] for kind, data in journal(execution) if kind == "info"]
    (degraded,) = [m for m in events if m.startswith("Starting over")]
    branch = degraded.split("saved to ")[1].split(" ")[0]
    assert branch.startswith("recovery/")
    repo = pygit2.Repository(str(execution / ".weft" / "checkpoints" / ".weftcheckpoints"))
    saved = repo.branches[branch].peel(pygit2.Commit).tree
    assert saved["draft.md"].data == b"work worth keeping"


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ([], ["a"]),  # killed before the first codon's start was committed
        ([[]], ["a"]),  # a run that recorded no codon
        ([["a"]], ["a", "b"]),  # a's successor may have run its rig
        ([["a", "b"], ["a"]], ["a", "b", "c"]),
        ([["a", "b", "c"]], ["a", "b", "c"]),  # nothing after the last codon
    ],
)
def test_possibly_started_adds_the_codons_that_may_have_acted_without_a_record(
    tmp_path: Path, recorded: list[list[str]], expected: list[str]
) -> None:
    plan = ExecutionPlan.from_hank(load_hank(three_codons(tmp_path)).hank)
    state = {"runs": [{"codons": [{"codonId": c} for c in run]} for run in recorded]}
    assert sorted(possibly_started(state, (plan,))) == expected
