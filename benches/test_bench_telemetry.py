"""Trace export's cost to a run (issue 38, "Performance"): per-codon runtime with
export on, to a live local OTLP receiver, against export off, in the same rounds.

Each round runs ``examples/hello`` (six codons on the fake agent) once with
export off and once with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a real
OTLP/HTTP receiver on loopback (``tests/telemetry/receiver.py``), one after the
other so both see the same load. The figure is the run's own time as journaled
(``RunStarted`` to ``RunCompleted``, from ``weft status --json``) per codon: what
the event-loop sink and the exporter thread add while codons run. The process's
start-up (the SDK's imports) and the bounded wait for the last spans at the end
are outside it; ``docs/telemetry.md`` gives those too.

The target is <= 1.1x; the bound asserted leaves room for a busy 2-core machine.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from tests.runtime.hanks import subprocess_environment
from tests.telemetry.receiver import otlp_receiver

ROUNDS = 7
TARGET = 1.1
BOUND = 1.3
"""0.95x, 0.99x, 1.04x and 1.20x measured on 2026-11-28 (2-core machine shared with
other test runs): the rounds' noise (160-475 ms a codon) is far larger than the
sink's own cost, about 1 ms a codon (43 us an event, docs/benchmarks.md)."""
HELLO = Path(__file__).resolve().parents[1] / "examples" / "hello"
CODONS = 6


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _per_codon(env: dict[str, str], managed: Path) -> float:
    before = set(managed.iterdir()) if managed.exists() else set()
    done = subprocess.run(
        [sys.executable, "-m", "weft", "run", str(HELLO), "--headless", "--new"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (execution,) = set(managed.iterdir()) - before
    status = subprocess.run(
        [sys.executable, "-m", "weft", "status", str(execution), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    (run,) = json.loads(status.stdout)["runs"]
    return (_seconds(run["endTime"]) - _seconds(run["startTime"])) / CODONS


def test_export_on_costs_each_codon_at_most_a_tenth_more(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    managed = tmp_path / "managed"
    off: list[float] = []
    on: list[float] = []
    with otlp_receiver() as receiver:
        traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        for round_ in range(ROUNDS):
            # Alternate which goes first: a machine getting busier favours neither.
            for which in ((off, env), (on, traced))[:: 1 if round_ % 2 else -1]:
                which[0].append(_per_codon(which[1], managed))
        assert receiver.spans  # the export really happened
    ratio = statistics.median(on) / statistics.median(off)
    print(
        f"\nper codon: off {statistics.median(off) * 1000:.0f} ms, "
        f"on {statistics.median(on) * 1000:.0f} ms: {ratio:.2f}x (target {TARGET}x); "
        f"rounds off {[round(x * 1000) for x in off]}, on {[round(x * 1000) for x in on]}"
    )
    assert ratio <= BOUND
