"""The seed's load-time checks against the disk: the checkpoints the thread
continues from must exist; orphaned run folders are noted."""

from __future__ import annotations

from pathlib import Path

from tests.builders import lifecycle, run_started

from weft.store import ExecutionStore
from weft.store.integrity import load_checks, run_folders


async def opened(tmp_path: Path) -> ExecutionStore:
    """A store whose run r1 completed codons a and b (checkpoints sha-a, sha-b)."""
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for codon in ("a", "b"):
        for event in lifecycle("r1", codon):
            manager.transition(event)
    await manager.flush()
    await store.close(manager)
    return ExecutionStore.open(tmp_path, readonly=True)


def check(
    store: ExecutionStore, confirmed: set[str], folders: list[str]
) -> tuple[list[str], str | None]:
    thread = store.core.execution_thread(checkpoints=confirmed)
    found = load_checks(
        store.core.state_json(), thread, confirmed, folders, execution=store.weft_dir.parent
    )
    return found.notes, found.error


async def test_a_state_whose_checkpoints_git_has_passes(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    assert check(store, {"sha-a", "sha-b"}, ["r1"]) == ([], None)


async def test_a_thread_checkpoint_git_lacks_is_an_error_with_the_ways_forward(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path)
    notes, error = check(store, {"sha-a"}, [])
    assert notes == []
    assert error is not None
    assert "lacks 1 checkpoint(s) the execution thread continues from: sha-b of b (run r1)" in error
    assert f"weft checkpoints {tmp_path.resolve()}" in error
    assert "--checkpoint SHA" in error
    assert "--new --force" in error


async def test_an_orphaned_run_folder_is_a_warning(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    (tmp_path / ".weft" / "runs" / "ghost").mkdir(parents=True)
    folders = run_folders(tmp_path / ".weft" / "runs")
    assert folders == ["ghost"]
    notes, error = check(store, {"sha-a", "sha-b"}, folders)
    assert error is None
    assert notes == ["warning: runs/ghost has no run in the state"]
