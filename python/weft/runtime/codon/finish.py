"""How a codon attempt ends: completed (outputs copied, the completion
checkpoint before the terminal move, which carries its SHA), failed (an error
checkpoint, the failure reason), skipped, or cut short by an interrupt (a
skip, a force stop, a shutdown, a budget: the run's ceiling stops the codon,
which stays to do).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Literal

from weft.agents.events import ErrorClass
from weft.budget.ledger import Verdict
from weft.checkpoints.errors import CheckpointError
from weft.errors import PersistenceError
from weft.events.stream import (
    CodonCompletedEvent,
    ErrorEvent,
)
from weft.events.transitions import (
    BudgetExceeded,
    FailureReason,
    TransitionMetadata,
)
from weft.progress import NANO, nanos
from weft.runtime.codon.attempt import (
    Attempt,
    CodonRequest,
    CodonResult,
    Interrupt,
    builtins_of,
    exit_code_of,
    process_exit_of,
)
from weft.runtime.codon.base import RunnerBase
from weft.runtime.codon.outputs import copy_outputs
from weft.store.diskspace import RESUME_HINT, is_storage_failure, storage_error


class Finishing(RunnerBase):
    """How an attempt ends (see the module docstring)."""

    async def _finish(self, a: Attempt) -> CodonResult:
        exit = a.exit
        assert exit is not None
        if exit.log_error is not None:
            a.storage = f"{exit.log_error}; {RESUME_HINT}"
            return await self._fail(a, "storage", False, a.storage)
        if a.interrupt is None and self.budget is not None and self.budget.verdict is not None:
            # Crossed on the last lines, before the watchdog's stop got here.
            a.interrupt = Interrupt.BUDGET
        if a.interrupt is not None:
            return await self._interrupted(a)
        return await self._ended(a)

    async def _ended(self, a: Attempt, *, budget: Verdict | None = None) -> CodonResult:
        """The attempt's end by how the agent ended (or by the budget it crossed)."""
        exit = a.exit
        assert exit is not None
        context_exceeded = exit.context_exceeded or (
            a.result is not None and a.result.context_exceeded
        )
        accepted = context_exceeded and a.request.accepts_context_exceeded
        if (exit.ok or accepted or budget is not None) and a.status == "running":
            # The sentinels wait for the agent's events, not for the move's commit.
            upto = self.manager.core.next_seq - 1
            self._move(a, "completing-sentinels")
            await self.sentinels.drain(
                a.request.planned, a.request.run_id, upto=upto, files_written=a.wrote_files
            )
            copied = await self._outputs(a)
            if copied is not None:
                return copied
            sha = await self._checkpoint(a, "completed")
            if sha is None:
                return await self._fail(
                    a,
                    "checkpoint",
                    False,
                    f"Completion checkpoint failed for {a.request.planned.codon_id}",
                )
            self._move(
                a,
                "completed",
                TransitionMetadata(
                    exit_code=0,
                    checkpoint_sha=sha,
                    result_message_received=a.result is not None,
                    context_exceeded=context_exceeded or None,
                    extension_count=a.extensions or None,
                    budget_exceeded=None if budget is None else budget_of(budget),
                ),
            )
            return await self._done(
                a, "completed", checkpoint=sha, context_exceeded=context_exceeded
            )
        error_class = exit.error_class or ErrorClass.ERROR_RESULT
        message = exit.message or f"the agent exited with code {exit_code_of(exit)}"
        if exit.ok and a.status != "running":
            error_class, message = ErrorClass.NO_RESULT, "the agent never reported a session"
        return await self._fail(
            a, str(error_class), exit.retriable, message, retry_after_ms=exit.retry_after_ms
        )

    async def _outputs(self, a: Attempt) -> CodonResult | None:
        """Copies the codon's ``outputFiles`` (see :mod:`weft.runtime.codon.outputs`);
        a failed copy fails the codon."""
        req, codon = a.request, a.request.planned.codon
        if not codon.output_files or self.output_dir is None:
            return None
        codon_id = req.planned.codon_id
        result = await copy_outputs(
            codon.output_files,
            workspace=self.layout.workspace,
            output_dir=self.output_dir,
            overwrite=self.overwrite_output,
            env=self._command_env(codon.env),
            emit=functools.partial(self.manager.emit, run_id=req.run_id, codon_id=codon_id),
            codon_id=codon_id,
        )
        if result.error is not None:
            return await self._fail(a, "output_copy", False, result.error)
        return None

    async def _interrupted(self, a: Attempt) -> CodonResult:
        why = a.interrupt
        verdict = None if self.budget is None else self.budget.verdict
        if why is Interrupt.BUDGET and verdict is not None:
            if verdict.stops_run and (a.result is None or not a.result.ok):
                # The run's ceiling is a safety stop, not the codon's end: unless
                # the agent already gave its result (a stopped agent reports an
                # error result: not that), the codon stops with a
                # checkpoint and stays to do (raising the cap and running again
                # goes on from it), whatever onExceeded says.
                return await self._fail(
                    a,
                    "interrupted",
                    True,
                    f"Stopped by the run's budget: {verdict.message}",
                    budget=budget_of(verdict),
                )
            if verdict.stops_run and a.exit is not None:
                return await self._ended(a, budget=verdict)  # its work is done: it keeps it
            if verdict.on_exceeded == "fail":
                return await self._fail(
                    a, "budget", False, verdict.message, budget=budget_of(verdict)
                )
            if a.status == "running" and a.exit is not None:
                return await self._ended(a, budget=verdict)
            why = Interrupt.SKIP  # the agent never ran: nothing to complete
        if why is Interrupt.SKIP:
            sha = await self._checkpoint(a, "skipped")
            self._move(
                a, "skipped", TransitionMetadata(skipped_during=a.status, checkpoint_sha=sha)
            )
            return await self._done(a, "skipped", checkpoint=sha)
        if why is Interrupt.FORCE_STOP:
            return await self._fail(a, "force_stopped", False, "Stopped by the user")
        return await self._fail(a, "interrupted", True, "Weft was shut down while the codon ran")

    async def _fail(
        self,
        a: Attempt,
        kind: str,
        retriable: bool,
        message: str,
        *,
        retry_after_ms: int | None = None,
        budget: BudgetExceeded | None = None,
    ) -> CodonResult:
        sha = await self._checkpoint(a, "error")
        if a.storage is not None:
            kind, retriable, message = "storage", False, a.storage
        reason = FailureReason(
            kind=kind, retriable=retriable, message=message, retry_after_ms=retry_after_ms
        )
        self._move(
            a,
            "failed",
            TransitionMetadata(
                exit_code=exit_code_of(a.exit),
                failure_reason=reason,
                failed_during=a.status,
                checkpoint_sha=sha,
                budget_exceeded=budget,
            ),
        )
        return await self._done(a, "failed", checkpoint=sha, failure=reason)

    async def _attempt_cost(self, a: Attempt) -> float | None:
        """The attempt's cost as the core holds it. When the agent reported a
        total, that is it; otherwise the core is asked once the queue is applied
        (the core applies a batch before committing it, so this waits for the
        batch in flight, not for an fsync of this one)."""
        if a.reported_cost is not None:
            return nanos(a.reported_cost) / NANO
        with contextlib.suppress(PersistenceError):
            await self.manager.applied()
        return self.manager.core.codon_cost(a.request.run_id, a.request.planned.codon_id)

    async def _done(
        self,
        a: Attempt,
        status: Literal["completed", "failed", "skipped"],
        *,
        checkpoint: str | None = None,
        failure: FailureReason | None = None,
        context_exceeded: bool = False,
    ) -> CodonResult:
        req = a.request
        cost = await self._attempt_cost(a)
        result = CodonResult(
            codon_id=req.planned.codon_id,
            status=status,
            failure=failure,
            session_id=a.session_id,
            cost=0.0 if status == "skipped" or cost is None else cost,
            tokens=a.tokens,
            checkpoint_sha=checkpoint,
            context_exceeded=context_exceeded,
            duration_ms=a.duration_ms,
            exit=a.exit,
            assistant_messages=len(a.messages),
            start_time=a.start_time,
        )
        self.emit(
            CodonCompletedEvent(
                codon_id=result.codon_id,
                status=status,
                success=status == "completed",
                cost=None if self._unpriced() and not result.cost else result.cost,
                duration=result.duration_ms,
                exit_status=process_exit_of(a.exit),
                failure_reason=None if failure is None else builtins_of(failure),
                checkpoint_sha=checkpoint,
            ),
            req.run_id,
            result.codon_id,
        )
        await self.sentinels.finish(
            req.planned, req.run_id, shutdown=a.interrupt is Interrupt.SHUTDOWN
        )
        return result

    def _unpriced(self) -> bool:
        """Whether the attempt's model has no price (its cost is unknown, not $0)."""
        return self.budget is not None and self.budget.ledger.attempt_unpriced

    async def _checkpoint(self, a: Attempt, kind: str) -> str | None:
        """Takes a checkpoint of the covered files; None when it failed (reported)."""
        req = a.request
        try:
            sha = await self.checkpoints.snapshot(
                req.patterns,
                branch=req.branch,
                parent_expected=self._tip(req),
                kind=kind,
                codon_id=req.planned.codon_id,
                run_id=req.run_id,
                codon_name=req.planned.codon.name,
                duration_ms=a.duration_ms,
            )
        except Exception as exc:
            # pygit2 and the OS report a full disk in their own words, not
            # always as a CheckpointError: those end the run like any storage failure.
            storage = is_storage_failure(exc)
            if not (storage or isinstance(exc, CheckpointError)):
                raise
            if storage and a.storage is None:
                a.storage = str(
                    storage_error(f"the {kind} checkpoint of {req.planned.codon_id}", exc)
                )
            self.emit(
                ErrorEvent(
                    message=f"{kind} checkpoint of {req.planned.codon_id} failed: {exc}",
                    codon=req.planned.codon_id,
                    severity="codon",
                ),
                req.run_id,
                req.planned.codon_id,
            )
            return None
        self.tips[req.branch] = sha
        return sha

    def _tip(self, req: CodonRequest) -> str:
        return self.tips.get(req.branch, req.parent_sha)


def budget_of(verdict: Verdict) -> BudgetExceeded:
    """The ``budgetExceeded`` metadata of a crossed budget (``currency`` names the kind)."""
    currency = "USD" if verdict.kind == "dollars" else verdict.kind
    return BudgetExceeded(currency=currency, limit=verdict.limit, used=round(verdict.used, 9))


__all__ = ["Finishing", "budget_of"]
