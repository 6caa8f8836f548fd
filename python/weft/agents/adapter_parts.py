"""Parts every CLI adapter needs, in one place so no adapter imports another.

Session-id aliasing, the prompt for CLIs without a system-prompt flag, the
warning for limits a CLI cannot enforce, the child's environment, the
:class:`~weft.agents.events.SessionExited` every parser ends with, and
:class:`JsonLineParser`, the line handling the Codex and Gemini parsers share.
"""

from __future__ import annotations

import abc
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from weft.agents.events import AgentEvent, CostSource, ErrorClass, SessionExited, Tokens
from weft.agents.harness import ProcessEnd, SessionSpec, decode_lossy
from weft.agents.pricing import Pricer
from weft.agents.process import FAKE_AGENT_PREFIX, EnvPolicy, build_env


def session_ids(requested: str | None, reported: list[str]) -> tuple[str | None, list[str]]:
    """The canonical session id and the alias chain (the requested id, then
    every distinct id the CLI reported). The last reported id is canonical:
    it is the one the CLI itself announced for this conversation."""
    chain: list[str] = []
    for sid in ([requested] if requested else []) + reported:
        if sid not in chain:
            chain.append(sid)
    return (reported[-1] if reported else requested), chain


def with_system_prompt(spec: SessionSpec) -> str:
    """The prompt, after ``append_system_prompt`` when there is one: Codex and
    Gemini have no flag that adds to their system prompt, so the text goes
    first, as instructions the user prompt follows."""
    if not spec.append_system_prompt:
        return spec.prompt
    return f"{spec.append_system_prompt}\n\n{spec.prompt}"


def warn_unsupported(name: str, spec: SessionSpec) -> None:
    """Log the limits a CLI cannot enforce itself (Weft's own budgets still
    apply), under the logger of the adapter ``name`` (``weft.agents.codex``)."""
    log = logging.getLogger(f"weft.agents.{name}")
    if spec.max_turns is not None:
        log.warning("%s has no turn limit flag; max_turns=%s is not enforced", name, spec.max_turns)
    if spec.max_budget_usd is not None:
        log.warning(
            "%s has no spending cap flag; max_budget_usd=%s is not enforced by the CLI",
            name,
            spec.max_budget_usd,
        )


def child_env(
    policy: EnvPolicy,
    spec: SessionSpec,
    parent: Mapping[str, str] | None,
    *,
    fake: bool,
) -> dict[str, str]:
    """The child's environment under ``policy`` (see
    :func:`weft.agents.process.build_env`), plus the fake agent's knobs when
    the fake runs. ``parent`` defaults to this process's environment."""
    source = os.environ if parent is None else parent
    if fake:
        policy = EnvPolicy(
            names=policy.names,
            prefixes=(*policy.prefixes, FAKE_AGENT_PREFIX),
            remove=policy.remove,
        )
    return build_env(policy, spec.env, source)


def exit_how(end: ProcessEnd) -> str:
    """How the process ended, for messages: ``exit code 2`` or ``signal 9``."""
    if end.exit_code is not None:
        return f"exit code {end.exit_code}"
    return f"signal {end.signal}"


def crash_verdict(
    end: ProcessEnd, *, started: bool, suffix: str, before: str, mid: str
) -> tuple[ErrorClass, bool, str]:
    """The verdict of a process that died without a result or a named cause:
    before its session started or mid-run. Both are retriable: seed 002 cools
    down on an error while spawning as on one while running, and its
    consecutive-error threshold (5 by default) ends a CLI that dies at every
    start. The causes that never go away by waiting (bad flags, no login, an
    unknown session) are named from the CLI's own words before this is asked.
    ``before`` and ``mid`` open the message, the exit and ``suffix``
    (``": <the stderr line>"``) close it."""
    how = exit_how(end)
    if not started:
        return ErrorClass.CRASH_BEFORE_INIT, True, f"{before} ({how}){suffix}"
    return ErrorClass.CRASH_MID_RUN, True, f"{mid} ({how}){suffix}"


def session_exited(
    end: ProcessEnd,
    *,
    error_class: ErrorClass | None,
    retriable: bool,
    message: str | None,
    retry_after_ms: int | None,
    result_seen: bool,
    session: tuple[str | None, list[str]],
    cost: tuple[float | None, CostSource],
    tokens: Tokens,
    malformed_lines: int,
    unknown_types: int,
    context_exceeded: bool | None = None,
) -> SessionExited:
    """The last event of a session: success when ``error_class`` is ``None``.
    ``session`` is the canonical id and its aliases (:func:`session_ids`);
    ``context_exceeded`` defaults to whether the class says so."""
    if context_exceeded is None:
        context_exceeded = error_class is ErrorClass.CONTEXT_EXCEEDED
    return SessionExited(
        ok=error_class is None,
        exit_code=end.exit_code,
        signal=end.signal,
        error_class=error_class,
        retriable=retriable,
        message=message,
        retry_after_ms=retry_after_ms,
        result_seen=result_seen,
        session_id=session[0],
        session_aliases=session[1],
        cost_usd=cost[0],
        cost_source=cost[1],
        tokens=tokens,
        malformed_lines=malformed_lines,
        unknown_types=unknown_types,
        context_exceeded=context_exceeded,
        stderr_tail=end.stderr_tail,
    )


_E = TypeVar("_E")
_MALFORMED_LOG_CHARS = 200


class JsonLineParser(abc.ABC, Generic[_E]):
    """The line handling of a parser whose CLI prints one JSON event a line
    (Codex, Gemini): non-JSON lines are skipped, each JSON line is decoded
    into the adapter's tagged union ``_E`` and handed to :meth:`_dispatch`; a
    line that does not decode is counted as an unknown type or as malformed
    (and logged), never fatal. It also keeps the session ids the CLI reports.

    Subclasses set :attr:`harness` and implement :meth:`_dispatch` and
    ``finish``.
    """

    harness: ClassVar[str]
    """The adapter's name, for logs (``codex``)."""
    session_noun: ClassVar[str] = "session"
    """What the CLI calls a session, for logs (Codex: ``thread``)."""

    def __init__(
        self,
        *,
        model: str,
        cwd: str | None,
        resume_session_id: str | None,
        pricer: Pricer,
        decode: Callable[[bytes], _E],
        envelope_type: Callable[[bytes], Any],
        known_types: frozenset[str],
        ignored_types: frozenset[str] = frozenset(),
    ) -> None:
        self._model = model
        """The model Weft asked for (it prices usage the CLI does not price)."""
        self._cwd = cwd
        self._pricer = pricer
        self._decode = decode
        self._envelope_type = envelope_type
        """The ``type`` of a line the union refused (``DecodeError`` if none)."""
        self._known_types = known_types
        self._ignored_types = ignored_types
        self._requested = resume_session_id
        self._reported_ids: list[str] = []
        self._log = logging.getLogger(f"weft.agents.{self.harness}")
        self.malformed_lines = 0
        self.unknown_types = 0

    @property
    def session_id(self) -> str | None:
        """The latest session (thread) id the CLI reported, if any."""
        return self._reported_ids[-1] if self._reported_ids else None

    def session_ids(self) -> tuple[str | None, list[str]]:
        """The canonical session id and its aliases (:func:`session_ids`)."""
        return session_ids(self._requested, self._reported_ids)

    def _new_session(self, session_id: str) -> bool:
        """Record a session id the CLI reported; ``False`` if already known.
        A resumed session that reports another id is logged: the alias chain
        keeps both."""
        if session_id in self._reported_ids:
            return False
        if self._requested and session_id != self._requested:
            self._log.warning(
                "%s resumed %s %s but reported %s %s",
                self.harness,
                self.session_noun,
                self._requested,
                self.session_noun,
                session_id,
            )
        self._reported_ids.append(session_id)
        return True

    def feed(self, line: bytes) -> list[AgentEvent]:
        """Parse one stdout line (plain-text lines, such as Gemini's YOLO
        banner, are skipped)."""
        stripped = line.strip()
        if not stripped.startswith(b"{"):
            return []
        try:
            event = decode_lossy(self._decode, stripped)
        except msgspec.DecodeError:
            self._unparsed(stripped)
            return []
        return self._dispatch(event)

    def stderr(self, line: str) -> list[AgentEvent]:
        """Nothing to add: the process layer passes each line on and keeps
        the tail, which ``finish`` reads (both CLIs print some fatal errors
        only there)."""
        return []

    @abc.abstractmethod
    def _dispatch(self, event: _E) -> list[AgentEvent]:
        """The normalised events of one decoded line (each CLI's own)."""

    def _unparsed(self, line: bytes) -> None:
        try:
            kind = decode_lossy(self._envelope_type, line)
        except msgspec.DecodeError:
            kind = None
        if kind is not None and kind not in self._known_types:
            self.unknown_types += 1
            self._log.debug("%s: unknown event type %r ignored", self.harness, kind)
            return
        if kind is not None and kind in self._ignored_types:
            return
        self.malformed_lines += 1
        self._log.warning(
            "%s: malformed stream line ignored: %s",
            self.harness,
            line[:_MALFORMED_LOG_CHARS].decode(errors="replace"),
        )


__all__ = [
    "JsonLineParser",
    "child_env",
    "crash_verdict",
    "exit_how",
    "session_exited",
    "session_ids",
    "warn_unsupported",
    "with_system_prompt",
]
