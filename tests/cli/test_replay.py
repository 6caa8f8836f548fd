"""``weft replay``: a recorded execution played back through the run views is
what ``weft run`` showed live, event for event, with no agent."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, subprocess_environment, weft_cli, write_hank

from weft.cli.replay import wait_s


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def events(stdout: str) -> list[dict[str, Any]]:
    """The journaled events of a ``--json`` output (its notes and summary apart)."""
    out = []
    for line in stdout.splitlines():
        doc = json.loads(line)
        if "seq" in doc:
            out.append(doc)
    return out


def test_a_replay_is_the_live_event_stream(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b", mode="continue-previous"))
    live = weft_cli("run", hank, "--execution", tmp_path / "x", "--json", env=env)
    assert live.returncode == 0, live.stderr
    replayed = weft_cli("replay", tmp_path / "x", "--speed", "0", "--json", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert events(replayed.stdout) == events(live.stdout)
    summary = json.loads(replayed.stdout.splitlines()[-1])
    assert summary["type"] == "run.summary"
    assert summary["data"]["codons"]["completed"] == 2
    headless = weft_cli("replay", tmp_path / "x", "--speed", "0", "--headless", env=env)
    assert "All codons completed" in headless.stdout


@pytest.mark.parametrize(
    ("before", "at", "speed", "max_gap", "wait"),
    [
        (1000, 3000, 1.0, 5.0, 2.0),
        (1000, 3000, 4.0, 5.0, 0.5),
        (1000, 3000, 0.0, 5.0, 0.0),
        (1000, 30000, 1.0, 5.0, 5.0),
        (3000, 1000, 1.0, 5.0, 0.0),
        (None, 1000, 1.0, 5.0, 0.0),
    ],
)
def test_the_wait_is_the_recorded_gap_over_the_speed(
    before: int | None, at: int, speed: float, max_gap: float, wait: float
) -> None:
    assert wait_s(before, at, speed, max_gap) == pytest.approx(wait)


def test_the_recorded_pace_is_kept_at_the_chosen_speed(tmp_path: Path, env: dict[str, str]) -> None:
    slow = "@@fake:sleep ms=1500@@ Work slowly."
    hank = write_hank(tmp_path / "hank", codon("a", slow))
    ran = weft_cli("run", hank, "--execution", tmp_path / "x", "--headless", env=env)
    assert ran.returncode == 0
    started = time.monotonic()
    weft_cli("replay", tmp_path / "x", "--speed", "0.5", "--headless", env=env)
    at_pace = time.monotonic() - started
    started = time.monotonic()
    weft_cli("replay", tmp_path / "x", "--speed", "0", "--headless", env=env)
    at_once = time.monotonic() - started
    # The agent's 1.5 s of silence, replayed at half speed: 3 s (start-up varies by less).
    assert at_pace - at_once > 1.5


@pytest.mark.parametrize("speed", ["-1", "fast", "inf", "nan"])
def test_a_bad_speed_is_refused(tmp_path: Path, env: dict[str, str], speed: str) -> None:
    done = weft_cli("replay", tmp_path, "--speed", speed, env=env)
    assert done.returncode == 2
    assert "is not a number of 0 or more" in done.stderr
