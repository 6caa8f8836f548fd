"""The asynchronous face: git work off the event loop, calls applied in submission order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.checkpoints.helpers import tree_state, write

from weft.checkpoints import AsyncCheckpointRepo, run_branch
from weft.checkpoints.repo import FLUSH_EVERY


async def test_calls_run_in_the_order_they_were_made(git_dir: Path, workspace: Path) -> None:
    repo = await AsyncCheckpointRepo.open(git_dir, workspace)
    try:
        write(workspace, "a.md", "first")
        first = await repo.snapshot(
            ["*.md"],
            branch="run-r1",
            parent_expected=repo.initial_sha,
            kind="completed",
            codon_id="c1",
            run_id="r1",
            codon_name="one",
        )
        write(workspace, "a.md", "second")
        write(workspace, "b.md", "second")
        second = await repo.snapshot(
            ["*.md"],
            branch="run-r1",
            parent_expected=first,
            kind="completed",
            codon_id="c2",
            run_id="r1",
            codon_name="two",
        )

        def snapshot_on(branch: str) -> asyncio.Task[str]:
            return asyncio.create_task(
                repo.snapshot(
                    ["*.md"],
                    branch=branch,
                    parent_expected=repo.initial_sha,
                    kind="completed",
                    codon_id="c",
                    run_id=branch,
                    codon_name="n",
                )
            )

        # Submitted back to back: each snapshot must see the restore submitted just before it.
        tasks = [
            asyncio.create_task(repo.restore(first, ["*.md"])),
            snapshot_on("run-after-first"),
            asyncio.create_task(repo.restore(second, ["*.md"])),
            snapshot_on("run-after-second"),
        ]
        await asyncio.gather(*tasks)
        after_first, after_second = tasks[1].result(), tasks[3].result()
        assert isinstance(after_first, str)
        assert isinstance(after_second, str)
        assert tree_state(repo.repo, after_first) == tree_state(repo.repo, first)
        assert tree_state(repo.repo, after_second) == tree_state(repo.repo, second)
        assert [c.sha for c in await repo.list("r1")] == [second, first]
        assert await repo.verify([first, "0" * 40]) == {first}
        assert await repo.resolve(first[:8]) == first
        assert await repo.branch_tip(run_branch("r1")) == second
        assert await repo.head() == after_second
    finally:
        await repo.close()


async def test_the_event_loop_keeps_running_during_git_work(git_dir: Path, workspace: Path) -> None:
    for i in range(3000):
        write(workspace, f"many/{i // 100}/{i}.txt", str(i))
    repo = await AsyncCheckpointRepo.open(git_dir, workspace)
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        await asyncio.sleep(0)
        before = ticks
        await repo.snapshot(
            ["many/**"],
            branch="run-r1",
            parent_expected=repo.initial_sha,
            kind="completed",
            codon_id="c",
            run_id="r1",
            codon_name="n",
        )
        assert ticks - before > 10, "the snapshot blocked the event loop"
    finally:
        done = True
        await task
        await repo.close()


async def test_a_save_a_short_checkpoint_brings_due_runs_on_the_worker_before_later_calls(
    git_dir: Path, workspace: Path
) -> None:
    repo = await AsyncCheckpointRepo.open(git_dir, workspace)
    on_worker = []
    inner = repo.repo.snapshot

    def worker_snapshot(*args: Any, **kwargs: Any) -> str:
        on_worker.append(args)
        return inner(*args, **kwargs)

    repo.repo.snapshot = worker_snapshot  # type: ignore[method-assign]
    try:
        tip = repo.initial_sha
        saving = None
        for i in range(FLUSH_EVERY + 1):
            write(workspace, "a.md", str(i))
            tip = await repo.snapshot(
                ["*.md"],
                branch="run-r1",
                parent_expected=tip,
                kind="completed",
                codon_id=f"c{i}",
                run_id="r1",
                codon_name="n",
            )
            if i == 0:
                on_worker.clear()  # the first one compares everything, on the worker
            if i == FLUSH_EVERY - 1:
                # The last record the log takes made the save due: queued for
                # the worker, not awaited.
                assert repo._saving is not None
                assert not repo._saving.done()
                assert (git_dir / "HEAD").read_text().strip() != tip
                saving = repo._saving
                await asyncio.sleep(0)  # the save starts on the worker
                assert repo._queued == 1
            if i == FLUSH_EVERY:
                # The next checkpoint waited for the save, then was taken on
                # the loop all the same (not queued behind the save).
                assert saving is not None
                assert saving.done()
        assert on_worker == [], "a short checkpoint went to the worker"
        assert not repo.repo.save_due
        assert (git_dir / "HEAD").read_text().strip() != repo.initial_sha
    finally:
        await repo.close()
    assert (git_dir / "HEAD").read_text().strip() == tip
