"""The collector while a run executes: the start-up heap set aside, and given back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from weft.runtime.heap import run_heap


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
