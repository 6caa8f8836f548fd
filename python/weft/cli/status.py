"""``weft status [execution] [--json]``: runs and codon states, read from the store.

Read-only: it takes no lock and writes nothing, so it is safe beside a live run.
A run the state still calls ``running`` while no live process holds the lock
is shown as ``crashed (not yet marked)``: the next ``weft run`` marks it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from weft.cli.colour import STATUS_STYLES, paint, wants_colour
from weft.cli.resolve import EXECUTION_HELP, codon_cost, resolve_execution
from weft.errors import LockHeldError
from weft.store import ExecutionStore
from weft.store.lock import LOCK, pid_alive, read_lock
from weft.terminal import printable

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


CRASHED_UNMARKED = "crashed (not yet marked)"


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


def report(store: ExecutionStore) -> dict[str, Any]:
    """The status of an opened store, as a JSON-ready dictionary."""
    state = json.loads(store.core.state_json())
    holder = lock_holder(store)
    # An unreadable lock may be live: only a missing or dead holder proves a crash.
    nobody_runs = holder is None or holder["alive"] is False
    runs = []
    for run in state["runs"]:
        codons = []
        for c in run["codons"]:
            entry: dict[str, Any] = {
                "codonId": c["codonId"],
                "status": c["status"],
                "cost": codon_cost(c),
                "startTime": c["startTime"],
            }
            for key in ("endTime", "failedDuring", "failureReason", "skippedDuring"):
                if key in c:
                    entry[key] = c[key]
            codons.append(entry)
        dead = run["status"] == "running" and nobody_runs
        runs.append(
            {
                "runId": run["runId"],
                "status": CRASHED_UNMARKED if dead else run["status"],
                "startTime": run["startTime"],
                "endTime": run.get("endTime"),
                "cost": store.core.run_cost(run["runId"]),
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
        "totalCost": store.core.total_cost(),
        "runs": runs,
    }


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
        f"  total cost: ${status['totalCost']:.4f}",
    ]
    lines += [printable(f"  note: {n}") for n in status["notes"]]
    if not status["runs"]:
        lines.append("  no runs yet")
    for run in status["runs"]:
        current = "  (current)" if run["runId"] == status["currentRunId"] else ""
        lines.append(
            printable(f"run {run['runId']}  ")
            + state(run["status"])
            + printable(f"  started {run['startTime']}  ${run['cost']:.4f}{current}")
        )
        for c in run["codons"]:
            detail = ""
            if c["status"] == "failed":
                reason = c.get("failureReason", {})
                detail = (
                    f"  during {c.get('failedDuring')}: {reason.get('message', reason.get('type'))}"
                )
            elif c["status"] == "skipped":
                detail = f"  during {c.get('skippedDuring')}"
            lines.append(
                printable(f"  {c['codonId']:<24} ")
                + state(c["status"], 21)
                + printable(f" ${c['cost']:.4f}{detail}")
            )
    return "\n".join(lines)


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
