"""The codon runner: one attempt of one codon, through the eight states.

``preparing`` (rig setup, rig-setup checkpoint) -> ``starting`` (sentinels,
prompt, spawn) -> ``initializing`` (the agent process runs, no session yet)
-> ``running`` (the agent reported its session; its events stream) ->
``completing-sentinels`` -> ``completed``; or ``failed`` / ``skipped`` from
any of them. Every move is a transition with the metadata its target
requires (seed 000), and the checkpoint is taken *before* the terminal
transition, because ``completed`` carries its SHA.

The runner submits transitions fire-and-forget: the StateManager keeps them
in order and the runtime watches for rejections (a rejection here is a
bug, and stops the run). It only waits where a decision depends on the
state: never on the hot path of agent events.

Two things happen between ``running`` and the end. An ``exhaustWithPrompt``
codon whose session succeeded without filling its context is resumed, same
session, with the exhaust prompt (``codon.extended``, ``ExtensionCountUpdated``)
up to ``maxExtensions`` times; a full context then completes it (reference
§6.7). Each extension session is supervised as the first one is (cool-downs,
usage windows, urgent messages). In ``completing-sentinels`` the codon's
``outputFiles`` are copied when the run has an output directory
(:mod:`weft.runtime.codon.outputs`), before the completion checkpoint so that
what ``beforeCopy`` changed is in it. The
codon's ``env`` reaches its rig and ``beforeCopy`` commands as it reaches the
agent. Archives (``archiveOnSuccess``) are the run loop's, after the codon ends.

The attempt's records live in :mod:`weft.runtime.codon.attempt`; its agent events
are turned into transitions and stream events by :mod:`weft.runtime.codon.agent_events`.

:class:`CodonRunner` is the attempt's order and its interrupts; its phases are
their own modules, each on :class:`~weft.runtime.codon.base.RunnerBase` (the
settings and plumbing): :mod:`~weft.runtime.codon.prepare` (``preparing``,
``starting``, the spawn), :mod:`~weft.runtime.codon.session` (the session under
the supervisor, extensions) and :mod:`~weft.runtime.codon.finish` (every end).
"""

from __future__ import annotations

import asyncio
import contextlib

from weft.agents.harness import (
    StopReason,
)
from weft.budget.ledger import Slot, Verdict
from weft.events.stream import (
    ProcessEndedEvent,
    SessionMessageEvent,
)
from weft.events.transitions import (
    CodonStarted,
)
from weft.runtime.codon.attempt import (
    Attempt,
    CodonRequest,
    CodonResult,
    Interrupt,
)
from weft.runtime.codon.base import DEFAULT_IDLE_TIMEOUT
from weft.runtime.codon.finish import budget_of
from weft.runtime.codon.prepare import Preparing
from weft.runtime.codon.session import Supervising

_STOP_REASONS = {Interrupt.SHUTDOWN: StopReason.SHUTDOWN}
"""Why the agent is stopped, as its session records it (the rest, a budget
included, are stops Weft asked for on purpose: ``operator``)."""


class CodonRunner(Preparing, Supervising):
    """Runs codon attempts for one execution. One attempt at a time."""

    @property
    def current_codon(self) -> str | None:
        """The codon being run, if any."""
        return None if self._current is None else self._current.request.planned.codon_id

    async def interrupt(self, why: Interrupt) -> bool:
        """Cuts the current attempt short (skip, force stop, shutdown).

        Returns False when no codon is running. The agent gets the graceful
        stop sequence; the attempt then ends as ``why`` says.
        """
        a = self._current
        if a is None:
            return False
        if a.interrupt is None:
            a.interrupt = why
        a.woken.set()  # ends a cool-down between sessions
        if a.rig is not None:
            a.rig.cancel()  # run_rig kills a running command's process group
        if a.session is not None:
            await a.session.stop(_STOP_REASONS.get(why, StopReason.OPERATOR))
        return True

    async def message(self, text: str, *, urgent: bool) -> bool:
        """A user's message for the agent. Queued, it joins the next prompt
        built (the next resume of this codon's session, or the next codon's
        prompt). Urgent, it also stops the running session gracefully, which
        is then resumed with it. Returns False (nothing done) for an urgent
        message when no agent session is running."""
        a = self._current
        live = a is not None and a.session is not None and a.exit is None and a.interrupt is None
        if urgent and not live:
            return False
        self._inbox.append(text)
        codon_id = None if a is None else a.request.planned.codon_id
        run_id = None if a is None else a.request.run_id
        self.emit(
            SessionMessageEvent(message=text, urgent=urgent, codon_id=codon_id), run_id, codon_id
        )
        if urgent and a is not None and a.session is not None:
            a.urgent = True
            await a.session.stop(StopReason.INTERRUPT)
        return True

    async def kill(self) -> None:
        """Kills the current agent at once (a second Ctrl-C)."""
        a = self._current
        if a is not None and a.session is not None:
            await a.session.kill()

    async def run(self, request: CodonRequest) -> CodonResult:
        """Runs one attempt of ``request`` to a terminal state."""
        a = Attempt(request)
        self._current = a
        out_of_budget = self.budget is not None and self.budget.begin(
            Slot.of(request.planned), request.run_id, self._over_budget
        )
        if request.planned.codon_id in self.skip:
            a.interrupt = Interrupt.SKIP  # weft run --skip: recorded as skipped, nothing runs
        elif out_of_budget:
            a.interrupt = Interrupt.BUDGET  # nothing left: it ends before the agent starts
        try:
            result = await self._run(a)
            if self.budget is not None:
                await self.budget.end(result.status)
            return result
        except BaseException:
            # Left by an exception (the journal failed, a full disk): the
            # agent must not outlive the attempt that was recording it.
            if a.session is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(a.session.kill(), self.stop_grace)
            raise
        finally:
            self._current = None

    async def _over_budget(self, verdict: Verdict) -> None:
        """The watchdog's stop: the attempt ends as the budget's ``onExceeded`` says."""
        await self.interrupt(Interrupt.BUDGET)

    async def _run(self, a: Attempt) -> CodonResult:
        """The attempt step by step: each step moves it on (None) or ends it."""
        self._record_start(a)
        if a.interrupt is not None:
            return await self._interrupted(a)
        for step in (self._preparing, self._starting, self._spawning):
            ended = await step(a)
            if ended is not None:
                return ended
        session = a.session
        assert session is not None
        await self._stream(a)
        self._provider_ended(a)
        # The session has exited and its group was SIGKILLed with it.
        self.emit(ProcessEndedEvent(pid=session.pid), a.request.run_id, a.request.planned.codon_id)
        ended = await self._supervise(a)
        if ended is not None:
            return ended
        while self._extends(a):
            ended = await self._extend(a)
            if ended is not None:
                return ended
            # An extension session is supervised as the first one was: a
            # transient failure cools down and resumes it, a closed usage
            # window parks it, an urgent message interrupts and resumes it.
            ended = await self._supervise(a)
            if ended is not None:
                return ended
        return await self._finish(a)

    def _record_start(self, a: Attempt) -> None:
        req, planned = a.request, a.request.planned
        # Not awaited: recovery never relies on this record being durable
        # before the rig or the agent acts (a restart treats the codon after
        # each run's last recorded codon as possibly started, see
        # rollback.possibly_started), so no codon pays a commit round trip here.
        self.manager.transition(
            CodonStarted(
                run_id=req.run_id,
                codon_id=planned.codon_id,
                start_time=a.start_time,
                loop_context=planned.loop_context,
            )
        )


__all__ = ["DEFAULT_IDLE_TIMEOUT", "CodonRunner", "budget_of"]
