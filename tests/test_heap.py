"""The process heap: the start-up objects set aside from the collector while a run
executes, and freed memory given back to the system."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import run_started

import weft.store.writer as writer_module
from weft import heap
from weft.heap import give_back, run_heap
from weft.store import ExecutionStore


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_run_sets_the_heap_aside_and_gives_it_back() -> None:
    kept = [object() for _ in range(100)]
    with run_heap():
        assert gc.get_freeze_count() > len(kept)
        # A cycle the run makes is still collected.
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_overlapping_runs_share_one_freeze_lifted_by_the_last() -> None:
    first, second = run_heap(), run_heap()
    first.__enter__()
    frozen = gc.get_freeze_count()
    second.__enter__()
    assert gc.get_freeze_count() == frozen, "the second run froze again"
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() == frozen, "the first run's end thawed the second's heap"
    second.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


def test_a_process_that_freezes_itself_is_left_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with run_heap():
        pass
    assert gc.get_freeze_count() == frozen, "the host's freeze was lifted"


def test_the_heap_is_given_back_when_the_run_raises() -> None:
    with pytest.raises(RuntimeError), run_heap():
        raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(heap._trim is None, reason="not glibc: nothing to give back this way")
def test_freed_memory_goes_back_to_the_system() -> None:
    blocks = [bytearray(os.urandom(16)) * 4096 for _ in range(2000)]  # 64 KiB each, on the heap
    del blocks[::2]  # half freed, scattered among the rest: kept by malloc
    before = _rss()
    give_back()
    assert before - _rss() >= 32 << 20, "less than half the freed 64 MiB went back"
    del blocks


def test_the_writer_gives_memory_back_every_so_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(writer_module, "give_back", lambda: calls.append(time.monotonic()))
    monkeypatch.setattr(writer_module, "GIVE_BACK_EVERY", 0.0)
    store = ExecutionStore.open(tmp_path)

    async def commit() -> None:
        manager = store.state_manager()
        await manager.transition_and_wait(run_started("r1"))
        await store.close(manager)

    asyncio.run(commit())
    assert calls, "the writer never gave memory back"
