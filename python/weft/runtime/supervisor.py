"""The runtime supervisor: start an execution, run its codons, stop cleanly.

Startup follows seed 001's order: the lock (taken by the store), the
checkpoint repository, the state manager, the event journal (the same
store), the sentinel host (a seam: :class:`~weft.runtime.runner.NoSentinels`
until sentinels exist), the WebSocket server (:mod:`weft.server`; the runtime
carries out its steering commands). Then runs a dead process left
``running`` are marked crashed, and the run is chosen:

* no run yet: a fresh run with the whole plan;
* the execution thread (seed 003) ended in failure: roll back to its last
  git-confirmed success (:mod:`weft.runtime.rollback`) and continue after it;
* otherwise: a continuation after the thread's newest codon with a confirmed
  checkpoint; the files the next codon covers are restored to it first, so a
  half-done attempt leaves nothing behind;
* no confirmed checkpoint at all: the work tree goes to a recovery branch,
  the covered files go back to the initial checkpoint (rig copies removed)
  and a fresh run starts; with nothing left to run, there is nothing to do.

Before all of that, right after the lock is taken, process groups a dead run
left behind are ended (:mod:`weft.runtime.survivors`), so nothing of the old
run writes to the work tree while it is restored or run again.

Then codons run one at a time, in plan order, under their failure policy;
loops grow lazily as iterations finish. In manual mode (``autostart=False``)
the run loop waits for a command before each codon, parks on a failed codon
and stays up when the codons are done; while it waits, a rollback or a redo
ends the current run and starts a new one from a checkpoint, and the loop
goes on in that run. The first SIGINT or SIGTERM stops
gracefully (the agent gets its stop sequence, an error checkpoint is taken,
the run ends as failed and can be continued); the second kills the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import msgspec

from weft._core import ExecutionThread, ThreadCodon
from weft.agents.harness import Harness, route
from weft.agents.registry import harness_for
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.clock import utc_now_iso
from weft.config.loader import LoadedHank
from weft.config.schema import ContextExceeded, Loop
from weft.errors import (
    CheckpointLossError,
    CommandRejectedError,
    PersistenceError,
    StorageFullError,
    WeftError,
)
from weft.events.stream import (
    CheckpointEntry,
    CheckpointListEvent,
    CodonRetryEvent,
    CodonSummary,
    ErrorEvent,
    InfoEvent,
    LoopIterationCompletedEvent,
    ProcessEndedEvent,
    ServerIdleEvent,
    StateSnapshotEvent,
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
from weft.progress import RunProgress
from weft.runtime import rollback, survivors
from weft.runtime.execution import PreparedExecution
from weft.runtime.policy import Action, decide
from weft.runtime.runner import CodonRequest, CodonResult, CodonRunner, Interrupt
from weft.server import ProtocolServer, ServerInfo, start_server
from weft.server.protocol import (
    CodonStartData,
    RollbackToCheckpointData,
    RollbackToCodonData,
    RollbackToLastSuccessData,
)
from weft.state import Processed, StateManager
from weft.store.diskspace import is_storage_failure, storage_error
from weft.store.execution import ExecutionStore
from weft.store.integrity import load_checks, run_folders

Listener = Callable[[Processed], None]


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """How ``weft run`` was asked to behave."""

    autostart: bool = True
    ignore_rig_failures: bool = False
    idle_timeout: float | None = None
    first_output_timeout: float | None = 60.0
    stop_grace: float = 5.0
    serve: bool = True
    """Start the WebSocket server beside the run."""
    host: str = "127.0.0.1"
    port: int = 0
    """0: a free port (the lock file and ``Runtime.server`` tell which)."""
    allow_anonymous_read: bool = False
    """Let loopback clients read the run without a token (``--allow-anonymous-read``)."""


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
    """The run's cost, read from the core's cost cache when it ended."""
    checkpoints: int = 0
    duration_ms: int = 0


def new_run_id() -> str:
    """``<ms since epoch>-<5 base36 chars>``, the reference's run id shape."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{time.time_ns() // 1_000_000}-{suffix}"


@dataclass(slots=True)
class _Cursor:
    """Where the runtime stands: the run it records into and what runs next."""

    run_id: str
    plan: ExecutionPlan
    current: PlannedCodon | None
    parent: str
    """The checkpoint the next codon starts from."""
    open: bool = True
    """The run is still ``running`` (not yet completed or failed)."""
    failure: str | None = None
    """Why the last codon failed for good (manual mode parks on it)."""
    sessions: dict[str, str] = field(default_factory=dict)
    """Sessions this run's codons established, for ``continue-previous``
    successors (earlier runs' sessions come from the execution thread)."""

    @property
    def branch(self) -> str:
        return run_branch(self.run_id)


@dataclass(frozen=True, slots=True)
class _Next:
    """Run the cursor's codon (``codon.next``, ``codon.start``)."""

    skip_rig: bool = False


@dataclass(frozen=True, slots=True)
class _Rewind:
    """Start a new run from a checkpoint: a rollback, or a redo (``retry``)
    that then runs ``codon_id`` again."""

    target: rollback.RollbackTarget | None
    reason: Literal["rollback", "retry"]
    codon_id: str | None = None
    run_next: bool = False
    skip_rig: bool = False


@dataclass(frozen=True, slots=True)
class _Shutdown:
    pass


_Request: TypeAlias = _Next | _Rewind | _Shutdown

IdleReason: TypeAlias = Literal[
    "startup", "codon-completed", "all-codons-completed", "rollback-completed"
]


DONE = frozenset(("completed", "failed", "skipped"))


def _summary(tc: ThreadCodon) -> CodonSummary:
    record = tc.codon
    return CodonSummary(
        codon_id=tc.codon_id,
        run_id=tc.run_id,
        status=tc.status,
        cost=float(record.get("finalCost") or 0.0),
        start_time=record.get("startTime"),
        end_time=record.get("endTime"),
    )


class Runtime:
    """Runs one execution's codons until they are done, a codon fails for
    good, or someone stops it; in manual mode (``autostart=False``) it waits
    for a command before each codon and stays up when the codons are done,
    until ``server.shutdown``.

    It is both the server's :class:`~weft.server.RuntimeCommands` and its
    :class:`~weft.server.RollbackHandler`. Steering commands that do not
    apply now raise :class:`~weft.errors.CommandRejectedError` with a message
    saying why and what to do instead.
    """

    def __init__(
        self,
        prepared: PreparedExecution,
        hank: LoadedHank,
        options: RuntimeOptions | None = None,
        *,
        listeners: tuple[Listener, ...] = (),
        on_state: Callable[[Mapping[str, Any]], None] | None = None,
        on_server: Callable[[ProtocolServer], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.prepared = prepared
        self.layout = prepared.layout
        self.hank = hank
        self.options = options or RuntimeOptions()
        self.env = env
        self.server: ProtocolServer | None = None
        """The WebSocket server, once started."""
        self._listeners = listeners
        self._on_state = on_state
        self._on_server = on_server
        self._requests: asyncio.Queue[_Request] = asyncio.Queue()
        self._waiting = False
        """The run loop waits for a command (manual mode, or parked)."""
        self._rolling_back = False
        self._stopping = False
        self._forced = False
        self._fatal: str | None = None
        self._runner: CodonRunner | None = None
        self._manager: StateManager | None = None
        self._checkpoints: AsyncCheckpointRepo | None = None
        self._cursor: _Cursor | None = None
        self._sleep: asyncio.Future[None] | None = None
        self._signal = 0
        self._started = time.monotonic()
        self._thread: ExecutionThread | None = None
        self._finished: list[CodonSummary] = []
        """The thread's finished codons, oldest first, for ``state.snapshot``."""
        self._codons_by_id = {
            codon.id: codon
            for item in hank.hank.hank
            for codon in (item.codons if isinstance(item, Loop) else [item])
        }
        self._progress = RunProgress()
        """The run's fold: the loop iterations' figures come from it, so they
        agree with the codons' own lines."""

    # ------------------------------------------------------------------ control

    async def command(self, name: str, data: msgspec.Struct | None = None) -> bool:
        """Steers the run: ``codon.next``, ``codon.start`` (``data.codon_id``,
        ``data.skip_pre_commands``), ``codon.redo``, ``codon.skip``,
        ``codon.forceStop``, ``server.shutdown``, ``server.force_shutdown``.

        Returns False when ``name`` is not a command; raises
        :class:`~weft.errors.CommandRejectedError` when it does not apply now.
        """
        runner = self._runner
        if name in ("codon.next", "codon.start", "codon.redo"):
            start = data if isinstance(data, CodonStartData) else CodonStartData()
            request = await self._start(name, start.codon_id, start.skip_pre_commands)
            self._requests.put_nowait(request)
            return True
        if name == "codon.skip":
            if runner is None or not await runner.interrupt(Interrupt.SKIP):
                raise CommandRejectedError("codon.skip refused: no codon is running")
            return True
        if name == "codon.forceStop":
            if runner is None or not await runner.interrupt(Interrupt.FORCE_STOP):
                raise CommandRejectedError("codon.forceStop refused: no codon is running")
            return True
        if name == "server.shutdown":
            await self.stop()
            return True
        if name == "server.force_shutdown":
            await self.stop(force=True)
            return True
        return False

    @property
    def rolling_back(self) -> bool:
        """A rollback was accepted and has not finished."""
        return self._rolling_back

    async def checkpoint_list(self, run_id: str | None) -> CheckpointListEvent:
        """The checkpoints of every run (or of ``run_id``), newest first.

        Not journaled: the server sends it to the client that asked (a flood
        of requests must not grow the journal)."""
        manager, checkpoints = self._manager, self._checkpoints
        if manager is None or checkpoints is None:
            raise CommandRejectedError("checkpoint.list refused: the run has not started yet")
        state, thread, confirmed = await rollback.analyze(manager, checkpoints)
        if run_id is not None and all(run["runId"] != run_id for run in state["runs"]):
            known = ", ".join(run["runId"] for run in state["runs"]) or "none"
            raise CommandRejectedError(f"checkpoint.list: no run {run_id!r} (runs: {known})")
        on_thread = {cp.sha for tc in thread.codons for cp in tc.validated_checkpoints}
        names = {cid: codon.name or cid for cid, codon in self._codons_by_id.items()}
        entries = [
            CheckpointEntry(
                codon_id=row["codonId"],
                codon_name=names.get(row["codonId"].split("#")[0], row["codonId"]),
                checkpoint_type=row["type"],
                sha=row["sha"],
                status=row["status"],
                run_id=row["runId"],
                on_thread=row["onThread"],
                timestamp=row["timestamp"],
            )
            for row in rollback.checkpoint_rows(state, on_thread, confirmed)
            if run_id is None or row["runId"] == run_id
        ]
        cursor = self._cursor
        return CheckpointListEvent(
            run_id=run_id,
            checkpoints=entries,
            current_branch=None if cursor is None else cursor.branch,
        )

    async def rollback(self, command: str, data: msgspec.Struct) -> None:
        """Accepts ``rollback.toCheckpoint``, ``rollback.toCodon`` or
        ``rollback.toLastSuccess``; the run loop carries it out (events
        ``rollback.*``, then ``server.idle{rollback-completed}`` or, with
        ``autoRestart``, the next codon)."""
        self._claim(command, rollback=True)
        self._rolling_back = True  # from here on other steering commands are refused
        try:
            _, manager, checkpoints = self._parts()
            state, thread, confirmed = await rollback.analyze(manager, checkpoints)
            if isinstance(data, RollbackToCheckpointData):
                target = rollback.target_for(
                    thread, state, confirmed, checkpoint=data.checkpoint_sha
                )
            elif isinstance(data, RollbackToCodonData):
                target = rollback.target_for(
                    thread, state, confirmed, codon=data.codon_id, end=data.checkpoint_type
                )
            elif isinstance(data, RollbackToLastSuccessData):
                target = rollback.target_for(thread, state, confirmed)
            else:
                raise CommandRejectedError(f"{command}: not a rollback command")
        except rollback.RollbackError as exc:
            self._waiting, self._rolling_back = True, False
            raise CommandRejectedError(f"{command} refused: {exc}") from exc
        except BaseException:
            self._waiting, self._rolling_back = True, False
            raise
        self._requests.put_nowait(
            _Rewind(target, "rollback", run_next=getattr(data, "auto_restart", False))
        )

    def _parts(self) -> tuple[_Cursor, StateManager, AsyncCheckpointRepo]:
        cursor, manager, checkpoints = self._cursor, self._manager, self._checkpoints
        if cursor is None or manager is None or checkpoints is None:
            raise CommandRejectedError("the run has not started yet; try again")
        return cursor, manager, checkpoints

    def _claim(self, command: str, *, rollback: bool = False) -> None:
        """Takes the waiting run loop for ``command``, or says why it cannot be."""
        if self._stopping:
            raise CommandRejectedError(f"{command} refused: the runtime is shutting down")
        if self._rolling_back:
            raise CommandRejectedError(
                f"{command} refused: a rollback is in progress", code="ROLLBACK_IN_PROGRESS"
            )
        if self._waiting:
            self._waiting = False
            return
        runner = self._runner
        running = None if runner is None else runner.current_codon
        if running is not None:
            if rollback:
                raise CommandRejectedError(
                    "Cannot rollback while codon is running. Use 'codon.forceStop' first."
                )
            raise CommandRejectedError(
                f"{command} refused: codon {running} is running; wait for it to finish, "
                "or send codon.skip / codon.forceStop"
            )
        if self.options.autostart:
            raise CommandRejectedError(
                f"{command} refused: this run starts its codons itself (autostart); "
                "start `weft run` with --no-autostart to step through codons"
            )
        raise CommandRejectedError(f"{command} refused: the runtime is busy; try again")

    async def _start(self, name: str, codon_id: str | None, skip_rig: bool) -> _Request:
        """The request for ``codon.next`` / ``codon.start`` / ``codon.redo``:
        the next codon, or one that already ran, again from the checkpoint it
        started from (a new run, reason ``retry``)."""
        self._claim(name)
        try:
            cursor, manager, checkpoints = self._parts()
            upcoming = cursor.current
            if (
                name != "codon.redo"
                and cursor.failure is None
                and upcoming is not None
                and codon_id in (None, upcoming.codon_id)
            ):
                return _Next(skip_rig)
            if name != "codon.redo" and codon_id is None:
                if cursor.failure is not None:
                    raise CommandRejectedError(
                        f"{name} refused: {cursor.failure}. Send codon.redo to run it again, "
                        "a rollback.* command to go back, or server.shutdown"
                    )
                raise CommandRejectedError(
                    f"{name} refused: every codon has run; send codon.redo, a rollback.* "
                    "command, or server.shutdown"
                )
            _, thread, _ = await rollback.analyze(manager, checkpoints)
            if codon_id is None:
                if not len(thread.codons):
                    raise CommandRejectedError(f"{name} refused: no codon has run yet")
                codon_id = thread.codons[0].codon_id
            if cursor.plan.get(codon_id) is None:
                raise CommandRejectedError(f"{name}: the plan has no codon {codon_id!r}")
            if all(tc.codon_id != codon_id for tc in thread.codons):
                raise CommandRejectedError(
                    f"{name} {codon_id} refused: codons run in plan order and the next one is "
                    f"{'none' if upcoming is None else upcoming.codon_id}; start that one, or "
                    "go back with codon.redo / rollback.toCodon"
                )
            target = rollback.redo_target(thread, codon_id)
        except rollback.RollbackError as exc:
            self._waiting = True
            raise CommandRejectedError(f"{name} refused: {exc}") from exc
        except BaseException:
            self._waiting = True
            raise
        return _Rewind(target, "retry", codon_id=codon_id, run_next=True, skip_rig=skip_rig)

    async def stop(self, *, force: bool = False) -> None:
        """Graceful stop (the agent is stopped, a checkpoint taken); ``force``
        kills the agent at once. A second graceful stop forces."""
        force = force or self._stopping
        self._stopping = True
        if self.server is not None:
            self.server.mark_shutting_down()
        if self._sleep is not None:
            self._sleep.cancel()
        self._requests.put_nowait(_Shutdown())
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
        self._manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _on_processed(self, item: Processed) -> None:
        if item.event is not None and not item.outcome.ok and self._fatal is None:
            # The runtime is the only writer; a refusal means its picture of
            # the state is wrong, and going on would only make it worse.
            self._fatal = f"internal error: {item.outcome.kind} was refused: {item.outcome.message}"
            self._requests.put_nowait(_Shutdown())  # wakes a waiting run loop
            runner = self._runner
            if runner is not None:
                asyncio.get_running_loop().create_task(runner.interrupt(Interrupt.FORCE_STOP))

    # ------------------------------------------------------------------ run

    async def run(self) -> RunOutcome:
        """Starts, runs the codons, shuts down. Never leaves the lock held.

        Raises :class:`~weft.server.ServerError` (before anything runs) when
        the WebSocket server cannot listen where it was asked to.
        """
        self._started = time.monotonic()
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
            # First of all, before anything can run again: the lock is ours, so
            # every process group still journaled as open belongs to a dead run.
            leftover = await asyncio.to_thread(survivors.open_groups, store.journal)
            ended = await survivors.end_survivors(leftover) if leftover else []
            checkpoints = await AsyncCheckpointRepo.open(
                self.layout.checkpoints, self.layout.workspace
            )
            self._checkpoints = checkpoints
            warnings = await self._load_checks(store, checkpoints)
            manager = store.state_manager()
            self._manager = manager
            manager.add_listener(self._on_processed)
            manager.add_listener(self._progress.apply)
            for listener in self._listeners:
                manager.add_listener(listener)
            if self.options.serve:
                self.server = await start_server(
                    manager,
                    store,
                    commands=self,
                    rollback=self,
                    host=self.options.host,
                    port=self.options.port,
                    allow_anonymous_read=self.options.allow_anonymous_read,
                    info=ServerInfo(
                        execution_path=str(self.layout.root),
                        agent_root_path=str(self.layout.workspace),
                        data_path=None
                        if self.prepared.data_path is None
                        else str(self.prepared.data_path),
                    ),
                )
                if self._on_server is not None:
                    self._on_server(self.server)
            for note in (*store.startup_notes(), *warnings):
                self._emit(InfoEvent(message=note))
            for repair in checkpoints.repairs:
                self._emit(InfoEvent(message=f"Checkpoint repository: {repair}"))
            self._report_survivors(ended)
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
            for signum in installed:
                loop.remove_signal_handler(signum)
            if self.server is not None:
                # After the run's last event: clients get everything first.
                await self.server.close()
            if checkpoints is not None:
                await checkpoints.close()
            closing_failure: StorageFullError | None = None
            try:
                await store.close(manager)
            except PersistenceError:
                pass  # reported above: the run already failed on it
            except StorageFullError as exc:
                closing_failure = exc
        if closing_failure is not None and outcome.exit_code == 0:
            # Everything is in the journal, but the final snapshot is not on disk.
            outcome = self._failed_outcome(str(closing_failure))
        outcome.duration_ms = int((time.monotonic() - self._started) * 1000)
        return outcome

    def _failed_outcome(self, message: str) -> RunOutcome:
        """A run ended by a persistence failure (exit 1, one line saying why)."""
        cursor = self._cursor
        return RunOutcome("failed", 1, None if cursor is None else cursor.run_id, message)

    def _report_survivors(self, ended: list[survivors.Ended]) -> None:
        """Says what was ended, and closes the journal's record of every group
        that is gone now (an unkillable one stays open, to be tried again)."""
        for item in ended:
            if item.how != "gone":
                self._emit(InfoEvent(message=item.describe()))
            if item.how != "unkillable":
                self._emit(ProcessEndedEvent(pid=item.record.pid, how=item.how))

    async def _load_checks(
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
            run_folders(self.layout.runs),
            execution=self.layout.root,
        )
        if checked.error is not None:
            raise CheckpointLossError(checked.error)
        return checked.notes

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
        self._runner = CodonRunner(
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
        self._cursor = _Cursor(run_id, plan, current, parent)
        await self._read_thread(manager)
        return await self._drive(manager, self._runner)

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
            return await self._fresh(manager, checkpoints, plan, run_id)
        if thread.failed:
            target = rollback.last_success(thread)
            if target is None:
                await self._clean_restart(
                    checkpoints,
                    state,
                    plan,
                    "the execution thread ended in failure and has no git-confirmed success",
                )
                return await self._fresh(
                    manager, checkpoints, ExecutionPlan.from_hank(self.hank.hank), run_id
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
            await self._clean_restart(
                checkpoints,
                state,
                plan,
                "no codon has run yet"
                if newest is None
                else f"{newest.codon_id} has no git-confirmed checkpoint",
            )
            return await self._fresh(
                manager, checkpoints, ExecutionPlan.from_hank(self.hank.hank), run_id
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
        fresh = ExecutionPlan.from_hank(self.hank.hank)
        # The stored plan holds the loop iterations that ran; the hank's, any
        # pattern added since. Their union is every file a run may have covered.
        patterns = list(dict.fromkeys(rollback.all_patterns(stored) + rollback.all_patterns(fresh)))
        saved = await checkpoints.recovery_snapshot(patterns, reason=why)
        started = rollback.possibly_started(state, (stored, fresh))
        removed = await asyncio.to_thread(
            rollback.remove_rig_copies, self.layout, (stored, fresh), started
        )
        await checkpoints.restore(checkpoints.initial_sha, patterns)
        copies = f", removed the rig copies {', '.join(removed)}" if removed else ""
        self._emit(
            InfoEvent(
                message=(
                    f"Recovery degraded: {why}. The work tree was saved to {saved.branch} "
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
    ) -> tuple[ExecutionPlan, PlannedCodon | None, str]:
        """A fresh run with the whole plan, from the initial checkpoint (an
        execution with history went through :meth:`_clean_restart` first)."""
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

    async def _drive(self, manager: StateManager, runner: CodonRunner) -> RunOutcome:
        """The run loop: codons one after another (autostart), or as commands
        ask (manual mode, which also stays up when the codons are done)."""
        cursor = self._cursor
        assert cursor is not None
        outcome = RunOutcome("completed", 0, cursor.run_id, "")
        idle: IdleReason = "startup"
        while not self._stopping and self._fatal is None:
            request: _Request
            if not self.options.autostart:
                request = await self._wait(cursor, idle)
            elif cursor.current is not None and cursor.failure is None:
                request = _Next()
            else:
                break
            if isinstance(request, _Shutdown):
                break
            skip_rig = request.skip_rig
            if isinstance(request, _Rewind):
                rewound = await self._rewind(manager, cursor, request)
                if rewound is None:
                    idle = "codon-completed"
                    continue
                cursor = self._cursor = rewound
                outcome.run_id = cursor.run_id
                idle = "rollback-completed"
                if not request.run_next or cursor.current is None:
                    continue
            await self._step(manager, runner, cursor, outcome, skip_rig)
            idle = "codon-completed"
        return await self._finish(manager, cursor, outcome)

    async def _wait(self, cursor: _Cursor, reason: IdleReason) -> _Request:
        """Waits for a command; says so with ``server.idle`` first."""
        if cursor.current is None and cursor.failure is None:
            reason = "all-codons-completed"
            message = "All codons completed: send codon.redo, rollback.* or server.shutdown"
        elif cursor.failure is not None:
            message = f"{cursor.failure}: send codon.redo, rollback.* or server.shutdown"
        else:
            assert cursor.current is not None
            message = f"Waiting for codon.next to start {cursor.current.codon_id}"
        self._waiting = True
        self._emit(ServerIdleEvent(reason=reason, message=message), cursor.run_id)
        try:
            return await self._requests.get()
        finally:
            self._waiting = False

    async def _rewind(
        self, manager: StateManager, cursor: _Cursor, request: _Rewind
    ) -> _Cursor | None:
        """Carries out a rollback or a redo: a new run from its target. None
        when it could not be done (an ``error`` event says why)."""
        checkpoints = self._checkpoints
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
                self._emit(
                    InfoEvent(message=f"Redoing {request.codon_id} from {origin}"),
                    cursor.run_id,
                )
            await rollback.execute(
                request.target,
                thread=thread,
                manager=manager,
                checkpoints=checkpoints,
                plan=cursor.plan,
                layout=self.layout,
                current_run_id=cursor.run_id if cursor.open else None,
                new_run_id=new_id,
                server_pid=os.getpid(),
                emit=self._emit,
                reason=request.reason,
            )
            _, self._thread, _ = await rollback.analyze(manager, checkpoints)
        except (WeftError, OSError) as exc:
            self._emit(
                ErrorEvent(message=f"{request.reason} failed: {exc}", severity="operation"),
                cursor.run_id,
            )
            return None
        finally:
            self._rolling_back = False
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
        await self._read_thread(manager)
        self._cursor = _Cursor(new_id, plan, current, parent)
        self._snapshot(new_id)
        return self._cursor

    async def _step(
        self,
        manager: StateManager,
        runner: CodonRunner,
        cursor: _Cursor,
        outcome: RunOutcome,
        skip_rig: bool,
    ) -> None:
        """Runs the cursor's codon under its failure policy and moves the cursor on."""
        assert cursor.current is not None
        current = self._configured(cursor.current)
        result = await self._attempts(runner, cursor, current, skip_rig)
        self._finished.append(
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
        if result.status == "failed" and not ignored:
            if not self._stopping:
                # Stopped by request is not failed: the run ends as interrupted.
                reason = result.failure.message if result.failure else "failed"
                cursor.failure = f"Codon {current.codon_id} failed: {reason}"
                await self._end_run(manager, cursor, failed=True)
            self._snapshot(cursor.run_id)
            return
        if result.continuable and result.session_id is not None:
            cursor.sessions[current.codon_id] = result.session_id
        change = cursor.plan.on_codon_finished(
            current.codon_id, context_exceeded=result.context_exceeded
        )
        cursor.plan = self._apply_plan_change(manager, change, cursor.run_id)
        cursor.current = cursor.plan.next_codon(current.codon_id)
        if cursor.current is None:
            await self._end_run(manager, cursor, failed=False)
        self._snapshot(cursor.run_id)

    async def _end_run(self, manager: StateManager, cursor: _Cursor, *, failed: bool) -> None:
        if not cursor.open:
            return
        cursor.open = False
        end = utc_now_iso()
        ended = RunFailed(run_id=cursor.run_id, end_time=end) if failed else None
        await manager.transition_and_wait(ended or RunCompleted(run_id=cursor.run_id, end_time=end))

    async def _read_thread(self, manager: StateManager) -> None:
        """Reads the finished codons and the cost from the execution thread:
        at the start and after a rollback or a redo. Between those, codons
        are only added, and ``_step`` adds them without a read (a read waits
        for the journal's commit)."""
        thread = await manager.execution_thread()
        self._finished = [_summary(tc) for tc in reversed(list(thread.codons)) if tc.status in DONE]

    def _snapshot(self, run_id: str) -> None:
        """Emits ``state.snapshot``: the thread's finished codons and the cost."""
        cursor = self._cursor
        self._emit(
            StateSnapshotEvent(
                completed_codons=self._finished,
                total_cost=self._manager.core.total_cost() if self._manager else 0.0,
                total_time=int((time.monotonic() - self._started) * 1000),
                is_rolling_back=self._rolling_back,
                current_codon=None
                if cursor is None or cursor.current is None
                else cursor.current.codon_id,
            ),
            run_id,
        )

    async def _finish(
        self, manager: StateManager, cursor: _Cursor, outcome: RunOutcome
    ) -> RunOutcome:
        """The outcome, with the run ended the way it went."""
        outcome.run_id = cursor.run_id
        outcome.cost = manager.core.run_cost(cursor.run_id) or 0.0
        if self._fatal is not None:
            outcome.status, outcome.exit_code, outcome.message = "failed", 1, self._fatal
            self._emit(ErrorEvent(message=self._fatal, fatal=True, severity="fatal"), cursor.run_id)
        elif cursor.failure is not None:
            outcome.status, outcome.exit_code, outcome.message = "failed", 1, cursor.failure
        elif cursor.current is not None:
            code = 128 + (self._signal or int(signal.SIGINT))
            outcome.status, outcome.exit_code = "interrupted", code
            outcome.message = "Stopped before the run finished; run the same command to continue"
        if outcome.status == "completed":
            outcome.message = "All codons completed"
            await self._end_run(manager, cursor, failed=False)
            if self.options.autostart:
                self._emit(
                    ServerIdleEvent(reason="all-codons-completed", message=outcome.message),
                    cursor.run_id,
                )
        else:
            await self._end_run(manager, cursor, failed=True)
        await manager.flush()
        return outcome

    async def _attempts(
        self, runner: CodonRunner, cursor: _Cursor, current: PlannedCodon, skip_rig: bool
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
                self._fatal = self._fatal or result.failure.message
                return result
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
            codons = [c.codon_id for c in change.plan.iteration(context.loop_id, context.iteration)]
            figures = self._progress.figures(codons, time.time_ns())
            self._emit(
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


__all__ = ["RunOutcome", "Runtime", "RuntimeOptions", "new_run_id"]
