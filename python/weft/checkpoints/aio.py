"""The runtime's asynchronous face of the checkpoint repository.

Every call runs on one dedicated worker thread, in the order it was made, except
a checkpoint known to be short (a few small files the change watcher names),
which the loop takes itself when the worker has nothing queued; the save into
git such a checkpoint brings due is then queued for the worker, not waited for
(a short checkpoint that comes while only that save runs waits for it, then is
taken on the loop all the same). That
keeps git work off the event loop, serialises mutations (a restore submitted
before a snapshot finishes before the snapshot starts), and keeps each libgit2
handle on a single thread. While the repository is open, a background task
drains the change watcher's kernel queue once a second (so that a busy agent
does not overflow it between checkpoints), moves the checkpoint log into git
and merges the small packs when enough have accumulated and no checkpoint was
taken for a second (or when very many wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

from weft.checkpoints.errors import CheckpointError
from weft.checkpoints.messages import Checkpoint
from weft.checkpoints.repo import CheckpointRepo, RecoverySnapshot, RestoreResult

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

#: Seconds between background drains of the change watcher (and pack merges).
DRAIN_EVERY = 1.0


class AsyncCheckpointRepo:
    """A :class:`CheckpointRepo` whose calls run in order on one worker thread."""

    def __init__(self, repo: CheckpointRepo, executor: ThreadPoolExecutor) -> None:
        self.repo = repo
        self._executor = executor
        self._drainer: asyncio.Task[None] | None = None
        self._closed = False
        self._queued = 0
        """Calls handed to the worker thread and not yet returned to their caller."""
        self._saving: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        git_dir: Path | str,
        workspace: Path | str,
        *,
        watch: bool = True,
        drain_every: float | None = DRAIN_EVERY,
        writer: bool = True,
    ) -> AsyncCheckpointRepo:
        """Opens (creating or repairing) the repository on the worker thread
        (``writer``: see :meth:`CheckpointRepo.open_or_create`)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weft-checkpoints")
        loop = asyncio.get_running_loop()
        try:
            repo = await loop.run_in_executor(
                executor,
                functools.partial(
                    CheckpointRepo.open_or_create, git_dir, workspace, watch=watch, writer=writer
                ),
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        opened = cls(repo, executor)
        if drain_every:
            opened._drainer = asyncio.create_task(opened._idle_loop(drain_every))
        return opened

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        self._queued += 1
        try:
            return await loop.run_in_executor(
                self._executor, functools.partial(fn, *args, **kwargs)
            )
        finally:
            self._queued -= 1

    def _save_later(self) -> None:
        """Has the worker save the index and move the log into git, without
        waiting for it: the checkpoint is in the log already. Later calls queue
        behind it (a short checkpoint too: it needs the worker idle)."""
        if self._saving is not None and not self._saving.done():
            return
        self._saving = asyncio.get_running_loop().create_task(self._save())

    async def _save(self) -> None:
        try:
            await self._run(self.repo.save)
        except CheckpointError as exc:
            # The log keeps the checkpoints and the save stays due: the next
            # checkpoint tries again, and reports it if it fails the same way.
            log.warning("saving the checkpoint index failed (tried again later): %s", exc)

    async def _idle_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self._run(self.repo.drain_changes)
                await self._run(self.repo.maintain, quiet_for=every)
            except CheckpointError as exc:
                # Housekeeping only: the next checkpoint reports the problem to its caller.
                log.warning("checkpoint maintenance stopped: %s", exc)
                return

    @property
    def initial_sha(self) -> str:
        """The initial empty commit on ``main``."""
        return self.repo.initial_sha

    @property
    def repairs(self) -> list[str]:
        """What opening repaired, swept or rebuilt."""
        return self.repo.repairs

    async def snapshot(
        self,
        patterns: Sequence[str],
        *,
        branch: str,
        parent_expected: str,
        kind: str,
        codon_id: str,
        run_id: str,
        codon_name: str,
        duration_ms: int | None = None,
        timestamp: str | None = None,
    ) -> str:
        """See :meth:`CheckpointRepo.snapshot`.

        A short checkpoint (:meth:`CheckpointRepo.snapshot_now`) is taken here,
        on the event loop, when nothing waits for the worker thread: calls
        still run in the order they were made.
        """
        saving = self._saving
        if self._queued == 1 and saving is not None and not saving.done():
            # Only the save is queued: wait for it, then take the short
            # checkpoint here, rather than queue the checkpoint behind the
            # save and wait for both (and for the threads' hand-overs).
            await asyncio.wait((saving,))
        if not self._queued and not self._closed:
            sha = self.repo.snapshot_now(
                patterns,
                branch=branch,
                parent_expected=parent_expected,
                kind=kind,
                codon_id=codon_id,
                run_id=run_id,
                codon_name=codon_name,
                duration_ms=duration_ms,
                timestamp=timestamp,
            )
            if sha is not None:
                if self.repo.save_due:
                    self._save_later()
                return sha
        return await self._run(
            self.repo.snapshot,
            patterns,
            branch=branch,
            parent_expected=parent_expected,
            kind=kind,
            codon_id=codon_id,
            run_id=run_id,
            codon_name=codon_name,
            duration_ms=duration_ms,
            timestamp=timestamp,
        )

    async def restore(self, sha: str, patterns: Sequence[str]) -> RestoreResult:
        """See :meth:`CheckpointRepo.restore`."""
        return await self._run(self.repo.restore, sha, patterns)

    async def recovery_snapshot(
        self, patterns: Sequence[str], *, run_id: str | None = None, reason: str = ""
    ) -> RecoverySnapshot:
        """See :meth:`CheckpointRepo.recovery_snapshot`."""
        return await self._run(self.repo.recovery_snapshot, patterns, run_id=run_id, reason=reason)

    async def list(self, run_id: str | None = None) -> list[Checkpoint]:
        """See :meth:`CheckpointRepo.list`."""
        return await self._run(self.repo.list, run_id)

    async def exists(self, sha: str) -> bool:
        """See :meth:`CheckpointRepo.exists`."""
        return await self._run(self.repo.exists, sha)

    async def verify(self, shas: Iterable[str]) -> set[str]:
        """See :meth:`CheckpointRepo.verify`."""
        return await self._run(self.repo.verify, list(shas))

    async def resolve(self, prefix: str) -> str:
        """See :meth:`CheckpointRepo.resolve`."""
        return await self._run(self.repo.resolve, prefix)

    async def branch_tip(self, name: str) -> str | None:
        """See :meth:`CheckpointRepo.branch_tip`."""
        return await self._run(self.repo.branch_tip, name)

    async def head(self) -> str:
        """See :meth:`CheckpointRepo.head`."""
        return await self._run(self.repo.head)

    async def close(self) -> None:
        """Finishes queued work, saves the index and stops the worker thread."""
        if self._closed:
            return
        self._closed = True
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drainer
        if self._saving is not None:
            await self._saving
        try:
            await self._run(self.repo.close)
        finally:
            self._executor.shutdown(wait=True)
