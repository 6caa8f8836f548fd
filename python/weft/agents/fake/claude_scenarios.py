"""Claude-only scenario rows (§7.3) for ``fake-claude``.

Each ``sc_*`` function drives a :class:`~weft.agents.fake.claude.ClaudeRun` through
one row of the table that :func:`claude_scenarios` returns; the run keeps the
wire format (lines, usage, results), these keep the story each row tells. The
shared rows (success, hangs, crashes, floods) are in :mod:`scenarios`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial

from weft.agents.fake.claude import ClaudeRun, Usage
from weft.agents.fake.claude_tools import ToolCall, failure
from weft.agents.fake.common import FakeConfigError, quote
from weft.agents.fake.output import Emit, Exit, Sleep, Stderr, Step
from weft.agents.fake.pricing import ALIASES, BACKGROUND_MODEL, price_of
from weft.agents.fake.scenarios import ScenarioFn

MAX_TOKENS_NUDGE = (
    "Output token limit hit. Resume directly \u2014 no apology, no recap of what you were "
    "doing. Pick up mid-thought if that is where the cut happened. Break remaining work into "
    "smaller pieces."
)
"""The user prompt 2.1.330 injects after an answer stopped at ``max_tokens``."""

RETRIED_STATUSES = frozenset({401, 429, 529})
"""Statuses 2.1.330 retries (with every 5xx); 400, 402, 403, 404 and 413 fail at once."""


def claude_scenarios(run: ClaudeRun) -> dict[str, ScenarioFn]:
    """The §7.3 rows that only Claude has, bound to ``run``."""
    return {
        "tool_use": partial(sc_tool_use, run),
        "max_tokens": partial(sc_max_tokens, run),
        "parallel_tools": partial(sc_parallel_tools, run),
        "tool_error": partial(sc_tool_error, run),
        "thinking": partial(sc_thinking, run),
        "subagent": partial(sc_subagent, run),
        "partial_messages": partial(sc_partial_messages, run),
        "retry_then_ok": partial(sc_retry_then_ok, run),
        "api_error": partial(sc_api_error, run),
        "auth_error": partial(sc_auth_error, run),
        "max_turns": partial(sc_max_turns, run),
        "max_turns_legacy": partial(sc_max_turns_legacy, run),
        "max_budget": partial(sc_max_budget, run),
        "error_result": partial(sc_error_result, run),
        "cost_omitted": partial(sc_cost_omitted, run),
        "multi_model_cost": partial(sc_multi_model_cost, run),
        "context_full": partial(sc_context_full, run),
        "usage_window": partial(sc_usage_window, run),
        "resume": run.sc_success,
        "multi_turn_stdin": run.sc_success,
        "session_in_use": run.sc_session_in_use,
    }


def sc_tool_use(run: ClaudeRun) -> Iterator[Step]:
    """Text and a Bash tool_use in one message, its result, a reply."""
    yield from run.opening()
    yield from run.tool_round("I'll list the files first.", [run.toolbox.ls_call()])
    yield from run.work()
    yield from run.closing()


def sc_max_tokens(run: ClaudeRun) -> Iterator[Step]:
    """An answer cut at ``max_tokens``; the CLI goes on by itself (2.1.330):
    a synthetic user line with its nudge, a second call, success."""
    yield from run.opening()
    yield from run.work()
    yield from run.call([{"type": "text", "text": "Here is the start of the answer, cut at the"}])
    line = run._line(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": MAX_TOKENS_NUDGE}],
            },
            "parent_tool_use_id": None,
        }
    )
    line["isSynthetic"] = True
    run.user_turns += 1
    run.transcript.add("user", line["uuid"], {"message": line["message"], "isMeta": True})
    yield Emit(line)
    yield from run.closing()


def sc_parallel_tools(run: ClaudeRun) -> Iterator[Step]:
    """Two tool_use blocks in one message; results in reverse order."""
    yield from run.opening()
    calls = [run.toolbox.glob_call("*.md"), run.toolbox.glob_call("*.py")]
    yield from run.tool_round("I'll search for both kinds of file.", calls, reverse=True)
    yield from run.work()
    yield from run.closing()


def sc_tool_error(run: ClaudeRun) -> Iterator[Step]:
    """A Read of a missing file: ``is_error`` and a string tool_use_result."""
    yield from run.opening()
    missing = os.path.join(run.ctx.cwd, "__fake_missing__", "settings.json")
    call = ToolCall(
        run.ids.tool(),
        "Read",
        {"file_path": missing},
        lambda: failure("File does not exist."),
        target=missing,
    )
    yield from run.tool_round("Let me read the settings file.", [call])
    yield from run.work()
    yield from run.closing()


def sc_thinking(run: ClaudeRun) -> Iterator[Step]:
    """A thinking block before the text (one message, two lines)."""
    yield from run.opening()
    yield from run.work()
    thought = f"The user asked: {quote(run.ctx.directives.plain, 80)}. I should answer briefly."
    signature = "Eq" + run.ids.base62(180)
    if run.v330:
        # 2.1.330 reports its estimate of the thinking as it streams.
        estimate = 0
        for share in (len(thought) // 8, len(thought) // 4 - len(thought) // 8):
            estimate += max(1, share)
            line = {
                "type": "system",
                "subtype": "thinking_tokens",
                "estimated_tokens": estimate,
                "estimated_tokens_delta": max(1, share),
            }
            yield Emit(run._line(line))
    yield from run.closing(
        extra_blocks=[{"type": "thinking", "thinking": thought, "signature": signature}]
    )


def _subagent(run: ClaudeRun, model: str) -> Iterator[Step]:
    task_id = run.ids.tool()
    prompt = "Find the files that matter for this request and summarise them."
    task = ToolCall(
        task_id,
        "Task",
        {"description": "Explore the repository", "prompt": prompt, "subagent_type": "Explore"},
        lambda: ("", False, None),
    )
    yield from run.call([{"type": "text", "text": "I'll ask a subagent to explore."}, task.block()])
    inner = run.toolbox.glob_call("*")
    yield from run.tool_round("Listing the top level.", [inner], parent=task_id, model=model)
    summary = f"The working directory has {len(run.ctx.workspace.listing())} visible entries."
    yield from run.call([{"type": "text", "text": summary}], parent=task_id, model=model)
    usage = run.model_usage.get(model, Usage())
    yield run.tool_result(
        task_id,
        [{"type": "text", "text": summary}],
        False,
        {
            "status": "completed",
            "prompt": prompt,
            "agentId": run.ids.base62(8).lower(),
            "content": [{"type": "text", "text": summary}],
            "totalDurationMs": run.rng.randint(2000, 9000),
            "totalTokens": usage.input + usage.output + usage.read + usage.write_5m,
            "totalToolUseCount": 1,
        },
    )


def sc_subagent(run: ClaudeRun) -> Iterator[Step]:
    """A Task tool whose subagent (on Haiku) works with parent_tool_use_id set."""
    yield from run.opening()
    yield from _subagent(run, BACKGROUND_MODEL)
    yield from run.work()
    yield from run.closing()


def sc_partial_messages(run: ClaudeRun) -> Iterator[Step]:
    """``stream_event`` deltas around every assistant line."""
    run.partial = True
    yield from sc_tool_use(run)


def sc_retry_then_ok(run: ClaudeRun) -> Iterator[Step]:
    """``count`` (3) ``api_retry`` notices (529, overloaded), then normal.
    Each is followed by its ``retry_delay_ms`` (``delay_ms``, 500, doubling)."""
    yield from run.opening()
    base = run.param_float("delay_ms", 500.0)
    for attempt in range(1, run.param_int("count", 3) + 1):
        delay = base * 2 ** (attempt - 1)
        yield run._retry(attempt, 529, "overloaded", delay)
        yield Sleep(delay)
    yield from run.work()
    yield from run.closing()


def sc_api_error(run: ClaudeRun) -> Iterator[Step]:
    """Rate-limited (``status``, 429) after ``count`` (2) retries. With
    ``fails``, only ``fails`` prompts of the session fail, from its prompt
    number ``after`` (0, the first) on (a transient outage: the prompts before
    and after run normally)."""
    fails, after = run.param_int("fails", 0), run.param_int("after", 0)
    if fails > 0 and not after <= run.prior_prompts < after + fails:
        yield from run.sc_success()
        return
    yield from run.opening()
    yield from run.work()
    status = run.param_int("status", 429)
    if not run.v330:
        retries = run.param_int("count", 2 if status in (429, 500, 529) else 0)
    elif status in RETRIED_STATUSES or status >= 500:
        # The real default (10 retries over about 3 minutes) only when
        # CLAUDE_CODE_MAX_RETRIES asks for it; 2 quick ones otherwise.
        env = os.environ.get("CLAUDE_CODE_MAX_RETRIES", "").strip()
        retries = run.param_int("count", int(env) if env.isdigit() else 2)
    else:
        retries = 0  # 2.1.330 does not retry 400, 402, 403, 404 or 413
    yield from run.api_failure(status, retries=retries, delay=run.param_float("delay_ms", 500.0))


def sc_auth_error(run: ClaudeRun) -> Iterator[Step]:
    """No usable credentials: no retries, a synthetic message, exit 1
    (2.1.330's text for a missing key; a rejected key is ``api_error,status=401``,
    which 2.1.330 retries)."""
    yield from run.opening()
    text = (
        "Not logged in \u00b7 Please run /login"
        if run.v330
        else "Invalid API key \u00b7 Please run /login"
    )
    yield run._synthetic(text, "authentication_failed")
    run.turns += 1
    yield Emit(run.result_line(is_error=True, text=text))
    yield Exit(1)


def _endless_rounds(run: ClaudeRun) -> Iterator[Step]:
    yield from run.opening()
    yield from run.work()
    step = 0
    while True:
        step += 1
        yield from run.tool_round(f"Looking further (pass {step}).", [run.toolbox.glob_call("*")])


def sc_max_turns(run: ClaudeRun) -> Iterator[Step]:
    """Tool rounds until ``--max-turns`` (or ``turns``, 3) trips."""
    if run.max_turns is None:
        run.max_turns = run.param_int("turns", 3)
    return _endless_rounds(run)


def sc_max_turns_legacy(run: ClaudeRun) -> Iterator[Step]:
    """The 2.0.x shape: ``error_max_turns`` with ``is_error:false``, exit 0."""
    run.legacy_max_turns = True
    run.turn_allowance_offset = 0
    return sc_max_turns(run)


def sc_max_budget(run: ClaudeRun) -> Iterator[Step]:
    """Tool rounds until ``--max-budget-usd`` (or ``usd``, 0.05) is spent."""
    if run.max_budget is None:
        run.max_budget = run.param_float("usd", 0.05)
    return _endless_rounds(run)


def sc_error_result(run: ClaudeRun) -> Iterator[Step]:
    """``error_during_execution`` with ``errors:["Tool execution crashed"]``."""
    yield from run.opening()
    yield from run.work()
    yield from run.progress(1, 1)
    yield Stderr(
        "Error: Tool execution crashed\n    at runTool (cli.js:3120:11)\n"
        "    at async query (cli.js:2877:5)\n"
    )
    yield Emit(
        run.result_line(
            subtype="error_during_execution", is_error=True, errors=["Tool execution crashed"]
        )
    )
    yield Exit(1)


def sc_cost_omitted(run: ClaudeRun) -> Iterator[Step]:
    """Success without ``total_cost_usd`` and ``costUSD``."""
    run.omit_cost = True
    return run.sc_success()


def sc_multi_model_cost(run: ClaudeRun) -> Iterator[Step]:
    """Main model, a subagent on another (Opus, or Sonnet under Opus) and
    the Haiku background call: three modelUsage entries."""
    other = ALIASES["sonnet"] if run.model.startswith("claude-opus") else ALIASES["opus"]
    if run.params.get("cache_ttl") == "1h":
        run.ttl_1h = True
    yield from run.opening()
    yield from _subagent(run, other)
    yield from run.work()
    yield from run.closing()


CONTEXT_SHAPES = ("prompt_too_long", "compact")
"""How ``context_full`` reports the full context."""


def sc_context_full(run: ClaudeRun) -> Iterator[Step]:
    """The session's context fills up at its ``after``-th prompt (3; earlier
    prompts of a resumed session count): until then a normal run; then, as
    Claude Code 2.1.330 reports it, ``shape=prompt_too_long`` (the default)
    is the API's 400: a ``<synthetic>`` "Prompt is too long" message and an
    ``is_error`` result with ``terminal_reason:"prompt_too_long"``, exit 1;
    ``shape=compact`` is an automatic ``compact_boundary`` (the CLI compacted
    the conversation by itself), then a normal success; unless ``--settings``
    switched auto-compaction off (``autoCompactEnabled: false``), when the
    prompt is too long instead, as with the real CLI.

    So a ``continue-previous`` loop (``terminateOn: contextExceeded``) or an
    ``exhaustWithPrompt`` codon on the fake ends after a known number of turns.
    """
    shape = run.params.get("shape") or "prompt_too_long"
    if shape not in CONTEXT_SHAPES:
        raise FakeConfigError(
            f"scenario context_full: shape={shape!r} is not one of {', '.join(CONTEXT_SHAPES)}"
        )
    if run.prior_prompts + 1 < max(1, run.param_int("after", 3)):
        yield from run.sc_success()
        return
    price = price_of(run.model)
    window = price.context_window if price else 200_000
    tokens = window + run.rng.randint(1_000, 20_000)
    yield from run.opening()
    if shape == "compact" and run.opts.auto_compact:
        yield Emit(
            run._line(
                {
                    "type": "system",
                    "subtype": "compact_boundary",
                    "compact_metadata": {"trigger": "auto", "pre_tokens": tokens},
                }
            )
        )
        yield from run.work()
        yield from run.closing()
        return
    text = (
        f"Prompt is too long \u00b7 the request is ~{tokens} tokens (limit {window}). "
        "Start a new session or compact the conversation."
    )
    yield run._synthetic(text, "invalid_request")
    run.turns += 1
    yield Emit(
        run.result_line(
            is_error=True, text=text, api_error_status=400, terminal_reason="prompt_too_long"
        )
    )
    yield Exit(1)


def window_line(run: ClaudeRun, status: str, resets_at: int, utilization: float) -> Emit:
    """A ``rate_limit_event`` as 2.1.330 prints it with a subscription token."""
    info = {
        "status": "rejected" if status == "rejected" else "allowed",
        "resetsAt": resets_at,
        "rateLimitType": "five_hour",
        "isUsingOverage": False,
        "unifiedWindows": {
            "five_hour": {"utilization": utilization, "resetsAt": resets_at, "status": status}
        },
    }
    return Emit(run._line({"type": "rate_limit_event", "rate_limit_info": info}))


def sc_usage_window(run: ClaudeRun) -> Iterator[Step]:
    """The account's five-hour window is closed until ``until`` (epoch seconds,
    wall clock): a ``rejected`` window, the synthetic "You've hit your 5-hour
    limit" message, an ``is_error`` result with status 429, exit 1 (reference
    real-agent-clis §1.10). A resume of the session remembers the window (it is
    the account's); from ``until`` on the session runs normally and reports an
    ``allowed`` window."""
    until = run.param_float("until", 0.0)
    yield from run.opening()
    if time.time() >= until:
        reset = int(time.time()) + 5 * 3600
        yield from run.work()
        text = run.final_text()
        yield from run.call([{"type": "text", "text": text}])
        yield window_line(run, "allowed", reset, 0.5)
        yield Emit(run.result_line(text=text))
        return
    reset = int(until)
    yield window_line(run, "rejected", reset, 1)
    when = time.strftime("%I:%M%p", time.gmtime(reset)).lstrip("0").lower()
    text = f"You've hit your 5-hour limit \u00b7 resets {when} (UTC)"
    info = {
        "status": "rejected",
        "resetsAt": reset,
        "rateLimitType": "five_hour",
        "isUsingOverage": False,
    }
    yield run._synthetic(
        text,
        "rate_limit",
        {
            "is_api_error_message": True,
            "api_error_status": 429,
            "api_error": "usage_limit_reached",
            "api_error_params": {"rate_limit_info": info},
            "api_error_type": "rate_limit_error",
        },
    )
    run.turns += 1
    result = run.result_line(is_error=True, text=text, api_error_status=429)
    result.update(api_error="usage_limit_reached", api_error_type="rate_limit_error")
    yield Emit(result)
    yield Exit(1)
