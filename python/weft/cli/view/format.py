"""Words and figures for people: money, token counts, durations, a codon's last action.

Pure functions of values (no terminal, no I/O), shared by every view.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from weft.events.stream import (
    AssistantActionEvent,
    BreakerWaitingEvent,
    CodonParkedEvent,
    CodonRetryEvent,
    RigOutputEvent,
    RigSetupFailedEvent,
    SessionCooldownEvent,
    SessionResumedEvent,
    ToolResultEvent,
)
from weft.money import format_cost, known, known_cost, total_cost
from weft.progress import CodonProgress, RunProgress

# Re-exported: they live in weft.terminal so that light commands (weft diff) can word
# times without importing the views and the fold.
from weft.terminal import format_duration as format_duration
from weft.terminal import format_wait as format_wait
from weft.windows.park import until_words


def codon_cost(c: CodonProgress) -> str:
    """A codon's cost as it is known (:func:`weft.money.known`), and the money a skipped
    attempt spent beside the ``$0`` the seed counts for it."""
    text = known(c.cost_nanos, c.unpriced)
    if not c.unpriced and c.spent_nanos > c.cost_nanos:
        text += f" (spent {format_cost(c.spent)})"
    return text


def attempt_figures(c: CodonProgress) -> str:
    """The cost and tokens of ``c``'s latest attempt (what its ``codon.completed``
    says). An attempt's line stands beside that attempt's duration, so it shows
    that attempt's own figures: :attr:`CodonProgress.cost` and
    :attr:`CodonProgress.tokens` add up every attempt of the run."""
    # ``unpriced`` is the codon's in this run, not the attempt's: its attempts
    # share its model, so what holds for one holds for the others.
    cost = known(c.attempt_cost_nanos, c.unpriced)
    return f"{cost}, {format_tokens(c.attempt_tokens)} tokens"


def run_cost(p: RunProgress) -> str:
    """A run's total (:func:`total_cost`): ``≥ $X (n codons unpriced)`` when
    some model has no price, ``unpriced`` when nothing priced was spent, and
    what skipped attempts spent when the seed's total leaves it out."""
    return total_cost(p.total_cost, p.unpriced, p.spent)


def iteration_cost(p: RunProgress, loop_id: str, iteration: int, usd: float) -> str:
    """A loop iteration's cost (its ``loop.iteration.completed`` figure) as it
    is known: ``unpriced`` or ``≥ $X`` when one of its codons has no price."""
    unpriced = any(c.unpriced for c in map(p.codon, p.iteration(loop_id, iteration)) if c)
    return known_cost(usd, unpriced)


def format_tokens(count: int) -> str:
    """A compact token count: ``950``, ``12.3k``, ``456k``, ``1.2M`` (three figures at most)."""
    if count < 1000:
        return str(max(count, 0))
    value = float(count)
    for unit in ("k", "M", "B", "T"):
        value /= 1000
        # Thresholds chosen so rounding never shows "100.0k" or "1000k".
        if value < 99.95:
            return f"{value:.1f}{unit}"
        if value < 999.5:
            return f"{value:.0f}{unit}"
    return f"{value:.0f}T"


def clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, whitespace collapsed."""
    # Only the head is looked at: a message may be a whole long answer.
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def iso(ns: int) -> str:
    ms = ns // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


ACTION_LIMIT = 60
"""Characters of a codon's last action kept for display."""
_PATH_KEYS = ("file_path", "filePath", "notebook_path", "path")
_ARG_KEYS = ("command", "cmd", "pattern", "query", "url", "description", "prompt")


def describe_tool(
    name: str, tool_input: Mapping[str, Any] | None, limit: int = ACTION_LIMIT
) -> str:
    """``tool Write notes.md``: the tool and its most telling argument (``limit`` characters)."""
    argument = ""
    if tool_input:
        for key in _PATH_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                argument = PurePosixPath(value).name or value
                break
        else:
            for key in _ARG_KEYS:
                value = tool_input.get(key)
                if isinstance(value, list):
                    value = " ".join(str(v) for v in value)
                if isinstance(value, str) and value.strip():
                    argument = value.strip().splitlines()[0]
                    break
    return clip(f"tool {name} {argument}" if argument else f"tool {name}", limit)


def describe_action(
    action: str, content: str, tool_name: str | None, tool_input: Mapping[str, Any] | None
) -> str:
    """The short text of an ``assistant.action``."""
    if action == "tool_use":
        return describe_tool(tool_name or content or "?", tool_input)
    if action == "thinking":
        return "thinking…"
    return clip(f"message: {content}", ACTION_LIMIT)


def rig_label(codon: Mapping[str, Any] | None, index: int) -> str:
    """``npm ci`` or ``copy src -> dst``: rig operation ``index`` of a plan entry's codon."""
    ops = codon.get("rigSetup") if codon else None
    if not isinstance(ops, list) or not 0 <= index < len(ops) or not isinstance(ops[index], dict):
        return f"operation {index + 1}"
    op: dict[str, Any] = ops[index]
    command = op.get("command")
    if isinstance(command, dict) and isinstance(command.get("run"), str):
        lines = command["run"].strip().splitlines()
        return clip(lines[0] if lines else command["run"], 40)
    copy = op.get("copy")
    if isinstance(copy, dict):
        return clip(f"copy {copy.get('from', '?')} -> {copy.get('to', '?')}", 40)
    return f"operation {index + 1}"


def describe_last(c: CodonProgress) -> str:
    """The short text of what a codon did last ("" when nothing yet)."""
    last = c.last
    if isinstance(last, AssistantActionEvent):
        return describe_action(last.action, last.content, last.tool_name, last.tool_input)
    if isinstance(last, RigOutputEvent):
        return "rig: " + rig_label(c.config, last.command_index)
    if isinstance(last, RigSetupFailedEvent):
        return clip(f"rig failed: {rig_label(c.config, last.command_index)}", ACTION_LIMIT)
    if isinstance(last, CodonRetryEvent):
        return f"retry {last.attempt}/{last.max_attempts}"
    if isinstance(last, ToolResultEvent):
        return clip(f"tool {last.tool_name or '?'} failed", ACTION_LIMIT)
    if isinstance(last, SessionCooldownEvent):
        wait = format_duration(last.duration_ms / 1000)
        return clip(f"cooling down {wait} ({last.error_class})", ACTION_LIMIT)
    if isinstance(last, SessionResumedEvent):
        return f"session {last.session} resumed" if last.resume_session_id else "session restarted"
    if isinstance(last, BreakerWaitingEvent):
        wait = format_duration(last.retry_in_ms / 1000)
        return clip(f"waiting {wait}: {last.provider} circuit open", ACTION_LIMIT)
    if isinstance(last, CodonParkedEvent):
        return clip(f"parked until {parked_until(last)}", ACTION_LIMIT)
    return ""


def parked_until(event: CodonParkedEvent) -> str:
    """When a parked codon resumes (:func:`weft.windows.park.until_words`)."""
    return until_words(event.resume_at, event.provider, event.window)


def checkpoint_list_text(data: Mapping[str, Any]) -> str:
    """One line for a ``checkpoint.list`` answer: its newest 20 checkpoints."""
    rows = data.get("checkpoints") or []
    listed = "; ".join(
        f"{str(r.get('sha', ''))[:10]} {r.get('checkpointType')} {r.get('codonId')}"
        for r in rows[:20]
    )
    more = f"; {len(rows) - 20} more" if len(rows) > 20 else ""
    return f"{len(rows)} checkpoint(s), newest first: {listed}{more}"
