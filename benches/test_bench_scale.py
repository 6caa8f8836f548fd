"""Flat cost as a run grows (issue 20): a 10,000-codon run, first 1,000 against last.

One loop of one codon runs through the real runtime: the store with fsync,
the WebSocket server, the eight-state lifecycle, the Claude parser and a
shadow-git checkpoint per codon. The agent is replayed in-process (a
recorded one-tool Claude stream, no process) and changes one file per codon,
so every checkpoint commits a change and the work tree stays the same size:
whatever grows, grows in Weft.

Per window (the first and the last ``WEFT_SCALE_WINDOW`` codons, 1,000 by
default) the benchmark reports the wall time per codon (everything between
two codon ends), the journal payload bytes per codon and the peak resident
set size, and asserts the issue's targets: last/first at most 1.2 for time
and bytes, RSS growth at most 50 MB, no journaled event over 16 KB (the
agent's own are small here) and, when the run is at least that long, the
first 1,441 codons' journal under 10 MB (183 MB before the snapshot deltas).

``WEFT_SCALE_CODONS`` (default 10,000) makes it smaller for a quick look;
the window is then at most a tenth of the run.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from array import array
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop

from benches.test_bench_runtime import GOLDEN, _ReplaySession
from weft.agents.harness import SessionSpec
from weft.config import load_hank
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import Runtime, RuntimeOptions
from weft.state import Processed

CODONS = int(os.environ.get("WEFT_SCALE_CODONS", "10000"))
WINDOW = min(int(os.environ.get("WEFT_SCALE_WINDOW", "1000")), max(CODONS // 10, 1))
FLAT = 1.2
"""last/first at most this, for time and for journal bytes per codon."""
RSS_GROWTH = 50 * 1024 * 1024
MAX_EVENT = 16 * 1024
ISSUE_CODONS = 1441
ISSUE_JOURNAL = 10 * 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


class _EditingHarness:
    """Replays the recorded stream; each session first rewrites one file."""

    name = "claude"

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines
        self._count = 0
        self._work: dict[Path, str] = {}

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["replay"]

    async def start(self, spec: SessionSpec) -> _ReplaySession:
        self._count += 1
        # The agent's edit, made as cheaply as an edit can be (the same number
        # of bytes rewritten in place, its path built once): it is the agent's
        # work, not Weft's, and truncating a file makes ext4 flush it at close
        # (auto_da_alloc).
        work = self._work.get(spec.cwd)
        if work is None:
            work = self._work[spec.cwd] = os.path.join(spec.cwd, "src", "work.py")
        body = f"step = {self._count:08d}\n".encode() * 20
        try:
            fd = os.open(work, os.O_WRONLY)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(work), exist_ok=True)
            fd = os.open(work, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, body, 0)
        finally:
            os.close(fd)
        return _ReplaySession(self._lines)


class _Ends:
    """Wall clock (and, with ``rss``, the RSS) at each codon's end (its ``state.snapshot``)."""

    def __init__(self, *, rss: bool = True) -> None:
        # Arrays, not lists: 24 bytes a codon instead of ~100, which would
        # count in the RSS growth this benchmark measures.
        self.times = array("d")
        self.rss = array("q")
        self.seqs = array("q")
        self._read_rss = rss

    def __call__(self, item: Processed) -> None:
        if item.stream is not None and item.stream.type == "state.snapshot":
            self.times.append(time.perf_counter())
            if self._read_rss:
                self.rss.append(_rss())
            self.seqs.append(item.seq)


def _hank(tmp: Path) -> Path:
    codon = {
        "id": "c",
        "name": "codon",
        "model": "fake/sonnet",
        "continuationMode": "fresh",
        "promptText": "step",
        "checkpointedFiles": ["src/**"],
    }
    loop = {
        "type": "loop",
        "id": "l",
        "name": "loop",
        "terminateOn": {"type": "iterationLimit", "limit": CODONS},
        "codons": [codon],
    }
    path = tmp / "hank.json"
    path.write_bytes(msgspec.json.encode({"hank": [loop]}))
    return path


def _run(tmp: Path) -> tuple[_Ends, Path]:
    path = _hank(tmp)
    prepared = prepare_execution(
        path, None, interactive=False, base_dir=tmp / "managed", execution_dir=tmp / "exec"
    )
    ends = _Ends()
    runtime = Runtime(prepared, load_hank(path), RuntimeOptions(), listeners=(ends,))
    lines = [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]
    harness = _EditingHarness(lines)
    runtime._harness = lambda model: (harness, "sonnet")  # type: ignore[method-assign]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outcome = runner.run(runtime.run())
    assert outcome.status == "completed", outcome
    assert len(ends.seqs) == CODONS
    return ends, tmp / "exec" / ".weft" / "weft.db"


def _payload_bytes(db: Path) -> tuple[list[tuple[int, int]], tuple[str, int]]:
    """(seq, payload bytes) of every event, and the biggest event's (type, bytes)."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT seq, length(CAST(payload AS BLOB)) FROM events").fetchall()
        big = conn.execute(
            "SELECT type, length(CAST(payload AS BLOB)) AS n FROM events ORDER BY n DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return rows, (big[0], big[1])


@pytest.mark.benchmark(group="scale")
@pytest.mark.timeout(1800)  # 10,000 codons: a few minutes on a busy 2-core machine
def test_scale_10000_codons_cost_stays_flat(benchmark: Any, tmp_path: Path) -> None:
    results: list[tuple[_Ends, Path]] = []

    def one() -> None:
        results.append(_run(tmp_path))

    benchmark.pedantic(one, rounds=1, iterations=1)
    ends, db = results[0]
    rows, (big_type, big_bytes) = _payload_bytes(db)
    per_seq = dict(rows)

    def window(first: int) -> tuple[float, float, int]:
        """(ms per codon, payload bytes per codon, peak RSS) of codons
        ``first+1 .. first+WINDOW`` (measured from codon ``first``'s end)."""
        last = first + WINDOW
        seconds = ends.times[last] - ends.times[first]
        journal = sum(per_seq[s] for s in range(ends.seqs[first] + 1, ends.seqs[last] + 1))
        return seconds / WINDOW * 1000, journal / WINDOW, max(ends.rss[first : last + 1])

    # The first codon's end is the origin: startup is not a codon's cost.
    t1, b1, r1 = window(0)
    t2, b2, r2 = window(CODONS - 1 - WINDOW)
    growth = r2 - r1
    total_journal = sum(per_seq.values())
    summary = (
        f"{CODONS} codons; first/last {WINDOW}: {t1:.2f}/{t2:.2f} ms per codon "
        f"(x{t2 / t1:.2f}), {b1:.0f}/{b2:.0f} journal bytes per codon (x{b2 / b1:.2f}), "
        f"peak RSS {r1 / 2**20:.0f}/{r2 / 2**20:.0f} MB (+{growth / 2**20:.1f} MB); "
        f"journal {total_journal / 2**20:.1f} MB; biggest event {big_type} {big_bytes} B"
    )
    if CODONS >= ISSUE_CODONS:
        upto = ends.seqs[ISSUE_CODONS - 1]
        issue = sum(n for s, n in rows if s <= upto)
        summary += f"; first {ISSUE_CODONS} codons' journal {issue / 2**20:.2f} MB"
        assert issue < ISSUE_JOURNAL, summary
    benchmark.extra_info["items"] = CODONS
    benchmark.extra_info["summary"] = summary
    print(summary)
    assert t2 <= FLAT * t1, summary
    assert b2 <= FLAT * b1, summary
    assert growth <= RSS_GROWTH, summary
    assert big_bytes <= MAX_EVENT, summary
