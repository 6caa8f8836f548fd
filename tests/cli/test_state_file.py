"""``state.json`` after a SIGKILL: current at every codon boundary, at most a few
seconds behind otherwise (docs/store.md's bound, :data:`weft.store.writer.SNAPSHOT_EVERY`).

A real ``weft run`` on the fake agent is killed, and the state.json file it left
(not the recovered state: the file itself, what a reader of the seed's files
sees) is compared with the journal's fold as ``weft status --json`` gives it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_run import TIMEOUT, start_weft, weft
from tests.cli.test_run import codon_state as _codon_state
from tests.runtime.hanks import (
    codon,
    pid_running,
    scenario,
    subprocess_environment,
    wait_for,
    write_file,
    write_hank,
)

from weft.cli.resolve import codon_cost
from weft.errors import StoreError
from weft.store.writer import SNAPSHOT_EVERY


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


@pytest.fixture
def children() -> Iterator[list[int]]:
    """Agents a SIGKILLed weft left behind; killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_running(pid):
            os.kill(pid, signal.SIGKILL)


def hank(tmp_path: Path) -> Path:
    """a ends; b works, spends, then hangs (journals nothing more)."""
    return write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", write_file("b/partial.md", "half") + scenario("hang_after_init")),
    )


def codon_state(execution: Path, codon_id: str) -> dict[str, Any] | None:
    """The codon's newest record in the journal's fold, once the store has tables."""
    try:
        return _codon_state(execution, codon_id)
    except StoreError:
        return None  # the run is creating its journal


def state_file(execution: Path) -> dict[str, Any]:
    """The state.json file as written, not recovered."""
    doc: dict[str, Any] = json.loads((execution / ".weft" / "state.json").read_bytes())
    return doc


def fold(execution: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """The journal's fold, as ``weft status --json`` gives it."""
    status = weft("status", execution, "--json", env=env, cwd=cwd)
    assert status.returncode == 0, status.stderr
    doc: dict[str, Any] = json.loads(status.stdout)
    return doc


def codons_of(state: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [(c["codonId"], c["status"], codon_cost(c)) for c in state["runs"][0]["codons"]]


def test_state_json_names_the_first_codon_as_soon_as_it_started(
    tmp_path: Path, env: dict[str, str], children: list[int]
) -> None:
    """Killed while the run's first codon works: its start is a boundary, so
    state.json names it. The old writer wrote at the run's start and then only
    at a codon's end or 5 s later, and left ``codons: []`` (issue 34)."""
    execution = tmp_path / "x"
    first = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a/partial.md", "half") + scenario("hang_after_init")),
    )
    proc = start_weft("run", first, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    try:
        a = wait_for(
            lambda: (
                (rec := codon_state(execution, "a")) is not None
                and rec["status"] == "running"
                and rec
            ),
            timeout=TIMEOUT,
            what="a running",
        )
        children.append(a["claudePid"])
        proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    written = state_file(execution)
    status = fold(execution, env, tmp_path)
    assert [c["codonId"] for c in status["runs"][0]["codons"]] == ["a"]
    assert [c[0] for c in codons_of(written)] == ["a"], written["runs"][0]["codons"]
    assert written["currentRunId"] == status["currentRunId"]


def test_state_json_is_the_journals_fold_a_few_seconds_after_the_last_event(
    tmp_path: Path, env: dict[str, str], children: list[int]
) -> None:
    """b journals nothing after its first message: within the time bound
    (SNAPSHOT_EVERY, longer only when a write is slow: a margin for this busy
    machine) state.json becomes the fold exactly, b running with the cost the
    journal has, and a SIGKILL then leaves it so. The old writer rewrote only
    when a commit came, so state.json stayed behind for ever."""
    execution = tmp_path / "x"
    proc = start_weft(
        "run", hank(tmp_path), "--execution", execution, "--headless", env=env, cwd=tmp_path
    )
    try:
        b = wait_for(
            lambda: (
                (rec := codon_state(execution, "b")) is not None
                and rec["status"] == "running"
                and rec.get("currentCost", 0) > 0
                and rec
            ),
            timeout=TIMEOUT,
            what="b running with its cost journaled",
        )
        children.append(b["claudePid"])
        wanted = [("a", "completed"), ("b", "running")]
        started = time.monotonic()
        wait_for(
            lambda: [c[:2] for c in codons_of(state_file(execution))] == wanted,
            timeout=SNAPSHOT_EVERY + 8.0,
            what="state.json showing b running",
        )
        behind = time.monotonic() - started
        proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    written = state_file(execution)
    status = fold(execution, env, tmp_path)
    expected = [(c["codonId"], c["status"], c["cost"]) for c in status["runs"][0]["codons"]]
    assert codons_of(written) == expected, f"state.json {behind:.1f} s behind"
    assert expected[1] == ("b", "running", float(b["currentCost"]))
    assert float(b["currentCost"]) > 0
    assert written["currentRunId"] == status["currentRunId"]
