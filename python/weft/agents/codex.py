"""The Codex adapter: ``codex exec --json`` (reference agent-cli-protocols §2).

:class:`CodexHarness` runs::

    codex exec --json --skip-git-repo-check -m <model> -C <cwd>
               --sandbox workspace-write [extra args] [resume <thread id>] -
    (the prompt on stdin)

Codex prints one JSON event per line: ``thread.started`` (the session id),
``turn.started``, ``item.started|updated|completed`` around each thread item
(agent message, reasoning, command, file change, MCP call...), then
``turn.completed`` (with usage) or ``turn.failed`` / ``error``.
:class:`CodexParser` maps them onto :mod:`weft.agents.events`. What differs
from Claude and drives the design:

* **No cost field.** Cost is computed from the pricing table; a model the
  table does not know is *unpriced*, never $0.
* **Usage is a thread total**, not a per-turn figure: a resumed thread reports
  totals that include earlier sessions (§2.3). The parser reports deltas
  against the thread's total when the session started, which the harness
  reads from the thread's rollout file under ``$CODEX_HOME/sessions/``
  (else from the totals this process saw, :class:`ThreadUsageLedger`).
  ``cached_input_tokens`` is a subset of ``input_tokens``: it moves to
  ``cache_read`` so the same price columns apply as for Claude.
* **The exit code is unreliable** both ways (§2.5): ``turn.completed`` is
  success whatever the exit code; ``turn.failed`` or ``error`` without a later
  ``turn.completed`` is failure; no terminal event at all is a crash.
  ``error`` events that announce a reconnect are retry notices, not failures.

Error texts are classified by :mod:`weft.agents.vendor_errors` (shared with
the Gemini adapter).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from weft.agents.adapter_parts import (
    JsonLineParser,
    child_env,
    crash_verdict,
    exit_how,
    session_exited,
    warn_unsupported,
    with_system_prompt,
)
from weft.agents.codex_usage import (
    ThreadTotal,
    ThreadUsageLedger,
    codex_home,
    rollout_thread_total,
)
from weft.agents.codex_wire import (
    IGNORED_TYPES,
    KNOWN_TYPES,
    AnyEvent,
    Item,
    ItemCompleted,
    ItemStarted,
    ItemUpdated,
    ThreadStarted,
    TurnCompleted,
    TurnFailed,
    Usage,
    decoder,
    line_type,
)
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    ErrorClass,
    ModelUsage,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import ProcessEnd, SessionSpec, stopped_verdict
from weft.agents.pricing import Pricer, default_pricer
from weft.agents.process import (
    EnvPolicy,
    SubprocessSession,
    spawn,
)
from weft.agents.vendor_errors import (
    classify_error_text,
    error_lines,
    last_line,
    retry_after_ms,
)

_log = logging.getLogger(__name__)


_TOOL_KINDS = frozenset(
    {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
)
_QUIET_KINDS = frozenset({"todo_list", "plan"})
_FAILED_STATUSES = frozenset({"failed", "declined", "error"})
_RECONNECTING = re.compile(r"reconnecting\.*\s*(\d+)\s*/\s*(\d+)", re.IGNORECASE)


def _tool_name(kind: str, item: Item) -> str:
    if kind == "mcp_tool_call":
        return f"mcp__{item.server or 'unknown'}__{item.tool or 'unknown'}"
    if kind == "collab_tool_call" and item.tool:
        return f"collab__{item.tool}"
    return kind


def _tool_input(kind: str, item: Item) -> dict[str, Any]:
    if kind == "command_execution":
        return {"command": item.command or ""}
    if kind == "file_change":
        return {"changes": item.changes if isinstance(item.changes, list) else []}
    if kind == "mcp_tool_call":
        if isinstance(item.arguments, dict):
            return item.arguments
        return {} if item.arguments is None else {"arguments": item.arguments}
    if kind == "web_search":
        return {"query": item.query or ""}
    return {"prompt": item.prompt} if item.prompt is not None else {}


def _error_message(error: Any) -> str | None:
    if isinstance(error, dict):
        message = error.get("message")
        return str(message) if message is not None else None
    if isinstance(error, str):
        return error
    return None


def _tool_result(kind: str, item: Item) -> tuple[str, bool]:
    failed = (item.status or "") in _FAILED_STATUSES
    if kind == "command_execution":
        nonzero = item.exit_code is not None and item.exit_code != 0
        return item.aggregated_output or "", failed or nonzero
    if kind == "file_change":
        lines = []
        for change in item.changes if isinstance(item.changes, list) else []:
            if isinstance(change, dict):
                lines.append(f"{change.get('kind', '?')} {change.get('path', '?')}")
        return "\n".join(lines), failed
    error = _error_message(item.error)
    if error is not None:
        return error, True
    if kind == "mcp_tool_call" and isinstance(item.result, dict):
        texts = [
            str(block.get("text", ""))
            for block in item.result.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        if texts:
            return "\n".join(texts), failed
        structured = item.result.get("structured_content")
        if structured is not None:
            return msgspec.json.encode(structured).decode(), failed
    return "", failed


class CodexParser(JsonLineParser[AnyEvent]):
    """Sans-I/O parser of ``codex exec --json`` output.

    ``model`` is the model Weft asked for (Codex does not echo it).
    ``baseline`` is the thread's usage total when this session started (a
    resumed thread reports totals that include earlier sessions); ``None``
    for a new thread, or a resumed one whose total is unknown, in which case
    the first total is taken as this session's own usage. Each total the
    thread reports is recorded in ``ledger``, the next session's baseline.
    """

    harness = "codex"
    session_noun = "thread"

    def __init__(
        self,
        *,
        model: str,
        cwd: str | None = None,
        resume_session_id: str | None = None,
        baseline: ThreadTotal | None = None,
        ledger: ThreadUsageLedger | None = None,
        pricer: Pricer = default_pricer,
    ) -> None:
        super().__init__(
            model=model,
            cwd=cwd,
            resume_session_id=resume_session_id,
            pricer=pricer,
            decode=decoder.decode,
            envelope_type=line_type,
            known_types=KNOWN_TYPES,
            ignored_types=IGNORED_TYPES,
        )
        self._ledger = ledger
        self._last_total = baseline or ThreadTotal()
        self._tokens = Tokens()
        self._usage_seen = False
        self._turns = 0
        self._outcome: str | None = None  # "completed" | "failed" (the latest wins)
        self._result_pending = False  # a bare ``error`` ended the turn: report it at exit
        self._failure: str | None = None
        self._errors: list[str] = []
        self._last_text: str | None = None
        self._open_tools: set[str] = set()

    @property
    def thread_total(self) -> ThreadTotal:
        """The thread's usage total as last reported (the next baseline)."""
        return self._last_total

    @property
    def tokens(self) -> Tokens:
        """This session's own usage so far."""
        return self._tokens

    # -- StreamParser -----------------------------------------------------

    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        """Decide the verdict (§2.5)."""
        if self._outcome == "completed":
            if end.exit_code != 0:
                _log.info(
                    "codex thread %s completed its turn but exited with %s; the turn wins",
                    self.session_id,
                    end.exit_code if end.exit_code is not None else f"signal {end.signal}",
                )
            return [self._exited(end, None, False, None)]
        if self._outcome == "failed":
            events: list[AgentEvent] = []
            if self._result_pending:
                events.append(self._result(ok=False, subtype="error"))
            if end.stopped is not None:
                # A stop makes Codex fail its turn ("Conversation interrupted").
                return [*events, self._exited(end, *stopped_verdict(end.stopped))]
            cls, retriable = self._failure_class(end.stderr_tail)
            return [*events, self._exited(end, cls, retriable, self._failure)]
        return [self._exited(end, *self._no_result_verdict(end))]

    # -- dispatch ------------------------------------------------------------

    def _dispatch(self, event: AnyEvent) -> list[AgentEvent]:
        if isinstance(event, ThreadStarted):
            return self._started(event.thread_id)
        if isinstance(event, ItemStarted | ItemUpdated):
            return self._item_progress(event.item)
        if isinstance(event, ItemCompleted):
            return self._item_completed(event.item)
        if isinstance(event, TurnCompleted):
            return self._turn_completed(event.usage)
        if isinstance(event, TurnFailed):
            message = event.error.message if event.error else ""
            return self._turn_failed(message)
        return self._error(event.message)

    def _started(self, thread_id: str) -> list[AgentEvent]:
        if not self._new_session(thread_id):
            return []
        return [SessionStarted(session_id=thread_id, model=self._model, cwd=self._cwd)]

    def _kind(self, item: Item) -> str | None:
        kind = item.type or item.item_type
        return "agent_message" if kind == "assistant_message" else kind

    def _item_progress(self, item: Item) -> list[AgentEvent]:
        kind = self._kind(item)
        if kind in _TOOL_KINDS and item.id not in self._open_tools:
            self._open_tools.add(item.id)
            return [
                ToolUse(
                    tool_use_id=item.id, name=_tool_name(kind, item), input=_tool_input(kind, item)
                )
            ]
        return []

    def _item_completed(self, item: Item) -> list[AgentEvent]:
        kind = self._kind(item)
        if kind == "agent_message":
            self._last_text = item.text or ""
            return [AssistantText(text=self._last_text, message_id=item.id or None)]
        if kind == "reasoning":
            return [Thinking(text=item.text or "", message_id=item.id or None)]
        if kind in _TOOL_KINDS:
            events = self._item_progress(item)
            self._open_tools.discard(item.id)
            content, is_error = _tool_result(kind, item)
            events.append(ToolResult(tool_use_id=item.id, content=content, is_error=is_error))
            return events
        if kind == "error":
            _log.info("codex warning: %s", item.message or item.text or "")
            return []
        if kind not in _QUIET_KINDS:
            self.unknown_types += 1
            _log.debug("codex: unknown item type %r ignored", kind)
        return []

    def _turn_completed(self, usage: Usage | None) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        self._turns += 1
        if usage is not None:
            total = ThreadTotal(usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
            if total.covers(self._last_total):
                delta = total.minus(self._last_total)
            else:
                # Not cumulative after all (or the baseline was wrong): the
                # figure can only be this turn's own usage.
                _log.info("codex usage %s is below the last total %s", total, self._last_total)
                delta = total.minus(ThreadTotal())
            self._last_total = total
            if self._ledger is not None and self.session_id is not None:
                self._ledger.record(self.session_id, total)
            self._tokens = self._tokens + delta
            self._usage_seen = True
            events.append(
                UsageDelta(
                    model=self._model, tokens=delta, cost_usd=self._pricer(self._model, delta)
                )
            )
        self._outcome = "completed"
        self._failure = None
        self._result_pending = False
        events.append(self._result(ok=True, subtype="success"))
        return events

    def _turn_failed(self, message: str) -> list[AgentEvent]:
        if message and message not in self._errors:
            self._errors.append(message)
        self._outcome = "failed"
        self._failure = message or (self._errors[-1] if self._errors else "turn failed")
        self._result_pending = False
        return [self._result(ok=False, subtype="turn_failed")]

    def _error(self, message: str) -> list[AgentEvent]:
        reconnect = _RECONNECTING.search(message)
        if reconnect is not None:
            # Codex reports its own stream retries as ``error`` events.
            return [
                RetryNotice(
                    attempt=int(reconnect.group(1)),
                    max_retries=int(reconnect.group(2)),
                    error=message,
                )
            ]
        if message and message not in self._errors:
            self._errors.append(message)
        self._outcome = "failed"
        self._failure = message or "error"
        self._result_pending = True
        return []

    # -- verdict ----------------------------------------------------------------

    def _cost(self) -> tuple[float | None, CostSource]:
        if not self._usage_seen:
            return None, CostSource.UNPRICED
        cost = self._pricer(self._model, self._tokens)
        return cost, CostSource.COMPUTED if cost is not None else CostSource.UNPRICED

    def _result(self, *, ok: bool, subtype: str) -> SessionResult:
        cost, source = self._cost()
        cls = None if ok else self._failure_class()[0]
        return SessionResult(
            ok=ok,
            subtype=subtype,
            is_error=not ok,
            text=self._last_text if ok else None,
            errors=[] if ok else list(self._errors),
            session_id=self.session_id,
            cost_usd=cost,
            cost_source=source,
            tokens=self._tokens,
            model_usage=(
                {self._model: ModelUsage(tokens=self._tokens, cost_usd=cost)}
                if self._usage_seen
                else {}
            ),
            num_turns=self._turns,
            error_class=cls,
            context_exceeded=cls is ErrorClass.CONTEXT_EXCEEDED,
        )

    def _failure_class(self, stderr_tail: str = "") -> tuple[ErrorClass, bool]:
        text = "\n".join([self._failure or "", *self._errors, error_lines(stderr_tail)])
        found = classify_error_text(text)
        return found if found is not None else (ErrorClass.ERROR_RESULT, True)

    def _no_result_verdict(self, end: ProcessEnd) -> tuple[ErrorClass, bool, str]:
        if end.stopped is not None:
            return stopped_verdict(end.stopped)
        started = bool(self._reported_ids)
        tail = last_line(end.stderr_tail)
        suffix = f": {tail}" if tail else ""
        if end.exit_code == 0:
            return ErrorClass.NO_RESULT, started, "codex exited 0 without ending its turn" + suffix
        how = exit_how(end)
        found = classify_error_text(error_lines(end.stderr_tail))
        if found is not None:
            return found[0], found[1], f"codex failed ({how}){suffix}"
        if end.exit_code == 2 and not started:
            # clap's status for a command line it refuses
            return ErrorClass.INPUT_ERROR, False, f"codex refused its arguments ({how}){suffix}"
        return crash_verdict(
            end,
            started=started,
            suffix=suffix,
            before="codex died before starting a thread",
            mid="codex died mid-turn",
        )

    def _exited(
        self,
        end: ProcessEnd,
        cls: ErrorClass | None,
        retriable: bool,
        message: str | None,
    ) -> SessionExited:
        wait = None
        if cls is not None:
            wait = retry_after_ms("\n".join([*self._errors, error_lines(end.stderr_tail)]))
        return session_exited(
            end,
            error_class=cls,
            retriable=retriable,
            message=message,
            retry_after_ms=wait,
            result_seen=self._outcome is not None,
            session=self.session_ids(),
            cost=self._cost(),
            tokens=self._tokens,
            malformed_lines=self.malformed_lines,
            unknown_types=self.unknown_types,
        )


# --------------------------------------------------------------------------
# The harness.
# --------------------------------------------------------------------------

CODEX_ENV = EnvPolicy(prefixes=("CODEX_", "OPENAI_"))
"""What Codex gets from Weft's environment besides the base set: its home
(``CODEX_HOME``), keys (``CODEX_API_KEY``, ``OPENAI_API_KEY``) and endpoint
settings (``OPENAI_BASE_URL``...)."""

_SHARED_LEDGER = ThreadUsageLedger()


class CodexHarness:
    """Runs ``codex exec --json`` (or the fake agent in its Codex flavour).

    The prompt goes on stdin (the ``-`` argument), so its length is not
    bounded by the command line and no flag can swallow it.
    """

    name = "codex"

    def __init__(
        self,
        command: Sequence[str] = ("codex",),
        *,
        fake: bool = False,
        ledger: ThreadUsageLedger | None = None,
        pricer: Pricer = default_pricer,
    ) -> None:
        self.command = list(command)
        """The program and any leading arguments (``[python, -m, ...]``)."""
        self.fake = fake
        self.ledger = ledger if ledger is not None else _SHARED_LEDGER
        """Thread totals seen in this process (shared by default)."""
        self.pricer = pricer

    def argv(self, spec: SessionSpec) -> list[str]:
        """The command line of §2.1; ``resume <id>`` after the ``exec``
        flags, which Codex does not remember across a resume."""
        argv = [
            *self.command,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-m",
            spec.model,
            "-C",
            str(spec.cwd),
            "--sandbox",
            "workspace-write",
            *spec.extra_args,
        ]
        if spec.resume_session_id:
            argv += ["resume", spec.resume_session_id]
        argv.append("-")
        return argv

    def env(self, spec: SessionSpec, parent: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment (see :func:`weft.agents.process.build_env`)."""
        return child_env(CODEX_ENV, spec, parent, fake=self.fake)

    async def baseline(self, spec: SessionSpec, env: Mapping[str, str]) -> ThreadTotal | None:
        """The usage total of the thread ``spec`` resumes: from its rollout
        file (the CLI's own record), else from this process's ledger."""
        if not spec.resume_session_id:
            return None
        thread = spec.resume_session_id
        found = await asyncio.to_thread(rollout_thread_total, codex_home(env), thread)
        return found if found is not None else self.ledger.get(thread)

    def parser(self, spec: SessionSpec, baseline: ThreadTotal | None = None) -> CodexParser:
        """A parser for one session of ``spec``."""
        return CodexParser(
            model=spec.model,
            cwd=str(spec.cwd),
            resume_session_id=spec.resume_session_id,
            baseline=baseline,
            ledger=self.ledger,
            pricer=self.pricer,
        )

    async def start(self, spec: SessionSpec) -> SubprocessSession:
        """Spawn Codex for ``spec``."""
        warn_unsupported(self.name, spec)
        env = self.env(spec)
        baseline = await self.baseline(spec, env)
        return await spawn(
            self.argv(spec),
            parser=self.parser(spec, baseline),
            cwd=spec.cwd,
            env=env,
            stdin=with_system_prompt(spec).encode("utf-8"),
            timeouts=spec.timeouts,
            log_path=spec.log_path,
            name="fake-codex" if self.fake else "codex",
        )
