"""What every phase of a codon attempt shares: the runner's settings and
plumbing (events, moves, the agent's process spec, the provider breakers).

:class:`RunnerBase` holds them; the phases build on it:
:mod:`~weft.runtime.codon.finish` (how an attempt ends), then
:mod:`~weft.runtime.codon.prepare` (rig setup, prompt, spawn) and
:mod:`~weft.runtime.codon.session` (the agent's session under the supervisor,
extensions), joined by :class:`~weft.runtime.codon.runner.CodonRunner`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from weft.agents.harness import (
    Harness,
    SessionSpec,
    Timeouts,
    session_log_name,
)
from weft.budget.watchdog import Watchdog
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.config.loader import LoadedHank
from weft.config.prompt import (
    AssembledPrompt,
    template_variables,
)
from weft.config.runtime import RuntimeSessionSettings, RuntimeUsageWindowSettings
from weft.events.stream import (
    CodonParkedEvent,
    StreamData,
)
from weft.events.transitions import (
    CodonStatus,
    TransitionMetadata,
)
from weft.paths import inside
from weft.runtime.codon.agent_events import AgentEvents
from weft.runtime.codon.attempt import (
    Attempt,
    NoSentinels,
    SentinelHost,
    move,
)
from weft.runtime.codon.breakers import ProviderBreakers, provider_of
from weft.runtime.codon.sessions import (
    Sleep,
    cool_down,
)
from weft.runtime.execution.prepare import ExecutionLayout
from weft.runtime.run.survivors import MARK_VAR, new_mark
from weft.state import StateManager
from weft.windows.park import Park, decide
from weft.windows.registry import WindowRegistry

log = logging.getLogger(__name__)


def wall_ms() -> int:
    """Wall-clock epoch milliseconds: a usage window's reset is a wall-clock time."""
    return time.time_ns() // 1_000_000


_FAKE_HOMES = {"CLAUDE_CONFIG_DIR": "claude", "CODEX_HOME": "codex", "GEMINI_CLI_HOME": "gemini"}

DEFAULT_IDLE_TIMEOUT = 180.0
"""Seconds without agent output before the session is ended (reference default)."""


@functools.cache
def auto_compact_args(harness: str, auto_compact: bool) -> tuple[str, ...]:
    """Claude Code's auto-compaction, switched as the codon's ``autoCompact``
    says (off by default, as in the reference): compaction would otherwise
    silently shrink the context that ``contextExceeded`` loops and
    ``exhaustWithPrompt`` codons wait to fill. Other CLIs have no such switch
    (``weft validate`` warns when ``autoCompact`` is set for them)."""
    if harness != "claude":
        return ()
    return ("--settings", json.dumps({"autoCompactEnabled": auto_compact}))


AgentEnv = Callable[[str, str, str], Mapping[str, str]]
"""``(run id, codon id, attempt start time) -> variables`` for that attempt's agent."""


class RunnerBase:
    """The runner's settings and plumbing, shared by every phase."""

    def __init__(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        hank: LoadedHank,
        layout: ExecutionLayout,
        *,
        harness_for: Callable[[str], tuple[Harness, str]],
        sentinels: SentinelHost | None = None,
        ignore_rig_failures: bool = False,
        idle_timeout: float | None = None,
        first_output_timeout: float | None = 60.0,
        stop_grace: float = 5.0,
        env: Mapping[str, str] | None = None,
        output_dir: Path | None = None,
        overwrite_output: bool = False,
        anthropic_base_url: str | None = None,
        budget: Watchdog | None = None,
        sessions: RuntimeSessionSettings | None = None,
        usage_window: RuntimeUsageWindowSettings | None = None,
        skip: frozenset[str] = frozenset(),
        sleep: Sleep | None = None,
        breakers: ProviderBreakers | None = None,
        agent_env: AgentEnv | None = None,
    ) -> None:
        self.manager = manager
        self.checkpoints = checkpoints
        self.hank = hank
        self.layout = layout
        # Built once: a codon's spawn reads them (pathlib joins cost microseconds each).
        self._weft_dir = layout.weft_dir
        self._workspace = layout.workspace
        self._harness_for = harness_for
        self.sentinels = sentinels or NoSentinels(self.emit)
        self.ignore_rig_failures = ignore_rig_failures
        self.idle_timeout = idle_timeout
        self.first_output_timeout = first_output_timeout
        self.stop_grace = stop_grace
        self.env = env
        self.anthropic_base_url = anthropic_base_url
        """``anthropicBaseUrl``: Claude Code's ``ANTHROPIC_BASE_URL``, unless the
        codon's ``env`` sets one."""
        self.output_dir = output_dir
        """Where ``outputFiles`` are copied (``-o``); None: they are not."""
        self.overwrite_output = overwrite_output
        self.agent_env = agent_env
        """Extra variables for each attempt's agent (the trace context, when
        traces are exported: :meth:`weft.telemetry.sink.TraceSink.agent_env`)."""
        self._current: Attempt | None = None
        self._variables = template_variables(layout.workspace)
        self.tips: dict[str, str] = {}
        """The newest checkpoint of each branch this runner committed to."""
        self.budget = budget
        """Counts each attempt's spending and stops it when a budget is crossed."""
        self._events = AgentEvents(manager, budget)
        self.sessions = sessions or RuntimeSessionSettings()
        """The session supervisor's thresholds and schedule (``session.*``)."""
        self.usage_window = usage_window or RuntimeUsageWindowSettings()
        """How long a codon may park for a closed usage window (``usageWindow.*``)."""
        self.skip = skip
        """Codons skipped without running (``weft run --skip``)."""
        self.windows = WindowRegistry.default()
        """The user's closed usage windows, shared with every Weft process."""
        self._wall_ms: Callable[[], int] = wall_ms
        self._sleep: Sleep = sleep or asyncio.sleep
        self._inbox: list[str] = []
        """User messages not yet in a prompt (``codon.message``)."""
        self.breakers = breakers or ProviderBreakers()
        """The agent providers' circuit breakers, shared across codons (and
        with other executions when the caller shares them)."""
        self._gated: str | None = None
        """The provider the running session was let through to (to report its end)."""

    def emit(self, event: StreamData, run_id: str | None, codon_id: str | None) -> None:
        """Queues a stream event in the one order of the execution."""
        self.manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _move(self, a: Attempt, to: CodonStatus, meta: TransitionMetadata | None = None) -> int:
        if to in ("completed", "failed", "skipped"):
            # The core takes no sentinel state once the codon is terminal.
            self.sentinels.seal(a.request.planned, a.request.run_id)
        return move(self.manager, a, to, meta)

    def _take_messages(self) -> list[str]:
        taken, self._inbox = self._inbox, []
        return taken

    def _command_env(self, codon_env: Mapping[str, str]) -> dict[str, str]:
        """The environment of the codon's rig and ``beforeCopy`` commands: Weft's
        own (or the runtime's) with the codon's ``env`` applied last, as for its agent."""
        return {**(os.environ if self.env is None else self.env), **codon_env}

    def _spec(
        self, a: Attempt, prompt: AssembledPrompt, model: str, harness: Harness
    ) -> SessionSpec:
        req = a.request
        codon = req.planned.codon
        idle = codon.shim_idle_timeout or self.idle_timeout or DEFAULT_IDLE_TIMEOUT
        env = dict(codon.env)
        if self.anthropic_base_url and harness.name == "claude":
            # The setting is explicit configuration, so it wins over an inherited
            # variable; the codon's own env is more specific still.
            env.setdefault("ANTHROPIC_BASE_URL", self.anthropic_base_url)
        # Marks every process of the agent's group, so that a later run can
        # tell them from anyone else's if this one dies (weft.runtime.run.survivors).
        env[MARK_VAR] = new_mark()
        if self.agent_env is not None:  # the codon's own env wins, as for ANTHROPIC_BASE_URL
            for name, value in self.agent_env(
                req.run_id, req.planned.codon_id, a.start_time
            ).items():
                env.setdefault(name, value)
        if getattr(harness, "fake", False):
            # The fake agents keep transcripts where the real CLIs do (~/.claude...):
            # give them the execution's own folder unless the user chose one.
            home = self._weft_dir / "fake-agents"
            for name, folder in _FAKE_HOMES.items():
                if name not in env and name not in (self.env or os.environ):
                    env[name] = str(home / folder)
        return SessionSpec(
            prompt=prompt.text,
            model=model,
            cwd=self._workspace,
            resume_session_id=(
                req.previous_session_id if codon.continuation_mode == "continue-previous" else None
            ),
            append_system_prompt=prompt.system_prompt_append,
            env=env,
            extra_args=auto_compact_args(harness.name, codon.auto_compact),
            log_path=inside(
                self._weft_dir,
                session_log_name(req.run_id, req.planned.codon_id, harness.name),
                what=f'the agent log of codon "{req.planned.codon_id}"',
            ),
            timeouts=Timeouts(
                first_output=self.first_output_timeout,
                idle=float(idle),
                stop_grace=self.stop_grace,
                flush_grace=self.stop_grace,
            ),
        )

    async def _provider_gate(self, a: Attempt, harness: str) -> bool:
        """Waits while the provider's usage window is known closed (parked,
        journaled) and while its breaker is open (journaled); False when an
        interrupt ended the wait. The session that follows is reported with
        :meth:`_provider_ended`."""
        provider, codon_id = provider_of(harness), a.request.planned.codon_id
        run_id = a.request.run_id
        now = self._wall_ms()
        closed = self.windows.closed(provider, now)
        if closed is not None:
            wait = decide(
                closed.resets_at_ms,
                now,
                margin_ms=self.usage_window.margin_ms,
                max_wait_ms=self.usage_window.max_wait_ms,
            )
            # Too far off: the session goes, and its refusal fails the codon
            # with the provider's own words.
            if isinstance(wait, Park) and not await self._park(
                a,
                provider,
                resets_at_ms=closed.resets_at_ms,
                wait=wait,
                window=closed.window,
                session=0,
                message=f"the {provider} usage window was seen closed by {closed.source}",
                record=False,
            ):
                return False
        ok = await self.breakers.gate(
            provider,
            codon_id,
            lambda event, codon: self.emit(event, run_id, codon),
            self._sleep,
            a.woken,
        )
        self._gated = provider if ok else None
        return ok

    async def _park(
        self,
        a: Attempt,
        provider: str,
        *,
        resets_at_ms: int,
        wait: Park,
        window: str | None,
        session: int,
        message: str | None,
        record: bool = True,
    ) -> bool:
        """Parks the codon until its provider's usage window opens: recorded
        for every Weft process (``record``), journaled (``codon.parked``), then
        waited; False when an interrupt ended the wait."""
        req = a.request
        codon_id = req.planned.codon_id
        if record:
            try:
                await asyncio.to_thread(
                    self.windows.close,
                    provider,
                    resets_at_ms,
                    window=window,
                    source=f"{self.layout.execution_id}/{codon_id}",
                    now_ms=self._wall_ms(),
                )
            except OSError as e:  # others learn it themselves; this codon still waits
                log.warning("could not record the closed %s window: %s", provider, e)
        self.emit(
            CodonParkedEvent(
                codon_id=codon_id,
                provider=provider,
                resets_at=resets_at_ms,
                resume_at=wait.resume_at_ms,
                session=session,
                window=window,
                message=message,
            ),
            req.run_id,
            codon_id,
        )
        return await cool_down(wait.wait_ms / 1000, self._sleep, a.woken)

    def _provider_ended(self, a: Attempt) -> None:
        """Tells the provider's breaker how the session let through ended."""
        provider, self._gated = self._gated, None
        if provider is None:
            return
        run_id = a.request.run_id
        self.breakers.record(
            provider,
            a.exit,
            a.request.planned.codon_id,
            lambda event, codon: self.emit(event, run_id, codon),
        )


__all__ = ["DEFAULT_IDLE_TIMEOUT", "RunnerBase", "auto_compact_args"]
