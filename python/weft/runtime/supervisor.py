"""The runtime supervisor: start an execution, run its codons, stop cleanly.

Startup follows seed 001's order: the lock (taken by the store), the
checkpoint repository, the state manager, the event journal (the same
store), the sentinel host (a seam: :class:`~weft.runtime.runner.NoSentinels`
until sentinels exist), the WebSocket server (a seam: ``command()`` is the
entry point the server will call). Then runs a dead process left ``running``
are marked crashed, and the run is chosen:

* no run yet: a fresh run with the whole plan;
* the execution thread (seed 003) ended in failure: roll back to its last
  git-confirmed success (:mod:`weft.runtime.rollback`) and continue after it;
* otherwise: a continuation after the thread's newest codon with a confirmed
  checkpoint; the files the next codon covers are restored to it first, so a
  half-done attempt leaves nothing behind;
* no confirmed checkpoint at all: the work tree goes to a recovery branch and
  a fresh run starts; with nothing left to run, there is nothing to do.

Then codons run one at a time, in plan order, under their failure policy;
loops grow lazily as iterations finish. The first SIGINT or SIGTERM stops
gracefully (the agent gets its stop sequence, an error checkpoint is taken,
the run ends as failed and can be continued); the second kills the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from weft._core import ExecutionThread
from weft.agents.harness import Harness, route
from weft.agents.registry import harness_for
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.clock import utc_now_iso
from weft.config.loader import LoadedHank
from weft.config.schema import ContextExceeded, Loop
from weft.errors import PersistenceError
from weft.events.stream import (
    CodonRetryEvent,
    ErrorEvent,
    InfoEvent,
    LoopIterationCompletedEvent,
    ServerIdleEvent,
    StreamData,
)
from weft.events.transitions import (
    Continuation,
    ContinuationSource,
    Fresh,
    InitialCheckpointSet,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from weft.plan import ExecutionPlan, PlanChange, PlannedCodon, plan_transitions
from weft.runtime import rollback
from weft.runtime.execution import PreparedExecution
from weft.runtime.policy import Action, decide
from weft.runtime.runner import CodonRequest, CodonResult, CodonRunner, Interrupt
from weft.state import Processed, StateManager
from weft.store.execution import ExecutionStore

Listener = Callable[[Processed], None]


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """How ``weft run`` was asked to behave."""

    autostart: bool = True
    ignore_rig_failures: bool = False
    idle_timeout: float | None = None
    first_output_timeout: float | None = 60.0
    stop_grace: float = 5.0


@dataclass(slots=True)
class RunOutcome:
    """How a ``weft run`` ended."""

    status: Literal["completed", "failed", "interrupted", "nothing_to_do"]
    exit_code: int
    run_id: str | None
    message: str
    codons: dict[str, str] = field(default_factory=dict)
    """Codon id -> its final status in this run."""
    cost: float = 0.0
    checkpoints: int = 0
    duration_ms: int = 0


def new_run_id() -> str:
    """``<ms since epoch>-<5 base36 chars>``, the reference's run id shape."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{time.time_ns() // 1_000_000}-{suffix}"


@dataclass(slots=True)
class _History:
    """Sessions this run's codons established, for ``continue-previous``
    successors (earlier runs' sessions come from the execution thread)."""

    sessions: dict[str, str] = field(default_factory=dict)


class Runtime:
    """Runs one execution's codons until they are done, a codon fails for
    good, or someone stops it."""

    def __init__(
        self,
        prepared: PreparedExecution,
        hank: LoadedHank,
        options: RuntimeOptions | None = None,
        *,
        listeners: tuple[Listener, ...] = (),
        on_state: Callable[[Mapping[str, Any]], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.prepared = prepared
        self.layout = prepared.layout
        self.hank = hank
        self.options = options or RuntimeOptions()
        self.env = env
        self._listeners = listeners
        self._on_state = on_state
        self._commands: asyncio.Queue[str] = asyncio.Queue()
        self._stopping = False
        self._forced = False
        self._fatal: str | None = None
        self._runner: CodonRunner | None = None
        self._manager: StateManager | None = None
        self._sleep: asyncio.Future[None] | None = None
        self._signal = 0
        self._thread: ExecutionThread | None = None
        self._codons_by_id = {
            codon.id: codon
            for item in hank.hank.hank
            for codon in (item.codons if isinstance(item, Loop) else [item])
        }
        self._iterations: dict[tuple[str, int], list[float]] = {}
        """(loop id, iteration) -> [cost, milliseconds, tokens] so far."""

    # ------------------------------------------------------------------ control

    async def command(self, name: str) -> bool:
        """Steers the run: ``codon.next``/``codon.start``, ``codon.skip``,
        ``codon.forceStop``, ``server.shutdown``, ``server.force_shutdown``.
        Returns False when the command does not apply now."""
        if name in ("codon.next", "codon.start"):
            self._commands.put_nowait(name)
            return True
        runner = self._runner
        if name == "codon.skip":
            return runner is not None and await runner.interrupt(Interrupt.SKIP)
        if name == "codon.forceStop":
            return runner is not None and await runner.interrupt(Interrupt.FORCE_STOP)
        if name == "server.shutdown":
            await self.stop()
            return True
        if name == "server.force_shutdown":
            await self.stop(force=True)
            return True
        return False

    async def stop(self, *, force: bool = False) -> None:
        """Graceful stop (the agent is stopped, a checkpoint taken); ``force``
        kills the agent at once. A second graceful stop forces."""
        force = force or self._stopping
        self._stopping = True
        if self._sleep is not None:
            self._sleep.cancel()
        self._commands.put_nowait("server.shutdown")
        runner = self._runner
        if runner is None:
            return
        if force:
            self._forced = True
            await runner.kill()
        else:
            await runner.interrupt(Interrupt.SHUTDOWN)

    def _on_signal(self, signum: int) -> None:
        asyncio.get_running_loop().create_task(self.stop())
        self._signal = signum

    # ------------------------------------------------------------------ events

    def _emit(
        self, event: StreamData, run_id: str | None = None, codon_id: str | None = None
    ) -> None:
        assert self._manager is not None
        self._manager.emit(event.TYPE, event, run_id=run_id, codon_id=codon_id)

    def _on_processed(self, item: Processed) -> None:
        if item.event is not None and not item.outcome.ok and self._fatal is None:
            # The runtime is the only writer; a refusal means its picture of
            # the state is wrong, and going on would only make it worse.
            self._fatal = f"internal error: {item.outcome.kind} was refused: {item.outcome.message}"
            runner = self._runner
            if runner is not None:
                asyncio.get_running_loop().create_task(runner.interrupt(Interrupt.FORCE_STOP))

    # ------------------------------------------------------------------ run

    async def run(self) -> RunOutcome:
        """Starts, runs the codons, shuts down. Never leaves the lock held."""
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        installed: list[int] = []
        for signum in (int(signal.SIGINT), int(signal.SIGTERM)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_signal, signum)
                installed.append(signum)
        store = await asyncio.to_thread(ExecutionStore.open, self.layout.weft_dir)
        checkpoints: AsyncCheckpointRepo | None = None
        manager: StateManager | None = None
        try:
            checkpoints = await AsyncCheckpointRepo.open(
                self.layout.checkpoints, self.layout.workspace
            )
            manager = store.state_manager()
            self._manager = manager
            manager.add_listener(self._on_processed)
            for listener in self._listeners:
                manager.add_listener(listener)
            for repair in checkpoints.repairs:
                self._emit(InfoEvent(message=f"Checkpoint repository: {repair}"))
            crashed = await store.mark_crashed_runs(manager)
            for run_id in crashed:
                self._emit(
                    InfoEvent(
                        message=f"Run {run_id} was left running by a process that died; "
                        "marked crashed"
                    )
                )
            outcome = await self._execute(manager, checkpoints)
        except PersistenceError as exc:
            outcome = RunOutcome("failed", 1, None, f"the journal can no longer be written: {exc}")
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            if checkpoints is not None:
                await checkpoints.close()
            with contextlib.suppress(PersistenceError):
                await store.close(manager)
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        return outcome

    async def _execute(self, manager: StateManager, checkpoints: AsyncCheckpointRepo) -> RunOutcome:
        state, thread, _ = await rollback.analyze(manager, checkpoints)
        if self._on_state is not None:
            self._on_state(state)
        if state.get("initialCheckpoint") is None:
            manager.transition(InitialCheckpointSet(sha=checkpoints.initial_sha))
        if state["runs"]:
            plan = ExecutionPlan.from_state(state["executionPlan"], self.hank.hank)
        else:
            plan = ExecutionPlan.from_hank(self.hank.hank)
        self._thread = thread
        run_id = new_run_id()
        start = await self._start_run(manager, checkpoints, state, thread, plan, run_id)
        if start is None:
            message = f"Execution {self.layout.root} is complete: nothing to do"
            self._emit(InfoEvent(message=message))
            return RunOutcome("nothing_to_do", 0, None, message)
        plan, current, parent = start
        runner = CodonRunner(
            manager,
            checkpoints,
            self.hank,
            self.layout,
            harness_for=self._harness,
            ignore_rig_failures=self.options.ignore_rig_failures,
            idle_timeout=self.options.idle_timeout,
            first_output_timeout=self.options.first_output_timeout,
            stop_grace=self.options.stop_grace,
            env=self.env,
        )
        self._runner = runner
        return await self._codons(
            manager, runner, plan, _History(), run_id, run_branch(run_id), parent, current
        )

    async def _start_run(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        state: Mapping[str, Any],
        thread: ExecutionThread,
        plan: ExecutionPlan,
        run_id: str,
    ) -> tuple[ExecutionPlan, PlannedCodon | None, str] | None:
        """Starts the run (seed 003 recovery); returns the plan, the first
        codon and the checkpoint the run starts from, or None when the
        execution has nothing left to do."""
        if not state["runs"]:
            return await self._fresh(manager, checkpoints, plan, run_id, None)
        if thread.failed:
            target = rollback.last_success(thread)
            if target is None:
                return await self._fresh(
                    manager,
                    checkpoints,
                    ExecutionPlan.from_hank(self.hank.hank),
                    run_id,
                    "the execution thread ended in failure and has no git-confirmed success",
                )
            self._emit(
                InfoEvent(message="The last run ended in failure: rolling back to its last success")
            )
            await rollback.execute(
                target,
                thread=thread,
                manager=manager,
                checkpoints=checkpoints,
                plan=plan,
                layout=self.layout,
                current_run_id=None,
                new_run_id=run_id,
                server_pid=os.getpid(),
                emit=self._emit,
            )
            current = plan.get(target.codon_id) if target.after_codon is None else None
            return plan, current or plan.next_codon(target.codon_id), target.sha
        next_id = thread.next_codon_id
        if next_id is None:
            return None
        newest = thread.codons[0] if len(thread.codons) else None
        terminal = [
            cp.sha
            for cp in (newest.validated_checkpoints if newest else ())
            if cp.type != "rig-setup"
        ]
        if newest is None or not terminal:
            return await self._fresh(
                manager,
                checkpoints,
                ExecutionPlan.from_hank(self.hank.hank),
                run_id,
                None if newest is None else f"{newest.codon_id} has no git-confirmed checkpoint",
            )
        sha = terminal[-1]
        current = plan.get(next_id)
        if current is not None:
            # Everything the codon about to run may touch goes back to the
            # checkpoint, its own patterns included: a half-done attempt leaves nothing.
            await checkpoints.restore(sha, plan.checkpoint_patterns(current.codon_id))
        manager.transition(
            RunStarted(
                run_id=run_id,
                run_folder=str(self.layout.runs / run_id),
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
        self._emit(InfoEvent(message=f"Continuing after {newest.codon_id} ({sha[:10]})"), run_id)
        return plan, current, sha

    async def _fresh(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        plan: ExecutionPlan,
        run_id: str,
        degraded: str | None,
    ) -> tuple[ExecutionPlan, PlannedCodon | None, str]:
        """A fresh run with the whole plan. ``degraded`` says why an execution
        with history starts over: its work tree is saved to a recovery branch first."""
        if degraded is not None:
            saved = await checkpoints.recovery_snapshot(
                rollback.all_patterns(plan), reason=degraded
            )
            self._emit(
                InfoEvent(
                    message=(
                        f"Recovery degraded: {degraded}. The work tree was saved to "
                        f"{saved.branch} ({saved.sha[:10]}); starting a fresh run"
                    )
                )
            )
        manager.transition(
            RunStarted(
                run_id=run_id,
                run_folder=str(self.layout.runs / run_id),
                git_branch=run_branch(run_id),
                starting_conditions=Fresh(initial_checkpoint_sha=checkpoints.initial_sha),
                server_pid=os.getpid(),
                start_time=utc_now_iso(),
                execution_plan=plan.to_entries(),
            )
        )
        return plan, plan.next_codon(None), checkpoints.initial_sha

    def _harness(self, model: str) -> tuple[Harness, str]:
        target = route(model)
        return harness_for(target, self.env), target.model

    async def _codons(
        self,
        manager: StateManager,
        runner: CodonRunner,
        plan: ExecutionPlan,
        history: _History,
        run_id: str,
        branch: str,
        parent: str,
        current: PlannedCodon | None,
    ) -> RunOutcome:
        outcome = RunOutcome("completed", 0, run_id, "")
        while current is not None and not self._stopping and self._fatal is None:
            if not self.options.autostart and not await self._wait_for_next(run_id, current):
                break
            current = self._configured(current)
            result = await self._attempts(runner, plan, history, current, run_id, branch, parent)
            outcome.codons[current.codon_id] = result.status
            outcome.cost += result.cost
            if current.loop_context is not None:
                key = (current.loop_context.loop_id, current.loop_context.iteration)
                totals = self._iterations.setdefault(key, [0.0, 0.0, 0.0])
                totals[0] += result.cost
                totals[1] += result.duration_ms
                totals[2] += result.tokens.input + result.tokens.output
            if result.checkpoint_sha is not None:
                outcome.checkpoints += 1
                parent = result.checkpoint_sha
            ignored = result.status == "failed" and current.codon.on_failure == "ignore"
            if result.status == "failed" and not ignored:
                if self._stopping:
                    break  # stopped by request, not failed: reported below as interrupted
                outcome.status, outcome.exit_code = "failed", 1
                reason = result.failure.message if result.failure else "failed"
                outcome.message = f"Codon {current.codon_id} failed: {reason}"
                break
            if result.continuable and result.session_id is not None:
                history.sessions[current.codon_id] = result.session_id
            change = plan.on_codon_finished(
                current.codon_id, context_exceeded=result.context_exceeded
            )
            plan = self._apply_plan_change(manager, change, run_id)
            current = plan.next_codon(current.codon_id)
        if self._fatal is not None:
            outcome.status, outcome.exit_code, outcome.message = "failed", 1, self._fatal
            self._emit(ErrorEvent(message=self._fatal, fatal=True, severity="fatal"), run_id)
        elif self._stopping and outcome.status == "completed" and current is not None:
            code = 128 + (self._signal or int(signal.SIGINT))
            outcome.status, outcome.exit_code = "interrupted", code
            outcome.message = "Stopped before the run finished; run the same command to continue"
        if outcome.status == "completed":
            outcome.message = outcome.message or "All codons completed"
            await manager.transition_and_wait(RunCompleted(run_id=run_id, end_time=utc_now_iso()))
            self._emit(
                ServerIdleEvent(reason="all-codons-completed", message=outcome.message), run_id
            )
        else:
            await manager.transition_and_wait(RunFailed(run_id=run_id, end_time=utc_now_iso()))
        await manager.flush()
        return outcome

    async def _wait_for_next(self, run_id: str, current: PlannedCodon) -> bool:
        self._emit(
            ServerIdleEvent(
                reason="codon-completed",
                message=f"Waiting for codon.next to start {current.codon_id}",
            ),
            run_id,
        )
        command = await self._commands.get()
        return command in ("codon.next", "codon.start") and not self._stopping

    async def _attempts(
        self,
        runner: CodonRunner,
        plan: ExecutionPlan,
        history: _History,
        current: PlannedCodon,
        run_id: str,
        branch: str,
        parent: str,
    ) -> CodonResult:
        """Runs ``current`` until it finishes or its failure policy gives up."""
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
                    else history.sessions.get(previous.codon_id)
                    or self._thread_session(current.codon_id)
                ),
                accepts_context_exceeded=self._accepts_context_exceeded(plan, current),
                attempt=attempt,
            )
            result = await runner.run(request)
            if result.status != "failed" or self._stopping or self._fatal is not None:
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
                    self._emit(
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
            self._emit(
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
            self._sleep = asyncio.ensure_future(asyncio.sleep(decision.delay_ms / 1000))
            with contextlib.suppress(asyncio.CancelledError):
                await self._sleep
            self._sleep = None
            if self._stopping:
                return result
            parent = runner.tips.get(branch, parent)
            attempt += 1

    def _configured(self, planned: PlannedCodon) -> PlannedCodon:
        """``planned`` with its codon as the hank file says now: a resumed
        execution whose hank changed (accepted with --yes) runs the codons it
        has not finished with their new configuration, while the stored plan
        keeps the order and the loop iterations."""
        codon = self._codons_by_id.get(planned.codon.id)
        if codon is None or codon == planned.codon:
            return planned
        return PlannedCodon(planned.codon_id, codon, planned.loop_context)

    def _thread_session(self, codon_id: str) -> str | None:
        thread = self._thread
        return None if thread is None else thread.find_continuation_session_id(codon_id)

    def _accepts_context_exceeded(self, plan: ExecutionPlan, current: PlannedCodon) -> bool:
        if current.codon.exhaust_with_prompt is not None:
            return True
        context = current.loop_context
        if context is None:
            return False
        loop = plan.loops.get(context.loop_id)
        return loop is not None and isinstance(loop.terminate_on, ContextExceeded)

    def _apply_plan_change(
        self, manager: StateManager, change: PlanChange, run_id: str
    ) -> ExecutionPlan:
        for transition in plan_transitions(change, run_id):
            manager.transition(transition)
        finished = change.finished
        if change.iteration_completed and finished.loop_context is not None:
            context = finished.loop_context
            cost, ms, tokens = self._iterations.pop((context.loop_id, context.iteration), [0, 0, 0])
            self._emit(
                LoopIterationCompletedEvent(
                    loop_id=context.loop_id,
                    iteration=context.iteration,
                    duration_ms=int(ms),
                    cost_usd=cost,
                    tokens_used=int(tokens),
                    is_final=change.loop_finished,
                    termination_reason=change.termination_reason,
                ),
                run_id,
                finished.codon_id,
            )
        return change.plan


__all__ = ["RunOutcome", "Runtime", "RuntimeOptions", "new_run_id"]
