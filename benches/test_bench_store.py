"""The durable store against the ways it could have been done, in the same run.

- Group commit: durable transitions per second through the StateManager and
  the SQLite journal, fsync on; beside (a) the same store committing (and
  fsyncing) every event on its own, and (b) what the reference runtime does:
  rewriting the whole state.json (with a backup copy) after every transition,
  here on a 500-codon state and without fsync, which favours the baseline.
- Replay: rebuilding the state from a 1,000,000-event journal, beside the
  oracle folding a 50,000-event prefix of the same journal (per event).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop
from tests.oracle import OracleCore

from benches.workload import RUN, as_array, codon_events, mixed_stream, run_started
from weft import core
from weft.state import StateManager
from weft.store import ExecutionStore, Journal, rebuild

DURABLE = 100_000
ONE_BY_ONE = 2_000
REWRITES = 300
REPLAY = 1_000_000
ORACLE_PREFIX = 50_000


@dataclass
class Round:
    runner: asyncio.Runner
    store: ExecutionStore
    manager: StateManager
    payloads: list[bytes]


def _open_round(
    root: Path, payloads: list[bytes], max_batch: int
) -> tuple[tuple[Round], dict[str, Any]]:
    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    store = ExecutionStore.open(Path(tempfile.mkdtemp(dir=root)))

    async def make() -> StateManager:
        return store.state_manager(max_batch=max_batch)

    return (Round(runner, store, runner.run(make()), payloads),), {}


def _submit_all(r: Round) -> None:
    async def go() -> None:
        for p in r.payloads:
            r.manager.transition_bytes(p)
        await r.manager.flush()

    r.runner.run(go())


def _close_round(r: Round) -> None:
    assert r.store.journal.last_seq() == len(r.payloads)
    r.runner.run(r.store.close(r.manager))
    r.runner.close()
    shutil.rmtree(r.store.weft_dir.parent)


@pytest.fixture(scope="module")
def stream() -> list[bytes]:
    return mixed_stream(DURABLE, mistakes=False)


@pytest.mark.benchmark(group="store: durable transitions")
def test_group_commit(benchmark: Any, stream: list[bytes], tmp_path: Path) -> None:
    benchmark.pedantic(
        _submit_all,
        setup=lambda: _open_round(tmp_path, stream, 4096),
        teardown=_close_round,
        rounds=3,
    )
    benchmark.extra_info["items"] = DURABLE
    if benchmark.stats is not None:
        rate = DURABLE / benchmark.stats.stats.median
        benchmark.extra_info["summary"] = f"{rate / 1e3:.0f}k durable transitions/s, fsync on"


@pytest.mark.benchmark(group="store: durable transitions")
def test_fsync_per_event_baseline(benchmark: Any, stream: list[bytes], tmp_path: Path) -> None:
    benchmark.pedantic(
        _submit_all,
        setup=lambda: _open_round(tmp_path, stream[:ONE_BY_ONE], 1),
        teardown=_close_round,
        rounds=2,
    )
    benchmark.extra_info["items"] = ONE_BY_ONE


def _state_with_codons(n: int) -> core.Core:
    c = core.Core()
    events = [run_started()]
    for i in range(n):
        events += codon_events(i, 2, mistakes=False)
    events += codon_events(n, 0, mistakes=False)[:4]  # one codon left running
    import json

    c.apply_batch(as_array([json.dumps(e).encode() for e in events]))
    assert c.codon_record_count == n + 1
    return c


def _rewrite_per_transition(c: core.Core, folder: Path, payloads: list[bytes]) -> None:
    """What the reference's save() does per transition: deep-clone the state
    through JSON, copy state.json to .bak, write it indented to .tmp, rename.
    orjson plays V8's JSON (C speed); the core applies the transition."""
    state, backup, temp = (folder / n for n in ("state.json", "state.json.bak", "state.json.tmp"))
    for p in payloads:
        c.apply(p)
        clone = orjson.loads(c.state_json())
        if state.exists():
            shutil.copyfile(state, backup)
        temp.write_bytes(orjson.dumps(clone, option=orjson.OPT_INDENT_2))
        os.replace(temp, state)


@pytest.mark.benchmark(group="store: durable transitions")
def test_state_json_rewrite_per_transition_baseline(benchmark: Any, tmp_path: Path) -> None:
    import json

    cost = json.dumps(
        {
            "type": "CostsIncremented",
            "data": {"runId": RUN, "codonId": "codon-500", "costDelta": 0.001, "tokensDelta": {}},
        }
    ).encode()
    payloads = [cost] * REWRITES

    def setup() -> tuple[tuple[core.Core, Path, list[bytes]], dict[str, Any]]:
        return (_state_with_codons(500), Path(tempfile.mkdtemp(dir=tmp_path)), payloads), {}

    benchmark.pedantic(_rewrite_per_transition, setup=setup, rounds=3)
    benchmark.extra_info["items"] = REWRITES


@pytest.fixture(scope="module")
def journal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal of 1M applied transitions, written directly in big batches."""
    folder = tmp_path_factory.mktemp("replay")
    journal = Journal.open(folder / "weft.db")
    payloads = mixed_stream(REPLAY, mistakes=False)
    rows = []
    for seq, p in enumerate(payloads, 1):
        kind = p[9 : p.index(b'"', 9)].decode()
        rows.append(
            (seq, f"1763683200000-{seq:09x}", "t", "transition", kind, RUN, None, p.decode())
        )
        if len(rows) == 100_000:
            journal.append(rows)
            rows = []
    journal.append(rows)
    assert journal.last_seq() == REPLAY
    journal.close()
    return folder / "weft.db"


@pytest.mark.benchmark(group="store: replay a journal")
def test_replay_1m_events(benchmark: Any, journal_path: Path) -> None:
    journal = Journal.open(journal_path, readonly=True, check=False)
    state = benchmark.pedantic(rebuild, args=(journal,), rounds=3)
    assert state.journal_seq == REPLAY
    benchmark.extra_info["items"] = REPLAY
    if benchmark.stats is not None:
        benchmark.extra_info["summary"] = (
            f"{benchmark.stats.stats.median:.2f} s for {REPLAY // 1000}k events"
        )
    journal.close()


def _oracle_fold(journal: Journal) -> OracleCore:
    oracle = OracleCore()
    for page in journal.pages(page=10_000):
        for e in page:
            if e.seq > ORACLE_PREFIX:
                return oracle
            oracle.apply(e.payload.encode())
    return oracle


@pytest.mark.benchmark(group="store: replay a journal")
def test_replay_oracle_baseline(benchmark: Any, journal_path: Path) -> None:
    journal = Journal.open(journal_path, readonly=True, check=False)
    benchmark.pedantic(_oracle_fold, args=(journal,), rounds=2)
    benchmark.extra_info["items"] = ORACLE_PREFIX
    journal.close()
