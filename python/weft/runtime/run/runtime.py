"""The runtime: start an execution, run its codons, stop cleanly.

Startup follows seed 001's order: the lock (taken by the store), the
checkpoint repository, the state manager, the event journal (the same
store), the sentinel host (:class:`~weft.sentinels.host.RuntimeSentinels`:
each codon's sentinels, fed from the committed events), the WebSocket
server (:mod:`weft.server`; the runtime carries out its steering commands).
Then runs a dead process left ``running`` are marked crashed, and the run is
chosen:

* no run yet: a fresh run with the whole plan;
* the execution thread (seed 003) ended in failure: roll back to its last
  git-confirmed success (:mod:`weft.runtime.run.rollback`) and continue after it;
* otherwise: a continuation after the thread's newest codon with a confirmed
  checkpoint; the files the next codon covers are restored to it first, so a
  half-done attempt leaves nothing behind;
* no confirmed checkpoint at all: the work tree goes to a recovery branch,
  the covered files go back to the initial checkpoint (rig copies removed)
  and a fresh run starts; with nothing left to run, there is nothing to do.

Before all of that, right after the lock is taken, process groups a dead run
left behind are ended (:mod:`weft.runtime.run.survivors`), so nothing of the old
run writes to the work tree while it is restored or run again.

Then codons run one at a time, in plan order, under their failure policy;
loops grow lazily as iterations finish. In manual mode (``autostart=False``)
the run loop waits for a command before each codon, parks on a failed codon
and stays up when the codons are done; while it waits, a rollback or a redo
ends the current run and starts a new one from a checkpoint, and the loop
goes on in that run. The first SIGINT or SIGTERM stops
gracefully (the agent gets its stop sequence, an error checkpoint is taken,
the run ends as stopped, ``RunStopped`` by the user, and can be continued);
the second kills the agent. The run's budget ceiling stops it the same way
(``RunStopped`` by budget): the codon it cut stays to do.

This module holds :class:`Runtime` itself: startup and shutdown in that
order, signals, and the refusal watch. The run's control state is the run
machine's (:mod:`weft.runtime.run.machine`); :class:`Runtime` is that state
(:class:`~weft.runtime.run.state.RuntimeState`) composed of the parts that drive
it, one job each, each holding it: the start of a run
(:mod:`weft.runtime.run.recovery`), the server's commands
(:mod:`weft.runtime.run.steering`), the run loop (:mod:`weft.runtime.run.loop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from typing import Any

import msgspec

from weft.agents.harness import Harness, route
from weft.agents.registry import harness_for
from weft.budget import BudgetBook, Ledger, Watchdog, restore_from_state
from weft.budget.report import journal_spend
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.errors import PersistenceError, StorageFullError
from weft.events.completed import mark_of
from weft.events.stream import CheckpointListEvent, InfoEvent, StateSnapshotEvent
from weft.events.transitions import InitialCheckpointSet
from weft.heap import run_heap
from weft.outcome import EXIT_FAILED, Ending
from weft.plan import ExecutionPlan
from weft.runtime.codon.file_updates import FileUpdates
from weft.runtime.codon.runner import CodonRunner
from weft.runtime.run import rollback, survivors
from weft.runtime.run.loop import RunLoop
from weft.runtime.run.recovery import Recovery
from weft.runtime.run.replan import PrefixChangedError, replan
from weft.runtime.run.state import (
    Cursor,
    RunOutcome,
    RuntimeOptions,
    RuntimeState,
    new_run_id,
)
from weft.runtime.run.steering import Steering
from weft.sentinels.host import RuntimeSentinels
from weft.server import ServerInfo, start_server
from weft.state import Processed, StateManager
from weft.store.diskspace import is_storage_failure, storage_error
from weft.store.execution import ExecutionStore


class Runtime(RuntimeState):
    """Runs one execution's codons until they are done, a codon fails for
    good, or someone stops it; in manual mode (``autostart=False``) it waits
    for a command before each codon and stays up when the codons are done,
    until ``server.shutdown``.

    It is the run's shared state (:class:`~weft.runtime.run.state.RuntimeState`)
    and is composed of its parts, one job each, which read and move that state:
    :attr:`recovery` (the start of a run), :attr:`loop` (the run machine's
    driver), :attr:`steering` (the server's commands). It is both the server's
    :class:`~weft.server.RuntimeCommands` and its
    :class:`~weft.server.RollbackHandler`, through :attr:`steering`: commands
    that do not apply now raise :class:`~weft.errors.CommandRejectedError` with
    a message saying why and what to do instead.
    """

    @functools.cached_property
    def recovery(self) -> Recovery:
        """The start of a run (the recovery choice)."""
        return Recovery(self)

    @functools.cached_property
    def loop(self) -> RunLoop:
        """The run machine's driver."""
        return RunLoop(self)

    @functools.cached_property
    def steering(self) -> Steering:
        """The server's commands."""
        return Steering(self)

    # -- the server's RuntimeCommands and RollbackHandler, carried out by steering --

    async def command(self, name: str, data: msgspec.Struct | None = None) -> bool:
        """See :meth:`Steering.command`."""
        return await self.steering.command(name, data)

    async def rollback(self, command: str, data: msgspec.Struct) -> None:
        """See :meth:`Steering.rollback`."""
        await self.steering.rollback(command, data)

    async def checkpoint_list(self, run_id: str | None) -> CheckpointListEvent:
        """See :meth:`Steering.checkpoint_list`."""
        return await self.steering.checkpoint_list(run_id)

    @property
    def rolling_back(self) -> bool:
        """A rollback was accepted and has not finished."""
        return self.machine.rolling_back

    async def stop(self, *, force: bool = False) -> None:
        """See :meth:`Steering.stop`."""
        await self.steering.stop(force=force)

    def _on_processed(self, item: Processed) -> None:
        if item.event is not None and not item.outcome.ok:
            # The runtime is the only writer; a refusal means its picture of
            # the state is wrong, and going on would only make it worse.
            self._perform(
                self.machine.fatal(
                    f"internal error: {item.outcome.kind} was refused: {item.outcome.message}"
                )
            )

    async def run(self) -> RunOutcome:
        """Starts, runs the codons, shuts down. Never leaves the lock held.

        Raises :class:`~weft.server.ServerError` (before anything runs) when
        the WebSocket server cannot listen where it was asked to.
        """
        with run_heap():
            return await self._run()

    async def _run(self) -> RunOutcome:
        self._started = time.monotonic()
        installed = self._install_signals()
        store = await asyncio.to_thread(ExecutionStore.open, self.layout.weft_dir)
        try:
            manager, checkpoints = await self._open(store)
            outcome = await self._execute(manager, checkpoints)
        except PersistenceError as exc:
            cause = exc.__cause__
            message = (
                str(cause)
                if isinstance(cause, StorageFullError)
                else f"the journal can no longer be written: {exc}"
            )
            outcome = self._failed_outcome(message)
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            outcome = self._failed_outcome(str(storage_error(str(self.layout.weft_dir), exc)))
        finally:
            # The handlers stay while the server closes: a signal then hastens
            # the close (Steering.on_signal) instead of killing the process
            # with the run's ending said nowhere.
            try:
                closing_failure = await self._close(store)
            finally:
                loop = asyncio.get_running_loop()
                for signum in installed:
                    loop.remove_signal_handler(signum)
        if closing_failure is not None and outcome.exit_code == 0:
            # Everything is in the journal, but the final snapshot is not on disk.
            outcome = self._failed_outcome(str(closing_failure))
        outcome.duration_ms = int((time.monotonic() - self._started) * 1000)
        return outcome

    def _install_signals(self) -> list[int]:
        """SIGINT and SIGTERM stop the run (the second one forcibly); returns
        the signals whose handlers were installed, to remove them after."""
        loop = asyncio.get_running_loop()
        installed: list[int] = []
        for signum in (int(signal.SIGINT), int(signal.SIGTERM)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.steering.on_signal, signum)
                installed.append(signum)
        return installed

    async def _open(self, store: ExecutionStore) -> tuple[StateManager, AsyncCheckpointRepo]:
        """Seed 001's startup order after the lock: survivors ended, the
        checkpoint repository, the load checks, the state manager and its
        listeners, the server; then what startup found is said."""
        # First of all, before anything can run again: the lock is ours, so
        # every process group still journaled as open belongs to a dead run.
        leftover = await asyncio.to_thread(survivors.open_groups, store.journal)
        ended = await survivors.end_survivors(leftover) if leftover else []
        # state.snapshot sends what changed since the journal's newest one.
        last = await asyncio.to_thread(store.journal.last_of_type, StateSnapshotEvent.TYPE)
        self._finished.expect(None if last is None else mark_of(last.payload))
        checkpoints = await AsyncCheckpointRepo.open(self.layout.checkpoints, self.layout.workspace)
        self._checkpoints = checkpoints
        warnings = await self.recovery.load_checks(store, checkpoints)
        manager = store.state_manager()
        self._manager = manager
        # What earlier runs spent that their records do not hold (unpriced
        # attempts, sentinel calls after a codon was sealed): the budget's restore.
        self._journal_spend = await asyncio.to_thread(journal_spend, store.journal)
        manager.add_listener(self._on_processed, types=("error",))  # refusals
        manager.add_listener(self._progress.apply)
        for listener in self._listeners:
            manager.add_listener(listener)
        if self.options.serve:
            await self._serve(manager, store)
        for note in (*store.startup_notes(), *warnings):
            self._emit(InfoEvent(message=note))
        for repair in checkpoints.repairs:
            self._emit(InfoEvent(message=f"Checkpoint repository: {repair}"))
        self.recovery.report_survivors(ended)
        crashed = await store.mark_crashed_runs(manager)
        for run_id in crashed:
            self._emit(
                InfoEvent(
                    message=f"Run {run_id} was left running by a process that died; marked crashed"
                )
            )
        return manager, checkpoints

    async def _serve(self, manager: StateManager, store: ExecutionStore) -> None:
        """Starts the WebSocket server; the runtime carries out its commands."""
        self.server = await start_server(
            manager,
            store,
            commands=self,
            rollback=self,
            host=self.options.host,
            port=self.options.port,
            allow_anonymous_read=self.options.allow_anonymous_read,
            idle_timeout=self.options.server_idle_timeout,
            info=ServerInfo(
                execution_path=str(self.layout.root),
                agent_root_path=str(self.layout.workspace),
                data_path=None if self.prepared.data_path is None else str(self.prepared.data_path),
            ),
        )
        if self._on_server is not None:
            self._on_server(self.server)

    async def _close(self, store: ExecutionStore) -> StorageFullError | None:
        """Closes what :meth:`_open` opened, the server first (after the run's
        last event: clients get everything first); returns the storage failure
        that kept the final snapshot off the disk, if one did."""
        if self.server is not None:
            await self.server.close()
        if self._checkpoints is not None:
            await self._checkpoints.close()
        try:
            await store.close(self._manager)
        except PersistenceError:
            pass  # reported by run(): the run already failed on it
        except StorageFullError as exc:
            return exc
        return None

    def _failed_outcome(self, message: str) -> RunOutcome:
        """A run ended by a persistence failure (exit 1, one line saying why)."""
        cursor = self._cursor
        return RunOutcome(
            "failed",
            EXIT_FAILED,
            None if cursor is None else cursor.run_id,
            message,
            ending=Ending("failed", reason=message),
        )

    async def _execute(self, manager: StateManager, checkpoints: AsyncCheckpointRepo) -> RunOutcome:
        state, thread, _ = await rollback.analyze(manager, checkpoints)
        if self._on_state is not None:
            self._on_state(state)
        if state.get("initialCheckpoint") is None:
            manager.transition(InitialCheckpointSet(sha=checkpoints.initial_sha))
        self._replan = None
        if state["runs"] and self.prepared.hank_changed:
            # Checked when the execution was prepared with the hank: the part that
            # ran is unchanged. Prepared without it, the older rule held (same
            # codons), and a run whose finished codons changed keeps the stored plan.
            with contextlib.suppress(PrefixChangedError):
                self._replan = replan(state, self.hank.hank)
        if self._replan is not None:
            plan = self._replan.plan
        elif state["runs"]:
            plan = ExecutionPlan.from_state(state["executionPlan"], self.hank.hank)
        else:
            plan = ExecutionPlan.from_hank(self.hank.hank)
        self._thread = thread
        run_id = new_run_id()
        start = await self.recovery.start_run(manager, checkpoints, state, thread, plan, run_id)
        if start is None:
            message = f"Execution {self.layout.root} is complete: nothing to do"
            self._emit(InfoEvent(message=message))
            return RunOutcome("nothing_to_do", 0, None, message)
        plan, current, parent = start
        files = FileUpdates(manager, self.layout.workspace)
        budget = self._watchdog(state)
        sentinels = RuntimeSentinels(
            manager,
            self.hank,
            workspace=self.layout.workspace,
            weft_dir=self.layout.weft_dir,
            env=self.env,
            model_override=self.options.sentinel_model,
            persist_history=self.options.sentinel_persistence,
            call_timeout=self.options.sentinel_call_timeout,
            before_drain=files.settle,
            spend=budget.sentinel_spend,
        )
        self._sentinels = sentinels
        self._runner = CodonRunner(
            manager,
            checkpoints,
            self.hank,
            self.layout,
            harness_for=self._harness,
            sentinels=sentinels,
            ignore_rig_failures=self.options.ignore_rig_failures,
            idle_timeout=self.options.idle_timeout,
            first_output_timeout=self.options.first_output_timeout,
            stop_grace=self.options.stop_grace,
            env=self.env,
            output_dir=self.options.output_dir,
            overwrite_output=self.options.overwrite_output,
            anthropic_base_url=self.options.anthropic_base_url,
            budget=budget,
            sessions=self.options.sessions,
            usage_window=self.options.usage_window,
            skip=self.options.skip,
            sleep=self.options.session_sleep,
            breakers=self.breakers,
            agent_env=self.options.agent_env,
        )
        self._cursor = Cursor(run_id, plan, current, parent)
        # Each plan keeps how to undo the change that made the next one, so a
        # reference to this first plan, held by this frame for the whole run,
        # kept every plan since alive: three objects per codon, forever.
        del plan, start
        await self.loop.read_thread(manager)
        try:
            return await self.loop.drive(manager, self._runner)
        finally:
            await sentinels.aclose()  # the last codon's sentinels finish first

    def _watchdog(self, state: dict[str, Any]) -> Watchdog:
        """The run's budgets, with what earlier runs of the execution spent."""
        options = self.options
        book = BudgetBook.from_hank(
            self.hank.hank,
            max_dollars=options.max_dollars,
            max_seconds=options.max_seconds,
            max_tokens=options.max_tokens,
            source=options.budget_source,
        )
        ledger = Ledger(book)
        restore_from_state(ledger, state, self._journal_spend)
        self._budget = Watchdog(ledger, self._emit)
        return self._budget

    def _harness(self, model: str) -> tuple[Harness, str]:
        target = route(model)
        return harness_for(target, self.env), target.model


__all__ = ["RunOutcome", "Runtime", "RuntimeOptions", "new_run_id"]
