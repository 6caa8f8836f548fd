"""One short sentence for each event worth a line: a state change, a failure, a message.

:func:`see` folds a processed event into the :class:`~weft.progress.RunProgress`
and then words it: one small function per event class, reading the event and
the fold as it stands after it. Events that are not worth a line (token usage,
tool calls) have no function and cost a dictionary lookup.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from weft.cli.view.format import (
    attempt_figures,
    checkpoint_list_text,
    clip,
    codon_cost,
    describe_tool,
    format_duration,
    format_tokens,
    format_wait,
    iteration_cost,
    parked_until,
    rig_label,
    run_cost,
)
from weft.events.stream import (
    ArchiveCompletedEvent,
    ArchivePartialEvent,
    AssistantActionEvent,
    BreakerChangedEvent,
    BreakerWaitingEvent,
    BudgetExceededEvent,
    BudgetSummaryEvent,
    CheckpointListEvent,
    CodonExtendedEvent,
    CodonParkedEvent,
    CodonRetryEvent,
    ErrorEvent,
    Event,
    InfoEvent,
    LoopIterationCompletedEvent,
    RejectedTransition,
    RigSetupCompletedEvent,
    RigSetupFailedEvent,
    RollbackArchiveRestoreEvent,
    RollbackCompletedEvent,
    RollbackProgressEvent,
    RollbackStartedEvent,
    SentinelError,
    SentinelOutput,
    ServerIdleEvent,
    SessionCooldownEvent,
    SessionGaveUpEvent,
    SessionMessageEvent,
    SessionResumedEvent,
    ToolResultEvent,
    UsageWindowEvent,
    typed,
)
from weft.events.transitions import (
    CodonStarted,
    CodonTransitioned,
    PlanExtended,
    PlanTrimmed,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
)
from weft.money import format_cost, known_cost
from weft.progress import TERMINAL, RunProgress
from weft.state import Processed
from weft.terminal import plural

if TYPE_CHECKING:
    # Only named in annotations: weft.client loads the WebSocket client (websockets.asyncio.client,
    # urllib.request), which a view on weft run's own process never uses.
    from weft.client import Event as WireEvent

NoteKind = Literal[
    "detail",
    "run",
    "codon",
    "plan",
    "rig",
    "retry",
    "loop",
    "info",
    "error",
    "idle",
    "rejected",
    "sentinel",
    "budget",
]


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth one line: a state change, a failure, a message."""

    kind: NoteKind
    text: str
    codon_id: str | None = None
    status: str | None = None
    """For a ``codon`` note, the status the codon reached."""


def see(progress: RunProgress, item: Processed) -> Note | None:
    """Folds ``item`` into ``progress``; returns its note, if it is worth a line."""
    event = progress.apply(item)
    return word(
        progress, event, item.time_ns, None if item.stream is None else item.stream.codon_id
    )


def wire_time_ns(event: WireEvent) -> int:
    """When a wire event was committed: its id starts with the milliseconds."""
    try:
        return int(event.id[:13]) * 1_000_000
    except ValueError:
        return time.time_ns()


def fold_wire(progress: RunProgress, event: WireEvent) -> tuple[Event | None, int]:
    """Folds a wire event (``weft attach``'s) into ``progress``: its decoded data
    is converted to the typed event once, without a JSON round trip. Returns
    the typed event and its time."""
    typed_event = typed(event.type, event.data)
    at = wire_time_ns(event)
    progress.fold(typed_event, at, event.seq)
    return typed_event, at


def see_wire(progress: RunProgress, event: WireEvent) -> Note | None:
    """:func:`see` for a wire event."""
    typed_event, at = fold_wire(progress, event)
    return word(progress, typed_event, at)


def word(
    progress: RunProgress, event: Event | None, at_ns: int, codon_id: str | None = None
) -> Note | None:
    """The note of an event ``progress`` has just folded (None if not worth a line)."""
    if event is None:
        return None
    handler = _NOTES.get(type(event))
    if handler is None:
        return None
    return handler(progress, event, at_ns, codon_id or getattr(event, "codon_id", None))


# -- transitions ----------------------------------------------------------------


def _codon_started(p: RunProgress, event: CodonStarted, at: int, _: str | None) -> Note | None:
    c = p.codon(event.codon_id)
    if c is None:
        return None
    again = f" (attempt {c.attempts})" if c.attempts > 1 else ""
    return Note("codon", f"{c.codon_id}: preparing{again}", c.codon_id, "preparing")


STATE_WORDS = {
    "starting": "starting the agent",
    "initializing": "agent started, waiting for its session",
    "completing-sentinels": "finishing",
}
"""User words for the codon states whose names are internal (``--json`` keeps the names)."""


def _moved(p: RunProgress, event: CodonTransitioned, at: int, _: str | None) -> Note | None:
    c = p.codon(event.codon_id)
    if c is None:
        return None
    to = event.to_status
    if to not in TERMINAL:
        model = f" ({c.model})" if to == "running" and c.model else ""
        said = STATE_WORDS.get(to, to)
        return Note("codon", f"{c.codon_id}: {said}{model}", c.codon_id, to)
    took = format_duration(c.elapsed(at) or 0.0)
    figures = attempt_figures(c)
    # A retried codon's line is its latest attempt's; what all its attempts
    # cost together follows, named as such (the run's total is the run line's).
    total = f"; {codon_cost(c)} over {c.attempts} attempts" if c.attempts > 1 else ""
    if to == "completed":
        sha = f", checkpoint {c.checkpoint[:8]}" if c.checkpoint else ""
        text = f"{c.codon_id}: completed in {took} ({figures}{sha}{total})"
        return Note("codon", text, c.codon_id, to)
    meta = event.metadata
    if to == "skipped":
        during = meta.skipped_during if meta is not None else None
        where = f" during {during}" if during else ""
        return Note("codon", f"{c.codon_id}: skipped{where} after {took}", c.codon_id, to)
    where = f" during {c.failed_during}" if c.failed_during else ""
    if c.stopped:
        # A stop (yours, or the run's budget) cut it short: it stays to do.
        text = f"{c.codon_id}: stopped{where} after {took} ({figures}{total}); it stays to do"
        return Note("codon", text, c.codon_id, to)
    text = f"{c.codon_id}: FAILED{where} after {took} ({figures}{total}): {c.failure}"
    return Note("codon", text, c.codon_id, to)


def _run_started(p: RunProgress, event: RunStarted, at: int, _: str | None) -> Note:
    how = f"continuing run {p.continuation}" if p.continuation else "fresh"
    planned = len(p.codons)
    return Note("run", f"run {event.run_id} started ({how}), {plural(planned, 'codon')} planned")


def _run_ended(p: RunProgress, event: Any, at: int, _: str | None) -> Note:
    took = format_duration(p.elapsed(at) or 0.0)
    word = p.ending.word if p.ending is not None else p.run_status
    return Note("run", f"run {p.run_id} {word} after {took} ({run_cost(p)})")


def _run_crashed(p: RunProgress, event: RunCrashed, at: int, _: str | None) -> Note | None:
    if event.run_id != p.run_id:
        return None  # an earlier run, marked crashed at start: the runtime says so
    note = _run_ended(p, event, at, None)
    crashed = None if p.crashed is None else p.codon(p.crashed)
    if crashed is None:
        return note
    return Note("run", f"{note.text}; {crashed.codon_id} failed during {crashed.failed_during}")


def _extended(p: RunProgress, event: PlanExtended, at: int, _: str | None) -> Note:
    added = p.plan_added
    return Note("plan", f"plan: added {', '.join(added)}" if added else "plan: unchanged")


def _trimmed(p: RunProgress, event: PlanTrimmed, at: int, _: str | None) -> Note:
    return Note("plan", f"plan: removed {', '.join(event.codon_ids)}")


def _rejected(p: RunProgress, event: RejectedTransition, at: int, codon: str | None) -> Note:
    kind = event.transition_type or "transition"
    return Note("rejected", f"rejected {kind}: {event.message}", codon)


# -- stream events ----------------------------------------------------------------


def _where(codon_id: str | None) -> str:
    return f"{codon_id}: " if codon_id else ""


def _rig_failed(p: RunProgress, event: RigSetupFailedEvent, at: int, codon: str | None) -> Note:
    c = None if codon is None else p.codon(codon)
    index = event.command_index
    label = rig_label(c.config if c else None, index)
    ignored = " (ignored: allowFailure)" if event.ignored else ""
    message = clip(event.message, 300)
    text = f"{_where(codon)}rig operation {index + 1} ({label}) failed{ignored}: {message}"
    return Note("rig", text, codon)


def _rig_done(p: RunProgress, event: RigSetupCompletedEvent, at: int, codon: str | None) -> Note:
    took = format_duration(event.duration_ms / 1000)
    text = f"{_where(codon)}rig setup done ({plural(event.operation_count, 'operation')}, {took})"
    return Note("rig", text, codon)


def _retry(p: RunProgress, event: CodonRetryEvent, at: int, codon: str | None) -> Note:
    delay = format_wait(event.delay_ms / 1000)
    text = f"{_where(codon)}retry {event.attempt}/{event.max_attempts} in {delay}"
    c = None if codon is None else p.codon(codon)
    failure = c.failure if c is not None else None
    # The failure's own line has just said why (its ``<kind>: <message>``): the
    # retry says a reason only when it is news.
    if event.reason and not (failure and event.reason in failure):
        text += f": {clip(event.reason, 200)}"
    return Note("retry", text, codon)


def _cooldown(p: RunProgress, event: SessionCooldownEvent, at: int, codon: str | None) -> Note:
    wait = format_wait(event.duration_ms / 1000)
    hint = " (Retry-After)" if event.duration_ms == event.retry_after_ms else ""
    what = event.error_class + (f": {clip(event.message, 160)}" if event.message else "")
    return Note(
        "retry",
        f"{_where(codon)}session {event.session} failed ({what}); cooling down {wait}{hint}, "
        f"{event.consecutive_errors} in a row, {event.total_errors} in all",
        codon,
    )


def _resumed(p: RunProgress, event: SessionResumedEvent, at: int, codon: str | None) -> Note:
    how = (
        f"resumes {event.resume_session_id}"
        if event.resume_session_id
        else "starts again (no session was reported)"
    )
    why = " (the usage window is open)" if event.reason == "window" else ""
    return Note("retry", f"{_where(codon)}session {event.session} {how}{why}", codon)


def _parked(p: RunProgress, event: CodonParkedEvent, at: int, codon: str | None) -> Note:
    wait = format_wait(max(0, event.resume_at - time.time() * 1000) / 1000)
    what = (
        f"session {event.session} was refused: the usage window is closed"
        if event.session
        else f"the usage window is closed ({event.message})"
        if event.message
        else "the usage window is closed"
    )
    return Note(
        "retry",
        f"{_where(codon)}{what}; parked until {parked_until(event)}, {wait} from now "
        "(no error counted)",
        codon,
    )


def _usage_window(p: RunProgress, event: UsageWindowEvent, at: int, codon: str | None) -> Note:
    window = f" {event.window}" if event.window else ""
    used = "" if event.utilization is None else f" {event.utilization:.0%} used;"
    resets = ""
    if event.resets_at is not None:
        resets = " resets " + time.strftime("%H:%M UTC", time.gmtime(event.resets_at / 1000))
    if event.status == "allowed_warning":
        return Note("budget", f"{event.provider}{window} usage window nearly spent:{used}{resets}")
    if event.status == "rejected":
        return Note("retry", f"{event.provider}{window} usage window closed:{used}{resets}")
    return Note("info", f"{event.provider}{window} usage window open:{used}{resets}")


def _message(p: RunProgress, event: SessionMessageEvent, at: int, codon: str | None) -> Note:
    how = "urgent message (the agent is interrupted)" if event.urgent else "message queued"
    return Note("info", f"{_where(codon)}{how}: {clip(event.message, 200)}", codon)


def _breaker(p: RunProgress, event: BreakerChangedEvent, at: int, codon: str | None) -> Note:
    if event.state == "open":
        cool = format_wait(event.cooldown_ms / 1000)
        what = (
            f"opened after {plural(event.consecutive_failures, 'failure')} in a row; "
            f"codons wait {cool} before one probe session"
        )
        if event.previous == "half_open":
            what = f"re-opened: the probe session failed; codons wait {cool} again"
        return Note("error", f"{event.provider} circuit breaker {what}", codon)
    if event.state == "half_open":
        return Note(
            "retry", f"{event.provider} circuit breaker half-open: one probe session", codon
        )
    how = "reset by the operator" if event.reason == "reset" else "the probe session succeeded"
    return Note("info", f"{event.provider} circuit breaker closed ({how})", codon)


def _breaker_wait(p: RunProgress, event: BreakerWaitingEvent, at: int, codon: str | None) -> Note:
    wait = format_wait(event.retry_in_ms / 1000)
    return Note(
        "retry", f"{_where(codon)}waits {wait} for {event.provider}: {event.message}", codon
    )


def _gave_up(p: RunProgress, event: SessionGaveUpEvent, at: int, codon: str | None) -> Note:
    return Note("error", f"{_where(codon)}{clip(event.message, 240)}", codon)


def _iteration(p: RunProgress, event: LoopIterationCompletedEvent, at: int, _: str | None) -> Note:
    why = event.termination_reason
    end = f", final{': ' + why if why else ''}" if event.is_final else ""
    took = format_duration(event.duration_ms / 1000)
    return Note(
        "loop",
        f"loop {event.loop_id} iteration {event.iteration} done in {took} "
        f"({iteration_cost(p, event.loop_id, event.iteration, event.cost_usd)}, "
        f"{format_tokens(event.tokens_used)} tokens{end})",
    )


def _error(p: RunProgress, event: ErrorEvent, at: int, codon: str | None) -> Note:
    severity = "fatal" if event.fatal else event.severity
    label = {"fatal": "fatal error", "warning": "warning"}.get(severity, "error")
    return Note("error", f"{_where(codon)}{label}: {clip(event.message, 300)}", codon)


def _info(p: RunProgress, event: InfoEvent, at: int, codon: str | None) -> Note:
    message = event.message
    prefix = "" if codon and codon in message else _where(codon)
    return Note("info", f"{prefix}{clip(message, 300)}", codon)


def _idle(p: RunProgress, event: ServerIdleEvent, at: int, _: str | None) -> Note:
    message = clip(event.message, 200)
    # "Waiting for codon.next ..." says itself; a parked run (a failure, or every codon
    # done in manual mode) asks for a command; the end of an autostart run just says so.
    if not message.startswith("Waiting") and "send " in message:
        message = f"{_PARKED}{message}"
    return Note("idle", message)


_NEXT = "Waiting for codon.next to start "
_PARKED = "Waiting for a command: "
_PARKED_ASKS = ": send "


def is_waiting(note: Note) -> bool:
    """Whether an ``idle`` note means the run waits for a command (the last
    ``server.idle`` of an autostart run waits for nothing)."""
    return note.kind == "idle" and note.text.startswith("Waiting")


def waiting_words(text: str) -> str:
    """An idle note in the words of ``weft run``'s own keys, for a person at its
    terminal (Enter starts the next codon, q stops); the protocol's command names
    are for clients, and ``--json`` keeps them."""
    if text.startswith(_NEXT):
        return f"Waiting: press Enter to start {text[len(_NEXT) :]} (q stops the run)"
    if text.startswith(_PARKED):
        why = text[len(_PARKED) :].split(_PARKED_ASKS, 1)[0]
        return (
            f"Waiting: {why}. Press q to stop the run (weft attach can redo a codon or roll back)"
        )
    return text


def _rollback_started(p: RunProgress, event: RollbackStartedEvent, at: int, _: str | None) -> Note:
    undone = ", ".join(event.codons_to_process) or "nothing"
    target = event.to_codon or "the initial state"
    return Note(
        "info",
        f"rolling back to the {event.checkpoint_type} checkpoint {event.to_checkpoint[:10]} "
        f"of {target}; undoing {clip(undone, 200)}",
    )


def _rollback_step(p: RunProgress, event: RollbackProgressEvent, at: int, _: str | None) -> Note:
    step = f"{event.current_step}/{event.total_steps}"
    return Note("info", f"rollback {step}: {clip(event.message, 200)}")


def _rolled_back(p: RunProgress, event: RollbackCompletedEvent, at: int, _: str | None) -> Note:
    return Note("info", f"rolled back: run {event.to_run} continues from {event.checkpoint[:10]}")


def _codon_extended(p: RunProgress, event: CodonExtendedEvent, at: int, codon: str | None) -> Note:
    return Note(
        "codon",
        f"{_where(codon)}extension {event.extension_number}: the session goes on with the "
        f"exhaust prompt ({format_cost(event.cumulative_cost)}, "
        f"{format_tokens(event.cumulative_tokens)} tokens so far)",
        codon,
    )


def _archived(
    p: RunProgress, event: ArchiveCompletedEvent | ArchivePartialEvent, at: int, codon: str | None
) -> Note:
    owner = f"loop {event.loop_id}" if event.loop_id else (codon or event.codon_id)
    text = f"archived {clip(', '.join(event.archived_paths) or 'nothing', 200)} of {owner}"
    text += f" to {event.archive_dir}"
    if isinstance(event, ArchivePartialEvent):
        failed = ", ".join(f"{f.path} ({f.error})" for f in event.failed_paths)
        return Note("error", f"{text}; not archived: {clip(failed, 200)}", codon)
    return Note("info", text, codon)


def _archive_restored(
    p: RunProgress, event: RollbackArchiveRestoreEvent, at: int, _: str | None
) -> Note:
    paths = clip(", ".join(event.restored_paths) or "nothing", 200)
    failed = "" if not event.failed_paths else f"; failed: {len(event.failed_paths)}"
    return Note("info", f"rollback: restored {paths} archived by {event.codon_id}{failed}")


def _over_budget(p: RunProgress, event: BudgetExceededEvent, at: int, codon: str | None) -> Note:
    if event.scope == "run":
        then = "stopping the run; the codon stays to do"
    elif event.on_exceeded == "fail":
        then = "stopping it (fail)"
    else:
        then = "ending it as completed"
    doing = f"; {then}" if event.codon_id else ""
    return Note("budget", f"{_where(codon)}{clip(event.message, 300)}{doing}", codon)


def _budget_summary(p: RunProgress, event: BudgetSummaryEvent, at: int, _: str | None) -> Note:
    limits = []
    if "maxDollars" in event.ceiling:
        limits.append(f"of {format_cost(event.ceiling['maxDollars'])}")
    if "maxTimeSeconds" in event.ceiling:
        limits.append(f"time cap {format_duration(event.ceiling['maxTimeSeconds'])}")
    spent = known_cost(event.actual_dollars, event.unpriced_codons)
    if spent.startswith("≥"):
        n = event.unpriced_codons
        spent += f" ({n} attempt{'s' * (n > 1)} unpriced)"
    if "maxTokens" in event.ceiling:
        # A token ceiling is read in tokens (a subscriber is charged no dollars).
        spent += f" and {event.actual_tokens:,} tokens"
        limits.append(f"of {int(event.ceiling['maxTokens']):,} tokens")
    cap = f" {', '.join(limits)}" if limits else ""
    took = format_duration(event.actual_time_seconds)
    return Note("budget", f"budget: spent {spent}{cap} in {took} (all runs of the execution)")


def _checkpoints(p: RunProgress, event: CheckpointListEvent, at: int, _: str | None) -> Note:
    # Journaled by earlier versions; now the asking client's own answer.
    return Note("info", checkpoint_list_text(msgspec.to_builtins(event)))


def _sentinel_output(p: RunProgress, event: SentinelOutput, at: int, codon: str | None) -> Note:
    content = event.content
    text = content if isinstance(content, str) else msgspec.json.encode(content).decode()
    said = clip(" ".join(text.split()), 240)
    cost = format_cost(event.cost)
    return Note("sentinel", f"{_where(codon)}sentinel {event.sentinel_id} ({cost}): {said}", codon)


def _sentinel_error(p: RunProgress, event: SentinelError, at: int, codon: str | None) -> Note:
    return Note(
        "error",
        f"{_where(codon)}sentinel {event.sentinel_id} {event.error_type}: "
        f"{clip(event.message, 300)}",
        codon,
    )


_NoteOf = Callable[[RunProgress, Any, int, "str | None"], "Note | None"]
_NOTES: dict[type[Any], _NoteOf] = {
    CodonTransitioned: _moved,
    CodonStarted: _codon_started,
    RunStarted: _run_started,
    RunCompleted: _run_ended,
    RunFailed: _run_ended,
    RunStopped: _run_ended,
    RunCrashed: _run_crashed,
    PlanExtended: _extended,
    PlanTrimmed: _trimmed,
    RejectedTransition: _rejected,
    RigSetupFailedEvent: _rig_failed,
    RigSetupCompletedEvent: _rig_done,
    CodonRetryEvent: _retry,
    SessionCooldownEvent: _cooldown,
    SessionResumedEvent: _resumed,
    CodonParkedEvent: _parked,
    UsageWindowEvent: _usage_window,
    SessionGaveUpEvent: _gave_up,
    SessionMessageEvent: _message,
    BreakerChangedEvent: _breaker,
    BreakerWaitingEvent: _breaker_wait,
    LoopIterationCompletedEvent: _iteration,
    ErrorEvent: _error,
    InfoEvent: _info,
    ServerIdleEvent: _idle,
    RollbackStartedEvent: _rollback_started,
    RollbackProgressEvent: _rollback_step,
    RollbackCompletedEvent: _rolled_back,
    CheckpointListEvent: _checkpoints,
    CodonExtendedEvent: _codon_extended,
    ArchiveCompletedEvent: _archived,
    ArchivePartialEvent: _archived,
    RollbackArchiveRestoreEvent: _archive_restored,
    SentinelOutput: _sentinel_output,
    SentinelError: _sentinel_error,
    BudgetExceededEvent: _over_budget,
    BudgetSummaryEvent: _budget_summary,
}
"""One function per event class worth a line."""


# -- details (``--verbose``) ----------------------------------------------------

DETAIL_LIMIT = 200
"""Characters of a tool call, result or message kept in a ``--verbose`` line."""


def detail(event: Event | None) -> Note | None:
    """The ``--verbose`` line of what the agent did: a tool call, its result, or a
    message (thinking and token counts stay out: they are noise in a log)."""
    if isinstance(event, AssistantActionEvent):
        if event.action == "tool_use":
            name = event.tool_name or event.content or "?"
            text = describe_tool(name, event.tool_input, DETAIL_LIMIT)
        elif event.action == "message" and event.content.strip():
            text = clip(f"says: {event.content}", DETAIL_LIMIT)
        else:
            return None
        return Note("detail", f"{event.codon_id}: {text}", event.codon_id)
    if isinstance(event, ToolResultEvent):
        outcome = "error" if event.is_error else "ok"
        took = "" if event.execution_time_ms is None else f" in {event.execution_time_ms} ms"
        size = plural(event.original_length, "char")
        head = clip(event.result, DETAIL_LIMIT) if event.result.strip() else "(empty)"
        name = event.tool_name or event.tool_use_id
        return Note(
            "detail", f"{event.codon_id}: {name} {outcome}{took}, {size}: {head}", event.codon_id
        )
    return None
