"""The harness protocol: what an agent adapter implements, and routing.

An adapter has two halves:

* a **parser** (:class:`StreamParser`), sans-I/O: it is fed complete stdout
  lines and, at the end, how the process exited, and returns normalised
  events (:mod:`weft.agents.events`). Parsers are tested on golden streams
  without spawning anything.
* a **harness** (:class:`Harness`): builds the CLI's argv and environment for a
  :class:`SessionSpec` and starts an :class:`AgentSession`, which owns the
  process (its own process group, stdout and stderr drained concurrently,
  timeouts, the stop sequence) and yields the parser's events.

:func:`route` picks the harness from the model id.
"""

from __future__ import annotations

import enum
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from weft.agents.events import AgentEvent, ErrorClass, SessionExited
from weft.errors import WeftError
from weft.paths import component, inside


class AgentStartError(WeftError):
    """An agent CLI could not be started at all (binary missing or not
    executable, working directory missing). Nothing ran, so there is no
    session and no verdict; the message says which binary and how to fix it."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines of one session, in seconds. ``None`` disables one."""

    first_output: float | None = 60.0
    """From spawn to the session's first event (Claude: ``system/init``)."""
    idle: float | None = 180.0
    """No stdout byte for this long. A retry notice extends it by the retry's
    delay; it does not run while Weft itself is not reading (backpressure)."""
    wall: float | None = None
    """The whole session."""
    stop_grace: float = 5.0
    """After SIGTERM to the process group, before SIGKILL."""
    flush_grace: float = 5.0
    """On a graceful stop of a CLI whose result is already out: how long it
    may take to exit by itself (writing its transcript) before SIGTERM."""


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Everything a harness needs to start one agent session."""

    prompt: str
    model: str
    """The model as the CLI should get it (routing already stripped
    ``fake/`` and provider prefixes the CLI does not understand)."""
    cwd: Path
    resume_session_id: str | None = None
    append_system_prompt: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra variables applied last (the codon's env). ``WEFT_<X>`` in the
    parent environment passes as ``X``; the value ``unset`` deletes ``X``."""
    log_path: Path | None = None
    """Where the raw stdout stream is teed (``.weft/runs/<runId>/<codonId>-<harness>.log``)."""
    max_turns: int | None = None
    max_budget_usd: float | None = None
    extra_args: tuple[str, ...] = ()
    timeouts: Timeouts = field(default_factory=Timeouts)


def session_log_path(weft_dir: Path, run_id: str, codon_id: str, harness: str) -> Path:
    """Where a codon's raw agent stream is teed:
    ``<weft_dir>/runs/<runId>/<codonId>-<harness>.log``. A loop iteration's
    ``#`` becomes ``-`` so the name is safe in every shell.

    The run id and the file name must each be one path component inside
    ``weft_dir`` (:func:`weft.paths.component`); an id that would place the
    log elsewhere raises :class:`~weft.errors.UnsafePathError`.
    """
    return inside(
        weft_dir,
        session_log_name(run_id, codon_id, harness),
        what=f'the agent log of codon "{codon_id}"',
    )


def session_log_name(run_id: str, codon_id: str, harness: str) -> str:
    """:func:`session_log_path` relative to the ``.weft`` folder
    (``runs/<runId>/<codonId>-<harness>.log``), its two names checked."""
    run = component(run_id, what="run id")
    name = component(f"{codon_id.replace('#', '-')}-{harness}.log", what="agent log name")
    return f"runs/{run}/{name}"


class StopReason(enum.StrEnum):
    """Why Weft ended a session itself."""

    OPERATOR = "operator"
    INTERRUPT = "interrupt"
    SHUTDOWN = "shutdown"
    FIRST_OUTPUT_TIMEOUT = "first_output_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    WALL_TIMEOUT = "wall_timeout"
    LOG_FAILED = "log_failed"
    """The session's raw log could not be written (a full disk)."""


_DEADLINES = {
    StopReason.FIRST_OUTPUT_TIMEOUT: "no session started before the first-output deadline",
    StopReason.IDLE_TIMEOUT: "the stream went idle past the idle deadline",
    StopReason.WALL_TIMEOUT: "the session ran past its wall-clock deadline",
}


def stopped_verdict(reason: StopReason) -> tuple[ErrorClass, bool, str]:
    """Class, retriability and message of a session Weft ended itself: a
    missed deadline is a retriable timeout, a requested stop is not an error
    to retry. Every adapter reports Weft's own stops the same way."""
    if reason in _DEADLINES:
        return ErrorClass.TIMEOUT, True, _DEADLINES[reason]
    return ErrorClass.STOPPED, False, f"stopped by Weft ({reason})"


@dataclass(frozen=True, slots=True)
class ProcessEnd:
    """How the child process ended, handed to :meth:`StreamParser.finish`."""

    exit_code: int | None
    """The exit status, or ``None`` when a signal killed it."""
    signal: int | None
    stderr_tail: str
    stopped: StopReason | None
    """Set when Weft stopped the process (a timeout or a request)."""


class StreamParser(Protocol):
    """Sans-I/O parser of one CLI's stdout stream."""

    def feed(self, line: bytes) -> list[AgentEvent]:
        """Parse one complete line (no newline; a trailing ``\\r`` may remain).
        Never raises on bad input: non-JSON lines are skipped, corrupt JSON
        and unknown types are counted."""
        ...

    def stderr(self, line: str) -> list[AgentEvent]:
        """Note one stderr line (some errors are only told there)."""
        ...

    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        """The process ended: return the closing events, the last of which is
        a :class:`SessionExited` with the verdict."""
        ...


@runtime_checkable
class BatchStreamParser(StreamParser, Protocol):
    """A :class:`StreamParser` that can also take several lines at once,
    which the process layer then prefers (one call per read from the pipe;
    the Claude parser hands such a batch to the Rust core)."""

    def feed_many(self, lines: list[bytes]) -> list[AgentEvent]:
        """The events of ``feed(line)`` for each line, in order."""
        ...


class AgentSession(Protocol):
    """One running agent process."""

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        ...

    def events(self) -> AsyncIterator[AgentEvent]:
        """The normalised events, ending with :class:`SessionExited`."""
        ...

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        """Graceful stop: drop unwritten stdin, wait ``flush_grace`` if the
        CLI is finishing, SIGTERM the process group, wait ``stop_grace``,
        SIGKILL. Returns once the process is gone. Idempotent."""
        ...

    async def kill(self) -> None:
        """SIGKILL the process group now."""
        ...

    async def wait(self) -> SessionExited:
        """Wait for the end (draining events nobody consumed)."""
        ...


class Harness(Protocol):
    """An agent adapter."""

    name: str
    """``claude``, ``codex``, ``gemini``."""

    def argv(self, spec: SessionSpec) -> list[str]:
        """The full command line for ``spec``."""
        ...

    async def start(self, spec: SessionSpec) -> AgentSession:
        """Spawn the CLI for ``spec``."""
        ...


@dataclass(frozen=True, slots=True)
class Route:
    """Which harness runs a model, and the model id the CLI gets."""

    harness: str
    """``claude``, ``codex`` or ``gemini``."""
    model: str
    fake: bool = False
    """Run the fake agent of that harness's flavour instead of the real CLI."""


_OPENAI_BARE = re.compile(r"^(gpt-|o1|o3|o4|codex)")
_CLAUDE_ALIASES = frozenset({"sonnet", "opus", "haiku"})


def route(model: str) -> Route:
    """Choose the harness for a hank's model id (reference hankweave-runtime
    §2.12): ``sonnet``/``opus``/``haiku``, ``claude-*`` and ``anthropic/...``
    go to Claude Code; ``openai/...`` and ``gpt-``/``o1``/``o3`` ids to Codex;
    ``google/...`` and ``gemini-*`` to Gemini. ``fake/<model>`` routes
    ``<model>`` the same way and runs the fake agent of that flavour
    (``fake/sonnet``, ``fake/openai/gpt-5``, ``fake/gemini-2.5-pro``).

    Raises :class:`ValueError` for an id no harness runs.
    """
    if model.startswith("fake/"):
        inner = route(model[len("fake/") :])
        return Route(inner.harness, inner.model, fake=True)
    provider, sep, rest = model.partition("/")
    if sep:
        if provider == "anthropic" and rest:
            return Route("claude", rest)
        if provider == "openai" and rest:
            return Route("codex", rest)
        if provider == "google" and rest:
            return Route("gemini", rest)
        raise ValueError(
            f"no harness runs model {model!r}: use anthropic/..., openai/..., google/... "
            "or fake/..."
        )
    if model in _CLAUDE_ALIASES or model.startswith("claude-"):
        return Route("claude", model)
    if model.startswith("gemini-"):
        return Route("gemini", model)
    if _OPENAI_BARE.match(model):
        return Route("codex", model)
    raise ValueError(
        f"no harness runs model {model!r}: use sonnet, opus, haiku, claude-..., gpt-..., "
        "gemini-..., a provider/model id, or fake/<model>"
    )


_T = TypeVar("_T")


def decode_lossy(decode: Callable[[bytes], _T], line: bytes) -> _T:
    """``decode(line)``; a line that is not valid UTF-8 is decoded again with
    U+FFFD in place of the bad bytes (msgspec raises ``UnicodeDecodeError``,
    not ``DecodeError``, for those). The well-formed path pays nothing."""
    try:
        return decode(line)
    except UnicodeDecodeError:
        return decode(line.decode("utf-8", "replace").encode())
