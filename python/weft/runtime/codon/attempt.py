"""One codon attempt's records: what the run loop asks for
(:class:`CodonRequest`), how it ended (:class:`CodonResult`), why it was cut
short (:class:`Interrupt`), the mutable facts of the attempt while it runs
(:class:`Attempt`), the sentinel seam, and the small conversions the runner
and its event handlers share.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from weft.agents.events import SessionExited, SessionResult, Tokens
from weft.agents.harness import AgentSession
from weft.clock import utc_now_iso
from weft.config.prompt import AssembledPrompt
from weft.events.stream import (
    TOOL_RESULT_LIMIT,
    InfoEvent,
    ProcessExit,
    StreamData,
    TokenUsageEvent,
)
from weft.events.transitions import (
    CodonStatus,
    CodonTransitioned,
    FailureReason,
    TokenUsage,
    TransitionMetadata,
)
from weft.plan import PlannedCodon
from weft.runtime.rig.setup import RigResult
from weft.state import StateManager


class Interrupt(enum.StrEnum):
    """Why the supervisor cuts a codon short."""

    SKIP = "skip"
    """The user skipped it: ``skipped``, at no cost."""
    FORCE_STOP = "force_stop"
    """The user stopped it: ``failed``, not retriable."""
    SHUTDOWN = "shutdown"
    """Weft is shutting down: ``failed``, retriable, so a later run redoes it."""
    BUDGET = "budget"
    """A budget was crossed: ``completed`` or ``failed`` as its ``onExceeded``
    says (``skipped`` when the agent had not started)."""


class SentinelHost(Protocol):
    """The seam for sentinels (LLM observers of a codon's events).

    ``weft run`` uses :class:`weft.sentinels.host.RuntimeSentinels`;
    :class:`NoSentinels` is for embedders and tests that run none. The runner
    calls ``load`` while ``starting``, ``drain`` while ``completing-sentinels``,
    ``seal`` right before the terminal move and ``finish`` after
    ``codon.completed``.
    """

    async def load(self, planned: PlannedCodon, run_id: str, *, since: int = 0) -> str | None:
        """Loads the codon's sentinels, to be fed the events from seq ``since``
        on (the codon's move to ``starting``: what earlier codons and this
        one's rig submitted is not theirs, even when committed later); the
        reason the codon fails when a sentinel marked ``failCodonIfNotLoaded``
        could not load."""
        ...

    async def drain(
        self, planned: PlannedCodon, run_id: str, *, upto: int, files_written: bool = True
    ) -> None:
        """Lets the codon's sentinels finish their work on the events up to
        seq ``upto`` (the agent's last, before the move to ``completing-sentinels``);
        ``files_written``: the agent called a file-writing tool."""
        ...

    def seal(self, planned: PlannedCodon, run_id: str) -> None:
        """Records the sentinels' last states before the codon's terminal move."""
        ...

    async def finish(self, planned: PlannedCodon, run_id: str, *, shutdown: bool = False) -> None:
        """Drains again and unloads the codon's sentinels (after ``codon.completed``)."""
        ...

    async def settle(self) -> None:
        """Waits until what ``finish`` started is done (before a run ends)."""
        ...


class NoSentinels:
    """No sentinel runs; a codon that declares some is told so once."""

    def __init__(self, emit: Callable[[StreamData, str, str], None]) -> None:
        self._emit = emit

    async def load(self, planned: PlannedCodon, run_id: str, *, since: int = 0) -> str | None:
        """Says that the codon's sentinels are not run."""
        if planned.codon.sentinels:
            count = len(planned.codon.sentinels)
            self._emit(
                InfoEvent(
                    message=(
                        f"Codon {planned.codon_id} declares {count} sentinel(s); this runner "
                        "has no sentinel host, so they are skipped."
                    )
                ),
                run_id,
                planned.codon_id,
            )
        return None

    async def drain(
        self, planned: PlannedCodon, run_id: str, *, upto: int, files_written: bool = True
    ) -> None:
        """Nothing to wait for."""

    def seal(self, planned: PlannedCodon, run_id: str) -> None:
        """Nothing to record."""

    async def finish(self, planned: PlannedCodon, run_id: str, *, shutdown: bool = False) -> None:
        """Nothing to unload."""

    async def settle(self) -> None:
        """Nothing runs after a codon."""


@dataclass(frozen=True, slots=True)
class CodonRequest:
    """One attempt of one codon, as the supervisor asks for it."""

    run_id: str
    branch: str
    planned: PlannedCodon
    patterns: list[str]
    """The checkpointed-file patterns in force (union up to this codon)."""
    parent_sha: str
    """The tip of the run's checkpoint branch (or the run's starting checkpoint)."""
    previous_session_id: str | None = None
    """For ``continue-previous``: the session to resume."""
    accepts_context_exceeded: bool = False
    """Running out of context completes the codon (an ``exhaustWithPrompt``
    codon, or one inside a ``contextExceeded`` loop)."""
    attempt: int = 1
    skip_rig: bool = False
    """``codon.start`` with ``skipPreCommands``: no rig setup this time."""


@dataclass(slots=True)
class CodonResult:
    """How an attempt ended."""

    codon_id: str
    status: Literal["completed", "failed", "skipped"]
    failure: FailureReason | None = None
    session_id: str | None = None
    cost: float = 0.0
    tokens: Tokens = field(default_factory=Tokens)
    checkpoint_sha: str | None = None
    context_exceeded: bool = False
    duration_ms: int = 0
    exit: SessionExited | None = None
    assistant_messages: int = 0
    start_time: str | None = None

    @property
    def continuable(self) -> bool:
        """Whether a ``continue-previous`` successor may resume this session
        (seed 003: completed, or skipped after at least one assistant message)."""
        if self.session_id is None:
            return False
        return self.status == "completed" or (
            self.status == "skipped" and self.assistant_messages > 0
        )

    @property
    def retriable(self) -> bool:
        """Whether running the codon again may help."""
        return self.failure is not None and self.failure.retriable


def usage_of(tokens: Tokens) -> TokenUsage:
    return TokenUsage(
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_creation_tokens=tokens.cache_creation,
        cache_read_tokens=tokens.cache_read,
    )


def token_usage_event(
    codon_id: str,
    tokens: Tokens,
    cost: float | None,
    *,
    model: str | None = None,
    final: bool = False,
) -> TokenUsageEvent:
    return TokenUsageEvent(
        codon_id=codon_id,
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_creation_tokens=tokens.cache_creation,
        cache_read_tokens=tokens.cache_read,
        total_cost=cost,
        final=final,
        model_id=model,
    )


def exit_code_of(exit: SessionExited | None) -> int:
    if exit is None:
        return -1
    if exit.exit_code is not None:
        return exit.exit_code
    return 128 + exit.signal if exit.signal is not None else -1


def process_exit_of(exit: SessionExited | None) -> ProcessExit | None:
    if exit is None:
        return None
    if exit.signal is not None:
        return ProcessExit(type="killed", signal=exit.signal)
    if exit.exit_code == 0:
        return ProcessExit(type="success")
    return ProcessExit(type="error", code=exit.exit_code)


def shorten(text: str, limit: int = TOOL_RESULT_LIMIT) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + "...", True


class Attempt:
    """The mutable facts of one attempt, kept together so the terminal move
    can be computed from them in one place."""

    def __init__(self, request: CodonRequest) -> None:
        self.request = request
        self.status: CodonStatus = "preparing"
        self.started = time.monotonic()
        self.start_time = utc_now_iso()
        self.session: AgentSession | None = None
        self.session_id: str | None = None
        self.result: SessionResult | None = None
        self.exit: SessionExited | None = None
        self.tokens = Tokens()
        self.prompt: AssembledPrompt | None = None
        self.model = ""
        self.harness = ""
        """The prompt (once assembled), the model and the harness (once the agent starts)."""
        self.messages: set[str] = set()
        self.wrote_files = False
        """Whether the agent called a file-writing tool (``file.updated`` may follow)."""
        self.tools: dict[str, tuple[str, float]] = {}
        self.interrupt: Interrupt | None = None
        self.rig: asyncio.Task[RigResult] | None = None
        self.storage: str | None = None
        """Why a write of this attempt found the disk full: the attempt fails
        with kind ``storage`` and the run ends (retrying cannot help)."""
        self.reported_cost: float | None = None
        """The total the agent reported, as submitted in ``CodonFinalCostSet``,
        while no increment followed it: the core's codon cost is then exactly
        this (rounded as the core rounds), so the terminal move can name it
        without waiting for the core to apply the queue. Not a tally: the
        value is the agent's, passed through."""
        self.session_reported = False
        """The current agent process reported its session (the seed 002
        machine's ``SessionStarted``, which resets the failures in a row)."""
        self.resumed_from: str | None = None
        """The session the attempt's first session really resumed (``--resume``):
        the codon's ``previousSessionId``; None for a fresh session."""
        self.urgent = False
        """An urgent message stopped the current session: resume it with the message."""
        self.starting_seq = 0
        """The sequence number of the move to ``starting``: the codon's
        sentinels are fed the events from it on."""
        self.woken = asyncio.Event()
        """Set by an interrupt: ends a cool-down between sessions at once."""
        self.extensions = 0
        """Times the session was resumed with ``exhaustWithPrompt``."""
        self.cost_base = 0.0
        self.tokens_base = Tokens()
        """The codon's cost and tokens before the current extension's session:
        each session reports its own process's figures, the codon's are the sum."""

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    @property
    def live(self) -> bool:
        """Whether the core takes cost and message updates now (the agent runs)."""
        return self.status in ("running", "completing-sentinels")


def move(
    manager: StateManager, a: Attempt, to: CodonStatus, meta: TransitionMetadata | None = None
) -> int:
    """Moves the attempt's codon to ``to`` (fire-and-forget: the manager keeps
    the order); the move's sequence number."""
    seq = manager.transition(
        CodonTransitioned(
            run_id=a.request.run_id,
            codon_id=a.request.planned.codon_id,
            from_status=a.status,
            to_status=to,
            timestamp=utc_now_iso(),
            metadata=meta,
        )
    )
    a.status = to
    return seq


def builtins_of(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(value)
    return out
