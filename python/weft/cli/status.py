"""``weft status [execution] [--json]``: runs and codon states, read from the store.

Read-only: it takes no lock and writes nothing, so it is safe beside a live run.
A run the state still calls ``running`` while no live process holds the lock
is shown as ``crashed (not yet marked)``: the next ``weft run`` marks it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from weft.cli.colour import STATUS_STYLES, paint, wants_colour
from weft.cli.resolve import (
    CRASHED_UNMARKED,
    EXECUTION_HELP,
    codon_cost,
    resolve_execution,
    unpriced_pairs,
)
from weft.errors import LockHeldError
from weft.events.stream import (
    BreakerChangedEvent,
    BreakerWaitingEvent,
    CodonParkedEvent,
    SessionCooldownEvent,
    SessionGaveUpEvent,
    SessionResumedEvent,
    TokenUsageEvent,
    decode_event,
)
from weft.money import known_cost, known_dollars, total_cost
from weft.outcome import ending_of
from weft.store import ExecutionStore
from weft.store.lock import LOCK, pid_alive, read_lock
from weft.terminal import printable
from weft.windows.park import until_words

TERMINAL = ("completed", "failed", "skipped")


def register(commands: Any) -> None:
    """Adds the ``status`` command."""
    parser = commands.add_parser(
        "status",
        help="show the runs and codon states of an execution",
        description="Show the runs and codon states of an execution, read from its store.",
    )
    parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(run=run)


def codon_spent(codon: dict[str, Any]) -> float:
    """What one record's attempt spent, whatever its status: a skipped attempt
    counts $0 by the seed's rule, but its money was spent."""
    for key in ("finalCost", "partialCost", "currentCost"):
        value = codon.get(key)
        if isinstance(value, int | float):
            return float(value)
    return 0.0


def unpriced_codons(store: ExecutionStore) -> set[tuple[str | None, str | None]]:
    """(run id, codon id) of every codon that used a model without a price
    (a ``token.usage`` with tokens and no cost): their dollars are unknown, not zero.
    ``weft ls`` and ``weft ui`` read the same (:func:`weft.cli.resolve.journal_unpriced`)."""
    return set(unpriced_pairs(store.journal.of_types([TokenUsageEvent.TYPE])))


def budget_report(store: ExecutionStore) -> dict[str, Any] | None:
    """The newest ``budget.summary`` and every ``budget.exceeded`` message, if any."""
    events = store.journal.of_types(["budget.summary", "budget.exceeded"])
    if not events:
        return None
    exceeded = []
    summary: dict[str, Any] | None = None
    for event in events:
        data = json.loads(event.payload).get("data") or {}
        if event.type == "budget.exceeded":
            exceeded.append({"runId": event.run_id, "message": data.get("message")})
        else:
            summary = data
    return {"summary": summary, "exceeded": exceeded}


def lock_holder(store: ExecutionStore) -> dict[str, Any] | None:
    """Who holds the execution's lock: ``{pid, runId, alive}``, None when nobody
    (``alive`` is None when the lock file is unreadable)."""
    try:
        info = read_lock(store.weft_dir / LOCK)
    except LockHeldError:
        return {"pid": None, "runId": None, "alive": None}
    if info is None:
        return None
    return {"pid": info.pid, "runId": info.run_id, "alive": pid_alive(info.pid)}


SESSION_EVENTS = (
    SessionCooldownEvent.TYPE,
    SessionResumedEvent.TYPE,
    SessionGaveUpEvent.TYPE,
    BreakerWaitingEvent.TYPE,
    CodonParkedEvent.TYPE,
)


def breakers_of(store: ExecutionStore) -> dict[str, dict[str, Any]]:
    """provider -> its circuit breaker as last journaled (``breaker.changed``):
    ``{state, reason, consecutiveFailures, failureThreshold, cooldownMs,
    codonId, timestamp}``. A provider never journaled is closed."""
    out: dict[str, dict[str, Any]] = {}
    for row in store.journal.of_types((BreakerChangedEvent.TYPE,)):
        data: dict[str, Any] = json.loads(row.payload)["data"]
        provider = data.pop("provider", None)
        if isinstance(provider, str):
            data.pop("previous", None)
            out[provider] = {**data, "codonId": data.get("codonId"), "timestamp": row.timestamp}
    return dict(sorted(out.items()))


def supervisor_of(store: ExecutionStore) -> dict[tuple[str, str], dict[str, Any]]:
    """(run id, codon id) -> the session supervisor's last word on that codon:
    ``{type, ...its data}`` of the newest ``session.*`` event (read through the
    journal's type index, so it costs what it returns)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in store.journal.of_types(SESSION_EVENTS):
        event = decode_event(row.payload.encode())
        if event is None or row.run_id is None or row.codon_id is None:
            continue
        data: dict[str, Any] = json.loads(row.payload)["data"]
        out[(row.run_id, row.codon_id)] = {"type": row.type, **data, "timestamp": row.timestamp}
    return out


def _session_line(s: dict[str, Any]) -> str:
    if s["type"] == SessionCooldownEvent.TYPE:
        return (
            f"cooled down {s['durationMs']} ms after session {s['session']} failed "
            f"({s['errorClass']}; {s['consecutiveErrors']} in a row, {s['totalErrors']} in all)"
        )
    if s["type"] == BreakerWaitingEvent.TYPE:
        return f"waiting {s['retryInMs']} ms: {s['message']}"
    if s["type"] == CodonParkedEvent.TYPE:
        until = until_words(s["resumeAt"], s["provider"], s.get("window"))
        return f"parked until {until}: the usage window is closed"
    if s["type"] == SessionResumedEvent.TYPE:
        return _resumed_line(s)
    return str(s.get("message", "the session supervisor gave up"))


def _resumed_line(s: dict[str, Any]) -> str:
    """A ``session.resumed``, worded by its reason: a retry follows a
    cool-down; an urgent message interrupted the agent and had none."""
    resumed = s.get("resumeSessionId")
    what = (
        f"session {s['session']} resumed {resumed}"
        if resumed
        else f"session {s['session']} started afresh (no session to resume)"
    )
    if s["reason"] == "urgent":
        return f"{what} with an urgent message (the agent was interrupted)"
    if s["reason"] == "window":
        return f"{what} when the usage window opened"
    return f"{what} after a cool-down"


def report(store: ExecutionStore) -> dict[str, Any]:
    """The status of an opened store, as a JSON-ready dictionary."""
    state = json.loads(store.core.state_json())
    supervisor = supervisor_of(store)
    holder = lock_holder(store)
    # An unreadable lock may be live: only a missing or dead holder proves a crash.
    nobody_runs = holder is None or holder["alive"] is False
    unpriced = unpriced_codons(store)
    runs = []
    spent_total = 0.0
    for run in state["runs"]:
        codons = []
        for c in run["codons"]:
            spent = codon_spent(c)
            spent_total += spent
            is_unpriced = (run["runId"], c["codonId"]) in unpriced
            cost = codon_cost(c)
            entry: dict[str, Any] = {
                "codonId": c["codonId"],
                "status": c["status"],
                # Failed because a stop (yours, the run's budget) cut it short: not a
                # failure of its own; it stays to do (the summary's "stopped").
                "stopped": stopped_record(c),
                "cost": known_dollars(cost, is_unpriced),
                "spent": known_dollars(spent, is_unpriced),
                "unpriced": is_unpriced,
                "startTime": c["startTime"],
            }
            for key in ("endTime", "failedDuring", "failureReason", "skippedDuring"):
                if key in c:
                    entry[key] = c[key]
            sentinels = sentinels_of(c)
            if sentinels is not None:
                entry["sentinels"] = sentinels
            session = supervisor.get((run["runId"], c["codonId"]))
            if session is not None and session["timestamp"] >= c["startTime"]:
                entry["session"] = session
            codons.append(entry)
        dead = run["status"] == "running" and nobody_runs
        run_unpriced = sum(1 for pair in unpriced if pair[0] == run["runId"])
        ending = ending_of(run)
        runs.append(
            {
                "runId": run["runId"],
                # The outcome's one word (weft.outcome), as weft run and weft ls say it.
                "status": CRASHED_UNMARKED if dead else ending.word,
                "ending": None if dead or not ending.finished else ending.to_json(),
                "startTime": run["startTime"],
                "endTime": run.get("endTime"),
                "cost": known_dollars(store.core.run_cost(run["runId"]) or 0.0, run_unpriced),
                "unpricedCodons": run_unpriced,
                "sentinelCost": math.fsum(
                    c.get("sentinels", {}).get("totalCost", 0.0) for c in codons
                ),
                "codons": codons,
            }
        )
    return {
        "execution": str(store.weft_dir.parent),
        "journal": {"events": store.journal.count(), "lastSeq": store.journal.last_seq()},
        "stateSource": store.recovery.source,
        "notes": store.recovery.notes,
        "lock": holder,
        "currentRunId": state["currentRunId"],
        "totalCost": known_dollars(store.core.total_cost(), len(unpriced)),
        "sentinelCost": math.fsum(r["sentinelCost"] for r in runs),
        "spent": known_dollars(round(spent_total, 9), len(unpriced)),
        "unpricedCodons": len(unpriced),
        "budget": budget_report(store),
        "breakers": breakers_of(store),
        "forkedFrom": forked_from(store.weft_dir),
        "runs": runs,
    }


def forked_from(weft_dir: Path) -> dict[str, str] | None:
    """``{execution, codonId, at}`` of a fork (``weft fork``), from its
    ``execution-meta.json``; None for any other execution."""
    try:
        meta = json.loads((weft_dir / "execution-meta.json").read_bytes())
    except (OSError, ValueError):
        return None
    forked = meta.get("forkedFrom") if isinstance(meta, dict) else None
    return forked if isinstance(forked, dict) else None


def stopped_record(record: dict[str, Any]) -> bool:
    """A codon record a stop cut short (failed, ``interrupted``): it is to do again,
    as :attr:`weft.progress.CodonProgress.stopped` says of it."""
    reason = record.get("failureReason") or {}
    return record["status"] == "failed" and reason.get("type") == "interrupted"


def sentinels_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """A codon record's sentinels: ``{totalCost, states}`` (``loaded`` while the
    codon runs, ``executed`` once it is terminal); None when it has none."""
    sentinels = record.get("sentinels")
    if not sentinels:
        return None
    states = sentinels.get("executed") or sentinels.get("loaded") or []
    return {"totalCost": float(sentinels.get("totalCost", 0.0)), "states": states}


def _sentinel_line(s: dict[str, Any]) -> str:
    failed = s.get("failedLLMCalls", 0)
    calls = f"{s.get('llmCallCount', 0)} call(s)" + (f", {failed} failed" if failed else "")
    why = f" ({s['unloadReason']})" if s.get("unloadReason") else ""
    return (
        f"{s['id']:<20} {s['model']:<28} {s['status']}{why}  {calls}  "
        f"${float(s.get('totalCost', 0.0)):.4f}"
    )


def render(status: dict[str, Any], *, colour: bool = False) -> str:
    """The status as text for a terminal (statuses coloured when ``colour``).

    Every line is made printable (:func:`weft.terminal.printable`) before it is
    coloured, so the only escape sequences in the result are the colours."""

    def state(word: str, width: int = 0) -> str:
        style = STATUS_STYLES.get(word.split(" ", 1)[0])
        return paint(printable(word).ljust(width), style, on=colour)

    lines = [
        printable(f"Execution {status['execution']}"),
        f"  journal: {status['journal']['events']} events, state from {status['stateSource']}",
        f"  total cost: {_total(status)}",
    ]
    forked = status.get("forkedFrom")
    if forked:
        lines.insert(
            1,
            printable(
                f"  forked from {forked.get('execution')} at {forked.get('codonId')} "
                f"({forked.get('at')})"
            ),
        )
    if status.get("sentinelCost"):
        lines.append(f"  sentinel cost: ${status['sentinelCost']:.4f} (apart from the total)")
    budget = status.get("budget")
    if budget is not None:
        summary = budget["summary"] or {}
        ceiling = summary.get("ceiling") or {}
        if ceiling:
            caps = ", ".join(f"{k} {v:g}" for k, v in ceiling.items())
            spent = known_cost(summary.get("actualDollars"), summary.get("unpricedCodons", 0))
            if "maxTokens" in ceiling:
                spent += f", {summary.get('actualTokens', 0):,} tokens"
            lines.append(f"  budget: {caps} (spent {spent})")
        lines += [f"  run {e['runId']}: {e['message']}" for e in budget["exceeded"]]
    for provider, b in status.get("breakers", {}).items():
        lines.append(
            printable(
                f"  breaker {provider}: {b['state']} ({b['reason']}; "
                f"{b['consecutiveFailures']}/{b['failureThreshold']} failures in a row)"
            )
        )
    lines += [printable(f"  note: {n}") for n in status["notes"]]
    if not status["runs"]:
        lines.append("  no runs yet")
    for run in status["runs"]:
        current = "  (current)" if run["runId"] == status["currentRunId"] else ""
        lines.append(
            printable(f"run {run['runId']}  ")
            + state(run["status"])
            + printable(
                f"  started {run['startTime']}  "
                f"{known_cost(run['cost'], run['unpricedCodons'])}{current}"
            )
        )
        ending = run.get("ending")
        if ending is not None and ending.get("reason"):
            who = f"{ending['codonId']}: " if ending.get("codonId") else ""
            forced = " (the agent was killed)" if ending.get("forced") else ""
            lines.append(printable(f"  {ending['word']}: {who}{ending['reason']}{forced}"))
        for c in run["codons"]:
            detail = ""
            word = "stopped" if c.get("stopped") else c["status"]
            if c["status"] == "failed":
                reason = c.get("failureReason", {})
                detail = (
                    f"  during {c.get('failedDuring')}: {reason.get('message', reason.get('type'))}"
                )
            elif c["status"] == "skipped":
                detail = f"  during {c.get('skippedDuring')}"
            lines.append(
                printable(f"  {c['codonId']:<24} ")
                + state(word, 21)
                + printable(f" {_cost(c)}{detail}")
            )
            if "session" in c:
                lines.append(printable(f"    supervisor: {_session_line(c['session'])}"))
            for s in c.get("sentinels", {}).get("states", []):
                lines.append(printable(f"    sentinel {_sentinel_line(s)}"))
    return "\n".join(lines)


def _total(status: dict[str, Any]) -> str:
    # The words of the run summary's cost (weft.cli.view.format.total_cost).
    return total_cost(status["totalCost"], status["unpricedCodons"], status["spent"])


def _cost(c: dict[str, Any]) -> str:
    text = known_cost(c["cost"], c["unpriced"])
    if not c["unpriced"] and c["spent"] > c["cost"] + 5e-10:
        text += f" (spent ${c['spent']:.4f})"
    return text


def run(args: argparse.Namespace) -> int:
    """Prints the status of ``args.execution``."""
    store = ExecutionStore.open(resolve_execution(args.execution), readonly=True)
    try:
        status = report(store)
    finally:
        store.journal.close()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(render(status, colour=wants_colour(sys.stdout)))
    return 0
