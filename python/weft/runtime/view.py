"""What the user sees during ``weft run``: a live table, plain lines or JSON lines.

Every event of a run reaches the views the way it reaches the journal and the
WebSocket clients: as a :class:`~weft.state.Processed` item, after its batch is
durable. A view is a StateManager listener::

    view = make_view("live", sys.stdout, progress=RunProgress.from_state(state))
    view.note("Resuming execution ...")     # the command's own messages
    manager.add_listener(view.on_event)
    view.start()                             # before or on the event loop
    ...                                      # the run
    view.stop()
    view.summary(RunSummary(status="completed", exit_code=0, execution=path, ...))

Three layers, so the figures can be tested without a terminal:

* :class:`RunProgress` folds the events into what a person wants to know (per
  codon: status, time, tokens, cost, last action, attempts, checkpoint,
  failure; per run: totals and how it ended). It does no I/O and reads no
  clock: elapsed times take ``now_ns`` as an argument. Each event it folds may
  yield a :class:`Note`, one short sentence about something worth a line.
* The views: :class:`LiveView` (a rich table redrawn at most a few times a
  second, never per event), :class:`HeadlessView` (one timestamped line per
  note, plus a progress line for long codons every ``progress_every`` seconds)
  and :class:`JsonView` (each event as one JSON line, the journal's bytes).
* :class:`RunSummary`, what the runtime knows at the end (status, exit code,
  execution directory, the command to resume), which each view prints with the
  model's figures.

``on_event`` runs on the event loop for every event, token deltas included,
so it does a dictionary lookup and a few additions for most of them; the only
I/O is writing a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol, TextIO

import msgspec
import orjson
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from weft.events.transitions import (
    AssistantMessageCountUpdated,
    CheckpointCreated,
    CodonFinalCostSet,
    CodonStarted,
    CodonTransitioned,
    Continuation,
    CostsIncremented,
    CostsUpdated,
    PlanEntry,
    PlanExtended,
    PlanTrimmed,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    TokenUsage,
    Transition,
    decode,
)
from weft.runtime.execution import ExecutionLayout
from weft.state import Processed
from weft.store.execution import DATABASE
from weft.store.writer import to_row
from weft.terminal import printable

__all__ = [
    "CodonProgress",
    "HeadlessView",
    "JsonView",
    "LiveView",
    "Note",
    "RunProgress",
    "RunSummary",
    "RunView",
    "ViewMode",
    "describe_action",
    "describe_tool",
    "format_cost",
    "format_duration",
    "format_tokens",
    "make_view",
    "render_progress",
    "rig_label",
    "summary_data",
    "summary_rows",
    "wants_live",
]

ViewMode = Literal["live", "headless", "json"]
TERMINAL = frozenset({"completed", "failed", "skipped"})
PENDING = "pending"
"""The status of a planned codon that has not started in this run."""

_NANO = 1_000_000_000


# --------------------------------------------------------------------------- formatting


def format_cost(usd: float | None) -> str:
    """Dollars with four decimals (``$0.0320``); ``-`` when unknown."""
    return "-" if usd is None else f"${usd:.4f}"


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


def format_duration(seconds: float) -> str:
    """A human duration: ``<1s``, ``42s``, ``1m 05s``, ``2h 03m``."""
    whole = max(int(seconds), 0)
    if whole == 0:
        return "<1s"
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, whitespace collapsed."""
    # Only the head is looked at: a message may be a whole long answer.
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _iso(ns: int) -> str:
    ms = ns // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _int(value: Any) -> int:
    # Stream data is Weft's own, but a view must never fail on an odd field.
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _nanos(usd: float) -> int:
    # The core keeps money in whole nano-dollars, rounded half-even; doing the
    # same keeps the view's totals equal to the core's, not merely close.
    return round(usd * _NANO)


def _token_total(tokens: TokenUsage) -> int:
    return (
        tokens.input_tokens
        + tokens.output_tokens
        + tokens.cache_creation_tokens
        + tokens.cache_read_tokens
    )


ACTION_LIMIT = 60
"""Characters of a codon's last action kept for display."""
_PATH_KEYS = ("file_path", "filePath", "notebook_path", "path")
_ARG_KEYS = ("command", "cmd", "pattern", "query", "url", "description", "prompt")


def describe_tool(name: str, tool_input: Mapping[str, Any] | None) -> str:
    """``tool Write notes.md``: the tool and its most telling argument."""
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
    return _clip(f"tool {name} {argument}" if argument else f"tool {name}", ACTION_LIMIT)


def describe_action(
    action: str, content: str, tool_name: str | None, tool_input: Mapping[str, Any] | None
) -> str:
    """The short text of an ``assistant.action``."""
    if action == "tool_use":
        return describe_tool(tool_name or content or "?", tool_input)
    if action == "thinking":
        return "thinking…"
    return _clip(f"message: {content}", ACTION_LIMIT)


def rig_label(codon: Mapping[str, Any] | None, index: int) -> str:
    """``npm ci`` or ``copy src -> dst``: rig operation ``index`` of a plan entry's codon."""
    ops = codon.get("rigSetup") if codon else None
    if not isinstance(ops, list) or not 0 <= index < len(ops) or not isinstance(ops[index], dict):
        return f"operation {index + 1}"
    op: dict[str, Any] = ops[index]
    command = op.get("command")
    if isinstance(command, dict) and isinstance(command.get("run"), str):
        lines = command["run"].strip().splitlines()
        return _clip(lines[0] if lines else command["run"], 40)
    copy = op.get("copy")
    if isinstance(copy, dict):
        return _clip(f"copy {copy.get('from', '?')} -> {copy.get('to', '?')}", 40)
    return f"operation {index + 1}"


# --------------------------------------------------------------------------- the model


@dataclass(slots=True)
class CodonProgress:
    """What is known of one codon in this run (all attempts; figures of skipped ones too)."""

    codon_id: str
    name: str | None = None
    model: str | None = None
    config: Mapping[str, Any] | None = None
    """The resolved codon of the plan entry (rigSetup labels come from it)."""
    status: str = PENDING
    earlier: str | None = None
    """The terminal status it reached in an earlier run of the execution, if any."""
    attempts: int = 0
    started_ns: int | None = None
    """When the latest attempt started."""
    ended_ns: int | None = None
    tokens: int = 0
    """Every token of every attempt (input, output, cache writes and reads)."""
    last_action: str = ""
    checkpoint: str | None = None
    failure: str | None = None
    """``<type>: <message>`` of the latest failure."""
    failed_during: str | None = None
    messages: int = 0
    _cost_before: int = 0
    _cost_now: int = 0
    _tokens_now: int = 0

    @property
    def active(self) -> bool:
        """Started in this run and not terminal."""
        return self.status != PENDING and self.status not in TERMINAL

    @property
    def finished(self) -> bool:
        """Terminal in this run."""
        return self.status in TERMINAL

    @property
    def cost(self) -> float:
        """Dollars this codon counts for in the run: every attempt, by the seed's
        getCodonCost (a skipped attempt counts nothing)."""
        return self.cost_nanos / _NANO

    @property
    def cost_nanos(self) -> int:
        """:attr:`cost` in nano-dollars."""
        return self._cost_before + self._counted_now()

    def elapsed(self, now_ns: int) -> float | None:
        """Seconds of the latest attempt (up to ``now_ns`` while it runs)."""
        if self.started_ns is None:
            return None
        end = self.ended_ns if self.ended_ns is not None else now_ns
        return max(end - self.started_ns, 0) / _NANO

    def _counted_now(self) -> int:
        return 0 if self.status in (PENDING, "skipped") else self._cost_now

    def _new_attempt(self, at_ns: int) -> None:
        self._cost_before += self._counted_now()
        self._cost_now = 0
        self._tokens_now = 0
        self.attempts += 1
        self.started_ns = at_ns
        self.ended_ns = None
        self.failure = None
        self.failed_during = None
        self.messages = 0
        self.status = "preparing"

    def _spend(self, nanos: int, tokens: int) -> None:
        self._cost_now += nanos
        self._tokens_now += tokens
        self.tokens += tokens

    def _set_spent(self, nanos: int, tokens: int) -> None:
        # A figure that replaces the attempt's running total (the agent's own).
        self._cost_now = nanos
        self.tokens += tokens - self._tokens_now
        self._tokens_now = tokens

    def _reset_for_new_run(self) -> None:
        if self.status in TERMINAL:
            self.earlier = self.status
        self.status = PENDING
        self.attempts = 0
        self.started_ns = self.ended_ns = None
        self.tokens = self._tokens_now = 0
        self._cost_before = self._cost_now = 0
        self.last_action = ""
        self.failure = self.failed_during = None
        self.checkpoint = None
        self.messages = 0


NoteKind = Literal[
    "run", "codon", "plan", "rig", "retry", "loop", "info", "error", "idle", "rejected"
]


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth one line: a state change, a failure, a message."""

    kind: NoteKind
    text: str
    codon_id: str | None = None
    status: str | None = None
    """For a ``codon`` note, the status the codon reached."""


class _StreamEnvelope(msgspec.Struct):
    data: dict[str, Any] = msgspec.field(default_factory=dict)


_stream_decoder = msgspec.json.Decoder(_StreamEnvelope)
_IGNORED_STREAMS = frozenset({"token.usage", "codon.completed"})
"""Stream events whose figures the model takes from transitions instead."""


class RunProgress:
    """The run as a person follows it, folded from processed events (no I/O).

    Codons are kept in plan order: the plan of a fresh ``RunStarted``, changed
    by ``PlanExtended`` and ``PlanTrimmed``; a continuation run keeps the plan
    given at construction (see :meth:`from_state`). Costs follow the core's
    rules exactly, so :attr:`total_cost` equals the core's cost of the run.
    """

    def __init__(self, plan: Iterable[Mapping[str, Any] | PlanEntry] = ()) -> None:
        self._codons: dict[str, CodonProgress] = {}
        self._order: list[str] = []
        self.run_id: str | None = None
        self.run_status: str | None = None
        """``running``, ``completed``, ``failed`` or ``crashed``; None before RunStarted."""
        self.started_ns: int | None = None
        self.ended_ns: int | None = None
        self.continuation: str | None = None
        """``<run>`` or ``<run> after <codon>`` for a continuation run."""
        self.checkpoints: set[str] = set()
        """Checkpoints made in this run (shas)."""
        self.failures: list[tuple[str, str]] = []
        """``(codon id, reason)`` of every failed attempt in this run, in order."""
        self.errors = 0
        self.rejected = 0
        self.last_seq = 0
        self._active: str | None = None
        self._replace_plan(plan)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunProgress:
        """A model seeded from a state document (see :meth:`seed`)."""
        progress = cls()
        progress.seed(state)
        return progress

    def seed(self, state: Mapping[str, Any]) -> None:
        """Takes the plan of a state document (``json.loads(core.state_json())``)
        and what earlier runs finished. A continuation run's ``RunStarted``
        carries no plan, so without this its pending codons are not shown."""
        self._replace_plan(state.get("executionPlan") or ())
        for run in reversed(state.get("runs") or ()):  # oldest first: newer wins
            for record in run.get("codons") or ():
                codon = self._codons.get(record.get("codonId"))
                if codon is not None and record.get("status") in TERMINAL:
                    codon.earlier = record["status"]

    # -- reading -------------------------------------------------------------

    @property
    def codons(self) -> list[CodonProgress]:
        """Every codon, in plan order (codons run outside the plan come last)."""
        return [self._codons[c] for c in self._order]

    def codon(self, codon_id: str) -> CodonProgress | None:
        """One codon's progress."""
        return self._codons.get(codon_id)

    @property
    def active(self) -> CodonProgress | None:
        """The codon being run, if any (Weft runs one at a time)."""
        return None if self._active is None else self._codons.get(self._active)

    @property
    def ended(self) -> bool:
        """Whether the run ended (completed, failed or crashed)."""
        return self.run_status not in (None, "running")

    @property
    def total_cost_nanos(self) -> int:
        """:attr:`total_cost` in nano-dollars."""
        return sum(c.cost_nanos for c in self._codons.values())

    @property
    def total_cost(self) -> float:
        """Dollars spent in this run."""
        return self.total_cost_nanos / _NANO

    @property
    def total_tokens(self) -> int:
        """Tokens used in this run."""
        return sum(c.tokens for c in self._codons.values())

    def counts(self) -> dict[str, int]:
        """How many codons are in each status (``pending`` = not started in this run)."""
        counts = dict.fromkeys(("completed", "failed", "skipped", "active", PENDING), 0)
        for c in self._codons.values():
            counts["active" if c.active else c.status] += 1
        return counts

    def elapsed(self, now_ns: int) -> float | None:
        """Seconds since the run started (to its end once it ended)."""
        if self.started_ns is None:
            return None
        end = self.ended_ns if self.ended_ns is not None else now_ns
        return max(end - self.started_ns, 0) / _NANO

    # -- folding -------------------------------------------------------------

    def apply(self, item: Processed) -> Note | None:
        """Folds one processed event; returns a note when it is worth a line."""
        self.last_seq = item.seq
        stream = item.stream
        if stream is not None:
            if stream.type in _IGNORED_STREAMS:
                return None
            return self._stream(item, stream.type, stream.codon_id)
        if not item.outcome.ok:
            self.rejected += 1
            kind = item.outcome.kind or "transition"
            return Note(
                "rejected", f"rejected {kind}: {item.outcome.message}", item.outcome.codon_id
            )
        event = item.event
        if event is None:
            try:
                event = decode(item.payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
        return self._transition(event, item.time_ns)

    def _transition(self, event: Transition, at: int) -> Note | None:
        # Ordered by frequency: cost updates dominate a run.
        if isinstance(event, CostsIncremented):
            self._get(event.codon_id)._spend(
                _nanos(event.cost_delta), _token_total(event.tokens_delta)
            )
            return None
        if isinstance(event, CodonTransitioned):
            return self._moved(event, at)
        if isinstance(event, AssistantMessageCountUpdated):
            self._get(event.codon_id).messages = event.new_count
            return None
        if isinstance(event, CodonFinalCostSet):
            self._get(event.codon_id)._set_spent(
                _nanos(event.final_cost), _token_total(event.final_tokens)
            )
            return None
        if isinstance(event, CostsUpdated):
            self._get(event.codon_id)._set_spent(_nanos(event.cost), _token_total(event.tokens))
            return None
        if isinstance(event, CodonStarted):
            c = self._get(event.codon_id)
            c._new_attempt(at)
            self._active = c.codon_id
            again = f" (attempt {c.attempts})" if c.attempts > 1 else ""
            return Note("codon", f"{c.codon_id}: preparing{again}", c.codon_id, "preparing")
        if isinstance(event, CheckpointCreated):
            self._get(event.codon_id).checkpoint = event.sha
            self.checkpoints.add(event.sha)
            return None
        if isinstance(event, RunStarted):
            return self._run_started(event, at)
        if isinstance(event, RunCompleted | RunFailed):
            return self._run_ended("completed" if isinstance(event, RunCompleted) else "failed", at)
        if isinstance(event, RunCrashed):
            if event.run_id != self.run_id:
                # An earlier run a dead process left running, marked at start:
                # not this progress's run (the runtime says it in a note).
                return None
            # The core fails the active codon; the model does the same.
            crashed = self.active
            if crashed is None:
                return self._run_ended("crashed", at)
            during = crashed.status
            self._finish(crashed, "failed", at)
            crashed.failure = "crash: Server crashed"
            crashed.failed_during = during
            self.failures.append((crashed.codon_id, crashed.failure))
            note = self._run_ended("crashed", at)
            return Note("run", f"{note.text}; {crashed.codon_id} failed during {during}")
        if isinstance(event, PlanExtended):
            return self._extend(event)
        if isinstance(event, PlanTrimmed):
            return self._trim(event)
        return None

    def _moved(self, event: CodonTransitioned, at: int) -> Note | None:
        c = self._get(event.codon_id)
        to = event.to_status
        meta = event.metadata
        if meta is not None and meta.checkpoint_sha:
            c.checkpoint = meta.checkpoint_sha
            self.checkpoints.add(meta.checkpoint_sha)
        if to not in TERMINAL:
            c.status = to
            model = f" ({c.model})" if to == "running" and c.model else ""
            return Note("codon", f"{c.codon_id}: {to}{model}", c.codon_id, to)
        self._finish(c, to, at)
        took = format_duration(c.elapsed(at) or 0.0)
        figures = f"{format_cost(c.cost)}, {format_tokens(c.tokens)} tokens"
        sha = f", checkpoint {c.checkpoint[:8]}" if c.checkpoint else ""
        if to == "completed":
            text = f"{c.codon_id}: completed in {took} ({figures}{sha})"
            return Note("codon", text, c.codon_id, to)
        if to == "skipped":
            during = meta.skipped_during if meta is not None else None
            where = f" during {during}" if during else ""
            return Note("codon", f"{c.codon_id}: skipped{where} after {took}", c.codon_id, to)
        reason = meta.failure_reason if meta is not None else None
        if reason is None:
            c.failure = "unknown reason"
        else:
            c.failure = f"{reason.kind}: {reason.message}" if reason.message else reason.kind
        c.failed_during = meta.failed_during if meta is not None else None
        self.failures.append((c.codon_id, c.failure))
        where = f" during {c.failed_during}" if c.failed_during else ""
        return Note(
            "codon",
            f"{c.codon_id}: FAILED{where} after {took} ({figures}): {c.failure}",
            c.codon_id,
            to,
        )

    def _finish(self, c: CodonProgress, status: str, at: int) -> None:
        c.status = status
        c.ended_ns = at
        if self._active == c.codon_id:
            self._active = None

    def _run_started(self, event: RunStarted, at: int) -> Note:
        if self.run_id is not None:
            for c in self._codons.values():
                c._reset_for_new_run()
        self.run_id = event.run_id
        self.run_status = "running"
        self.started_ns, self.ended_ns = at, None
        self.checkpoints = set()
        self.failures = []
        self._active = None
        if event.execution_plan is not None:
            self._replace_plan(event.execution_plan)
        how = "fresh"
        self.continuation = None
        if isinstance(event.starting_conditions, Continuation):
            source = event.starting_conditions.source
            after = f" after {source.after_codon}" if source.after_codon else ""
            self.continuation = f"{source.run_id}{after}"
            how = f"continuing run {self.continuation}"
        return Note("run", f"run {event.run_id} started ({how}), {len(self._order)} codons planned")

    def _run_ended(self, status: str, at: int) -> Note:
        self.run_status = status
        self.ended_ns = at
        took = format_duration(self.elapsed(at) or 0.0)
        return Note(
            "run", f"run {self.run_id} {status} after {took} ({format_cost(self.total_cost)})"
        )

    def _extend(self, event: PlanExtended) -> Note:
        added = [self._entry(e) for e in event.entries]
        at = (
            self._order.index(event.after_codon_id) + 1
            if event.after_codon_id in self._order
            else len(self._order)
        )
        added = [a for a in dict.fromkeys(added) if a not in self._order]
        self._order[at:at] = added
        return Note("plan", f"plan: added {', '.join(added)}" if added else "plan: unchanged")

    def _trim(self, event: PlanTrimmed) -> Note:
        dropped = set(event.codon_ids)
        kept = []
        for codon_id in self._order:
            c = self._codons[codon_id]
            if codon_id in dropped and c.status == PENDING:
                del self._codons[codon_id]
            else:
                kept.append(codon_id)
        self._order = kept
        return Note("plan", f"plan: removed {', '.join(event.codon_ids)}")

    def _replace_plan(self, plan: Iterable[Mapping[str, Any] | PlanEntry]) -> None:
        order = [self._entry(e) for e in plan]
        # Codons that ran but are no longer planned stay visible, after the plan.
        planned = set(order)
        extra = [c for c in self._order if c not in planned and self._codons[c].status != PENDING]
        self._order = order + extra
        for codon_id in list(self._codons):
            if codon_id not in planned and codon_id not in extra:
                del self._codons[codon_id]

    def _entry(self, entry: Mapping[str, Any] | PlanEntry) -> str:
        if isinstance(entry, PlanEntry):
            codon_id, config = entry.codon_id, entry.codon
        else:
            codon_id, config = str(entry["codonId"]), entry.get("codon") or {}
        c = self._codons.get(codon_id)
        if c is None:
            c = self._codons[codon_id] = CodonProgress(codon_id)
        c.config = config
        name, model = config.get("name"), config.get("model")
        c.name = name if isinstance(name, str) else c.name
        c.model = model if isinstance(model, str) else c.model
        return codon_id

    def _get(self, codon_id: str) -> CodonProgress:
        c = self._codons.get(codon_id)
        if c is None:
            c = self._codons[codon_id] = CodonProgress(codon_id)
            self._order.append(codon_id)
        return c

    def _stream(self, item: Processed, kind: str, codon_id: str | None) -> Note | None:
        try:
            data = _stream_decoder.decode(item.payload).data
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if codon_id is None:
            found = data.get("codonId")
            codon_id = found if isinstance(found, str) else None
        c = self._codons.get(codon_id) if codon_id else None
        if kind == "assistant.action":
            if c is not None:
                c.last_action = describe_action(
                    str(data.get("action", "")),
                    str(data.get("content", "")),
                    data.get("toolName"),
                    data.get("toolInput") if isinstance(data.get("toolInput"), dict) else None,
                )
            return None
        if kind == "codon.started":
            model = data.get("model")
            if c is not None and isinstance(model, str) and model:
                c.model = model  # what the agent reported, not the hank's alias
            return None
        if kind == "rig.output":
            if c is not None:
                c.last_action = "rig: " + rig_label(c.config, _int(data.get("commandIndex")))
            return None
        if kind == "tool.result":
            if c is not None and data.get("isError"):
                c.last_action = _clip(f"tool {data.get('toolName') or '?'} failed", ACTION_LIMIT)
            return None
        where = f"{codon_id}: " if codon_id else ""
        if kind == "rig.setup.failed":
            index = _int(data.get("commandIndex", data.get("operationIndex")))
            label = rig_label(c.config if c else None, index)
            ignored = " (ignored: allowFailure)" if data.get("ignored") else ""
            if c is not None:
                c.last_action = _clip(f"rig failed: {label}", ACTION_LIMIT)
            message = _clip(str(data.get("message", "")), 300)
            return Note(
                "rig",
                f"{where}rig operation {index + 1} ({label}) failed{ignored}: {message}",
                codon_id,
            )
        if kind == "rig.setup.completed":
            took = format_duration(_int(data.get("durationMs")) / 1000)
            return Note(
                "rig",
                f"{where}rig setup done ({data.get('operationCount', 0)} ops, {took})",
                codon_id,
            )
        if kind == "codon.retry":
            if c is not None:
                c.last_action = f"retry {data.get('attempt')}/{data.get('maxAttempts')}"
            delay = format_duration(_int(data.get("delayMs")) / 1000)
            return Note(
                "retry",
                f"{where}retry {data.get('attempt')}/{data.get('maxAttempts')} in {delay}: "
                f"{_clip(str(data.get('reason', '')), 200)}",
                codon_id,
            )
        if kind == "loop.iteration.completed":
            final = data.get("isFinal")
            why = data.get("terminationReason")
            end = f", final{': ' + str(why) if why else ''}" if final else ""
            took = format_duration(_int(data.get("durationMs")) / 1000)
            cost = _float(data.get("costUsd"))
            return Note(
                "loop",
                f"loop {data.get('loopId')} iteration {data.get('iteration')} done in {took} "
                f"({format_cost(cost)}, {format_tokens(_int(data.get('tokensUsed')))} tokens"
                f"{end})",
            )
        if kind == "error":
            self.errors += 1
            severity = "fatal" if data.get("fatal") else data.get("severity")
            label = {"fatal": "fatal error", "warning": "warning"}.get(str(severity), "error")
            message = _clip(str(data.get("message", "")), 300)
            return Note("error", f"{where}{label}: {message}", codon_id)
        if kind == "info":
            message = str(data.get("message", ""))
            prefix = "" if codon_id and codon_id in message else where
            return Note("info", f"{prefix}{_clip(message, 300)}", codon_id)
        if kind == "server.idle":
            return Note("idle", f"idle: {_clip(str(data.get('message', '')), 200)}")
        if kind == "rollback.started":
            undone = ", ".join(map(str, data.get("codonsToProcess") or ())) or "nothing"
            target = str(data.get("toCodon") or "the initial state")
            sha = str(data.get("toCheckpoint", ""))[:10]
            return Note(
                "info",
                f"rolling back to the {data.get('checkpointType')} checkpoint {sha} of {target}; "
                f"undoing {_clip(undone, 200)}",
            )
        if kind == "rollback.progress":
            step = f"{data.get('currentStep')}/{data.get('totalSteps')}"
            return Note("info", f"rollback {step}: {_clip(str(data.get('message', '')), 200)}")
        if kind == "rollback.completed":
            return Note(
                "info",
                f"rolled back: run {data.get('toRun')} continues from "
                f"{str(data.get('checkpoint', ''))[:10]}",
            )
        if kind == "checkpoint.list":
            # Journaled by earlier versions; now the asking client's own answer.
            return Note("info", checkpoint_list_text(data))
        return None


def checkpoint_list_text(data: Mapping[str, Any]) -> str:
    """One line for a ``checkpoint.list`` answer: its newest 20 checkpoints."""
    rows = data.get("checkpoints") or []
    listed = "; ".join(
        f"{str(r.get('sha', ''))[:10]} {r.get('checkpointType')} {r.get('codonId')}"
        for r in rows[:20]
    )
    more = f"; {len(rows) - 20} more" if len(rows) > 20 else ""
    return f"{len(rows)} checkpoint(s), newest first: {listed}{more}"


# --------------------------------------------------------------------------- the summary


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the runtime knows when ``weft run`` ends; the view adds the figures."""

    status: str
    """``completed``, ``failed``, ``crashed``, ``interrupted``..."""
    exit_code: int
    execution: Path | None = None
    """The execution directory (the journal and checkpoints are under it)."""
    resume_command: str | None = None
    """The command that resumes or continues this execution."""
    message: str | None = None
    """Why the run ended that way, when there is more to say."""
    duration_ms: int | None = None
    """Wall time of the whole command; by default, from the run's start to its end."""

    @property
    def journal(self) -> Path | None:
        """The journal database of the execution."""
        return (
            None if self.execution is None else ExecutionLayout(self.execution).weft_dir / DATABASE
        )

    @property
    def checkpoint_repository(self) -> Path | None:
        """The folder of the shadow checkpoint repository."""
        return None if self.execution is None else ExecutionLayout(self.execution).checkpoints


def summary_data(progress: RunProgress, result: RunSummary, now_ns: int) -> dict[str, Any]:
    """The end summary as JSON-ready data (camelCase, like the events)."""
    counts = progress.counts()
    earlier = sum(1 for c in progress.codons if c.status == PENDING and c.earlier == "completed")
    if result.duration_ms is not None:
        wall_ms: int | None = result.duration_ms
    else:
        elapsed = progress.elapsed(now_ns)
        wall_ms = None if elapsed is None else round(elapsed * 1000)
    return {
        "status": result.status,
        "exitCode": result.exit_code,
        "message": result.message,
        "runId": progress.run_id,
        "codons": {
            "completed": counts["completed"],
            "failed": counts["failed"],
            "skipped": counts["skipped"],
            "notRun": counts[PENDING] - earlier + counts["active"],
            "total": len(progress.codons),
            "doneEarlier": earlier,
        },
        "totalCost": progress.total_cost,
        "tokens": progress.total_tokens,
        "wallTimeMs": wall_ms,
        "checkpoints": len(progress.checkpoints),
        "failures": [{"codonId": c, "reason": r} for c, r in progress.failures],
        "execution": None if result.execution is None else str(result.execution),
        "journal": None if result.journal is None else str(result.journal),
        "checkpointRepository": (
            None if result.checkpoint_repository is None else str(result.checkpoint_repository)
        ),
        "resumeCommand": result.resume_command,
    }


def summary_rows(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The summary as ``(label, text)`` rows, for the text views."""
    rows: list[tuple[str, str]] = []
    if data["runId"] is not None:
        rows += _figures(data)
    if data["journal"]:
        rows.append(("journal", data["journal"]))
    if data["checkpointRepository"]:
        rows.append(("repository", data["checkpointRepository"]))
    if data["resumeCommand"]:
        label = "resume" if data["exitCode"] != 0 else "continue"
        rows.append((label, data["resumeCommand"]))
    return rows


def _figures(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    codons = data["codons"]
    counted = (
        f"{codons['completed']} completed, {codons['failed']} failed, {codons['skipped']} skipped"
    )
    if codons["notRun"]:
        counted += f", {codons['notRun']} not run"
    counted += f" (of {codons['total']})"
    if codons["doneEarlier"]:
        counted += f"; {codons['doneEarlier']} done in earlier runs"
    rows = [("codons", counted)]
    rows.append(
        ("cost", f"{format_cost(data['totalCost'])} ({format_tokens(data['tokens'])} tokens)")
    )
    if data["wallTimeMs"] is not None:
        rows.append(("time", format_duration(data["wallTimeMs"] / 1000)))
    rows.append(("checkpoints", f"{data['checkpoints']} made"))
    failures = data["failures"]
    for failure in failures[:5]:
        rows.append(("failed", f"{failure['codonId']}: {_clip(failure['reason'], 160)}"))
    if len(failures) > 5:
        rows.append(("failed", f"… and {len(failures) - 5} more (weft status)"))
    return rows


_TITLES = {"nothing_to_do": "Nothing to do"}


def _title(result: RunSummary) -> str:
    title = f"{_TITLES.get(result.status, f'Run {result.status}')} (exit {result.exit_code})"
    return f"{title}: {result.message}" if result.message else title


# --------------------------------------------------------------------------- the views


class RunView(Protocol):
    """What ``weft run`` shows. ``on_event`` is a StateManager listener: it runs
    on the event loop for every event and must stay cheap."""

    progress: RunProgress
    """The model the view shows; seed it with the state a resumed run starts from."""

    def on_event(self, item: Processed) -> None:
        """Takes one processed event."""

    def note(self, message: str) -> None:
        """Shows a message of the command itself (not an event of the run)."""

    def start(self) -> None:
        """Starts showing. Timed refreshes begin with the first event, on its loop."""

    def stop(self) -> None:
        """Stops showing (a last refresh first); idempotent."""

    def summary(self, result: RunSummary) -> None:
        """Prints the end summary."""


class _Lines:
    """Writes lines to a text stream; flushes once per event-loop turn, not per line.

    With ``escape``, each line goes through :func:`weft.terminal.printable`
    first: ids, names, messages and file names come from hank files and agents.
    """

    def __init__(self, stream: TextIO, *, escape: bool = False) -> None:
        self.stream = stream
        self._escape = escape
        self._flush_pending = False
        self._broken = False

    def write(self, line: str) -> None:
        if self._broken:
            return
        if self._escape:
            line = printable(line)
        try:
            self.stream.write(line + "\n")
        except (BrokenPipeError, ValueError):
            # The reader went away (`weft run --json | head`): stop writing, keep running.
            self._broken = True
            return
        if self._flush_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_pending = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        if self._broken:
            return
        try:
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self._broken = True


def _call_later(delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle | None:
    # ``weft run`` starts its view before the event loop exists; the timer is
    # then armed by the first event, which the StateManager delivers on the loop.
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(delay, callback)


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        with contextlib.suppress(RuntimeError):  # its loop may be closed by now
            timer.cancel()


class HeadlessView:
    """Plain timestamped lines for CI logs: a line per codon state change, rig
    failures, errors, information, retries, loop iterations, and every
    ``progress_every`` seconds a progress line for the codon being run. Token
    and cost updates only ever show in those lines."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        progress: RunProgress | None = None,
        progress_every: float = 30.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self._out = _Lines(stream if stream is not None else sys.stdout, escape=True)
        self._every_ns = int(progress_every * _NANO)
        self._clock = clock
        self._last_line: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._running = False

    def on_event(self, item: Processed) -> None:
        """Folds the event; writes its line, if it has one."""
        note = self.progress.apply(item)
        if note is not None:
            self._out.write(f"{item.timestamp} {note.text}")
            if note.codon_id is not None:
                self._last_line[note.codon_id] = item.time_ns
        if self._timer is None and self._running:
            self._schedule()

    def note(self, message: str) -> None:
        """Writes ``message`` as a timestamped line."""
        self._out.write(f"{_iso(self._clock())} {message}")

    def tick(self, now_ns: int) -> None:
        """Writes a progress line for the active codon if it has been quiet for
        ``progress_every`` seconds."""
        c = self.progress.active
        if c is None or c.started_ns is None:
            return
        last = self._last_line.get(c.codon_id, c.started_ns)
        if now_ns - last < self._every_ns:
            return
        self._last_line[c.codon_id] = now_ns
        action = f", last: {c.last_action}" if c.last_action else ""
        self._out.write(
            f"{_iso(now_ns)} {c.codon_id}: {c.status} for {format_duration(c.elapsed(now_ns) or 0)}"
            f" ({format_tokens(c.tokens)} tokens, {format_cost(c.cost)}{action})"
        )

    def start(self) -> None:
        """Enables the progress timer; it runs on the loop of the events."""
        self._running = True
        self._schedule()

    def stop(self) -> None:
        """Stops the progress timer."""
        self._running = False
        _cancel(self._timer)
        self._timer = None
        self._out.flush()

    def summary(self, result: RunSummary) -> None:
        """Writes the summary: a title line, then indented ``label  text`` lines."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        self._out.write(f"{_iso(now)} {_title(result)}")
        for label, text in summary_rows(data):
            self._out.write(f"  {label:<12} {text}")
        self._out.flush()

    def _schedule(self) -> None:
        # A quiet agent sends no events, so a timer (not the events) drives the
        # progress lines; checking every second is cheaper than one event.
        period = max(0.05, min(1.0, self._every_ns / _NANO / 4))
        self._timer = _call_later(period, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._running:
            return
        self.tick(self._clock())
        self._schedule()


class JsonView:
    """Each event as one JSON line, ``{"id","seq","timestamp","type","data"}``:
    the journal's payload bytes with the envelope spliced in front, never
    re-encoded. A refused transition appears as the journal records it, an
    ``error`` event. The summary is one last line, ``{"type": "run.summary", ...}``."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        progress: RunProgress | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self._out = _Lines(stream if stream is not None else sys.stdout)
        self._clock = clock

    def on_event(self, item: Processed) -> None:
        """Writes the event's line (and folds it, for the summary)."""
        self.progress.apply(item)
        payload = to_row(item)[7].strip()
        head = f'{{"id":"{item.id}","seq":{item.seq},"timestamp":"{item.timestamp}"'
        rest = payload[1:].lstrip()
        if not payload.startswith("{") or not rest:
            return
        self._out.write(f"{head}}}" if rest.startswith("}") else f"{head},{rest}")

    def note(self, message: str) -> None:
        """Writes ``{"type":"note","timestamp":...,"data":{"message":...}}``."""
        line = {"type": "note", "timestamp": _iso(self._clock()), "data": {"message": message}}
        self._out.write(orjson.dumps(line).decode())

    def start(self) -> None:
        """Nothing to start: lines are written as events come."""

    def stop(self) -> None:
        """Flushes."""
        self._out.flush()

    def summary(self, result: RunSummary) -> None:
        """Writes ``{"type":"run.summary","timestamp":...,"data":{...}}``."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        line = {"type": "run.summary", "timestamp": _iso(now), "data": data}
        self._out.write(orjson.dumps(line).decode())
        self._out.flush()


_STYLES = {
    PENDING: "dim",
    "preparing": "yellow",
    "starting": "yellow",
    "initializing": "yellow",
    "running": "bold cyan",
    "completing-sentinels": "cyan",
    "completed": "green",
    "failed": "bold red",
    "skipped": "magenta",
}
_ICONS = {PENDING: "·", "completed": "✓", "failed": "✗", "skipped": "↷"}
_NOTE_STYLES: dict[str, str] = {
    "error": "red",
    "rejected": "red",
    "rig": "yellow",
    "retry": "yellow",
    "run": "bold",
}


class LiveView:
    """A rich table of every codon (status, time, tokens, cost, last action)
    under a scrolling log of what happened (codons ending, failures, errors,
    retries, loop iterations). The table is rebuilt by a timer at most
    ``refreshes_per_second`` times a second, and once a second while a codon
    runs (its clock moves), never per event. Meant for a terminal: use
    :func:`make_view`, which falls back to :class:`HeadlessView` otherwise."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        progress: RunProgress | None = None,
        refreshes_per_second: float = 4.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self.console = console if console is not None else Console()
        self._period = 1.0 / refreshes_per_second
        self._clock = clock
        self._live: Live | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._dirty = True
        self._rendered_ns = 0
        self.renders = 0
        """How many times the table was rebuilt (the throttle is tested on it)."""

    def on_event(self, item: Processed) -> None:
        """Folds the event; lines worth keeping go to the log above the table."""
        note = self.progress.apply(item)
        self._dirty = True
        if self._timer is None and self._live is not None:
            self._schedule()
        if note is None or note.kind == "idle":
            return
        if note.kind == "codon" and note.status not in TERMINAL:
            return  # the table shows it
        style = _STYLES[note.status] if note.status else _NOTE_STYLES.get(note.kind, "")
        self._print(item.time_ns, note.text, style)

    def note(self, message: str) -> None:
        """Prints ``message`` above the table."""
        self._print(self._clock(), message, "")

    def _print(self, at_ns: int, message: str, style: str) -> None:
        line = Text(time.strftime("%H:%M:%S ", time.localtime(at_ns // _NANO)), style="dim")
        line.append(printable(message), style=style)
        with contextlib.suppress(BrokenPipeError, ValueError):
            if self._live is not None and self._dirty:
                # Printing redraws the last drawn table below the line: make it current.
                self._live.update(self.renderable(), refresh=True)
            self.console.print(line, soft_wrap=True)

    def start(self) -> None:
        """Shows the table and starts the refresh timer (when on an event loop)."""
        if self._live is not None:
            return
        # Other output (logging, prints) is routed above the table, but only
        # when the table is on the process's own stdout.
        redirect = self.console.file in (sys.stdout, sys.__stdout__)
        self._live = Live(
            self.renderable(),
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=redirect,
            redirect_stderr=redirect,
            vertical_overflow="ellipsis",
        )
        self._live.start(refresh=True)
        self._schedule()

    def refresh(self) -> None:
        """Rebuilds and redraws the table now."""
        if self._live is None:
            return
        self._live.update(self.renderable(), refresh=True)

    def stop(self) -> None:
        """Draws the table a last time and leaves it on the screen."""
        _cancel(self._timer)
        self._timer = None
        if self._live is not None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.refresh()
                self._live.stop()
            self._live = None

    def summary(self, result: RunSummary) -> None:
        """Prints the summary in a panel."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")
        for label, text in summary_rows(data):
            grid.add_row(label, Text(printable(text)))
        ok = result.exit_code == 0
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.console.print(
                Panel(
                    grid,
                    title=Text(_title(result), style="bold green" if ok else "bold red"),
                    title_align="left",
                    border_style="green" if ok else "red",
                    expand=False,
                )
            )

    def renderable(self, now_ns: int | None = None) -> RenderableType:
        """The table and its totals line, as they stand."""
        now = self._clock() if now_ns is None else now_ns
        self._dirty = False
        self._rendered_ns = now
        self.renders += 1
        return render_progress(self.progress, now, max_rows=max(self.console.size.height - 6, 5))

    def _schedule(self) -> None:
        self._timer = _call_later(self._period, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._live is None:
            return
        now = self._clock()
        ticking = self.progress.active is not None and now - self._rendered_ns >= _NANO
        if self._dirty or ticking:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.refresh()
        self._schedule()


def _window(count: int, first_open: int, max_rows: int) -> tuple[int, int]:
    """Which rows ``[start, end)`` of ``count`` to show in ``max_rows`` lines,
    keeping the first unfinished codon and two finished ones before it in view."""
    if count <= max_rows:
        return 0, count
    budget = max(max_rows - 2, 1)  # two lines say what is hidden
    start = max(0, min(first_open - 2, count - budget))
    return start, min(count, start + budget)


def render_progress(progress: RunProgress, now_ns: int, *, max_rows: int = 40) -> RenderableType:
    """The codon table and a totals line."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    table.add_column("", width=1)
    table.add_column("codon", overflow="ellipsis", max_width=32)
    table.add_column("status", overflow="ellipsis")
    table.add_column("time", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("last action", overflow="ellipsis", max_width=ACTION_LIMIT)
    codons = progress.codons
    first_open = next((i for i, c in enumerate(codons) if not c.finished), len(codons))
    start, end = _window(len(codons), first_open, max_rows)
    if start:
        table.add_row("", Text(f"… {start} earlier codons", style="dim"))
    for c in codons[start:end]:
        table.add_row(*_row(c, now_ns))
    if end < len(codons):
        table.add_row("", Text(f"… {len(codons) - end} more", style="dim"))
    return Group(table, _totals(progress, now_ns))


def _row(c: CodonProgress, now_ns: int) -> tuple[RenderableType, ...]:
    style = _STYLES.get(c.status, "")
    name = Text(printable(c.codon_id))
    if c.name and c.name != c.codon_id:
        name.append(f" {printable(c.name)}", style="dim")
    if c.status == PENDING and c.earlier:
        status = Text(f"{c.earlier} earlier", style="dim")
    else:
        status = Text(c.status, style=style)
        if c.attempts > 1:
            status.append(f" (try {c.attempts})", style="yellow")
    elapsed = c.elapsed(now_ns)
    action = Text(printable(c.failure or c.last_action), style="red" if c.failure else "")
    return (
        Text(_ICONS.get(c.status, "●"), style=style),
        name,
        status,
        "" if elapsed is None else format_duration(elapsed),
        format_tokens(c.tokens) if c.tokens else "",
        format_cost(c.cost) if c.status != PENDING else "",
        action,
    )


def _totals(progress: RunProgress, now_ns: int) -> Text:
    counts = progress.counts()
    total = len(progress.codons)
    text = Text()
    if progress.run_id is None:
        text.append("waiting for the run to start", style="dim")
        return text
    status = progress.run_status or "running"
    text.append(f"run {progress.run_id} ", style="bold")
    text.append(status, style=_STYLES.get(status, "bold cyan" if status == "running" else "red"))
    text.append(f" · {counts['completed']}/{total} completed")
    if counts["failed"]:
        text.append(f" · {counts['failed']} failed", style="red")
    if counts["skipped"]:
        text.append(f" · {counts['skipped']} skipped")
    text.append(
        f" · {format_cost(progress.total_cost)} · {format_tokens(progress.total_tokens)} tokens"
    )
    elapsed = progress.elapsed(now_ns)
    if elapsed is not None:
        text.append(f" · {format_duration(elapsed)}")
    return text


CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "CIRCLECI", "TRAVIS")
"""Set in CI: the live view's redraws would flood a log, so lines are written instead."""


def wants_live(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is a terminal a live table can redraw: a TTY, not
    ``TERM=dumb``, and not in CI (FORCE_COLOR is not enough: it is set in CI)."""
    env = os.environ if environ is None else environ
    if env.get("TERM", "").lower() in ("dumb", "unknown") or any(env.get(v) for v in CI_VARIABLES):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def make_view(
    mode: str = "live",
    stream: TextIO | None = None,
    *,
    progress: RunProgress | None = None,
    environ: Mapping[str, str] | None = None,
) -> RunView:
    """The view for ``weft run``'s flags: ``json`` (``--json``), ``headless``
    (``--headless``), or ``live``, which needs a terminal on ``stream`` (default
    stdout; see :func:`wants_live`) and is headless otherwise."""
    if mode not in ("live", "headless", "json"):
        raise ValueError(f"unknown view mode {mode!r}: use live, headless or json")
    out = stream if stream is not None else sys.stdout
    if mode == "json":
        return JsonView(out, progress=progress)
    if mode == "live" and wants_live(out, environ):
        return LiveView(Console(file=out, force_terminal=True), progress=progress)
    return HeadlessView(out, progress=progress)
