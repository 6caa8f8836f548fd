"""The Gemini adapter: ``gemini -p ... --output-format stream-json``
(reference agent-cli-protocols §3).

Gemini prints ``init`` (the session id), the echoed user prompt, assistant
text as ``message`` chunks with ``delta: true``, ``tool_use`` /
``tool_result`` pairs, non-fatal ``error`` notices and a final ``result``
with ``status`` and token ``stats``. :class:`GeminiParser` maps them onto
:mod:`weft.agents.events`.

What shapes the parser:

* **Text arrives in chunks** that are not word-aligned: each chunk is passed on
  as a partial :class:`~weft.agents.events.AssistantText`, and the joined
  message follows as a whole one when the run of chunks ends.
* **No cost field.** Cost is computed per model from ``stats.models`` when the
  CLI breaks usage down (auto-routing can use several models; ``init.model``
  only echoes the request), else from the totals and the requested model.
  ``input_tokens`` already includes ``cached``: the uncached part is
  ``input``. Thinking tokens are missing from ``output_tokens`` but present in
  ``total_tokens`` and billed at the output rate, so billable output is
  ``total_tokens - input_tokens`` when that is larger.
* **Verdict** (§6 rule 6): ``result.status`` decides success; the class comes
  from the error type, then the exit code (41 auth, 42 input, 53 turn limit,
  ...), then the message. Fatal errors raised before the run (auth, input,
  untrusted folder) print no ``result`` at all, only stderr and the exit code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

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
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    ErrorClass,
    ModelUsage,
    SessionExited,
    SessionResult,
    SessionStarted,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import ProcessEnd, SessionSpec, stopped_verdict
from weft.agents.pricing import Pricer, default_pricer
from weft.agents.process import EnvPolicy, SubprocessSession, spawn
from weft.agents.vendor_errors import (
    classify_error_text,
    default_retriable,
    error_lines,
    last_line,
    retry_after_ms,
)

_log = logging.getLogger(__name__)

EXIT_CODE_CLASSES: dict[int, ErrorClass] = {
    41: ErrorClass.AUTH,  # FatalAuthenticationError
    42: ErrorClass.INPUT_ERROR,  # FatalInputError
    44: ErrorClass.INPUT_ERROR,  # FatalSandboxError: the environment, not the run
    52: ErrorClass.INPUT_ERROR,  # FatalConfigError
    53: ErrorClass.MAX_TURNS,  # FatalTurnLimitedError
    54: ErrorClass.ERROR_RESULT,  # FatalToolExecutionError
    55: ErrorClass.INPUT_ERROR,  # FatalUntrustedWorkspaceError
}
"""Gemini CLI's fatal exit codes (42 and 53 documented, the others from its
``FatalError`` classes)."""

_ERROR_TYPE_CLASSES: dict[str, ErrorClass] = {
    "MaxSessionTurnsError": ErrorClass.MAX_TURNS,
    "FatalTurnLimitedError": ErrorClass.MAX_TURNS,
    "FatalAuthenticationError": ErrorClass.AUTH,
    "FatalInputError": ErrorClass.INPUT_ERROR,
    "FatalConfigError": ErrorClass.INPUT_ERROR,
    "FatalSandboxError": ErrorClass.INPUT_ERROR,
    "FatalUntrustedWorkspaceError": ErrorClass.INPUT_ERROR,
    "FatalToolExecutionError": ErrorClass.ERROR_RESULT,
}

_EXIT_HINTS: dict[int, str] = {
    41: "gemini could not authenticate: set GEMINI_API_KEY or log in with `gemini`",
    42: "gemini refused its input (prompt or arguments)",
    53: "gemini reached its session turn limit (maxSessionTurns in settings.json)",
    55: (
        "gemini refused an untrusted folder: set GEMINI_CLI_TRUST_WORKSPACE=true "
        "or trust the folder"
    ),
}


# --------------------------------------------------------------------------
# Wire format (§3.2). Undeclared fields are ignored.
# --------------------------------------------------------------------------


class _ErrorBody(msgspec.Struct):
    type: str | None = None
    message: str = ""


class _ModelStats(msgspec.Struct):
    total_tokens: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached: int = 0
    input: int | None = None


class _Stats(_ModelStats):
    duration_ms: int | None = None
    tool_calls: int | None = None
    models: dict[str, _ModelStats] | None = None


class _Event(msgspec.Struct, tag_field="type"):
    pass


class _Init(_Event, tag="init"):
    session_id: str
    model: str | None = None


class _Message(_Event, tag="message"):
    role: str
    content: str = ""
    delta: bool = False


class _ToolUse(_Event, tag="tool_use"):
    tool_name: str
    tool_id: str
    parameters: Any = None


class _ToolResult(_Event, tag="tool_result"):
    tool_id: str
    status: str = "success"
    output: Any = None
    error: _ErrorBody | None = None


class _Error(_Event, tag="error"):
    severity: str = "error"
    message: str = ""


class _Result(_Event, tag="result"):
    status: str
    error: _ErrorBody | None = None
    stats: _Stats | None = None


_AnyEvent: TypeAlias = _Init | _Message | _ToolUse | _ToolResult | _Error | _Result
_KNOWN_TYPES = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})


class _Envelope(msgspec.Struct):
    type: str


_decoder = msgspec.json.Decoder(_AnyEvent)
_envelope_decoder = msgspec.json.Decoder(_Envelope)


def _line_type(line: bytes) -> str:
    return _envelope_decoder.decode(line).type


def stats_tokens(stats: _ModelStats) -> Tokens:
    """Weft's token shape for one Gemini stats block: ``input`` is the
    uncached input, ``cache_read`` the cached part, and the output includes
    the thinking tokens that only ``total_tokens`` counts."""
    cached = max(stats.cached, 0)
    uncached = stats.input if stats.input is not None else stats.input_tokens - cached
    output = stats.output_tokens
    if stats.total_tokens is not None:
        output = max(output, stats.total_tokens - stats.input_tokens)
    return Tokens(input=max(uncached, 0), output=max(output, 0), cache_read=cached)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


class GeminiParser(JsonLineParser[_AnyEvent]):
    """Sans-I/O parser of ``gemini --output-format stream-json`` output.

    ``model`` is the model Weft asked for; it prices the run when the CLI does
    not break usage down per model.
    """

    harness = "gemini"

    def __init__(
        self,
        *,
        model: str,
        cwd: str | None = None,
        resume_session_id: str | None = None,
        pricer: Pricer = default_pricer,
    ) -> None:
        super().__init__(
            model=model,
            cwd=cwd,
            resume_session_id=resume_session_id,
            pricer=pricer,
            decode=_decoder.decode,
            envelope_type=_line_type,
            known_types=_KNOWN_TYPES,
        )
        self._chunks: list[str] = []
        self._messages = 0
        self._last_text: str | None = None
        self._warnings: list[str] = []
        self._result: SessionResult | None = None
        self._result_error_type: str | None = None
        self._tokens = Tokens()
        self._cost: float | None = None
        self._cost_source = CostSource.UNPRICED

    # -- StreamParser -----------------------------------------------------

    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        """Decide the verdict (§6 rule 6)."""
        events: list[AgentEvent] = self._flush_text()
        if self._result is not None:
            if self._result.ok:
                if end.exit_code != 0:
                    _log.info(
                        "gemini session %s reported success but exited with %s; the result wins",
                        self.session_id,
                        end.exit_code if end.exit_code is not None else f"signal {end.signal}",
                    )
                return [*events, self._exited(end, None, False, None)]
            if end.stopped is not None:
                # A stop makes Gemini report a cancelled run.
                return [*events, self._exited(end, *stopped_verdict(end.stopped))]
            cls, retriable = self._failure_class(
                end.exit_code, end.stderr_tail, self._result.errors
            )
            message = self._result.errors[0] if self._result.errors else "gemini reported an error"
            return [*events, self._exited(end, cls, retriable, message)]
        return [*events, self._exited(end, *self._no_result_verdict(end))]

    # -- dispatch ------------------------------------------------------------

    def _dispatch(self, event: _AnyEvent) -> list[AgentEvent]:
        if isinstance(event, _Message):
            return self._message(event)
        if isinstance(event, _Error):
            # Non-fatal notices (``Loop detected``...): kept for the failure
            # message in case the run then fails.
            if event.message:
                self._warnings.append(event.message)
            _log.info("gemini %s: %s", event.severity, event.message)
            return []
        events = self._flush_text()
        if isinstance(event, _Init):
            events.extend(self._started(event))
        elif isinstance(event, _ToolUse):
            parameters = event.parameters if isinstance(event.parameters, dict) else {}
            events.append(
                ToolUse(tool_use_id=event.tool_id, name=event.tool_name, input=parameters)
            )
        elif isinstance(event, _ToolResult):
            events.append(self._tool_result(event))
        else:
            events.extend(self._result_events(event))
        return events

    def _started(self, event: _Init) -> list[AgentEvent]:
        if not self._new_session(event.session_id):
            return []
        return [
            SessionStarted(
                session_id=event.session_id, model=event.model or self._model, cwd=self._cwd
            )
        ]

    def _message_id(self) -> str:
        return f"gemini-{self._messages}"

    def _message(self, event: _Message) -> list[AgentEvent]:
        if event.role != "assistant":
            # The echoed prompt ends any assistant text before it.
            return self._flush_text()
        if not event.delta:
            events = self._flush_text()
            self._messages += 1
            self._last_text = event.content
            events.append(AssistantText(text=event.content, message_id=self._message_id()))
            return events
        if not self._chunks:
            self._messages += 1
        self._chunks.append(event.content)
        return [AssistantText(text=event.content, message_id=self._message_id(), partial=True)]

    def _flush_text(self) -> list[AgentEvent]:
        if not self._chunks:
            return []
        text = "".join(self._chunks)
        self._chunks.clear()
        self._last_text = text
        return [AssistantText(text=text, message_id=self._message_id())]

    def _tool_result(self, event: _ToolResult) -> ToolResult:
        failed = event.status != "success" or event.error is not None
        content = _text(event.output)
        if event.error is not None and event.error.message:
            content = event.error.message if not content else f"{content}\n{event.error.message}"
        return ToolResult(tool_use_id=event.tool_id, content=content, is_error=failed)

    def _result_events(self, event: _Result) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        model_usage: dict[str, ModelUsage] = {}
        if event.stats is not None:
            per_model = event.stats.models or {}
            if per_model:
                for name, stats in per_model.items():
                    tokens = stats_tokens(stats)
                    model_usage[name] = ModelUsage(
                        tokens=tokens, cost_usd=self._pricer(name, tokens)
                    )
            else:
                tokens = stats_tokens(event.stats)
                model_usage[self._model] = ModelUsage(
                    tokens=tokens, cost_usd=self._pricer(self._model, tokens)
                )
            for name, usage in model_usage.items():
                events.append(UsageDelta(model=name, tokens=usage.tokens, cost_usd=usage.cost_usd))
            self._tokens = sum((u.tokens for u in model_usage.values()), Tokens())
            costs = [u.cost_usd for u in model_usage.values()]
            if all(cost is not None for cost in costs):
                self._cost = sum(cost for cost in costs if cost is not None)
                self._cost_source = CostSource.COMPUTED
            else:
                self._cost, self._cost_source = None, CostSource.UNPRICED
        ok = event.status == "success"
        errors: list[str] = []
        if event.error is not None and event.error.message:
            errors.append(event.error.message)
        if not ok:
            errors.extend(w for w in self._warnings if w not in errors)
        self._result_error_type = event.error.type if event.error else None
        cls = None if ok else self._failure_class(None, "", errors)[0]
        self._result = SessionResult(
            ok=ok,
            subtype=event.status if event.error is None else event.error.type or event.status,
            is_error=not ok,
            text=self._last_text if ok else None,
            errors=errors,
            session_id=self.session_id,
            cost_usd=self._cost,
            cost_source=self._cost_source,
            tokens=self._tokens,
            model_usage=model_usage,
            duration_ms=event.stats.duration_ms if event.stats else None,
            error_class=cls,
            context_exceeded=cls is ErrorClass.CONTEXT_EXCEEDED,
        )
        events.append(self._result)
        return events

    # -- verdict ----------------------------------------------------------------

    def _failure_class(
        self, exit_code: int | None, stderr_tail: str, errors: list[str]
    ) -> tuple[ErrorClass, bool]:
        """For a result with ``status: error``: the error type, then the exit
        code, then the words of the message."""
        if self._result_error_type in _ERROR_TYPE_CLASSES:
            cls = _ERROR_TYPE_CLASSES[self._result_error_type]
            return cls, default_retriable(cls)
        if exit_code in EXIT_CODE_CLASSES:
            cls = EXIT_CODE_CLASSES[exit_code]
            return cls, default_retriable(cls)
        found = classify_error_text("\n".join([*errors, error_lines(stderr_tail)]))
        return found if found is not None else (ErrorClass.ERROR_RESULT, True)

    def _no_result_verdict(self, end: ProcessEnd) -> tuple[ErrorClass, bool, str]:
        if end.stopped is not None:
            return stopped_verdict(end.stopped)
        started = bool(self._reported_ids)
        tail = last_line(end.stderr_tail)
        suffix = f": {tail}" if tail else ""
        if end.exit_code == 0:
            return ErrorClass.NO_RESULT, started, "gemini exited 0 without a result" + suffix
        how = exit_how(end)
        found = classify_error_text("\n".join([*self._warnings, error_lines(end.stderr_tail)]))
        if found is not None and found[0] is ErrorClass.CANNOT_RESUME:
            # An unknown --resume id exits 42 like any input error; the
            # message is what tells them apart.
            return ErrorClass.CANNOT_RESUME, False, f"gemini cannot resume ({how}){suffix}"
        if end.exit_code is not None and end.exit_code in EXIT_CODE_CLASSES:
            cls = EXIT_CODE_CLASSES[end.exit_code]
            hint = _EXIT_HINTS.get(end.exit_code, "gemini failed")
            return cls, default_retriable(cls), f"{hint} ({how}){suffix}"
        if found is not None:
            return found[0], found[1], f"gemini failed ({how}){suffix}"
        return crash_verdict(
            end,
            started=started,
            suffix=suffix,
            before="gemini died before starting a session",
            mid="gemini died mid-run without a result",
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
            errors = self._result.errors if self._result is not None else self._warnings
            wait = retry_after_ms("\n".join([*errors, error_lines(end.stderr_tail)]))
        return session_exited(
            end,
            error_class=cls,
            retriable=retriable,
            message=message,
            retry_after_ms=wait,
            result_seen=self._result is not None,
            session=self.session_ids(),
            cost=(self._cost, self._cost_source),
            tokens=self._tokens,
            malformed_lines=self.malformed_lines,
            unknown_types=self.unknown_types,
        )


# --------------------------------------------------------------------------
# The harness.
# --------------------------------------------------------------------------

GEMINI_ENV = EnvPolicy(prefixes=("GEMINI_", "GOOGLE_"))
"""What Gemini CLI gets from Weft's environment besides the base set: its
keys and home (``GEMINI_API_KEY``, ``GEMINI_CLI_HOME``...) and Google Cloud
settings (``GOOGLE_API_KEY``, ``GOOGLE_CLOUD_PROJECT``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_GENAI_USE_VERTEXAI``...)."""

ARGV_PROMPT_LIMIT = 100_000
"""Longest prompt, in UTF-8 bytes, passed as the ``-p`` value. Linux refuses
a single argument over 128 KiB (``MAX_ARG_STRLEN``), so longer prompts go on
stdin, which Gemini reads whenever it is not a terminal."""


def prompt_on_stdin(prompt: str) -> bool:
    """Whether ``prompt`` travels on stdin rather than as the ``-p`` value:
    when it is too long for one argument, or starts with ``-`` (the CLI's
    parser would take it for a flag)."""
    return prompt.startswith("-") or len(prompt.encode("utf-8")) > ARGV_PROMPT_LIMIT


class GeminiHarness:
    """Runs ``gemini -p ... --output-format stream-json`` (or the fake agent
    in its Gemini flavour).

    The prompt is the ``-p`` value, as in the CLI's documented headless use.
    A prompt :func:`prompt_on_stdin` rejects goes on stdin with an empty
    ``-p ""``: Gemini reads a non-terminal stdin and puts it before the
    ``-p`` text, so the model gets the same prompt (followed by a blank
    line).
    """

    name = "gemini"

    def __init__(
        self,
        command: Sequence[str] = ("gemini",),
        *,
        fake: bool = False,
        pricer: Pricer = default_pricer,
    ) -> None:
        self.command = list(command)
        """The program and any leading arguments (``[python, -m, ...]``)."""
        self.fake = fake
        self.pricer = pricer

    def argv(self, spec: SessionSpec) -> list[str]:
        """The command line of §3.1 (``-y``: tools run without asking)."""
        prompt = with_system_prompt(spec)
        argv = [
            *self.command,
            "-p",
            "" if prompt_on_stdin(prompt) else prompt,
            "--output-format",
            "stream-json",
            "-m",
            spec.model,
            "-y",
        ]
        if spec.resume_session_id:
            argv += ["--resume", spec.resume_session_id]
        argv += spec.extra_args
        return argv

    def stdin(self, spec: SessionSpec) -> bytes | None:
        """What is written to the CLI's stdin (nothing for a short prompt)."""
        prompt = with_system_prompt(spec)
        return prompt.encode("utf-8") if prompt_on_stdin(prompt) else None

    def env(self, spec: SessionSpec, parent: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment (see :func:`weft.agents.process.build_env`)."""
        return child_env(GEMINI_ENV, spec, parent, fake=self.fake)

    def parser(self, spec: SessionSpec) -> GeminiParser:
        """A parser for one session of ``spec``."""
        return GeminiParser(
            model=spec.model,
            cwd=str(spec.cwd),
            resume_session_id=spec.resume_session_id,
            pricer=self.pricer,
        )

    async def start(self, spec: SessionSpec) -> SubprocessSession:
        """Spawn Gemini CLI for ``spec``."""
        warn_unsupported(self.name, spec)
        return await spawn(
            self.argv(spec),
            parser=self.parser(spec),
            cwd=spec.cwd,
            env=self.env(spec),
            stdin=self.stdin(spec),
            timeouts=spec.timeouts,
            log_path=spec.log_path,
            name="fake-gemini" if self.fake else "gemini",
        )
