"""What the runtime's parts share: its options, its outcome, the cursor (the
run it records into and what runs next), the run loop's requests, and
:class:`RuntimeState`, the state every part of :class:`~weft.runtime.run.runtime.Runtime`
reads (the runtime is this state, composed of its parts, each holding it as
``ctx``: :mod:`~weft.runtime.run.recovery` starts the run,
:mod:`~weft.runtime.run.steering` takes the server's commands,
:mod:`~weft.runtime.run.loop` runs the codons). The run's control state is
the run machine's (:class:`~weft.runtime.run.machine.RunMachine`), never a flag
here; :meth:`RuntimeState._perform` carries out its effects.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from weft._core import ExecutionThread, ThreadCodon
from weft.budget.report import JournalSpend
from weft.budget.watchdog import Watchdog
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.config.loader import LoadedHank
from weft.config.runtime import (
    RuntimeBreakerSettings,
    RuntimeSessionSettings,
    RuntimeUsageWindowSettings,
)
from weft.config.schema import Loop
from weft.errors import CommandRejectedError
from weft.events.completed import CompletedCodons
from weft.events.stream import CodonSummary, ErrorEvent, InfoEvent, StreamData
from weft.outcome import Ending
from weft.plan import ExecutionPlan, PlannedCodon
from weft.progress import RunProgress
from weft.runtime.codon.attempt import Interrupt as AttemptInterrupt
from weft.runtime.codon.breakers import ProviderBreakers
from weft.runtime.codon.runner import CodonRunner
from weft.runtime.codon.sessions import Sleep
from weft.runtime.execution.prepare import PreparedExecution
from weft.runtime.run import rollback
from weft.runtime.run.machine import (
    CancelSleep,
    Effect,
    End,
    Kill,
    RunCodon,
    RunMachine,
    Say,
    ShuttingDown,
    Wait,
    WakeLoop,
)
from weft.runtime.run.replan import Replan
from weft.sentinels.host import RuntimeSentinels
from weft.server import ProtocolServer
from weft.state import Processed, StateManager

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
    server_idle_timeout: int = 0
    """Seconds between the server's pings to each client, and for its answer; a client
    that does not answer is closed (``--idle-timeout``). 0: clients are never closed idle."""
    output_dir: Path | None = None
    """Where codons' ``outputFiles`` are copied (``-o``); None: nowhere."""
    overwrite_output: bool = False
    """Replace files already in ``output_dir`` (``--overwrite-output``)."""
    sentinel_model: str | None = None
    """Every sentinel calls this model (``--sentinel-model``, ``sentinel.model``)."""
    sentinel_persistence: bool = True
    sentinel_call_timeout: float = 60.0
    """Seconds one sentinel model call may take (``sentinel.callTimeoutMs``)."""
    """Conversational sentinels keep their history on disk across codons and
    restarts (``sentinel.enablePersistence``); off: in memory, for one codon."""
    anthropic_base_url: str | None = None
    """``ANTHROPIC_BASE_URL`` for Claude Code agents (``anthropicBaseUrl``)."""
    max_dollars: float | None = None
    max_seconds: float | None = None
    """The run's budget ceiling (``--max-cost``/``--max-time``, else the stricter
    of the runtime config and ``overrides.budget``)."""
    max_tokens: int | None = None
    """The run's token ceiling (``--max-tokens``, ``budget.maxTokens``): every token."""
    budget_source: str = "overrides.budget"
    """Where the ceiling came from, for the messages (``--max-cost``...)."""
    sessions: RuntimeSessionSettings = field(default_factory=RuntimeSessionSettings)
    """The session supervisor's thresholds and cool-down schedule (``session.*``)."""
    session_sleep: Sleep | None = None
    """How cool-downs wait (:func:`asyncio.sleep`); tests inject a clock."""
    breakers: RuntimeBreakerSettings = field(default_factory=RuntimeBreakerSettings)
    """The agent providers' circuit breakers (``breaker.*``)."""
    usage_window: RuntimeUsageWindowSettings = field(default_factory=RuntimeUsageWindowSettings)
    skip: frozenset[str] = frozenset()
    """Codons this run records as skipped without running them (``--skip``)."""
    """How long a codon may wait for a closed usage window (``usageWindow.*``)."""
    provider_breakers: ProviderBreakers | None = None
    """Breakers to share with other executions (a batch runner's); None: the
    run makes its own from :attr:`breakers`."""
    agent_env: Callable[[str, str, str], Mapping[str, str]] | None = None
    """Extra variables for each codon attempt's agent (the trace context when traces
    are exported); see :attr:`weft.runtime.codon.base.RunnerBase.agent_env`."""
    breaker_clock: Callable[[], int] | None = None
    """The breakers' millisecond clock (monotonic); tests inject one."""


@dataclass(slots=True)
class RunOutcome:
    """How a ``weft run`` ended."""

    status: Literal["completed", "failed", "stopped", "budget", "nothing_to_do"]
    """The ending's kind (:mod:`weft.outcome`), or ``nothing_to_do``."""
    exit_code: int
    run_id: str | None
    message: str
    codons: dict[str, str] = field(default_factory=dict)
    """Codon id -> its final status in this run."""
    cost: float = 0.0
    """The run's cost, read from the core's cost cache when it ended."""
    checkpoints: int = 0
    duration_ms: int = 0
    ending: Ending | None = None
    """How the run ended, as journaled (None: nothing ran)."""


def new_run_id() -> str:
    """``<ms since epoch>-<5 base36 chars>``, the reference's run id shape."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{time.time_ns() // 1_000_000}-{suffix}"


@dataclass(slots=True)
class Cursor:
    """Where the runtime stands: the run it records into and what runs next."""

    run_id: str
    plan: ExecutionPlan
    current: PlannedCodon | None
    parent: str
    """The checkpoint the next codon starts from."""
    open: bool = True
    """The run is still ``running`` (not yet ended)."""
    sessions: dict[str, str] = field(default_factory=dict)
    """Sessions this run's codons established, for ``continue-previous``
    successors (earlier runs' sessions come from the execution thread)."""

    @property
    def branch(self) -> str:
        return run_branch(self.run_id)


@dataclass(frozen=True, slots=True)
class Next:
    """Run the cursor's codon (``codon.next``, ``codon.start``)."""

    skip_rig: bool = False


@dataclass(frozen=True, slots=True)
class Rewind:
    """Start a new run from a checkpoint: a rollback, or a redo (``retry``)
    that then runs ``codon_id`` again."""

    target: rollback.RollbackTarget | None
    reason: Literal["rollback", "retry"]
    codon_id: str | None = None
    run_next: bool = False
    skip_rig: bool = False


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Request: TypeAlias = Next | Rewind | Shutdown

IdleReason: TypeAlias = Literal[
    "startup", "codon-completed", "all-codons-completed", "rollback-completed"
]


DONE = frozenset(("completed", "failed", "skipped"))


def summary(tc: ThreadCodon) -> CodonSummary:
    record = tc.codon
    return CodonSummary(
        codon_id=tc.codon_id,
        run_id=tc.run_id,
        status=tc.status,
        cost=float(record.get("finalCost") or 0.0),
        start_time=record.get("startTime"),
        end_time=record.get("endTime"),
    )


class RuntimeState:
    """The runtime's state, set up once; the parts read and move it. Only
    the event loop's thread touches it."""

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
        self._requests: asyncio.Queue[Request] = asyncio.Queue()
        self.machine = RunMachine(autostart=self.options.autostart)
        """The run's control state: waiting, running, rolling back, stopping, done."""
        self._effects: set[asyncio.Task[Any]] = set()
        """The agent interrupts and kills the machine asked for, still going."""
        self._runner: CodonRunner | None = None
        self._sentinels: RuntimeSentinels | None = None
        self._manager: StateManager | None = None
        self._checkpoints: AsyncCheckpointRepo | None = None
        self._cursor: Cursor | None = None
        self._sleep: asyncio.Future[None] | None = None
        self._started = time.monotonic()
        self._thread: ExecutionThread | None = None
        self._replan: Replan | None = None
        """How a changed hank changes the stored plan (set by the run's start)."""
        self._finished = CompletedCodons()
        """The thread's finished codons, oldest first, for ``state.snapshot``
        (which sends what changed since the journal's previous one)."""
        self._codons_by_id = {
            codon.id: codon
            for item in hank.hank.hank
            for codon in (item.codons if isinstance(item, Loop) else [item])
        }
        self._budget: Watchdog | None = None
        self._journal_spend: JournalSpend | None = None
        """What the journal says earlier runs spent beyond their records (read at open)."""
        """The run's budgets and their watchdog (set when the run starts)."""
        self._progress = RunProgress()
        """The run's fold: the loop iterations' figures come from it, so they
        agree with the codons' own lines."""
        o = self.options
        self.breakers = o.provider_breakers or (
            ProviderBreakers(o.breakers)
            if o.breaker_clock is None
            else ProviderBreakers(o.breakers, clock=o.breaker_clock)
        )
        """The agent providers' circuit breakers, shared by the run's codons."""

    def _emit(
        self, event: StreamData, run_id: str | None = None, codon_id: str | None = None
    ) -> None:
        assert self._manager is not None
        self._manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _perform(self, effects: list[Effect]) -> Effect | None:
        """Carries out the run machine's effects; returns the one that says what
        the run loop does next (:class:`RunCodon`, :class:`Wait`, :class:`End`),
        if any. Agent interrupts and kills run as tasks (:attr:`_effects`)."""
        control: Effect | None = None
        runner = self._runner
        for effect in effects:
            if isinstance(effect, RunCodon | Wait | End):
                control = effect
            elif isinstance(effect, Say):
                if self._manager is not None:
                    self._emit(InfoEvent(message=effect.message))
            elif isinstance(effect, ShuttingDown):
                if self.server is not None:
                    self.server.mark_shutting_down()
                if self._sentinels is not None:
                    # Their model calls must not hold the stop (docs/sentinels.md).
                    self._sentinels.abandon()
            elif isinstance(effect, CancelSleep):
                if self._sleep is not None:
                    self._sleep.cancel()
            elif isinstance(effect, WakeLoop):
                self._requests.put_nowait(Shutdown())
            elif runner is not None:
                act = (
                    runner.kill()
                    if isinstance(effect, Kill)
                    else runner.interrupt(
                        AttemptInterrupt.BUDGET
                        if effect.why == "budget"
                        else AttemptInterrupt.SHUTDOWN
                    )
                )
                task: asyncio.Task[Any] = asyncio.ensure_future(act)
                self._effects.add(task)
                task.add_done_callback(self._effect_done)
        return control

    def _effect_done(self, task: asyncio.Task[Any]) -> None:
        """An interrupt or kill the machine asked for has finished. One that
        raised must not leave the agent running unseen: it is said, and the
        agent is killed."""
        self._effects.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        if self._manager is not None:
            self._emit(
                ErrorEvent(message=f"stopping the agent failed: {task.exception()}; killing it")
            )
        if self._runner is not None:
            kill = asyncio.ensure_future(self._runner.kill())
            self._effects.add(kill)
            kill.add_done_callback(self._effects.discard)

    def _parts(self) -> tuple[Cursor, StateManager, AsyncCheckpointRepo]:
        cursor, manager, checkpoints = self._cursor, self._manager, self._checkpoints
        if cursor is None or manager is None or checkpoints is None:
            raise CommandRejectedError("the run has not started yet; try again")
        return cursor, manager, checkpoints
