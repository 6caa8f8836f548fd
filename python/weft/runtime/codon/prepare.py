"""A codon attempt's first phases: ``preparing`` (rig setup, its checkpoint),
``starting`` (sentinels, the prompt) and the agent's spawn (``initializing``),
behind its provider's circuit breaker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

from weft.agents.harness import (
    AgentStartError,
    StopReason,
    session_log_name,
)
from weft.config.prompt import (
    assemble_prompt,
    prompt_reads_files,
)
from weft.errors import ConfigError, StorageFullError, UnsafePathError
from weft.events.stream import (
    InfoEvent,
    RigSetupCompletedEvent,
)
from weft.events.transitions import (
    TransitionMetadata,
)
from weft.runtime.codon.attempt import (
    Attempt,
    CodonResult,
)
from weft.runtime.codon.finish import Finishing
from weft.runtime.codon.sessions import (
    with_messages,
)
from weft.runtime.rig.setup import run_rig
from weft.runtime.run.survivors import MARK_VAR, started_event
from weft.terminal import plural


class Preparing(Finishing):
    """Rig setup, the prompt and the spawn (see the module docstring)."""

    async def _preparing(self, a: Attempt) -> CodonResult | None:
        """``preparing``: the rig setup and its checkpoint, then ``starting``."""
        req, planned = a.request, a.request.planned
        rig_sha: str | None = None
        if planned.codon.rig_setup and req.skip_rig:
            self.emit(
                InfoEvent(message=f"Rig setup of {planned.codon_id} skipped (skipPreCommands)"),
                req.run_id,
                planned.codon_id,
            )
        elif planned.codon.rig_setup:
            failed = await self._rig(a)
            if failed is not None:
                return failed
            rig_sha = await self._checkpoint(a, "rig-setup")
            if rig_sha is None:
                return await self._fail(
                    a,
                    "checkpoint",
                    False,
                    f"Rig-setup checkpoint failed for codon {planned.codon_id}",
                )
        if a.interrupt is not None:
            return await self._interrupted(a)
        meta = TransitionMetadata(checkpoint_sha=rig_sha) if rig_sha else None
        a.starting_seq = self._move(a, "starting", meta)
        return None

    async def _starting(self, a: Attempt) -> CodonResult | None:
        """``starting``: the sentinels and the prompt."""
        req, planned = a.request, a.request.planned
        codon = planned.codon
        refused = await self.sentinels.load(planned, req.run_id, since=a.starting_seq)
        if refused is not None:
            return await self._fail(a, "sentinel_load_failure", False, refused)
        try:
            if prompt_reads_files(codon, self.hank.hank):
                a.prompt = await asyncio.to_thread(
                    assemble_prompt,
                    codon,
                    self.hank.directory,
                    self._variables,
                    hank=self.hank.hank,
                )
            else:  # text only: a thread hop would cost more than the work
                a.prompt = assemble_prompt(
                    codon, self.hank.directory, self._variables, hank=self.hank.hank
                )
        except ConfigError as exc:
            return await self._fail(a, "config", False, str(exc))
        if self._inbox:  # queued messages join the next codon's prompt
            text = with_messages(a.prompt.text, self._take_messages())
            a.prompt = dataclasses.replace(a.prompt, text=text)
        if codon.continuation_mode == "continue-previous" and req.previous_session_id is None:
            return await self._fail(
                a,
                "no_session",
                False,
                f"Codon {planned.codon_id} continues the previous codon's session, but no "
                "completed previous codon with a session was found.",
            )
        if a.interrupt is not None:
            return await self._interrupted(a)
        return None

    async def _spawning(self, a: Attempt) -> CodonResult | None:
        """The agent process starts: ``initializing``."""
        req, planned = a.request, a.request.planned
        assert a.prompt is not None
        try:
            harness, model = self._harness_for(planned.codon.model)
        except ValueError as exc:
            return await self._fail(a, "agent_start", False, str(exc))
        if not await self._provider_gate(a, harness.name):
            return await self._interrupted(a)
        # Nothing is spent on this codon before the codon before it ended
        # durably: its end precedes this codon's move to starting, long
        # committed by now on a sound disk (a crash then never runs a finished
        # codon again). Usually already dispatched: no wait at all.
        await self.manager.wait_dispatched(a.starting_seq)
        try:
            spec = self._spec(a, a.prompt, model, harness)
            a.session = await harness.start(spec)
            a.resumed_from = spec.resume_session_id
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        a.model, a.harness = model, harness.name
        self.emit(
            started_event(
                a.session.pid,
                role="agent",
                argv=[harness.name, model],
                mark=spec.env[MARK_VAR],
                codon_id=planned.codon_id,
            ),
            req.run_id,
            planned.codon_id,
        )
        self._move(
            a,
            "initializing",
            TransitionMetadata(
                claude_pid=a.session.pid,
                claude_log_path=session_log_name(req.run_id, planned.codon_id, harness.name),
                previous_session_id=a.resumed_from,
            ),
        )
        if a.interrupt is not None:
            # Asked to stop while spawning: the stop above found no session yet.
            await a.session.stop(StopReason.OPERATOR)
        return None

    async def _rig(self, a: Attempt) -> CodonResult | None:
        req = a.request
        codon_id = req.planned.codon_id
        emit = functools.partial(self.manager.emit, run_id=req.run_id, codon_id=codon_id)
        self.emit(
            InfoEvent(
                message=f"Rig setup of {codon_id}: "
                + plural(len(req.planned.codon.rig_setup), "operation")
            ),
            req.run_id,
            codon_id,
        )
        a.rig = asyncio.ensure_future(
            run_rig(
                req.planned.codon.rig_setup,
                hank_dir=self.hank.directory,
                workspace=self.layout.workspace,
                emit=emit,
                ignore_failures=self.ignore_rig_failures,
                env=self._command_env(req.planned.codon.env),
                codon_id=codon_id,
            )
        )
        try:
            result = await a.rig
        except StorageFullError as exc:
            a.storage = str(exc)
            return await self._fail(a, "storage", False, a.storage)
        except asyncio.CancelledError:
            if a.interrupt is None:
                raise  # cancelled from outside, not by interrupt()
            return await self._interrupted(a)
        finally:
            a.rig = None
        if not result.ok:
            reason = result.reason or "Rig setup failed"
            return await self._fail(a, "rig_setup", True, reason)
        self.emit(
            RigSetupCompletedEvent(
                codon_id=codon_id,
                operation_count=len(result.operations),
                duration_ms=int(result.duration * 1000),
            ),
            req.run_id,
            codon_id,
        )
        return None


__all__ = ["Preparing"]
