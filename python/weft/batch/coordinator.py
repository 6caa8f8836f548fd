"""The coordinator: the batch store's single writer, driving the scheduler and an engine.

One loop, in this order each turn: commit every outcome the engine has
reported (each at the time the step ended); apply the recovery commands
waiting in the store's inbox; ask the scheduler what is due; **commit** its
changes; only then launch the steps it named (so no step runs whose
``S_RUNNING`` is not on disk) and record each launch's pid; wait for an
outcome, the next wake-up time, or the inbox poll interval.

**The audit trail never shows more steps running than workers.** The free
slots given to the scheduler are counted from the steps *recorded*
``S_RUNNING``, not from the engine's own count: an engine frees its slot the
moment a step exits, before the coordinator has recorded that exit (the
outcome may wait in :attr:`Engine.completions` while the coordinator awaits a
launch), and a slot counted free then would start a step beside one still
``S_RUNNING`` in the store. Outcomes are committed first in every turn, so a
slot is reused as soon as its step's end is on disk.

On start it opens the store as the writer (``batch.lock``), records the plan
of a new batch (or checks that the batch file is the one the store was made
from), and **resumes**: a step left ``S_RUNNING`` by a dead coordinator is
adopted if its process still runs or left an exit code, and launched again
otherwise (a hank step's execution then resumes; a finished step never runs
again, as it is no longer ``S_RUNNING``).

**Step env values stay out of the store.** A step's ``env`` is planned with
its names and :data:`weft.plan.REDACTED` for each value, as a hank's codon
``env`` is journaled; the values go to :data:`~weft.batch.store.ENV_FILE`
(0600, written again from the batch file at every run and resume, the file
being checked against the stored digest first), read back at each launch.

**Rebuild.** :func:`rebuild` makes a new store from the batch file and what
the step folders prove, for a store refused as damaged (``weft batch rebuild``).

**Drain** (:meth:`Coordinator.request_drain`: the first Ctrl-C of ``weft batch
run``, or ``weft batch drain FILE`` through the inbox): nothing new starts,
the running steps finish and their ends are recorded as usual (timeouts still
apply), then the coordinator returns with :attr:`Coordinator.drained` set
(``weft batch run`` exits :data:`DRAINED_EXIT`). The request and the end are
audit notes on the batch; nothing else is kept, so the next ``weft batch run``
simply goes on (and a coordinator killed mid-drain is resumed as any other).

**Usage windows.** At start the coordinator works out which providers each
step calls (:func:`weft.batch.windows.steps_providers`, kept in the store's
``meta`` for ``weft batch status``); every turn it reads the closed windows
(:class:`~weft.batch.windows.WindowWatch`: one ``stat``, the file read only when
it changed) and gives them to the scheduler with the time. A held step is not
launched and the loop sleeps until its window opens (or the next poll, which
also notices a window closed by a running step).

Listeners see every committed change, after its commit (the live view,
``--headless`` lines, ``--json`` lines, the trace of :mod:`weft.telemetry.batch`);
with traces on, :attr:`Coordinator.step_env` adds each launch's trace context to
its env and :attr:`Coordinator.on_tick` hears the steps a window holds (both
``None`` otherwise: the loop is unchanged).

The coordinator times its own work (:attr:`Coordinator.busy_ns`: store
commits with their audit rows and listeners, scheduling, the inbox), not the
steps' nor the engine's: the overhead a batch adds per step, reported in
``weft batch run --json``'s summary and by ``benches/test_bench_batch.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from weft.batch.engine import LaunchSpec, LocalEngine, execution_cost, launch_spec
from weft.batch.matrix import BatchPlan
from weft.batch.scheduler import Outcome, Scheduler, breaker_row
from weft.batch.store import (
    ENV_FILE,
    BatchStore,
    Change,
    Note,
    StepRow,
    StepTrace,
    WorkstreamRow,
    step_traces,
)
from weft.batch.windows import PROVIDERS_META, WindowWatch, steps_providers
from weft.errors import ConfigError, StoreError
from weft.plan import REDACTED
from weft.terminal import plural

__all__ = [
    "DRAINED_EXIT",
    "REFUSED",
    "Coordinator",
    "Engine",
    "Listener",
    "apply_commands_offline",
    "check_rebuildable",
    "default_state_dir",
    "rebuild",
    "record_plan",
    "wall_clock_ms",
]

DRAINED_EXIT = 3
"""``weft batch run``'s exit code after a drain left steps to run (as ``weft run``
stopped by its budget: stopped on purpose, the same command goes on)."""
INBOX_POLL_S = 0.5
"""How often a running coordinator looks for `weft batch abandon|retry|skip|reset-breaker`."""
REFUSED = "refused: "
"""Starts the stored result of a recovery command that was refused (it changed
nothing), so its sender exits non-zero whichever process applied it."""

Listener = Callable[[Change, int], None]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: times in the store outlive a process, so
    they are wall-clock times, not a monotonic clock's."""
    return time.time_ns() // 1_000_000


def default_state_dir(batch_file: Path) -> Path:
    """``<folder>/.weft-batch/<file stem>``: where a batch keeps its store and steps."""
    return batch_file.resolve().parent / ".weft-batch" / batch_file.stem


class Engine(Protocol):
    """What the coordinator needs from an engine (local processes, Ray)."""

    completions: asyncio.Queue[tuple[str, Outcome]]

    @property
    def active(self) -> int: ...

    async def start(self, spec: LaunchSpec) -> tuple[int, str | None]: ...

    def adopt(self, spec: LaunchSpec, pid: int | None, pid_start: str | None) -> bool: ...

    def cancel(self, key: str) -> None: ...

    async def detach(self) -> None: ...

    async def close(self) -> None: ...


def record_plan(store: BatchStore, plan: BatchPlan, file_sha: str, now_ms: int) -> None:
    """Records a new batch's rows, or checks that ``plan`` is the stored one."""
    stored_sha = store.get_meta("file_sha256")
    if not store.is_empty():
        if stored_sha != file_sha:
            raise ConfigError(
                [],
                summary=(
                    f"the batch file changed since the batch in {store.folder} started; "
                    "resume it with the file it started with, or start over with "
                    "--state-dir NEW_FOLDER (or delete the old folder)"
                ),
            )
        _write_env(store.folder, plan)
        return
    _write_env(store.folder, plan)
    wss: list[WorkstreamRow] = []
    steps: list[StepRow] = []
    for position, ws in enumerate(plan.workstreams):
        wss.append(
            WorkstreamRow(
                ws_id=ws.ws_id,
                position=position,
                state="S_PENDING",
                retry_count=0,
                max_retries=ws.max_retries,
                retry_ready_at_ms=None,
                base_delay_ms=ws.backoff.base_delay_ms,
                max_delay_ms=ws.backoff.max_delay_ms,
                abandon_requested=False,
            )
        )
        for s_pos, step in enumerate(ws.steps):
            steps.append(
                StepRow(
                    ws_id=ws.ws_id,
                    step_id=step.step_id,
                    position=s_pos,
                    state="S_PENDING",
                    retry_count=0,
                    max_retries=step.max_retries,
                    retry_ready_at_ms=None,
                    plan=_masked(step.to_json()),
                )
            )
    tools = sorted({s.tool for s in plan.steps()})
    breakers = []
    for tool in tools:
        spec = plan.breaker_spec(tool)
        breakers.append(
            breaker_row(
                tool,
                spec.failure_threshold,
                int(spec.cooldown_seconds * 1000),
                spec.success_threshold,
            )
        )
    store.insert_plan(wss, steps, breakers, now_ms)
    meta = {"name": plan.name, "file_sha256": file_sha}
    if plan.max_dollars is not None:
        meta["max_dollars"] = repr(plan.max_dollars)
    store.set_meta(meta)


def _masked(plan: dict[str, Any]) -> dict[str, Any]:
    """A step's plan as stored: its ``env`` names kept, the values masked."""
    if plan.get("env"):
        plan = {**plan, "env": dict.fromkeys(plan["env"], REDACTED)}
    return plan


def _write_env(folder: Path, plan: BatchPlan) -> None:
    """Writes the steps' ``env`` values to :data:`ENV_FILE` (0600, through a
    rename), or removes it when no step has any."""
    values = {
        f"{ws.ws_id}/{step.step_id}": dict(step.env)
        for ws in plan.workstreams
        for step in ws.steps
        if step.env
    }
    path = folder / ENV_FILE
    if not values:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(values, fh)
    os.replace(tmp, path)


def _read_env(folder: Path) -> dict[str, dict[str, str]]:
    try:
        data: dict[str, dict[str, str]] = json.loads((folder / ENV_FILE).read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise StoreError(
            f"cannot read the steps' env values in {folder / ENV_FILE}: {e}; "
            "`weft batch resume FILE` writes it again from the batch file"
        ) from e
    return data


def file_sha256(path: Path) -> str:
    """The batch file's digest, to tell a resumed batch from a changed one."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Coordinator:
    """Runs one batch to the end (see the module doc)."""

    store: BatchStore
    engine: Engine
    workers: int
    clock: Callable[[], int] = wall_clock_ms
    listeners: list[Listener] = field(default_factory=list)
    scheduler: Scheduler = field(init=False)
    waiting: dict[str, str] = field(default_factory=dict)
    """Steps that could start but wait, with why (for the live view)."""
    windows: WindowWatch = field(default_factory=WindowWatch)
    """The closed usage windows, read each turn (see the module doc)."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by :meth:`request_stop`: launch nothing more, leave what runs to resume."""
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by :meth:`request_drain`: launch nothing more, let what runs finish."""
    drained: bool = False
    """Whether :meth:`run` returned at the end of a drain, with steps left to run."""
    _drain_by: str | None = field(default=None, repr=False)
    _drain_from: list[str] | None = field(default=None, repr=False)
    """The steps running when the drain's note was written (``None``: not yet)."""
    busy_ns: int = 0
    """Wall time spent in the coordinator's own work (see the module doc)."""
    launched: int = 0
    """Launches this coordinator made."""
    _timing: bool = field(default=False, repr=False)
    _env: dict[str, dict[str, str]] | None = field(default=None, repr=False)
    """The steps' env values (:data:`ENV_FILE`), read at the first launch needing them."""
    step_env: Callable[[str, int], dict[str, str]] | None = None
    """Variables added to a launch's env (step key, launch number): the trace
    context of its span when traces are exported (:mod:`weft.telemetry.batch`)."""
    on_tick: Callable[[dict[str, tuple[str, int]], int], None] | None = None
    """Told each turn which steps a closed usage window holds (for the trace)."""

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Counts the time inside towards :attr:`busy_ns` (once when nested)."""
        if self._timing:
            yield
            return
        self._timing = True
        started = time.perf_counter_ns()
        try:
            yield
        finally:
            self.busy_ns += time.perf_counter_ns() - started
            self._timing = False

    def request_stop(self) -> None:
        """Stops the coordinator soon: nothing new starts; in-process hank runs
        stop gracefully and command steps keep running; every running step stays
        ``S_RUNNING``, so ``weft batch resume`` takes them over."""
        self.stopping.set()

    def request_drain(self, by: str) -> bool:
        """Drains (see the module doc) at ``by``'s request; ``False`` if already draining."""
        if self.draining.is_set():
            return False
        self._drain_by = by
        self.draining.set()
        return True

    def _note_drain(self) -> None:
        """Writes the drain's request note, once, from inside the loop (a signal
        handler only sets the flag)."""
        if not self.draining.is_set() or self._drain_from is not None:
            return
        self._drain_from = self.scheduler.running()
        reason = (
            f"drain requested ({self._drain_by}): the {len(self._drain_from)} running step(s) "
            "finish, nothing new starts"
        )
        note = Note("batch", "", {"reason": reason, "running": self._drain_from})
        with self.busy():
            self.store.commit([note], self.clock())

    def _end_drain(self) -> None:
        left = [
            s.row.key
            for ws in self.scheduler.workstreams.values()
            if not ws.machine.is_terminal
            for s in ws.steps.values()
            if s.machine.state != "S_SUCCESS"
        ]
        reason = (
            f"drained: the running step(s) finished ({len(self._drain_from or [])}); "
            f"{len(left)} step(s) left to run; `weft batch run` goes on"
        )
        note = Note("batch", "", {"reason": reason, "finished": self._drain_from or []})
        with self.busy():
            self.store.commit([note], self.clock())
        self.drained = True

    def __post_init__(self) -> None:
        budget = self.store.get_meta("max_dollars")
        self.scheduler = Scheduler(
            self.store.load(), max_dollars=float(budget) if budget is not None else None
        )

    def commit(self, changes: list[Change], now: int | None = None) -> None:
        """Writes ``changes`` (stamped ``now``, default the clock), then tells the listeners."""
        if not changes:
            return
        with self.busy():
            now = self.clock() if now is None else now
            self.store.commit(changes, now)
            for change in changes:
                for listener in self.listeners:
                    listener(change, now)

    def apply_commands(self) -> list[str]:
        """Applies the inbox's recovery commands; their results."""
        results = []
        with self.busy():
            pending = self.store.pending_commands()
        for command_id, kind, target in pending:
            if kind == "drain":
                applied, result = self._drain_command()
                stored = result if applied else REFUSED + result
                self.store.mark_command(command_id, stored, self.clock())
                results.append(result)
                continue
            changes, result = apply_command(self.scheduler, kind, target, self.clock())
            self.commit(changes)
            # A command that changes nothing was refused: marked so for its sender.
            stored = result if changes else REFUSED + result
            self.store.mark_command(command_id, stored, self.clock())
            results.append(result)
        return results

    def _drain_command(self) -> tuple[bool, str]:
        """``weft batch drain``: whether it was applied, and the answer."""
        if self.workers == 0:  # applied by a command's process: no coordinator runs
            return False, "no coordinator is running this batch: nothing to drain"
        if not self.request_drain("weft batch drain"):
            return False, "the coordinator is already draining"
        self._note_drain()
        running = self._drain_from or []
        return True, (
            f"draining: {plural(len(running), 'running step')} finish"
            f"{'es' if len(running) == 1 else ''}"
            f"{' (' + ', '.join(running) + ')' if running else ''}, nothing new starts; "
            f"the coordinator then exits {DRAINED_EXIT}"
        )

    async def run(self) -> None:
        """Resumes what was running, then runs until every workstream is terminal."""
        self._plan_providers()
        await self._resume_running()
        while True:
            self._record_outcomes()
            if self.stopping.is_set():
                left = [self.scheduler.step(key).row for key in self.scheduler.running()]
                self.commit([_resumed(row, "coordinator stopping: left to resume") for row in left])
                await self.engine.detach()
                return
            self.apply_commands()
            self._note_drain()
            draining = self.draining.is_set()
            now = self.clock()
            with self.busy():
                # Draining: no slot is free, so nothing starts; ends, retries'
                # bookkeeping and timeouts go on as usual.
                free = 0 if draining else self.free_slots()
                tick = self.scheduler.tick(now, free, self.windows.closed(now))
            if draining:
                tick.waiting = dict.fromkeys(tick.waiting, "draining: not started")
            self.waiting = tick.waiting
            if self.on_tick is not None:
                self.on_tick(tick.held, now)
            # Stamped when they were decided: a launch's S_RUNNING then carries the
            # time its row's started_at_ms holds, which the launch's end is kept
            # after (committing stamped a later clock reading, and a step that
            # failed within the same millisecond or two could end before it started).
            self.commit(tick.changes, now)
            for key in tick.launches:
                await self._launch(key)
            for key in tick.cancels:
                self.engine.cancel(key)
            if self.scheduler.done and self.engine.active == 0:
                return
            if draining and not self.scheduler.running() and self.engine.active == 0:
                self._end_drain()
                await self.engine.detach()
                return
            if tick.launches or tick.changes:
                continue
            timeout = INBOX_POLL_S
            if tick.wake_at_ms is not None:
                timeout = max(0.0, min(timeout, (tick.wake_at_ms - now) / 1000))
            got = asyncio.ensure_future(self.engine.completions.get())
            stop = asyncio.ensure_future(self.stopping.wait())
            waits = {got, stop}
            drain = None
            if not draining:
                drain = asyncio.ensure_future(self.draining.wait())
                waits.add(drain)
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when="FIRST_COMPLETED")
            stop.cancel()
            if drain is not None:
                drain.cancel()
            if got not in done:
                got.cancel()
                continue
            self._record_outcome(*got.result())

    def _plan_providers(self) -> None:
        """The providers of every step (see the module doc), recorded for status."""
        with self.busy():
            stored = self.store.load()
            found = steps_providers((s.key, s.plan) for s in stored.steps)
            self.scheduler.providers = {k: frozenset(v) for k, v in found.items()}
            text = json.dumps(found, sort_keys=True)
            if self.store.get_meta(PROVIDERS_META) != text:
                self.store.set_meta({PROVIDERS_META: text})

    def free_slots(self) -> int:
        """Workers free for a launch: those neither running a launch nor holding a
        step still recorded ``S_RUNNING`` (see the module doc)."""
        return self.workers - max(self.engine.active, len(self.scheduler.running()))

    def _record_outcomes(self) -> None:
        """Commits every outcome the engine has reported so far."""
        while not self.engine.completions.empty():
            self._record_outcome(*self.engine.completions.get_nowait())

    def _record_outcome(self, key: str, outcome: Outcome) -> None:
        """Commits a launch's end, stamped when the engine saw it end (never
        before the step's own launch was recorded, nor after now)."""
        with self.busy():
            now = self.clock()
            at = now if outcome.ended_at_ms is None else min(outcome.ended_at_ms, now)
            started = self.scheduler.step(key).row.started_at_ms
            if started is not None:
                at = max(at, started)
            self.commit(self.scheduler.finished(key, outcome, at), at)

    def spec(self, key: str) -> LaunchSpec:
        """The launch of step ``key``, its ``env`` values read back (see the module doc)."""
        plan = self.scheduler.step(key).row.plan
        env: dict[str, str] = plan.get("env") or {}
        masked = [name for name, value in env.items() if value == REDACTED]
        if masked:
            if self._env is None:
                self._env = _read_env(self.store.folder)
            given = self._env.get(key, {})
            missing = [name for name in masked if name not in given]
            if missing:
                raise StoreError(
                    f"step {key} needs env {', '.join(missing)}, whose values the batch store "
                    f"does not keep and {self.store.folder / ENV_FILE} does not hold; "
                    "`weft batch resume FILE` writes them again from the batch file"
                )
            plan = {**plan, "env": {name: given.get(name, v) for name, v in env.items()}}
        return launch_spec(key, plan, self.store.folder)

    async def _launch(self, key: str) -> None:
        spec = self.spec(key)
        if self.step_env is not None:
            extra = self.step_env(key, self.scheduler.step(key).row.launches)
            spec = dataclasses.replace(spec, env={**spec.env, **extra})
        self.launched += 1
        pid, pid_start = await self.engine.start(spec)
        step = self.scheduler.step(key)
        step.row.pid, step.row.pid_start = pid, pid_start
        values: dict[str, Any] = {"pid": pid, "pid_start": pid_start}
        if spec.execution_dir is not None:
            values["execution_dir"] = str(spec.execution_dir)
            step.row.execution_dir = str(spec.execution_dir)
        self.commit(
            [
                Change(
                    "steps",
                    (step.row.ws_id, step.row.step_id),
                    "S_RUNNING",
                    "S_RUNNING",
                    values=values,
                )
            ]
        )

    async def _resume_running(self) -> None:
        for key in self.scheduler.running():
            step = self.scheduler.step(key)
            spec = self.spec(key)
            if self.engine.adopt(spec, step.row.pid, step.row.pid_start):
                self.commit([_resumed(step.row, "coordinator resumed: step adopted")])
                continue
            if self.scheduler.workstreams[step.row.ws_id].machine.is_terminal:
                # Abandoned while no coordinator ran: record the lost launch as
                # failed rather than start it again.
                lost = Outcome(exit_code=None, error="process lost while no coordinator ran")
                self.commit(self.scheduler.finished(key, lost, self.clock()))
                continue
            # Its process is gone and left no exit code: launch it again. The
            # audit says so; the step's state does not move. A launch that
            # never started (killed before it, no pid anywhere) is not counted.
            started = step.row.pid is not None or spec.pid_path.exists()
            if not started:
                self.commit([_resumed(step.row, "coordinator resumed: launch never started")])
                await self._launch(key)
                continue
            step.row.launches += 1
            self.commit(
                [
                    Change(
                        "steps",
                        (step.row.ws_id, step.row.step_id),
                        "S_RUNNING",
                        "S_RUNNING",
                        values={"launches": step.row.launches},
                        metadata={
                            "reason": "coordinator resumed: process lost, launched again",
                            "launch": step.row.launches,
                        },
                        audit=True,
                    )
                ]
            )
            await self._launch(key)


def _resumed(row: StepRow, reason: str) -> Change:
    """An audit row for a step a resumed coordinator took over; its state stays."""
    return Change(
        "steps",
        (row.ws_id, row.step_id),
        "S_RUNNING",
        "S_RUNNING",
        metadata={"reason": reason, "launch": row.launches},
        audit=True,
    )


def apply_command(
    scheduler: Scheduler, kind: str, target: str, now_ms: int
) -> tuple[list[Change], str]:
    """One recovery command against the scheduler's machines."""
    if kind == "abandon":
        return scheduler.request_abandon(target)
    if kind == "retry":
        return scheduler.retry_step(target)
    if kind == "reopen":
        return scheduler.retry_step(target, reopen=True)
    if kind == "skip":
        return scheduler.skip_step(target)
    if kind == "reset-breaker":
        return scheduler.reset_breaker(target, now_ms)
    return [], f"unknown command {kind!r}"


def apply_commands_offline(
    state_dir: Path, clock: Callable[[], int] = wall_clock_ms
) -> list[str] | None:
    """Applies the inbox when no coordinator runs (this process takes the lock,
    applies, and lets go). ``None`` if a coordinator holds the lock: it will."""
    from weft.errors import LockHeldError

    try:
        store = BatchStore.open(state_dir, writer=True)
    except LockHeldError:
        return None
    with store:
        if store.is_empty():
            raise StoreError(f"no batch in {state_dir}; run `weft batch run FILE` first")
        coordinator = Coordinator(store, LocalEngine(), workers=0, clock=clock)
        results = coordinator.apply_commands()
        # Abandon requests are honoured by the scheduler's next tick; with no
        # worker free it launches nothing, only moves states.
        coordinator.commit(coordinator.scheduler.tick(clock(), 0).changes)
        return results


def check_rebuildable(folder: Path, plan: BatchPlan) -> dict[str, StepTrace]:
    """The step folders, if a store for ``plan`` can be rebuilt from them (see
    :func:`rebuild`); else :class:`StoreError`: a step folder that is no step of
    ``plan``, or a step whose process still runs."""
    traces = step_traces(folder)
    keys = {f"{ws.ws_id}/{step.step_id}" for ws in plan.workstreams for step in ws.steps}
    strangers = [t.where for t in traces.values() if t.key not in keys]
    if strangers:
        raise StoreError(
            f"{folder}: {', '.join(strangers)} belong to no step of the batch file; "
            "rebuild with the batch file this batch ran"
        )
    for key, trace in traces.items():
        spec = launch_spec(key, {"command": ["true"], "cwd": "."}, folder)
        pid = spec.wrapper_pid()
        if pid is not None and not trace.has_exit:
            raise StoreError(
                f"step {key} still runs (pid {pid}, {trace.where}); wait for it to end "
                "(or stop it) before rebuilding"
            )
    return traces


def rebuild(
    store: BatchStore,
    plan: BatchPlan,
    file_sha: str,
    now_ms: int,
    traces: dict[str, StepTrace],
) -> dict[str, list[str]]:
    """Fills a new, empty ``store`` from ``plan`` and what the step folders
    prove (``traces``, from :func:`check_rebuildable`): a step whose ``exit``
    file holds one of its expected exit codes succeeded (``S_SUCCESS``, with its
    launches, exit code and cost); every other step is ``S_PENDING`` with fresh
    retries and runs again (a hank step's execution resumes in its folder);
    breakers start ``CLOSED``. Each move is audited with its evidence. Returns
    the keys ``kept`` and ``again``."""
    record_plan(store, plan, file_sha, now_ms)
    kept: list[str] = []
    again: list[str] = []
    changes: list[Change] = []
    for ws in plan.workstreams:
        ws_changes: list[Change] = []
        proven = 0
        for step in ws.steps:
            key = f"{ws.ws_id}/{step.step_id}"
            trace = traces.get(key)
            if trace is None:
                continue
            where = {"rebuilt_from": trace.where}
            if trace.exit_code is not None and trace.exit_code in step.expected_exit_codes:
                proven += 1
                kept.append(key)
                execution = trace.folder / "execution"
                why = f"rebuilt: {trace.where}/exit holds {trace.exit_code}"
                ws_changes += [
                    Change(
                        "steps",
                        (ws.ws_id, step.step_id),
                        "S_PENDING",
                        "S_RUNNING",
                        values={"launches": max(1, trace.launches or 0), "started_at_ms": now_ms},
                        metadata={"reason": why, **where},
                    ),
                    Change(
                        "steps",
                        (ws.ws_id, step.step_id),
                        "S_RUNNING",
                        "S_SUCCESS",
                        values={
                            "exit_code": trace.exit_code,
                            "cost_usd": execution_cost(execution if execution.is_dir() else None),
                        },
                        metadata={"reason": why, "exit_code": trace.exit_code, **where},
                    ),
                ]
            else:
                again.append(key)
                found = f"exit {trace.exit_code}" if trace.exit_code is not None else "no exit code"
                ws_changes.append(
                    Change(
                        "steps",
                        (ws.ws_id, step.step_id),
                        "S_PENDING",
                        "S_PENDING",
                        metadata={
                            "reason": f"rebuilt: {trace.where} shows no success ({found}); "
                            "runs again",
                            **where,
                        },
                        audit=True,
                    )
                )
        if proven:
            ws_changes.insert(
                0,
                Change(
                    "workstreams",
                    (ws.ws_id,),
                    "S_PENDING",
                    "S_RUNNING",
                    metadata={"reason": f"rebuilt: {proven} step(s) proven finished"},
                ),
            )
            if proven == len(ws.steps):
                ws_changes.append(
                    Change(
                        "workstreams",
                        (ws.ws_id,),
                        "S_RUNNING",
                        "S_SUCCESS",
                        metadata={"reason": "rebuilt: all steps succeeded"},
                    )
                )
        changes += ws_changes
    store.commit(changes, now_ms)
    return {"kept": kept, "again": again}
