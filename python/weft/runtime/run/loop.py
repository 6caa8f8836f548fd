"""The run loop: the run machine's driver.

It feeds :class:`~weft.runtime.run.machine.RunMachine` (the run began, a codon
ended under its failure policy, a rewind finished) and does what it answers:
run the next codon, wait for a command (manual mode: ``server.idle`` says
why), end the run with its journaled outcome (:func:`_ending_transition`). In
autostart mode the codons run in plan order; in manual mode the loop waits
before each, parks on a failed codon and stays up when the codons are done. A
rewind (a rollback or a redo) ends the current run and starts a new one from a
checkpoint, and the loop goes on in that run. Loops grow lazily as iterations
finish. It decides nothing the machine decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import msgspec

from weft.budget.ledger import Slot, Verdict
from weft.clock import utc_now_iso
from weft.config.schema import ContextExceeded
from weft.errors import WeftError
from weft.events.stream import (
    CodonRetryEvent,
    CodonSummary,
    ErrorEvent,
    InfoEvent,
    LoopIterationCompletedEvent,
    ServerIdleEvent,
    StateSnapshotEvent,
)
from weft.events.transitions import (
    BudgetStop,
    RunCompleted,
    RunFailed,
    RunStopped,
    Transition,
)
from weft.outcome import Ending, exit_code
from weft.plan import ExecutionPlan, PlanChange, PlannedCodon, plan_transitions
from weft.runtime.codon import archive
from weft.runtime.codon.attempt import CodonRequest, CodonResult
from weft.runtime.codon.runner import CodonRunner
from weft.runtime.run import rollback
from weft.runtime.run.machine import Effect, End, RunCodon, Wait
from weft.runtime.run.policy import Action, decide
from weft.runtime.run.state import (
    DONE,
    Cursor,
    IdleReason,
    Request,
    Rewind,
    RunOutcome,
    RuntimeState,
    Shutdown,
    new_run_id,
    summary,
)
from weft.state import StateManager

_RAISE_HINT = (
    "raise the budget (--max-cost, --max-time, --max-tokens) and run the same command to continue"
)


def _codon_id(planned: PlannedCodon | None) -> str | None:
    return None if planned is None else planned.codon_id


def _budget_stop(verdict: Verdict) -> dict[str, object]:
    """The ``budget`` of a ``RunStopped`` by the run's ceiling."""
    return {
        "scope": verdict.scope,
        "kind": verdict.kind,
        "limit": verdict.limit,
        "used": round(verdict.used, 9),
        "source": verdict.source,
    }


def _ending_transition(run_id: str, ending: Ending) -> Transition:
    """The transition that journals ``ending``."""
    end = utc_now_iso()
    if ending.kind == "completed":
        return RunCompleted(run_id=run_id, end_time=end)
    if ending.kind in ("stopped", "budget"):
        budget = ending.budget
        return RunStopped(
            run_id=run_id,
            end_time=end,
            by="budget" if ending.kind == "budget" else "user",
            forced=ending.forced,
            reason=ending.reason or "stopped",
            codon_id=ending.codon_id,
            budget=None if budget is None else msgspec.convert(budget, BudgetStop),
        )
    return RunFailed(run_id=run_id, end_time=end, codon_id=ending.codon_id, reason=ending.reason)


def _ending_message(ending: Ending, codons: dict[str, str]) -> str:
    """What the summary says of how the run ended: "All codons completed" only when true."""
    if ending.kind == "completed":
        failed = sorted(c for c, status in codons.items() if status == "failed")
        if failed:
            return (
                f"Completed; {len(failed)} codon(s) failed and were ignored "
                f"(onFailure ignore): {', '.join(failed)}"
            )
        return "All codons completed"
    if ending.kind == "budget":
        left = f"; {ending.codon_id} stays to do" if ending.codon_id else ""
        return f"{ending.reason}{left}; {_RAISE_HINT}"
    if ending.kind == "stopped":
        how = "the agent was killed; " if ending.forced else ""
        left = f"{ending.codon_id} stays to do; " if ending.codon_id else ""
        return f"Stopped by you: {how}{left}run the same command to continue"
    if ending.codon_id is not None:
        return f"Codon {ending.codon_id} failed: {ending.reason or 'failed'}"
    return ending.reason or "failed"


class RunLoop:
    """Runs the cursor's codons, carries out rewinds, ends the run."""

    def __init__(self, ctx: RuntimeState) -> None:
        self.ctx = ctx
        """The run's shared state (the runtime itself)."""

    async def drive(self, manager: StateManager, runner: CodonRunner) -> RunOutcome:
        """The run machine's driver: codons one after another (autostart), or
        as commands ask (manual mode, which also stays up when the codons are
        done), until the machine says the run ends."""
        cursor = self.ctx._cursor
        assert cursor is not None
        if (
            self.ctx._replan is not None
            and self.ctx._replan.changed
            and self.ctx._checkpoints is not None
        ):
            # The thread was read before the changed hank's entries were journaled:
            # a continue-previous codon added after what ran would find no
            # predecessor in its plan, hence no session to continue.
            _, self.ctx._thread, _ = await rollback.analyze(manager, self.ctx._checkpoints)
        # Read once, here: its plan would keep every later plan alive (see _execute).
        self.ctx._replan = None
        outcome = RunOutcome("completed", 0, cursor.run_id, "")
        machine = self.ctx.machine
        effects = machine.began(_codon_id(cursor.current))
        skip_rig = False
        while True:
            control = self.ctx._perform(effects)
            if isinstance(control, Wait):
                ended = next((e for e in effects if isinstance(e, End)), None)
                if ended is not None:
                    # Manual mode: the run ended (failed, or every codon done) and
                    # the loop still waits for a redo, a rollback or a shutdown.
                    await self._end_run(manager, cursor, ended.ending)
                    self._snapshot(cursor.run_id)
                request = await self._wait(cursor, control.reason)
                if isinstance(request, Shutdown):
                    if not machine.live:
                        break
                    effects = [Wait(control.reason)]  # a stale wake-up: wait again
                    continue
                skip_rig = request.skip_rig
                if isinstance(request, Rewind):
                    if not machine.rolling_back:
                        machine.rewinding()  # a redo (a rollback said so when accepted)
                    rewound = await self._rewind(manager, cursor, request)
                    if rewound is not None:
                        cursor = self.ctx._cursor = rewound
                        outcome.run_id = cursor.run_id
                    effects = machine.rewound(
                        _codon_id(cursor.current),
                        run_next=request.run_next,
                        ok=rewound is not None,
                    )
                    continue
                control = RunCodon()
            if not isinstance(control, RunCodon) or not machine.live:
                break
            effects = await self._step(manager, runner, cursor, outcome, skip_rig)
            skip_rig = False
        # A codon that ended the run left its snapshot to be taken after the end
        # (manual mode took it already, when the run ended before waiting).
        after_codon = isinstance(control, End)
        return await self._finish(manager, cursor, outcome, machine.finish(), after_codon)

    async def _wait(self, cursor: Cursor, reason: IdleReason) -> Request:
        """Waits for a command; says so with ``server.idle`` first."""
        failure = self.ctx.machine.failure
        if cursor.current is None and failure is None:
            reason = "all-codons-completed"
            message = "All codons completed: send codon.redo, rollback.* or server.shutdown"
        elif failure is not None:
            message = (
                f"Codon {failure[0]} failed: {failure[1]}: "
                "send codon.redo, rollback.* or server.shutdown"
            )
        else:
            assert cursor.current is not None
            message = f"Waiting for codon.next to start {cursor.current.codon_id}"
        if self.ctx.machine.live:
            self.ctx._emit(ServerIdleEvent(reason=reason, message=message), cursor.run_id)
        return await self.ctx._requests.get()

    async def _rewind(
        self, manager: StateManager, cursor: Cursor, request: Rewind
    ) -> Cursor | None:
        """Carries out a rollback or a redo: a new run from its target. None
        when it could not be done (an ``error`` event says why)."""
        checkpoints = self.ctx._checkpoints
        assert checkpoints is not None
        new_id = new_run_id()
        try:
            _, thread, _ = await rollback.analyze(manager, checkpoints)
            if request.reason == "retry":
                origin = (
                    "the initial state"
                    if request.target is None
                    else f"the {request.target.checkpoint_type} checkpoint of "
                    f"{request.target.codon_id} ({request.target.sha[:10]})"
                )
                self.ctx._emit(
                    InfoEvent(message=f"Redoing {request.codon_id} from {origin}"), cursor.run_id
                )
            ending: Transition | None = None
            if cursor.open:
                await self._closing(cursor)
                why = "rolled back" if request.reason == "rollback" else "redone"
                ending = _ending_transition(cursor.run_id, self.ctx.machine.rewind_ending(why))
            await rollback.execute(
                request.target,
                thread=thread,
                manager=manager,
                checkpoints=checkpoints,
                plan=cursor.plan,
                layout=self.ctx.layout,
                current_run_id=cursor.run_id if cursor.open else None,
                new_run_id=new_id,
                server_pid=os.getpid(),
                emit=self.ctx._emit,
                reason=request.reason,
                current_ending=ending,
            )
            _, self.ctx._thread, _ = await rollback.analyze(manager, checkpoints)
        except (WeftError, OSError) as exc:
            self.ctx._emit(
                ErrorEvent(message=f"{request.reason} failed: {exc}", severity="operation"),
                cursor.run_id,
            )
            return None
        plan, target = cursor.plan, request.target
        if request.codon_id is not None:
            current = plan.get(request.codon_id)
        elif target is None:
            current = plan.next_codon(None)
        elif target.after_codon is None:
            current = plan.get(target.codon_id)
        else:
            current = plan.next_codon(target.codon_id)
        parent = checkpoints.initial_sha if target is None else target.sha
        await self.read_thread(manager)
        self.ctx._cursor = Cursor(new_id, plan, current, parent)
        self._snapshot(new_id)
        return self.ctx._cursor

    async def _step(
        self,
        manager: StateManager,
        runner: CodonRunner,
        cursor: Cursor,
        outcome: RunOutcome,
        skip_rig: bool,
    ) -> list[Effect]:
        """Runs the cursor's codon under its failure policy, moves the cursor on,
        and tells the run machine how it ended; returns the machine's effects."""
        assert cursor.current is not None
        current = self._configured(cursor.current)
        machine = self.ctx.machine
        machine.codon_started(current.codon_id)
        if await self._out_of_budget(cursor, current):
            return machine.codon_ended(current.codon_id, moved_on=False)
        result = await self._attempts(runner, cursor, current, skip_rig)
        verdict = self._run_ceiling()
        self.ctx._finished.append(
            CodonSummary(
                codon_id=current.codon_id,
                run_id=cursor.run_id,
                status=result.status,
                cost=result.cost,
                start_time=result.start_time,
                end_time=utc_now_iso(),
            )
        )
        outcome.codons[current.codon_id] = result.status
        if result.checkpoint_sha is not None:
            outcome.checkpoints += 1
            cursor.parent = result.checkpoint_sha
        ignored = result.status == "failed" and current.codon.on_failure == "ignore"
        if result.status == "failed" and (not ignored or not machine.live):
            # Failed for good, or stopped (by you, or the run's budget): it stays to do.
            reason = result.failure.message if result.failure else None
            effects = machine.codon_ended(current.codon_id, moved_on=False, reason=reason)
            self._snapshot_unless_ending(cursor.run_id, effects)
            return effects
        if result.continuable and result.session_id is not None:
            cursor.sessions[current.codon_id] = result.session_id
        await self._archive(current.codon.archive_on_success, cursor.run_id, current)
        crossed = None if self.ctx._budget is None else self.ctx._budget.verdict
        change = cursor.plan.on_codon_finished(
            current.codon_id,
            context_exceeded=result.context_exceeded,
            # A hank's own codon or loop budget ends its loop; the run's ceiling
            # never does: a cut loop keeps its remaining iterations.
            budget_exceeded=crossed is not None and not crossed.stops_run,
        )
        cursor.plan = await self._apply_plan_change(manager, change, cursor.run_id)
        context = current.loop_context
        if change.loop_finished and context is not None:
            loop = cursor.plan.loops.get(context.loop_id)
            if loop is not None:
                await self._archive(loop.archive_on_success, cursor.run_id, current, loop.id)
        cursor.current = cursor.plan.next_codon(current.codon_id)
        if verdict is not None and cursor.current is not None:
            self.ctx._perform(machine.budget_stop(verdict.message, _budget_stop(verdict)))
        effects = machine.codon_ended(
            current.codon_id, moved_on=True, next_codon=_codon_id(cursor.current)
        )
        self._snapshot_unless_ending(cursor.run_id, effects)
        return effects

    def _snapshot_unless_ending(self, run_id: str, effects: list[Effect]) -> None:
        """The snapshot after a codon; when the run ends with it, :meth:`_finish`
        takes it after the run's end is journaled (clients see the end in it)."""
        if not any(isinstance(e, End) for e in effects):
            self._snapshot(run_id)

    def _run_ceiling(self) -> Verdict | None:
        """The run's ceiling, when it was crossed; the machine is told (once)."""
        verdict = None if self.ctx._budget is None else self.ctx._budget.verdict
        if verdict is None or not verdict.stops_run:
            return None
        if self.ctx.machine.live:
            self.ctx._perform(self.ctx.machine.budget_stop(verdict.message, _budget_stop(verdict)))
        return verdict

    async def _archive(
        self, paths: list[str], run_id: str, finished: PlannedCodon, loop_id: str | None = None
    ) -> None:
        """Archives ``paths`` of the finished codon (or, with ``loop_id``, of its
        loop, which just ended): ``archive.completed`` or ``archive.partial``."""
        if not paths:
            return
        owner = (
            loop_id
            if loop_id is not None
            else archive.codon_owner(finished.codon_id, finished.loop_context)
        )
        outcome = await asyncio.to_thread(
            archive.archive_paths,
            paths,
            layout=self.ctx.layout,
            owner=owner,
            run_id=run_id,
            codon_id=finished.codon_id,
            loop_id=loop_id,
        )
        self.ctx._emit(archive.archive_event(outcome), run_id, finished.codon_id)

    async def _out_of_budget(self, cursor: Cursor, current: PlannedCodon) -> bool:
        """Stops the run before ``current`` starts when the run's ceiling is used
        up (a resumed run whose earlier runs spent it, or a run stopped on it)."""
        budget = self.ctx._budget
        verdict = None if budget is None else budget.preflight(Slot.of(current), cursor.run_id)
        if verdict is None:
            return False
        reason = f"{verdict.message}; {current.codon_id} is not started"
        self.ctx._perform(self.ctx.machine.budget_stop(reason, _budget_stop(verdict)))
        return True

    async def _end_run(self, manager: StateManager, cursor: Cursor, ending: Ending) -> None:
        """Journals how the run ended: ``RunCompleted``, ``RunFailed`` (which
        codon, why) or ``RunStopped`` (by you or by the budget)."""
        if not cursor.open:
            return
        await self._closing(cursor)
        cursor.open = False
        await manager.transition_and_wait(_ending_transition(cursor.run_id, ending))

    async def _closing(self, cursor: Cursor) -> None:
        """What comes before a run's end is journaled: its sentinels' last drain
        and its ``budget.summary``."""
        if self.ctx._runner is not None:
            # The last codon's second sentinel drain ends before its run does,
            # as in the reference (it runs in the background between codons).
            await self.ctx._runner.sentinels.settle()
        if self.ctx._budget is not None:
            # Before the run-terminal transition, as the reference does; the
            # sentinels told the ledger every call's cost (settled above).
            self.ctx._emit(self.ctx._budget.summary(), cursor.run_id)

    async def read_thread(self, manager: StateManager) -> None:
        """Reads the finished codons and the cost from the execution thread:
        at the start and after a rollback or a redo. Between those, codons
        are only added, and ``_step`` adds them without a read (a read waits
        for the journal's commit)."""
        thread = await manager.execution_thread()
        self.ctx._finished.reset(
            summary(tc) for tc in reversed(list(thread.codons)) if tc.status in DONE
        )

    def _snapshot(self, run_id: str) -> None:
        """Emits ``state.snapshot``: the thread's finished codons (what changed
        since the previous snapshot) and the cost."""
        cursor = self.ctx._cursor
        keep, added, count, digest = self.ctx._finished.delta()
        self.ctx._emit(
            StateSnapshotEvent(
                completed_codons=added,
                completed_from=keep,
                completed_count=count,
                completed_digest=digest,
                total_cost=self.ctx._manager.core.total_cost() if self.ctx._manager else 0.0,
                total_time=int((time.monotonic() - self.ctx._started) * 1000),
                is_rolling_back=self.ctx.machine.rolling_back,
                current_codon=None
                if cursor is None or cursor.current is None
                else cursor.current.codon_id,
            ),
            run_id,
        )

    async def _finish(
        self,
        manager: StateManager,
        cursor: Cursor,
        outcome: RunOutcome,
        ending: Ending,
        snapshot: bool = False,
    ) -> RunOutcome:
        """The outcome, with the run ended the way the machine decided."""
        outcome.run_id = cursor.run_id
        outcome.cost = manager.core.run_cost(cursor.run_id) or 0.0
        outcome.ending = ending
        stop = self.ctx.machine.stopping
        signal = None if stop is None else stop.signal
        outcome.exit_code = exit_code(ending, signal)
        if ending.kind == "failed" and ending.codon_id is None and ending.reason:
            # A run-wide failure (a refused transition, a full disk): said as fatal.
            self.ctx._emit(
                ErrorEvent(message=ending.reason, fatal=True, severity="fatal"), cursor.run_id
            )
        outcome.status = "nothing_to_do" if ending.kind == "running" else ending.kind  # type: ignore[assignment]
        outcome.message = _ending_message(ending, outcome.codons)
        await self._end_run(manager, cursor, ending)
        if snapshot:
            self._snapshot(cursor.run_id)
        if ending.kind == "completed" and self.ctx.options.autostart:
            self.ctx._emit(
                ServerIdleEvent(reason="all-codons-completed", message=outcome.message),
                cursor.run_id,
            )
        await manager.flush()
        return outcome

    async def _attempts(
        self, runner: CodonRunner, cursor: Cursor, current: PlannedCodon, skip_rig: bool
    ) -> CodonResult:
        """Runs ``current`` until it finishes or its failure policy gives up."""
        plan, run_id, branch, parent = cursor.plan, cursor.run_id, cursor.branch, cursor.parent
        previous = plan.previous_codon(current.codon_id)
        attempt = 1
        while True:
            request = CodonRequest(
                run_id=run_id,
                branch=branch,
                planned=current,
                patterns=plan.checkpoint_patterns(current.codon_id),
                parent_sha=parent,
                previous_session_id=(
                    None
                    if previous is None
                    else cursor.sessions.get(previous.codon_id)
                    or self._thread_session(current.codon_id)
                ),
                accepts_context_exceeded=self._accepts_context_exceeded(plan, current),
                attempt=attempt,
                skip_rig=skip_rig,
            )
            result = await runner.run(request)
            if result.failure is not None and result.failure.kind == "storage":
                # A full disk: no retry or failure policy can help, the run ends.
                self.ctx._perform(
                    self.ctx.machine.fatal(result.failure.message or "the disk is full")
                )
                return result
            self._run_ceiling()
            if result.status != "failed" or not self.ctx.machine.live:
                return result
            failure = result.failure
            decision = decide(
                current.codon,
                attempt=attempt,
                retriable=result.retriable,
                retry_after_ms=None if failure is None else failure.retry_after_ms,
            )
            if decision.action is not Action.RETRY:
                if decision.action is Action.IGNORE:
                    self.ctx._emit(
                        InfoEvent(
                            message=f"Codon {current.codon_id} failed, continuing "
                            "(onFailure=ignore)"
                        ),
                        run_id,
                        current.codon_id,
                    )
                return result
            config_attempts = (
                current.codon.retry_config.max_attempts if current.codon.retry_config else 3
            )
            self.ctx._emit(
                CodonRetryEvent(
                    codon_id=current.codon_id,
                    attempt=attempt + 1,
                    max_attempts=config_attempts,
                    delay_ms=decision.delay_ms,
                    reason=failure.message if failure and failure.message else decision.reason,
                ),
                run_id,
                current.codon_id,
            )
            self.ctx._sleep = asyncio.ensure_future(asyncio.sleep(decision.delay_ms / 1000))
            with contextlib.suppress(asyncio.CancelledError):
                await self.ctx._sleep
            self.ctx._sleep = None
            if not self.ctx.machine.live:
                return result
            parent = runner.tips.get(branch, parent)
            attempt += 1

    def _configured(self, planned: PlannedCodon) -> PlannedCodon:
        """``planned`` with its codon as the hank file says now: a resumed
        execution whose hank changed (accepted with --yes) runs the codons it
        has not finished with their new configuration, while the stored plan
        keeps the order and the loop iterations."""
        codon = self.ctx._codons_by_id.get(planned.codon.id)
        if codon is None or codon == planned.codon:
            return planned
        return PlannedCodon(planned.codon_id, codon, planned.loop_context)

    def _thread_session(self, codon_id: str) -> str | None:
        thread = self.ctx._thread
        return None if thread is None else thread.find_continuation_session_id(codon_id)

    def _accepts_context_exceeded(self, plan: ExecutionPlan, current: PlannedCodon) -> bool:
        if current.codon.exhaust_with_prompt is not None:
            return True
        context = current.loop_context
        if context is None:
            return False
        loop = plan.loops.get(context.loop_id)
        return loop is not None and isinstance(loop.terminate_on, ContextExceeded)

    async def _apply_plan_change(
        self, manager: StateManager, change: PlanChange, run_id: str
    ) -> ExecutionPlan:
        finished = change.finished
        if change.iteration_completed and finished.loop_context is not None:
            # The iteration's figures come from the fold, which sees events once
            # their batch is committed: a slow commit left the iteration's last
            # codon out of them ($0.0000, 0 tokens). The fold takes events in
            # journal order, so once it has that codon's end it has the rest.
            folded = self.ctx._progress.codon(finished.codon_id)
            if folded is None or not folded.finished:
                await manager.flush()
        for transition in plan_transitions(change, run_id):
            manager.transition(transition)
        if change.iteration_completed and finished.loop_context is not None:
            context = finished.loop_context
            codons = [c.codon_id for c in change.plan.iteration(context.loop_id, context.iteration)]
            figures = self.ctx._progress.figures(codons, time.time_ns())
            self.ctx._emit(
                LoopIterationCompletedEvent(
                    loop_id=context.loop_id,
                    iteration=context.iteration,
                    duration_ms=figures.duration_ms,
                    cost_usd=figures.cost,
                    tokens_used=figures.tokens,
                    is_final=change.loop_finished,
                    termination_reason=change.termination_reason,
                ),
                run_id,
                finished.codon_id,
            )
        return change.plan
