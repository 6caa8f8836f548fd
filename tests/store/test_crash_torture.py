"""Crash torture: SIGKILL a writer at random moments; nothing reported durable is lost.

After each of 25+ kills the store must open (integrity check, gapless seqs),
hold every event the killed process had reported durable, and recover a
state equal to the oracle's fold of the journal. The next child recovers,
takes over the dead process's lock and marks its run crashed, so the
recovery path itself is tortured too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.oracle import OracleCore

from weft.store import ExecutionStore, Journal

CHILD = Path(__file__).with_name("torture_child.py")
ROOT = Path(__file__).resolve().parents[2]
KILLS = 25


def run_and_kill(execution: Path, run_id: str, delay: float, *, after_open: bool) -> list[int]:
    """Starts a child and SIGKILLs it ``delay`` seconds later: counted from its
    start, or (``after_open``) from its first committed event, so a loaded
    machine's slow start does not turn every kill into a kill during open."""
    # This checkout's weft, not whichever one is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "python")))}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(execution), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    first = b""
    if after_open:
        assert child.stdout is not None
        first = child.stdout.readline()
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    out, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err.decode()
    # A kill can cut the last line short; only whole lines were reported.
    lines = (first + out).decode().split("\n")[:-1]
    return [int(line) for line in lines]


def oracle_fold(journal: Journal) -> OracleCore:
    oracle = OracleCore()
    for page in journal.pages():
        for event in page:
            if event.kind == "transition":
                assert oracle.apply(event.payload.encode()).ok, event
    return oracle


def test_sigkill_at_random_moments_loses_nothing_reported_durable(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    execution = tmp_path / "execution"
    reported_total = 0
    after_open = 0
    for k in range(KILLS):
        # One kill in five may land while the child opens and recovers the store.
        waits = k % 5 != 2
        after_open += waits
        reported = run_and_kill(execution, f"run-{k}", rng.uniform(0.3, 1.2), after_open=waits)
        reported_total += len(reported)

        journal = Journal.open(execution / ".weft" / "weft.db", readonly=True)  # checks
        try:
            last = journal.last_seq()
            assert journal.count() == last, "seqs are not a gapless prefix"
            assert all(seq <= last for seq in reported), (k, max(reported), last)
            fold = oracle_fold(journal)
        finally:
            journal.close()

        store = ExecutionStore.open(execution, readonly=True)
        try:
            assert json.loads(store.core.state_json()) == fold.state_dict()
            assert store.core.total_cost() == fold.total_cost()
        finally:
            store.journal.close()

    assert reported_total > 1000, "the children barely ran; the torture tested nothing"
    final = ExecutionStore.open(execution, readonly=True)
    try:
        runs = final.runs()
        # Every killed run is either still running (the last) or marked crashed.
        assert [r["status"] for r in runs[1:]] == ["crashed"] * (len(runs) - 1)
        assert len(runs) >= after_open
    finally:
        final.journal.close()
