"""Start-up (issue 35, "Start fast"): ``weft status`` and ``weft run`` up to
its first agent, against a bare ``python -c pass``, in the same rounds.

Every round starts, one after the other, the baseline interpreter and the
command measured, so both see the same load on the machine, and the ratio is
taken of the medians:

* ``weft status <execution>`` of a finished one-codon execution, to its exit;
* ``weft run`` of a one-codon hank, from the moment the parent starts it to the
  moment its agent process starts. The agent is a two-line bash script
  (``WEFT_CLAUDE_BIN``) that writes ``$EPOCHREALTIME`` and then execs the fake
  Claude CLI, so the figure is Weft's own start-up (imports, loading and
  checking the hank, the execution, the store, the checkpoint repository, the
  server), not the fake agent's. The run's output goes to a pipe (the
  headless view: a live table on a terminal also loads rich).

Every child runs with ``-S``, the baseline too, with the parent's ``sys.path``
on ``PYTHONPATH``: ``.pth`` hooks in site-packages belong to the machine, not
to Weft (one in the sandbox this was written in imports certifi and
importlib.resources at every start, 55 ms, which would triple the baseline and
hide Weft's share). Bytecode is cached under a temporary ``PYTHONPYCACHEPREFIX``
and warmed by a first run, as an installed Weft's is; ``PYTHONDONTWRITEBYTECODE``
would make every child compile every module.

The targets are ``weft status`` <= 6x and the first agent <= 10x the bare
interpreter; the asserted bounds are the figures reached so far
(``docs/benchmarks.md`` says where the rest of the time goes).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.runtime.hanks import subprocess_environment

from weft.agents.registry import fake_command

ROUNDS = 9
STATUS_TARGET = 6.0
SPAWN_TARGET = 10.0
STATUS_BOUND = 12.0
"""The status ratio asserted: the target is not reached yet. 10.3-11.7x measured
on 2026-11-28 (2-core machine, busy), with 15% for a busier one."""
SPAWN_BOUND = 48.0
"""The first-agent ratio asserted: the target is not reached yet. 37.5-42x
measured on 2026-11-28 (49-56x before issue 35's deferrals), with 15% for a busier machine."""

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="the agent stamp is a bash script")


def _environment(tmp: Path) -> dict[str, str]:
    env = subprocess_environment(tmp)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return env


def _stamp_agent(tmp: Path) -> Path:
    """The agent: writes its start time, then becomes the fake Claude CLI."""
    script = tmp / "stamp-agent"
    fake = " ".join(fake_command("claude").command)
    script.write_text(f'#!{BASH}\necho "$EPOCHREALTIME" > "{tmp / "spawned"}"\nexec {fake} "$@"\n')
    script.chmod(0o755)
    return script


def _hank(tmp: Path) -> Path:
    doc = {
        "meta": {"name": "startup", "version": "1.0.0"},
        "hank": [
            {
                "id": "c1",
                "name": "Codon c1",
                "model": "sonnet",
                "continuationMode": "fresh",
                "checkpointedFiles": ["**/*.md"],
                "promptText": "hello",
            }
        ],
    }
    path = tmp / "project" / "hank.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.encode(doc))
    return path


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting ``argv`` to its exit (it must succeed)."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return elapsed


class _Rounds:
    """The baseline and one command, started one after the other in each round."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = _environment(tmp)
        self.env["WEFT_CLAUDE_BIN"] = str(_stamp_agent(tmp))
        self.hank = _hank(tmp)
        self.base: list[float] = []
        self.measured: list[float] = []
        self.runs = 0

    def baseline(self) -> float:
        return _wall([sys.executable, "-S", "-c", "pass"], self.env, self.tmp)

    def weft(self, *args: str | Path) -> float:
        argv = [sys.executable, "-S", "-m", "weft", *map(str, args)]
        return _wall(argv, self.env, self.tmp)

    def run_to_spawn(self) -> float:
        """Seconds from starting ``weft run`` to its agent's start."""
        self.runs += 1
        env = {**self.env, "WEFT_RUNTIME_EXECUTION_BASE_DIR": str(self.tmp / f"m{self.runs}")}
        stamp = self.tmp / "spawned"
        stamp.unlink(missing_ok=True)
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-S", "-m", "weft", "run", str(self.hank)],
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return float(stamp.read_text()) - started

    def round(self, measure: Callable[[], float]) -> None:
        self.base.append(self.baseline())
        self.measured.append(measure())

    def ratio(self) -> float:
        return statistics.median(self.measured) / statistics.median(self.base)

    def summary(self, what: str, target: float) -> str:
        return (
            f"{what} {statistics.median(self.measured) * 1000:.0f} ms, "
            f"python -S -c pass {statistics.median(self.base) * 1000:.0f} ms: "
            f"{self.ratio():.1f}x (target {target:.0f}x; medians of {len(self.base)})"
        )


@pytest.mark.benchmark(group="start-up")
def test_status_against_a_bare_interpreter(benchmark: Any, tmp_path: Path) -> None:
    rounds = _Rounds(tmp_path)
    rounds.run_to_spawn()  # the execution to read, and the bytecode cache warmed
    (execution,) = (tmp_path / "m1").iterdir()
    rounds.weft("status", execution)

    benchmark.pedantic(
        lambda: rounds.round(lambda: rounds.weft("status", execution)),
        rounds=ROUNDS,
        iterations=1,
    )
    summary = rounds.summary("weft status", STATUS_TARGET)
    benchmark.extra_info["summary"] = summary
    assert rounds.ratio() <= STATUS_BOUND, summary


@pytest.mark.benchmark(group="start-up")
def test_run_to_first_agent_against_a_bare_interpreter(benchmark: Any, tmp_path: Path) -> None:
    rounds = _Rounds(tmp_path)
    rounds.run_to_spawn()  # the bytecode cache warmed

    benchmark.pedantic(lambda: rounds.round(rounds.run_to_spawn), rounds=ROUNDS, iterations=1)
    summary = rounds.summary("weft run to its first agent", SPAWN_TARGET)
    benchmark.extra_info["summary"] = summary
    assert rounds.ratio() <= SPAWN_BOUND, summary
