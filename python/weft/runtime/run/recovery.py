"""The start of a run: load checks, survivors, and the recovery choice.

Seed 003's order: a fresh run when there is none yet; after a failed thread,
a rollback to its last git-confirmed success; otherwise a continuation after
the newest codon with a confirmed checkpoint (the files the next codon covers
restored to it first); with no confirmed checkpoint at all, a clean restart
(the work tree saved to a recovery branch, the covered files back to the
initial checkpoint, rig copies removed) and a fresh run.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any, TypeAlias

from weft._core import ExecutionThread
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.clock import utc_now_iso
from weft.errors import CheckpointLossError
from weft.events.stream import InfoEvent, ProcessEndedEvent
from weft.events.transitions import Continuation, ContinuationSource, Fresh, RunStarted
from weft.outcome import ending_of
from weft.plan import ExecutionPlan, PlannedCodon
from weft.runtime.codon.archive import restore_archives
from weft.runtime.run import rollback, survivors
from weft.runtime.run.state import RuntimeState
from weft.state import StateManager
from weft.store.execution import ExecutionStore
from weft.store.integrity import load_checks, run_folders

Start: TypeAlias = tuple[ExecutionPlan, PlannedCodon | None, str]


def _stopped_codon(state: Mapping[str, Any]) -> str | None:
    """The codon the newest run's stop (yours or its budget's) cut short, if it did."""
    runs = state.get("runs") or []
    if not runs:
        return None
    newest = max(runs, key=lambda r: str(r.get("startTime", "")))
    ending = ending_of(newest)
    return ending.codon_id if ending.kind in ("stopped", "budget") else None


"""The run's plan, its first codon and the checkpoint it starts from."""


class Recovery:
    """Chooses and starts the run (see the module docstring)."""

    def __init__(self, ctx: RuntimeState) -> None:
        self.ctx = ctx
        """The run's shared state (the runtime itself)."""

    def report_survivors(self, ended: list[survivors.Ended]) -> None:
        """Says what was ended, and closes the journal's record of every group
        that is gone now (an unkillable one stays open, to be tried again)."""
        for item in ended:
            if item.how != "gone":
                self.ctx._emit(InfoEvent(message=item.describe()))
            if item.how != "unkillable":
                self.ctx._emit(ProcessEndedEvent(pid=item.record.pid, how=item.how))

    async def load_checks(
        self, store: ExecutionStore, checkpoints: AsyncCheckpointRepo
    ) -> list[str]:
        """The seed's load-time checks, before anything is journaled: raises
        CheckpointLossError when the thread's checkpoints are gone; returns the
        warnings to say."""
        state_json = store.core.state_json()
        confirmed = await checkpoints.verify(rollback.recorded_shas(json.loads(state_json)))
        checked = load_checks(
            state_json,
            store.core.execution_thread(checkpoints=confirmed),
            confirmed,
            run_folders(self.ctx.layout.runs),
            execution=self.ctx.layout.root,
        )
        if checked.error is not None:
            raise CheckpointLossError(checked.error)
        return checked.notes

    async def start_run(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        state: Mapping[str, Any],
        thread: ExecutionThread,
        plan: ExecutionPlan,
        run_id: str,
    ) -> Start | None:
        """Starts the run (seed 003 recovery); returns the plan, the first
        codon and the checkpoint the run starts from, or None when the
        execution has nothing left to do."""
        if not state["runs"]:
            return await self._fresh(manager, checkpoints, plan, run_id)
        if thread.failed:
            return await self._after_failure(manager, checkpoints, state, thread, plan, run_id)
        next_id = thread.next_codon_id
        if (
            self.ctx._replan is not None
            and self.ctx._replan.changed
            and not thread.has_running_codon
        ):
            # The thread computed its next codon on the stored plan; the run follows the new one.
            newest = thread.codons[0] if len(thread.codons) else None
            after = newest.codon_id if newest is not None and newest.codon_id in plan else None
            following = plan.next_codon(after)
            next_id = None if following is None else following.codon_id
        if next_id is None and not (self.ctx._replan is not None and self.ctx._replan.changed):
            return None
        # A changed plan with nothing left still starts a run: it journals the change
        # (codons removed), or the next resume would run them from the stored plan.
        return await self._continue(manager, checkpoints, state, thread, plan, run_id, next_id)

    async def _after_failure(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        state: Mapping[str, Any],
        thread: ExecutionThread,
        plan: ExecutionPlan,
        run_id: str,
    ) -> Start:
        """The thread ended in failure: roll back to its last git-confirmed
        success and go on after it, or start over when it has none."""
        target = rollback.last_success(thread)
        stopped = _stopped_codon(state)
        ended = (
            f"the last run was stopped while {stopped} ran"
            if stopped is not None
            else "the execution thread ended in failure"
        )
        if target is None:
            await self._clean_restart(
                checkpoints, state, plan, f"{ended} and has no git-confirmed success"
            )
            return await self._fresh(
                manager, checkpoints, ExecutionPlan.from_hank(self.ctx.hank.hank), run_id
            )
        self.ctx._emit(
            InfoEvent(
                message=f"The last run was stopped while {stopped} ran: going back to the "
                "checkpoint it started from"
                if stopped is not None
                else "The last run ended in failure: rolling back to its last success"
            )
        )
        await rollback.execute(
            target,
            thread=thread,
            manager=manager,
            checkpoints=checkpoints,
            plan=plan,
            layout=self.ctx.layout,
            current_run_id=None,
            new_run_id=run_id,
            server_pid=os.getpid(),
            emit=self.ctx._emit,
        )
        self._journal_replan(manager, run_id)
        current = plan.get(target.codon_id) if target.after_codon is None else None
        return plan, current or plan.next_codon(target.codon_id), target.sha

    async def _continue(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        state: Mapping[str, Any],
        thread: ExecutionThread,
        plan: ExecutionPlan,
        run_id: str,
        next_id: str | None,
    ) -> Start:
        """A continuation after the thread's newest codon with a confirmed
        checkpoint, on to ``next_id``; with none, a clean restart and a fresh run."""
        newest = thread.codons[0] if len(thread.codons) else None
        terminal = [
            cp.sha
            for cp in (newest.validated_checkpoints if newest else ())
            if cp.type != "rig-setup"
        ]
        if newest is None or not terminal:
            await self._clean_restart(
                checkpoints,
                state,
                plan,
                "no codon has run yet"
                if newest is None
                else f"{newest.codon_id} has no git-confirmed checkpoint",
            )
            return await self._fresh(
                manager, checkpoints, ExecutionPlan.from_hank(self.ctx.hank.hank), run_id
            )
        sha = terminal[-1]
        current = None if next_id is None else plan.get(next_id)
        if current is not None:
            # Everything the codon about to run may touch goes back to the
            # checkpoint, its own patterns included: a half-done attempt leaves nothing.
            await checkpoints.restore(sha, plan.checkpoint_patterns(current.codon_id))
        manager.transition(
            RunStarted(
                run_id=run_id,
                run_folder=str(self.ctx.layout.runs / run_id),
                git_branch=run_branch(run_id),
                starting_conditions=Continuation(
                    source=ContinuationSource(
                        run_id=newest.run_id, after_codon=newest.codon_id, checkpoint_sha=sha
                    ),
                    reason="continue",
                ),
                server_pid=os.getpid(),
                start_time=utc_now_iso(),
            )
        )
        self._journal_replan(manager, run_id)
        self.ctx._emit(
            InfoEvent(message=f"Continuing after {newest.codon_id} ({sha[:10]})"), run_id
        )
        return plan, current, sha

    def _journal_replan(self, manager: StateManager, run_id: str) -> None:
        """Records in the stored plan how the changed hank changed it, once the
        continuation run ``run_id`` started (plan changes need a live run)."""
        if self.ctx._replan is None:
            return
        for transition in self.ctx._replan.transitions(run_id):
            manager.transition(transition)
        if self.ctx._replan.changed and self.ctx._replan.after is not None:
            dropped, added = self.ctx._replan.dropped, self.ctx._replan.inserted
            kept = {e.codon_id for e in added}
            gone = [c for c in dropped if c not in kept]
            new = [e.codon_id for e in added if e.codon_id not in set(dropped)]
            parts = [
                f"removed {', '.join(gone)}" if gone else "",
                f"added {', '.join(new)}" if new else "",
            ]
            models = sorted({e.codon.model for e in added if e.codon.model})
            edited = "codons after it edited" + (
                f" (they run on {', '.join(models)})" if models else ""
            )
            said = "; ".join(p for p in parts if p) or edited
            after = self.ctx._replan.after
            self.ctx._emit(
                InfoEvent(message=f"The plan follows the changed hank after {after}: {said}"),
                run_id,
            )

    async def _clean_restart(
        self,
        checkpoints: AsyncCheckpointRepo,
        state: Mapping[str, Any],
        stored: ExecutionPlan,
        why: str,
    ) -> None:
        """Before an execution with history starts over: saves the work tree to
        a recovery branch, removes the rig copies of every codon that ever
        started, and restores every covered file to the execution's initial
        checkpoint, so the fresh run starts where the first one did, not on
        top of half-done work."""
        fresh = ExecutionPlan.from_hank(self.ctx.hank.hank)
        # The stored plan holds the loop iterations that ran; the hank's, any
        # pattern added since. Their union is every file a run may have covered.
        patterns = list(dict.fromkeys(rollback.all_patterns(stored) + rollback.all_patterns(fresh)))
        saved = await checkpoints.recovery_snapshot(patterns, reason=why)
        started = rollback.possibly_started(state, (stored, fresh))
        # Every codon runs again: what any of them archived comes back first.
        for restored in await asyncio.to_thread(restore_archives, self.ctx.layout, None):
            self.ctx._emit(restored)
        removed = await asyncio.to_thread(
            rollback.remove_rig_copies, self.ctx.layout, (stored, fresh), started
        )
        await checkpoints.restore(checkpoints.initial_sha, patterns)
        copies = f", removed the rig copies {', '.join(removed)}" if removed else ""
        self.ctx._emit(
            InfoEvent(
                message=(
                    f"Starting over: {why}. The work tree was saved to {saved.branch} "
                    f"({saved.sha[:10]}){copies} and the checkpointed files were restored to "
                    "the initial checkpoint; starting a fresh run"
                )
            )
        )

    async def _fresh(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        plan: ExecutionPlan,
        run_id: str,
    ) -> Start:
        """A fresh run with the whole plan, from the initial checkpoint (an
        execution with history went through :meth:`_clean_restart` first)."""
        manager.transition(
            RunStarted(
                run_id=run_id,
                run_folder=str(self.ctx.layout.runs / run_id),
                git_branch=run_branch(run_id),
                starting_conditions=Fresh(initial_checkpoint_sha=checkpoints.initial_sha),
                server_pid=os.getpid(),
                start_time=utc_now_iso(),
                execution_plan=plan.to_entries(),
            )
        )
        return plan, plan.next_codon(None), checkpoints.initial_sha
