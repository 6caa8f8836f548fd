"""Parts every CLI adapter needs, in one place so no adapter imports another.

Session-id aliasing, the prompt for CLIs without a system-prompt flag, the
warning for limits a CLI cannot enforce, the child's environment, and the
:class:`~weft.agents.events.SessionExited` every parser ends with.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from weft.agents.events import CostSource, ErrorClass, SessionExited, Tokens
from weft.agents.harness import ProcessEnd, SessionSpec
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


__all__ = [
    "child_env",
    "exit_how",
    "session_exited",
    "session_ids",
    "warn_unsupported",
    "with_system_prompt",
]
