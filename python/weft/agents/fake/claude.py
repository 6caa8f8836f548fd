"""``fake-claude``: Claude Code's ``-p --output-format stream-json`` (§1, §7).

Why this module is long (~1,170 lines): it is one class, :class:`ClaudeRun`,
and the entry that builds it. The run owns one wire format end to end (lines,
per-call usage, cost, transcript, results, tool rounds, and the fault
injections that must produce those same lines), and its steps share that
state, so splitting the class would only pass ``self`` between modules. The
jobs that stand apart are already elsewhere: the command line in
:mod:`claude_options`, the Claude-only scenario rows in :mod:`claude_scenarios`,
sessions in :mod:`claude_session`, tools in :mod:`claude_tools` and the
stream-json input mode in :mod:`claude_stream`.

What it emits follows the §7.2 checklist: ``system/init`` first (after
optional hook lines); per API call one ``assistant`` line per content block,
all with the same ``message.id`` and the same usage snapshot (its
``output_tokens`` below the call's final figure); a ``user`` tool_result line
per tool_use; the ``result`` last, with ``usage`` = the sum of the main
model's final per-call usage, ``modelUsage`` per model (plus the background
Haiku call) and ``total_cost_usd`` = the sum of ``costUSD``, each computed
exactly with the §5 formula. Transcripts go to
``$CLAUDE_CONFIG_DIR/projects/<sanitized cwd>/<session>.jsonl`` (§1.9) and
``--resume`` reads them back.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from weft.agents.fake import directives as dirs
from weft.agents.fake.claude_options import (
    ERR_EMPTY,
    USAGE,
    ClaudeOptions,
    check_options,
    resolve_model,
)
from weft.agents.fake.claude_session import (
    Session,
    Transcript,
    count_prompts,
    project_dir,
    resolve_session,
)
from weft.agents.fake.claude_tools import (
    DEFAULT_TOOLS,
    TOOLS_2_1_330,
    Toolbox,
    ToolCall,
    bash_result,
)
from weft.agents.fake.common import (
    CliError,
    Clock,
    JsonObj,
    Settings,
    make_rng,
    read_stdin,
    read_stdin_if_ready,
    split_words,
    stdin_is_tty,
    write_record,
)
from weft.agents.fake.output import Chunks, Emit, Exit, Raw, Runner, Sleep, Stderr, Step, dumps
from weft.agents.fake.pricing import (
    BACKGROUND_MODEL,
    Price,
    cost_units,
    price_of,
    to_usd,
)
from weft.agents.fake.scenarios import (
    Context,
    Flavour,
    ScenarioFn,
    choose_scenario,
    filler_text,
    huge_line,
    with_start_delay,
)

SPILL_ABOVE_BYTES = 30_000
"""2.1.330 keeps a Bash output up to this size in the stream; a larger one
goes to ``tool-results/`` (2.9 MB gave a 33 KB line)."""
STDOUT_KEPT_CHARS = 30_000
"""The head of a spilled output kept in ``tool_use_result.stdout``."""
PREVIEW_CHARS = 2048
"""The preview of a spilled output in the tool_result the model sees."""

ABORT_DIAGNOSTIC = "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"
"""``errors`` of 2.1.330's result after a SIGINT."""

DEFAULT_MAX_RETRIES = 10
"""Claude Code's API retries when ``CLAUDE_CODE_MAX_RETRIES`` is not set."""


class _TurnLimitError(Exception):
    """The next API call would pass ``--max-turns``."""


class _BudgetLimitError(Exception):
    """The spent cost reached ``--max-budget-usd``."""


# -- usage accounting --------------------------------------------------------------------------


class Usage:
    """Token counts of one API call or a sum of calls."""

    __slots__ = ("cost", "input", "output", "read", "write_1h", "write_5m")

    def __init__(self) -> None:
        self.input = 0
        self.write_5m = 0
        self.write_1h = 0
        self.read = 0
        self.output = 0
        self.cost = 0
        """Exact cost in $1e-10."""

    def add(self, other: Usage) -> None:
        """Add ``other`` into this sum."""
        self.input += other.input
        self.write_5m += other.write_5m
        self.write_1h += other.write_1h
        self.read += other.read
        self.output += other.output
        self.cost += other.cost

    def subtract(self, other: Usage) -> None:
        """Take ``other`` (a part of this sum) out of it."""
        self.input -= other.input
        self.write_5m -= other.write_5m
        self.write_1h -= other.write_1h
        self.read -= other.read
        self.output -= other.output
        self.cost -= other.cost

    def price(self, price: Price) -> None:
        """Set :attr:`cost` with the §5 formula."""
        self.cost = cost_units(
            price,
            input_tokens=self.input,
            write_5m=self.write_5m,
            write_1h=self.write_1h,
            read=self.read,
            output_tokens=self.output,
        )

    def message_usage(self, output_tokens: int) -> JsonObj:
        """The ``usage`` object of an assistant line."""
        return {
            "input_tokens": self.input,
            "cache_creation_input_tokens": self.write_5m + self.write_1h,
            "cache_read_input_tokens": self.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.write_5m,
                "ephemeral_1h_input_tokens": self.write_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def result_usage(self) -> JsonObj:
        """The ``usage`` object of a result line."""
        return {
            "input_tokens": self.input,
            "cache_creation_input_tokens": self.write_5m + self.write_1h,
            "cache_read_input_tokens": self.read,
            "output_tokens": self.output,
            "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            "service_tier": "standard",
            "cache_creation": {
                "ephemeral_1h_input_tokens": self.write_1h,
                "ephemeral_5m_input_tokens": self.write_5m,
            },
        }


# -- the run -----------------------------------------------------------------------------------


class ClaudeRun(Flavour):
    """One fake Claude Code process."""

    name = "claude"

    def __init__(
        self,
        ctx: Context,
        opts: ClaudeOptions,
        *,
        model: str,
        session_id: str,
        transcript: Transcript,
        previous_prompt: str | None,
    ) -> None:
        super().__init__(ctx)
        self.opts = opts
        self.model = model
        self.session_id = session_id
        self.transcript = transcript
        self.previous_prompt = previous_prompt
        self.partial = opts.partial
        self.omit_cost = ctx.settings.omit_cost
        self.v330 = ctx.settings.version_at_least(2, 1, 330)
        """Claude Code 2.1.330 (the verified pin) or newer."""
        self.turns = 0
        """``num_turns`` before 2.1.330: the API calls."""
        self.api_calls = 0
        """Main-thread API calls (what ``--max-turns`` limits)."""
        self.prompts = 0
        self.user_turns = 0
        """Main-thread user lines: tool results, the max-tokens nudge, the
        interruption. 2.1.330's ``num_turns`` is prompts + these (two
        parallel tool results after one call count twice)."""
        self.api_ms = 0
        self.context_tokens = 0
        self.main_usage = Usage()
        self.model_usage: dict[str, Usage] = {}
        self.prior_prompts = 0
        """User prompts of the resumed session before this process's (``context_full``)."""
        self.prior_usage: dict[str, Usage] = {}
        """What earlier processes of a resumed session spent (from its transcript):
        2.1.330 reports cost and ``modelUsage`` over the whole session."""
        self._reported: dict[str, Usage] = {}
        """This process's usage already reported by an earlier result (one
        that was printed: a result a stop cut short before its line was out
        reported nothing, so the abort result's share still holds it all, as
        2.1.330's ``aborted_streaming`` result does)."""
        self._unprinted: tuple[JsonObj, dict[str, Usage]] | None = None
        """The last result built and what it reports, until its line is out."""
        ctx.runner.emitted = self._printed
        self.background_calls = not self.v330
        """The background Haiku call (titles): 2.1.330 made none against the
        test mock, so from that version it is gone."""
        self.background_done = False
        self.max_turns = opts.max_turns
        self.max_budget = opts.max_budget
        # Between 2.1 and 2.1.330 the prompt was documented as turn 1 (N turns,
        # N-1 API calls); 2.1.330, the verified pin, makes N calls.
        settings = ctx.settings
        legacy_count = settings.version_at_least(2, 1) and not settings.version_at_least(2, 1, 330)
        self.turn_allowance_offset = 1 if legacy_count else 0
        self.legacy_max_turns = False
        self.ttl_1h = False
        self.tools = opts.tools(TOOLS_2_1_330 if self.v330 else DEFAULT_TOOLS)
        self.toolbox = Toolbox(
            ctx.workspace,
            ctx.ids,
            ctx.rng,
            tools=self.tools,
            permission_mode=opts.permission_mode,
            allowed=opts.allowed,
            disallowed=opts.disallowed,
        )
        self.outcomes = self.toolbox.outcomes  # the toolbox records them
        self.init_sent = False
        self.session_ref = session_id
        self.model_ref = model

    # -- lines -----------------------------------------------------------------

    def _line(self, obj: JsonObj) -> JsonObj:
        obj["session_id"] = self.session_id
        obj["uuid"] = self.ids.uuid4()
        return obj

    def init_line(self) -> JsonObj:
        """The ``system/init`` line."""
        return {
            "type": "system",
            "subtype": "init",
            "cwd": self.ctx.cwd,
            "session_id": self.session_id,
            "tools": self.tools,
            "mcp_servers": self.opts.mcp_servers(),
            "model": self.model,
            "permissionMode": self.opts.permission_mode,
            "slash_commands": ["compact", "context", "cost", "init", "review", "security-review"],
            "apiKeySource": "ANTHROPIC_API_KEY" if os.environ.get("ANTHROPIC_API_KEY") else "none",
            "claude_code_version": self.settings.version,
            "output_style": "default",
            "agents": ["general-purpose", "statusline-setup", "Explore", "Plan"],
            "skills": [],
            "plugins": [],
            "uuid": self.ids.uuid4(),
        }

    def _user_prompt_entry(self, prompt: str) -> None:
        self.transcript.add(
            "user", self.ids.uuid4(), {"message": {"role": "user", "content": prompt}}
        )

    def opening(self) -> Iterator[Step]:
        """``system/init`` (the prompt goes to the transcript, not stdout).
        With ``--input-format stream-json`` later turns only record their prompt."""
        self._user_prompt_entry(self.ctx.prompt)
        self.prompts += 1
        if not self.init_sent:
            self.init_sent = True
            yield Emit(self.init_line())

    def hooks(self) -> Iterator[Step]:
        """A SessionStart hook's two lines, before init."""
        hook_id = self.ids.uuid4()
        base = {
            "hook_id": hook_id,
            "hook_name": "SessionStart:startup",
            "hook_event": "SessionStart",
        }
        yield Emit(self._line({"type": "system", "subtype": "hook_started", **base}))
        yield Emit(
            self._line(
                {
                    "type": "system",
                    "subtype": "hook_response",
                    **base,
                    "output": "",
                    "stdout": "",
                    "stderr": "",
                    "exit_code": 0,
                    "outcome": "success",
                }
            )
        )

    # -- API calls -------------------------------------------------------------

    def _account(self, model: str, usage: Usage, *, main: bool) -> None:
        price = price_of(model)
        if price is not None:
            usage.price(price)
        self.model_usage.setdefault(model, Usage()).add(usage)
        if main:
            self.main_usage.add(usage)

    def _background(self) -> None:
        # Claude Code makes one small Haiku call per prompt (titles, topic
        # detection); it shows in modelUsage only.
        if self.background_done or not self.background_calls:
            return
        self.background_done = True
        usage = Usage()
        usage.input = self.rng.randint(180, 480)
        usage.output = self.rng.randint(8, 40)
        self._account(BACKGROUND_MODEL, usage, main=False)

    def _new_usage(self, text_chars: int, *, fresh_context: bool) -> Usage:
        usage = Usage()
        usage.input = self.rng.randint(3, 12)
        if fresh_context or self.context_tokens == 0:
            writes = self.rng.randint(2000, 9000)
            usage.read = self.rng.randint(9000, 16000)
        else:
            writes = self.rng.randint(80, 900)
            usage.read = self.context_tokens
        if self.ttl_1h:
            usage.write_1h = writes
        else:
            usage.write_5m = writes
        usage.output = text_chars // 4 + self.rng.randint(12, 60)
        if not fresh_context:
            self.context_tokens = usage.read + writes + usage.input + usage.output
        return usage

    def call(
        self,
        blocks: list[JsonObj],
        *,
        model: str | None = None,
        parent: str | None = None,
    ) -> Iterator[Step]:
        """One API response: one assistant line per block, all sharing the
        message id and the usage snapshot; with ``--include-partial-messages``
        the stream events around them."""
        main = parent is None
        model = model or self.model
        if main and self.max_turns is not None and self.api_calls >= self._turn_allowance():
            raise _TurnLimitError
        text_chars = sum(len(json.dumps(b)) for b in blocks)
        usage = self._new_usage(text_chars, fresh_context=not main)
        snapshot_out = self.rng.randint(1, min(12, usage.output - 1))
        snapshot = usage.message_usage(snapshot_out)
        msg_id = self.ids.message()
        request_id = self.ids.request()
        latency = self.rng.randint(700, 4000)
        self.api_ms += latency
        self.clock.simulate(latency)
        self._account(model, usage, main=main and model == self.model)
        self._background()
        if main:
            self.turns += 1
            self.api_calls += 1
        message_head: JsonObj = {
            "model": model,
            "id": msg_id,
            "type": "message",
            "role": "assistant",
        }
        if self.partial:
            start = dict(message_head, content=[], stop_reason=None, stop_sequence=None)
            start["usage"] = snapshot
            yield self._stream({"type": "message_start", "message": start}, parent)
        for index, block in enumerate(blocks):
            if self.partial:
                yield from self._block_events(index, block, parent)
            message = dict(message_head)
            message.update(
                content=[block],
                stop_reason=None,
                stop_sequence=None,
                usage=snapshot,
                context_management=None,
            )
            line = self._line(
                {"type": "assistant", "message": message, "parent_tool_use_id": parent}
            )
            yield Emit(line)
            stored = dict(message, usage=usage.message_usage(usage.output))
            stored.pop("context_management", None)
            self.transcript.add(
                "assistant",
                line["uuid"],
                {"message": stored, "requestId": request_id},
                sidechain=not main,
            )
        if self.partial:
            stop_reason = "tool_use" if blocks and blocks[-1]["type"] == "tool_use" else "end_turn"
            delta = {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage.output},
            }
            yield self._stream(delta, parent)
            yield self._stream({"type": "message_stop"}, parent)
        if main and self.max_budget is not None and to_usd(self._total_cost()) >= self.max_budget:
            raise _BudgetLimitError

    def _turn_allowance(self) -> int:
        # From 2.1 the prompt delivery counts as turn 1 (§1.1), so N turns
        # allow N-1 API calls.
        return max(0, (self.max_turns or 0) - self.turn_allowance_offset)

    def _stream(self, event: JsonObj, parent: str | None) -> Emit:
        line: JsonObj = {
            "type": "stream_event",
            "uuid": self.ids.uuid4(),
            "session_id": self.session_id,
            "parent_tool_use_id": parent,
            "event": event,
        }
        return Emit(line, delay=False)

    def _block_events(self, index: int, block: JsonObj, parent: str | None) -> Iterator[Step]:
        kind = block["type"]
        start: JsonObj = block
        deltas: list[JsonObj] = []
        if kind == "text":
            start = {"type": "text", "text": ""}
            text = str(block["text"])
            pieces = split_words(text, self.rng, max(1, min(8, len(text) // 12)))
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            pieces = split_words(str(block["thinking"]), self.rng, 3)
            deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"], ensure_ascii=False)
            pieces = split_words(raw, self.rng, 3)
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        event: JsonObj = {"type": "content_block_start", "index": index, "content_block": start}
        yield self._stream(event, parent)
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            yield self._stream(event, parent)
        yield self._stream({"type": "content_block_stop", "index": index}, parent)

    def tool_result(
        self,
        tool_id: str,
        content: Any,
        is_error: bool,
        tool_use_result: Any,
        parent: str | None = None,
    ) -> Emit:
        """The user line carrying one tool result (also written to the transcript)."""
        block: JsonObj = {"tool_use_id": tool_id, "type": "tool_result", "content": content}
        if is_error:
            block["is_error"] = True
        else:
            block["is_error"] = False
        line = self._line(
            {
                "type": "user",
                "message": {"role": "user", "content": [block]},
                "parent_tool_use_id": parent,
            }
        )
        line["tool_use_result"] = tool_use_result
        if parent is None:
            self.user_turns += 1
        stored_result = tool_use_result
        if isinstance(content, str) and len(content) > 100_000:
            block = dict(block, content=content[:2000] + "\n[truncated]")
            stored_result = {"truncated": True}
        self.transcript.add(
            "user",
            line["uuid"],
            {"message": {"role": "user", "content": [block]}, "toolUseResult": stored_result},
            sidechain=parent is not None,
        )
        return Emit(line)

    def tool_round(
        self,
        text: str,
        calls: list[ToolCall],
        *,
        parent: str | None = None,
        model: str | None = None,
        reverse: bool = False,
    ) -> Iterator[Step]:
        """One API call with optional text and tool_use blocks, then the tools
        run (after their tool_use lines are out) and their results."""
        blocks: list[JsonObj] = [{"type": "text", "text": text}] if text else []
        blocks.extend(c.block() for c in calls)
        yield from self.call(blocks, parent=parent, model=model)
        outcomes = [(c, self.toolbox.run_tool(c)) for c in calls]
        if reverse:
            outcomes.reverse()
        for call, (content, is_error, tool_use_result) in outcomes:
            yield self.tool_result(call.id, content, is_error, tool_use_result, parent)

    def work(self) -> Iterator[Step]:
        """Each directive op as one tool round."""
        for op in self.ctx.directives.ops:
            if op.verb == "sleep":
                yield Sleep(op.ms)
            elif op.is_tool:
                lead, call = self.toolbox.op_call(op)
                yield from self.tool_round(lead, [call])

    # -- the reply and the result ----------------------------------------------

    def _session_usage(self) -> dict[str, Usage]:
        """Per model, the whole session's usage: earlier processes and this one."""
        total: dict[str, Usage] = {}
        for source in (self.prior_usage, self.model_usage):
            for model, usage in source.items():
                total.setdefault(model, Usage()).add(usage)
        return total

    def _usage_since_last_result(self) -> dict[str, Usage]:
        since: dict[str, Usage] = {}
        for model, usage in self.model_usage.items():
            delta = Usage()
            delta.add(usage)
            delta.subtract(self._reported.get(model, Usage()))
            since[model] = delta
        return since

    def _total_cost(self) -> int:
        return sum(u.cost for u in self.model_usage.values())

    def model_usage_obj(self, usage_by_model: dict[str, Usage] | None = None) -> JsonObj:
        """``modelUsage``: one camelCase entry per model (of this process, or
        of ``usage_by_model``)."""
        out: JsonObj = {}
        source = self.model_usage if usage_by_model is None else usage_by_model
        for model, usage in source.items():
            price = price_of(model)
            entry: JsonObj = {
                "inputTokens": usage.input,
                "outputTokens": usage.output,
                "cacheReadInputTokens": usage.read,
                "cacheCreationInputTokens": usage.write_5m + usage.write_1h,
                "webSearchRequests": 0,
                "costUSD": to_usd(usage.cost),
                "contextWindow": price.context_window if price else 200_000,
                "maxOutputTokens": price.max_output if price else 64_000,
            }
            if self.omit_cost:
                del entry["costUSD"]
            out[model] = entry
        return out

    def result_line(
        self,
        *,
        subtype: str = "success",
        is_error: bool = False,
        text: str | None = None,
        errors: list[str] | None = None,
        terminal_reason: str | None = None,
        api_error_status: int | None = None,
    ) -> JsonObj:
        """The ``result`` line from everything accounted so far."""
        obj: JsonObj = {"type": "result", "subtype": subtype, "is_error": is_error}
        if subtype == "success" and self.settings.version_at_least(2, 1, 330):
            # 2.1.330 always says why a success-subtype result ended, and its status.
            obj["api_error_status"] = api_error_status
            if terminal_reason is None:
                terminal_reason = (
                    "completed"
                    if not is_error
                    else {413: "image_error"}.get(api_error_status or 0, "api_error")
                )
        elif api_error_status is not None:
            obj["api_error_status"] = api_error_status
        obj["duration_ms"] = self.clock.elapsed_ms()
        obj["duration_api_ms"] = self.api_ms
        obj["num_turns"] = self.prompts + self.user_turns if self.v330 else self.turns
        if text is not None:
            obj["result"] = text
        obj["session_id"] = self.session_id
        session = self._session_usage()
        if not self.omit_cost:
            obj["total_cost_usd"] = to_usd(sum(u.cost for u in session.values()))
        obj["usage"] = self.main_usage.result_usage()
        obj["modelUsage"] = self.model_usage_obj(session)
        obj["permission_denials"] = list(self.toolbox.denials)
        if terminal_reason is not None:
            obj["terminal_reason"] = terminal_reason
        if errors is not None:
            obj["errors"] = errors
        obj["uuid"] = self.ids.uuid4()
        if self.settings.version_at_least(2, 1, 330):
            obj["model_usage_since_last_result"] = self.model_usage_obj(
                self._usage_since_last_result()
            )
        reported: dict[str, Usage] = {}
        for model, usage in self.model_usage.items():
            reported.setdefault(model, Usage()).add(usage)
        self._unprinted = (obj, reported)
        return obj

    def _printed(self, obj: JsonObj) -> None:
        """A line is out: a result's usage is now reported."""
        unprinted = self._unprinted
        if unprinted is not None and unprinted[0] is obj:
            self._reported, self._unprinted = unprinted[1], None

    def closing(self, extra_blocks: list[JsonObj] | None = None) -> Iterator[Step]:
        """The final text message and a success result."""
        text = self.final_text()
        blocks = [*(extra_blocks or []), {"type": "text", "text": text}]
        yield from self.call(blocks)
        yield Emit(self.result_line(text=text))

    def guarded(self, body: Iterator[Step]) -> Iterator[Step]:
        """``body``, ending in the max-turns or budget result when a limit trips."""
        try:
            yield from body
        except _TurnLimitError:
            limit = self.max_turns or 0
            self.turns = limit + 1
            if self.legacy_max_turns:
                yield Emit(self.result_line(subtype="error_max_turns"))
                yield Exit(0)
            else:
                yield Emit(
                    self.result_line(
                        subtype="error_max_turns",
                        is_error=True,
                        terminal_reason="max_turns",
                        errors=[f"Reached maximum number of turns ({limit})"],
                    )
                )
                yield Exit(1)
        except _BudgetLimitError:
            yield Emit(
                self.result_line(
                    subtype="error_max_budget_usd",
                    is_error=True,
                    errors=[f"Reached maximum budget (${self.max_budget:g})"],
                    terminal_reason=(
                        "budget_exhausted" if self.settings.version_at_least(2, 1, 330) else None
                    ),
                )
            )
            yield Exit(1)

    def steps(self) -> Iterator[Step]:
        """The chosen scenario with the turn and budget limits applied."""
        return self.guarded(super().steps())

    # -- primitives for the shared scenarios ------------------------------------

    def progress(self, index: int, total: int) -> Iterator[Step]:
        """One assistant text message."""
        text = "Let me look into this." if total == 1 else f"Working on step {index} of {total}."
        yield from self.call([{"type": "text", "text": text}])

    def dangling_tool(self) -> Iterator[Step]:
        """A Bash tool_use whose result never comes."""
        call = ToolCall(
            self.ids.tool(),
            "Bash",
            {"command": "npm test", "description": "Run the test suite"},
            lambda: ("", False, bash_result("", "")),
        )
        yield from self.call([{"type": "text", "text": "I'll run the tests."}, call.block()])

    def crash_trace(self) -> str:
        """A Node.js crash, the way Claude Code dies."""
        return (
            "file:///usr/local/lib/node_modules/@anthropic-ai/claude-code/cli.js:4211\n"
            "TypeError: Cannot read properties of undefined (reading 'content')\n"
            "    at processMessage (file:///usr/local/lib/node_modules/@anthropic-ai/"
            "claude-code/cli.js:4211:38)\n"
            "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\n"
            "\nNode.js v20.11.1\n"
        )

    def noise(self) -> Iterator[Step]:
        """A CRLF line, a truncated line, an unknown type."""
        rate = self._line(
            {
                "type": "rate_limit_event",
                "rate_limit_info": {
                    "status": "allowed",
                    "resetsAt": self.clock.now_ms() // 1000 + 18_000,
                    "rateLimitType": "five_hour",
                    "utilization": 0.12,
                },
            }
        )
        yield Raw(dumps(rate).decode("utf-8") + "\r")
        yield Raw('{"type":"assistant","mess')
        yield Emit({"type": "future_event", "x": 1})

    def sc_malformed_lines(self) -> Iterator[Step]:
        """The shared noise, and an unknown content block in the final message."""
        yield Raw("[SandboxDebug] fake sandbox probe: ok")
        yield from self.opening()
        yield Raw("")
        yield Raw("   ")
        yield from self.noise()
        yield from self.work()
        future = {"type": "future_block", "data": {"note": "a block type from a newer CLI"}}
        yield from self.closing(extra_blocks=[future])

    def huge(self, nbytes: int, events: int) -> Iterator[Step]:
        """A Bash output of ``nbytes``, then a reply streamed as ``events``
        text deltas. From 2.1.330 an output over 30,000 bytes is spilled to
        ``tool-results/`` with a preview, as the real CLI does; ``spill=0``
        (or an older version) sends it whole, in one huge line."""
        call = ToolCall(
            self.ids.tool(),
            "Bash",
            {"command": "cat build.log", "description": "Show the build log"},
            lambda: ("", False, None),
        )
        yield from self.call([{"type": "text", "text": "Let me look at the log."}, call.block()])
        if self.v330 and self.param_int("spill", 1) and nbytes > SPILL_ABOVE_BYTES:
            yield self._spilled_result(call.id, nbytes)
        else:
            yield from self._huge_line(call.id, nbytes)
        if events > 0:
            yield from self._streamed_text(events)

    def _spilled_result(self, tool_id: str, nbytes: int) -> Emit:
        # Written in pieces: the output is never held whole.
        folder = os.path.join(project_dir(self.ctx.cwd), self.session_id, "tool-results")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, self.ids.base62(9).lower() + ".txt")
        head = ""
        with open(path, "w", encoding="ascii") as fh:
            for piece in filler_text(nbytes):
                if len(head) < STDOUT_KEPT_CHARS:
                    head += piece[: STDOUT_KEPT_CHARS - len(head)]
                fh.write(piece)
        content = (
            f"<persisted-output>\nOutput too large ({_size_label(nbytes)}). Full output saved "
            f"to: {path}\n\nPreview (first 2KB):\n{head[:PREVIEW_CHARS]}\n...\n"
            "</persisted-output>"
        )
        result = bash_result(head, "")
        result.update(persistedOutputPath=path, persistedOutputSize=nbytes)
        return self.tool_result(tool_id, content, False, result)

    def _huge_line(self, tool_id: str, nbytes: int) -> Iterator[Step]:
        marker = "\x00FAKE-HUGE\x00"
        line = self._line(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": tool_id,
                            "type": "tool_result",
                            "content": marker,
                            "is_error": False,
                        }
                    ],
                },
                "parent_tool_use_id": None,
            }
        )
        line["tool_use_result"] = {
            "stdout": marker,
            "stderr": "",
            "interrupted": False,
            "isImage": False,
        }
        yield Chunks(huge_line(line, marker, nbytes))
        self.transcript.add(
            "user",
            line["uuid"],
            {
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": tool_id,
                            "type": "tool_result",
                            "content": f"[{nbytes} bytes of output not kept]",
                            "is_error": False,
                        }
                    ],
                },
                "toolUseResult": {"truncated": True},
            },
        )
        self.user_turns += 1

    def _streamed_text(self, events: int) -> Iterator[Step]:
        # The deltas are written as they are made; only the short words are
        # kept to build the assistant line that follows them.
        usage = self._new_usage(events * 6, fresh_context=False)
        msg_id = self.ids.message()
        self.turns += 1
        self.api_calls += 1
        self._account(self.model, usage, main=True)
        self._background()
        snapshot = usage.message_usage(self.rng.randint(1, min(12, usage.output - 1)))
        head: JsonObj = {
            "model": self.model,
            "id": msg_id,
            "type": "message",
            "role": "assistant",
        }
        start = dict(head, content=[], stop_reason=None, stop_sequence=None, usage=snapshot)
        yield self._stream({"type": "message_start", "message": start}, None)
        empty: JsonObj = {"type": "text", "text": ""}
        yield self._stream(
            {"type": "content_block_start", "index": 0, "content_block": empty}, None
        )
        words: list[str] = []
        for number in range(events):
            word = f"w{number} "
            words.append(word)
            delta = {"type": "text_delta", "text": word}
            yield self._stream({"type": "content_block_delta", "index": 0, "delta": delta}, None)
        yield self._stream({"type": "content_block_stop", "index": 0}, None)
        text = "".join(words)
        message = dict(head, content=[{"type": "text", "text": text}])
        message.update(
            stop_reason=None, stop_sequence=None, usage=snapshot, context_management=None
        )
        yield Emit(
            self._line({"type": "assistant", "message": message, "parent_tool_use_id": None})
        )
        closing_delta: JsonObj = {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage.output},
        }
        yield self._stream(closing_delta, None)
        yield self._stream({"type": "message_stop"}, None)

    def abort(self, signum: int) -> Iterable[Step]:
        """A graceful stop: ``error_during_execution``, ``aborted_streaming``.
        On SIGINT, as 2.1.330: the interruption line first, and exit 0."""
        interrupted = signum == signal.SIGINT
        if interrupted and not self.init_sent:
            return  # no session yet: nothing to report, exit 130
        if interrupted:
            self.user_turns += 1
            yield Emit(
                {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [{"type": "text", "text": "[Request interrupted by user]"}],
                    },
                    "parent_tool_use_id": None,
                    "session_id": self.session_id,
                    "uuid": self.ids.uuid4(),
                }
            )
        errors = [ABORT_DIAGNOSTIC] if interrupted and self.v330 else []
        yield Emit(
            self.result_line(
                subtype="error_during_execution",
                is_error=True,
                errors=errors,
                terminal_reason="aborted_streaming",
            )
        )
        if interrupted:
            yield Exit(0)

    def resume_missing(self) -> Iterator[Step]:
        """§1.6 unknown id: a result line (unless legacy), stderr, exit 1."""
        message = f"No conversation found with session ID: {self.session_id}"
        if not self.settings.legacy_errors:
            yield Emit(
                self.result_line(subtype="error_during_execution", is_error=True, errors=[message])
            )
        yield Stderr(message + "\n")
        yield Exit(1)

    def empty_prompt_error(self) -> CliError:
        """The real message for a missing prompt."""
        return CliError(ERR_EMPTY)

    # -- Claude-only scenarios: see claude_scenarios.py -------------------------

    def own_scenarios(self) -> dict[str, ScenarioFn]:
        """The §7.3 rows that only Claude has (their steps are in :mod:`claude_scenarios`)."""
        from weft.agents.fake.claude_scenarios import claude_scenarios

        return claude_scenarios(self)

    # -- API failures (scenarios and an unknown model) ---------------------------------------

    def _retry(self, attempt: int, status: int, error: str, delay: float) -> Emit:
        return Emit(
            self._line(
                {
                    "type": "system",
                    "subtype": "api_retry",
                    "attempt": attempt,
                    "max_retries": self.max_retries(),
                    "retry_delay_ms": int(delay),
                    "error_status": status,
                    "error": error,
                }
            )
        )

    def max_retries(self) -> int:
        """``CLAUDE_CODE_MAX_RETRIES``, else Claude Code's default of 10."""
        raw = os.environ.get("CLAUDE_CODE_MAX_RETRIES", "")
        return int(raw) if raw.strip().isdigit() else DEFAULT_MAX_RETRIES

    def _synthetic(self, text: str, error: str, extra: JsonObj | None = None) -> Emit:
        zero = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": self.ids.uuid4(),
            "type": "message",
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": zero,
        }
        line = self._line({"type": "assistant", "message": message, "parent_tool_use_id": None})
        line["error"] = error
        line.update(extra or {})
        fields: JsonObj = {"message": message, "isApiErrorMessage": True}
        if extra and "api_error_params" in extra:
            fields["apiErrorParams"] = extra["api_error_params"]
        self.transcript.add("assistant", line["uuid"], fields)
        return Emit(line)

    def api_failure(self, status: int, *, retries: int, delay: float) -> Iterator[Step]:
        """Retries, a ``<synthetic>`` error message, an ``is_error`` result, exit 1.
        Error codes and texts as Claude Code 2.1.330 prints them."""
        server = "This is a server-side issue, usually temporary \u2014 try again in a moment."
        kinds = {
            400: ("invalid_request", "API Error: 400 Invalid request"),
            401: ("authentication_failed", "Invalid API key \u00b7 Fix external API key"),
            402: ("billing_error", "Credit balance is too low"),
            403: (
                "authentication_failed",
                "Failed to authenticate. API Error: 403 Your API key does not have permission "
                "to use the specified resource.",
            ),
            404: (
                "model_not_found",
                f"There's an issue with the selected model ({self.model}). It may not exist or "
                "you may not have access to it. Run --model to pick a different model.",
            ),
            413: ("invalid_request", "Request too large (max 32MB)."),
            429: (
                "rate_limit",
                "API Error: Request rejected (429) \u00b7 Number of request tokens has exceeded "
                "your per-minute rate limit",
            ),
            500: ("server_error", f"API Error: 500 Internal server error. {server}"),
            529: ("server_error", f"API Error: 529 Overloaded. {server}"),
        }
        kind, text = kinds.get(status, ("unknown", f"API Error: {status} Unexpected error"))
        retry_error = {
            401: "authentication_failed",
            429: "rate_limit",
            529: "overloaded",
        }.get(status, "server_error")
        for attempt in range(1, retries + 1):
            wait = delay * 2 ** (attempt - 1)
            yield self._retry(attempt, status, retry_error, wait)
            yield Sleep(wait)
        yield self._synthetic(text, kind)
        self.turns += 1
        yield Emit(self.result_line(is_error=True, text=text, api_error_status=status))
        yield Exit(1)

    def sc_session_in_use(self) -> Iterator[Step]:
        """The pre-assigned id collides with an existing session."""
        yield Stderr(f"Error: Session ID {self.session_id} is already in use.\n")
        yield Exit(1)


# -- entry -------------------------------------------------------------------------------------


def main(argv: list[str], settings: Settings) -> int:
    """Run ``fake-claude`` with ``argv`` (without the program name)."""
    opts = ClaudeOptions(argv)
    if opts.parsed.flag("version"):
        sys.stdout.write(f"{settings.version} (Claude Code)\n")
        return 0
    if opts.parsed.flag("help"):
        sys.stdout.write(USAGE)
        return 0
    check_options(opts, settings)
    if opts.input_format == "stream-json":
        from weft.agents.fake.claude_stream import run_stream_input

        return run_stream_input(opts, settings, argv)

    stdin_text: str | None
    if opts.positionals and opts.positionals[0]:
        prompt = opts.positionals[0]
        stdin_text = read_stdin_if_ready(settings.stdin_wait_ms)
        if stdin_text and stdin_text.strip():
            prompt = f"{prompt}\n\n{stdin_text}"
    elif stdin_is_tty():
        stdin_text = None
        prompt = ""
    else:
        stdin_text = read_stdin()
        prompt = stdin_text
    write_record(settings, "claude", argv, stdin_text, {"prompt": prompt})
    if not prompt.strip():
        raise CliError(ERR_EMPTY)
    return run_prompt(opts, settings, argv, prompt)


def run_prompt(opts: ClaudeOptions, settings: Settings, argv: list[str], prompt: str) -> int:
    """Run one prompt to completion (text prompt mode)."""
    directives = dirs.parse(prompt)
    scenario, params = choose_scenario(directives, settings)
    rng = make_rng(settings, "claude", argv, prompt)
    clock = Clock(virtual=settings.seed is not None)
    capture: list[JsonObj] | None = None if opts.output_format == "stream-json" else []
    runner = Runner(settings, clock, rng, capture=capture)
    runner.install_signals(sigint_graceful=True)
    model = resolve_model(opts.model_arg, settings)
    ctx = Context(
        flavour="claude",
        settings=settings,
        argv=argv,
        rng=rng,
        clock=clock,
        runner=runner,
        cwd=os.getcwd(),
        prompt=prompt,
        directives=directives,
        scenario=scenario,
        params=params,
    )
    session, run = open_run(ctx, opts, model)
    if settings.script is not None:
        steps: Iterator[Step] = run.script_steps()
    elif session.missing:
        steps = run.resume_missing()
    elif scenario == "session_in_use":
        steps = run.sc_session_in_use()
    elif price_of(model) is None and scenario not in ("hang_before_init", "crash_before_init"):
        steps = _unknown_model(run)
    else:
        steps = run.steps()
    code = runner.run(with_start_delay(steps, settings, scenario), run.abort)
    if capture is not None:
        _print_captured(capture, opts)
    return code


def open_run(ctx: Context, opts: ClaudeOptions, model: str) -> tuple[Session, ClaudeRun]:
    """The session the flags select (its transcript opened, a forked
    history copied in) and the run that continues it."""
    settings = ctx.settings
    session = resolve_session(
        ctx.cwd,
        resume=opts.resume,
        continue_=opts.continue_,
        session_id=opts.session_id,
        fork=opts.fork,
        resume_mode=settings.resume_mode,
        new_id=ctx.ids.uuid4,
    )
    path = None if opts.no_persist else session.path
    transcript = Transcript(
        path, session.file_id, ctx.cwd, settings.version, ctx.clock, parent=session.parent
    )
    if session.copy_from and path is not None:
        transcript.write_raw(dumps(dict(e, sessionId=session.file_id)) for e in session.copy_from)
    run = ClaudeRun(
        ctx,
        opts,
        model=model,
        session_id=session.session_id,
        transcript=transcript,
        previous_prompt=session.previous_prompt,
    )
    if session.history:
        run.prior_usage = transcript_usage(session.history)
        run.prior_prompts = count_prompts(session.history)
        until = window_until(session.history)
        if until and ctx.directives.scenario is None and settings.scenario is None:
            # The account's window is the session's too: refused while it is
            # closed, reported (allowed) once it is open, as a subscriber's CLI does.
            ctx.scenario, ctx.params = "usage_window", {"until": repr(until)}
            run.params = ctx.params
    return session, run


def window_until(entries: list[JsonObj]) -> float:
    """When the usage window that last rejected this session opens (epoch
    seconds; 0 when none did)."""
    for entry in reversed(entries):
        params = entry.get("apiErrorParams")
        if entry.get("type") != "assistant" or not isinstance(params, dict):
            continue
        info = params.get("rate_limit_info")
        if isinstance(info, dict) and isinstance(info.get("resetsAt"), int | float):
            return float(info["resetsAt"])
    return 0.0


def transcript_usage(entries: list[JsonObj]) -> dict[str, Usage]:
    """Per model, what the assistant messages of a transcript cost (each
    message once: its blocks are stored as separate entries)."""
    by_message: dict[str, tuple[str, JsonObj]] = {}
    for entry in entries:
        message = entry.get("message")
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        mid, model, usage = message.get("id"), message.get("model"), message.get("usage")
        if isinstance(mid, str) and isinstance(model, str) and isinstance(usage, dict):
            by_message[mid] = (model, usage)
    totals: dict[str, Usage] = {}
    for model, raw in by_message.values():
        price = price_of(model)
        if model == "<synthetic>" or price is None:
            continue
        split = raw.get("cache_creation") or {}
        usage = Usage()
        usage.input = int(raw.get("input_tokens") or 0)
        usage.read = int(raw.get("cache_read_input_tokens") or 0)
        usage.output = int(raw.get("output_tokens") or 0)
        usage.write_1h = int(split.get("ephemeral_1h_input_tokens") or 0)
        usage.write_5m = int(raw.get("cache_creation_input_tokens") or 0) - usage.write_1h
        usage.price(price)
        totals.setdefault(model, Usage()).add(usage)
    return totals


def _unknown_model(run: ClaudeRun) -> Iterator[Step]:
    yield from run.opening()
    yield from run.api_failure(404, retries=0, delay=0)


def _print_captured(capture: list[JsonObj], opts: ClaudeOptions) -> None:
    results = [obj for obj in capture if obj.get("type") == "result"]
    out = sys.stdout
    if opts.output_format == "json":
        if opts.verbose:
            out.write(json.dumps(capture, ensure_ascii=False) + "\n")
        elif results:
            out.write(json.dumps(results[-1], ensure_ascii=False) + "\n")
    elif results:
        last = results[-1]
        if "result" in last:
            out.write(str(last["result"]) + "\n")
        else:
            errors = last.get("errors") or [last.get("subtype", "error")]
            out.write(f"Error: {'; '.join(str(e) for e in errors)}\n")
    out.flush()


def _size_label(nbytes: int) -> str:
    """A size as Claude Code prints it (``2.9MB`` for 3,000,000 bytes)."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    if nbytes < 1024 * 1024:
        return f"{nbytes / 1024:.1f}KB"
    return f"{nbytes / 1024 / 1024:.1f}MB"
