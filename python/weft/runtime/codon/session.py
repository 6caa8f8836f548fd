"""A codon attempt's agent session under the seed-002 supervisor: its events
streamed, a transient failure cooled down and resumed (or given up), urgent
messages, and ``exhaustWithPrompt`` extensions of the same session.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import msgspec

from weft.agents.events import SessionExited
from weft.agents.harness import (
    AgentStartError,
    SessionSpec,
    StopReason,
)
from weft.errors import UnsafePathError
from weft.events.stream import (
    CodonExtendedEvent,
    ProcessEndedEvent,
    SessionCooldownEvent,
    SessionGaveUpEvent,
    SessionResumedEvent,
)
from weft.events.transitions import (
    ExtensionCountUpdated,
)
from weft.runtime.codon.attempt import (
    Attempt,
    CodonResult,
)
from weft.runtime.codon.breakers import provider_of
from weft.runtime.codon.finish import Finishing
from weft.runtime.codon.sessions import (
    RETRY_PROMPT,
    WINDOW_PROMPT,
    GaveUp,
    Parking,
    SessionRetries,
    WindowTooFar,
    cool_down,
    with_messages,
)
from weft.runtime.run.survivors import MARK_VAR, started_event


class Supervising(Finishing):
    """The agent's session under the supervisor (see the module docstring)."""

    async def _stream(self, a: Attempt) -> None:
        """Feeds the session's agent events to the handlers until it exits."""
        session = a.session
        assert session is not None
        async for event in session.events():
            if isinstance(event, SessionExited):
                a.exit = event
                break
            self._events.on_event(a, event)
        if a.exit is None:
            a.exit = await session.wait()

    async def _supervise(self, a: Attempt) -> CodonResult | None:
        """Resumes the session after transient failures, as the seed 002
        machine decides (:mod:`weft.runtime.codon.sessions`); None when the sessions
        are over and the attempt finishes as the last one ended."""
        req, codon_id = a.request, a.request.planned.codon_id
        assert a.prompt is not None
        retries = SessionRetries(self.sessions, self.usage_window)
        retries.spawning(a.prompt.text)
        while a.exit is not None and a.interrupt is None:
            if a.urgent:
                # Seed 002: UrgentMessage -> Interrupting -> BuildingPrompt; the
                # same session goes on with the message as its prompt.
                a.urgent = False
                retries.interrupted(started=a.session_reported)
                messages = self._take_messages()
                prompt = (
                    "\n\n".join(messages)
                    if a.session_id
                    else with_messages(a.prompt.text, messages)
                )
                ended = await self._resume(a, retries, prompt, "urgent")
                if ended is not None:
                    return ended
                continue
            decision = retries.exited(a.exit, started=a.session_reported, now_ms=self._wall_ms())
            if decision is None:
                return None
            if isinstance(decision, WindowTooFar):
                a.exit = msgspec.structs.replace(a.exit, message=decision.message)
                return None
            if isinstance(decision, Parking):
                if not await self._park(
                    a,
                    provider_of(a.harness),
                    resets_at_ms=decision.resets_at_ms,
                    wait=decision.wait,
                    window=decision.window,
                    session=retries.sessions,
                    message=decision.message,
                ):
                    return None  # interrupted: the attempt ends as the interrupt says
                retries.window_opened()
                prompt = WINDOW_PROMPT if a.session_id else a.prompt.text
                prompt = with_messages(prompt, self._take_messages())
                ended = await self._resume(a, retries, prompt, "window")
                if ended is not None:
                    return ended
                continue
            if isinstance(decision, GaveUp):
                self.emit(
                    SessionGaveUpEvent(
                        codon_id=codon_id,
                        sessions=retries.sessions,
                        consecutive_errors=decision.consecutive_errors,
                        total_errors=decision.total_errors,
                        max_consecutive_errors=self.sessions.max_consecutive_errors,
                        max_total_errors=self.sessions.max_total_errors,
                        message=decision.message,
                    ),
                    req.run_id,
                    codon_id,
                )
                return None
            self.emit(
                SessionCooldownEvent(
                    codon_id=codon_id,
                    session=retries.sessions,
                    duration_ms=decision.duration_ms,
                    backoff_ms=decision.backoff_ms,
                    retry_after_ms=decision.retry_after_ms,
                    error_class=decision.error_class,
                    message=decision.message,
                    consecutive_errors=decision.consecutive_errors,
                    total_errors=decision.total_errors,
                ),
                req.run_id,
                codon_id,
            )
            if not await cool_down(decision.duration_ms / 1000, self._sleep, a.woken):
                return None  # interrupted: the attempt ends as the interrupt says
            retries.elapsed()
            what = decision.message or decision.error_class
            prompt = RETRY_PROMPT.format(what=what) if a.session_id else a.prompt.text
            prompt = with_messages(prompt, self._take_messages())
            ended = await self._resume(a, retries, prompt, "retry")
            if ended is not None:
                return ended
        return None

    async def _resume(
        self,
        a: Attempt,
        retries: SessionRetries,
        prompt: str,
        reason: Literal["urgent", "retry", "window"],
    ) -> CodonResult | None:
        """The supervisor's next session of ``a`` with ``prompt``: counted,
        journaled as ``session.resumed`` (why: ``reason``), then started."""
        codon_id = a.request.planned.codon_id
        number = retries.spawning(prompt)
        self.emit(
            SessionResumedEvent(
                codon_id=codon_id,
                session=number,
                reason=reason,
                resume_session_id=a.session_id,
            ),
            a.request.run_id,
            codon_id,
        )
        return await self._respawn(a, prompt, a.session_id)

    async def _respawn(
        self, a: Attempt, prompt: str, resume_session_id: str | None
    ) -> CodonResult | None:
        """Starts the attempt's next session (resuming ``resume_session_id``,
        or as the first one did when None) and streams it. As for extensions,
        the earlier sessions' figures become the base the next one adds to."""
        planned = a.request.planned
        assert a.prompt is not None
        if a.harness is not None and not await self._provider_gate(a, a.harness):
            return None  # interrupted while waiting: the attempt ends as the last session did
        cost = await self._attempt_cost(a)
        a.cost_base, a.tokens_base = cost or 0.0, a.tokens
        a.result, a.exit, a.reported_cost = None, None, None
        a.session_reported = False
        try:
            harness, model = self._harness_for(planned.codon.model)
            spec = self._spec(a, a.prompt, model, harness)
            spec = dataclasses.replace(
                spec,
                prompt=prompt,
                resume_session_id=resume_session_id or spec.resume_session_id,
            )
            a.session = await harness.start(spec)
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        if a.resumed_from is None:
            a.resumed_from = spec.resume_session_id
        await self._follow(a, harness.name, model, spec)
        return None

    def _extends(self, a: Attempt) -> bool:
        """Whether the session is resumed once more with ``exhaustWithPrompt``
        (reference §6.7): a clean success that did not fill the context, not
        interrupted, below ``maxExtensions``."""
        codon, exit = a.request.planned.codon, a.exit
        if codon.exhaust_with_prompt is None or exit is None or a.interrupt is not None:
            return False
        if not exit.ok or exit.log_error is not None or exit.context_exceeded:
            return False
        if a.result is None or a.result.is_error or a.result.context_exceeded:
            return False
        return a.status == "running" and a.extensions < codon.max_extensions

    async def _extend(self, a: Attempt) -> CodonResult | None:
        """Resumes the same session with the exhaust prompt and streams it."""
        req, planned = a.request, a.request.planned
        codon = planned.codon
        assert a.prompt is not None
        assert a.session_id is not None
        if a.harness is not None and not await self._provider_gate(a, a.harness):
            return None  # interrupted while waiting: no more extensions
        a.extensions += 1
        cost = await self._attempt_cost(a)
        self.manager.transition(
            ExtensionCountUpdated(
                run_id=req.run_id, codon_id=planned.codon_id, extension_count=a.extensions
            )
        )
        self.emit(
            CodonExtendedEvent(
                codon_id=planned.codon_id,
                codon_name=codon.name,
                extension_number=a.extensions,
                exhaust_with_prompt=a.prompt.exhaust_prompt or codon.exhaust_with_prompt or "",
                cumulative_tokens=a.tokens.input + a.tokens.output,
                cumulative_cost=cost,
            ),
            req.run_id,
            planned.codon_id,
        )
        # The next session's result is its own process's: the codon's figures
        # are what came before plus it (agent_events adds the base).
        a.cost_base, a.tokens_base = cost or 0.0, a.tokens
        a.result, a.exit, a.reported_cost = None, None, None
        try:
            harness, model = self._harness_for(codon.model)
            spec = dataclasses.replace(
                self._spec(a, a.prompt, model, harness),
                prompt=a.prompt.exhaust_prompt or codon.exhaust_with_prompt or "",
                resume_session_id=a.session_id,
            )
            a.session = await harness.start(spec)
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        await self._follow(a, harness.name, model, spec)
        return None

    async def _follow(self, a: Attempt, harness: str, model: str, spec: SessionSpec) -> None:
        """A resumed or extended session that started: journals its process,
        streams it to its end and reports it to the provider's breaker."""
        assert a.session is not None
        req, codon_id = a.request, a.request.planned.codon_id
        self.emit(
            started_event(
                a.session.pid,
                role="agent",
                argv=[harness, model],
                mark=spec.env[MARK_VAR],
                codon_id=codon_id,
            ),
            req.run_id,
            codon_id,
        )
        if a.interrupt is not None:
            await a.session.stop(StopReason.OPERATOR)
        await self._stream(a)
        self._provider_ended(a)
        self.emit(ProcessEndedEvent(pid=a.session.pid), req.run_id, codon_id)


__all__ = ["Supervising"]
