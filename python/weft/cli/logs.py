"""``weft logs`` and ``weft show CODON``: what the agents said and did.

Both read the journal's ``assistant.action`` events (messages, thinking, tool
calls) and, with ``--tools``, ``tool.result`` events, for any harness (the
journal holds them in one shape whatever the agent CLI was). ``weft logs``
prints every codon's, oldest first; ``weft show CODON`` one codon's, its
status and cost first. Read-only: no lock, safe beside a live run. The raw
agent output stays in ``.weft/runs/<run>/<codon>-<harness>.log``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from weft.cli.resolve import EXECUTION_HELP, codon_cost, resolve_execution
from weft.terminal import printable, printable_lines

ACTIONS = "assistant.action"
RESULTS = "tool.result"
TOOL_INPUT_LIMIT = 200
"""Characters of a tool call's input shown on its line (``--json`` has it whole)."""


def register(commands: Any) -> None:
    """Adds ``logs`` and ``show``."""
    logs = commands.add_parser(
        "logs",
        help="print what the agents said and did, codon by codon",
        description="Print the agents' messages (and with --thinking / --tools, their thinking "
        "and tool calls) from the execution's journal, oldest first.",
    )
    logs.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    _options(logs)
    logs.set_defaults(run=run_logs, codon=None)

    show = commands.add_parser(
        "show",
        help="print one codon's status and what its agent said",
        description="Print a codon's status, cost and files, then what its agent said "
        "(every attempt, in every run, oldest first).",
    )
    show.add_argument("codon", metavar="CODON", help="the codon id (a loop's as id#n)")
    show.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    _options(show)
    show.set_defaults(run=run_show)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", dest="run_id", metavar="RUN_ID", help="only this run")
    parser.add_argument("--thinking", action="store_true", help="include the agents' thinking")
    parser.add_argument(
        "--tools", action="store_true", help="include tool calls and their (truncated) results"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per event")


def read_events(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The matching events, oldest first, and the state; each event is
    ``{seq, timestamp, type, runId, codonId, data}``."""
    from weft.store import ExecutionStore

    store = ExecutionStore.open(resolve_execution(args.execution), readonly=True)
    try:
        state: dict[str, Any] = json.loads(store.core.state_json())
        types = [ACTIONS, RESULTS] if args.tools else [ACTIONS]
        events = []
        for row in store.journal.of_types(types):
            if args.codon is not None and row.codon_id != args.codon:
                continue
            if args.run_id is not None and row.run_id != args.run_id:
                continue
            payload = json.loads(row.payload)
            data = payload.get("data", payload)
            if row.type == ACTIONS and not _wanted(data, args):
                continue
            events.append(
                {
                    "seq": row.seq,
                    "timestamp": row.timestamp,
                    "type": row.type,
                    "runId": row.run_id,
                    "codonId": row.codon_id,
                    "data": data,
                }
            )
    finally:
        store.journal.close()
    return events, state


def _wanted(data: dict[str, Any], args: argparse.Namespace) -> bool:
    action = data.get("action")
    if action == "thinking":
        return bool(args.thinking)
    if action == "tool_use":
        return bool(args.tools)
    return True


def render_event(event: dict[str, Any]) -> list[str]:
    """An event as text lines (made printable)."""
    data = event["data"]
    if event["type"] == RESULTS:
        mark = "error" if data.get("isError") else "result"
        text = str(data.get("result", ""))
        more = " (truncated)" if data.get("truncated") else ""
        return [printable(f"    [{mark}{more}] {line}") for line in text.splitlines()[:20]]
    action = data.get("action")
    content = str(data.get("content", ""))
    if action == "tool_use":
        shown = json.dumps(data.get("toolInput") or {}, ensure_ascii=False)
        if len(shown) > TOOL_INPUT_LIMIT:
            shown = shown[: TOOL_INPUT_LIMIT - 1] + "…"
        return [printable(f"  > {data.get('toolName') or 'tool'} {shown}")]
    prefix = "  (thinking) " if action == "thinking" else "  "
    return printable_lines("\n".join(prefix + line for line in content.splitlines())).split("\n")


def _print(events: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for event in events:
            print(json.dumps(event))
        return
    current: tuple[str | None, str | None] | None = None
    for event in events:
        key = (event["runId"], event["codonId"])
        if key != current:
            current = key
            print(printable(f"── {event['codonId']} (run {event['runId']}) ──"))
        for line in render_event(event):
            print(line)


def run_logs(args: argparse.Namespace) -> int:
    """Prints the agents' messages."""
    events, _ = read_events(args)
    if not events and not args.json:
        print("no agent messages recorded yet", file=sys.stderr)
    _print(events, as_json=args.json)
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Prints one codon: its records (status, cost, checkpoints), then its agent's messages."""
    events, state = read_events(args)
    records = [
        (run["runId"], record)
        for run in reversed(state["runs"])  # the document keeps runs newest first
        for record in run["codons"]
        if record["codonId"] == args.codon and (args.run_id is None or run["runId"] == args.run_id)
    ]
    if not records and not events:
        known = sorted({c["codonId"] for run in state["runs"] for c in run["codons"]})
        print(
            printable(
                f"weft: error: codon {args.codon!r} has not run in this execution "
                f"(codons that ran: {', '.join(known) or 'none'})"
            ),
            file=sys.stderr,
        )
        return 2
    if args.json:
        for run_id, record in records:
            print(json.dumps({"type": "codon.record", "runId": run_id, "data": record}))
        _print(events, as_json=True)
        return 0
    for run_id, record in records:
        line = f"{args.codon}  run {run_id}  {record['status']}  ${codon_cost(record):.4f}"
        if record.get("endTime"):
            line += f"  ended {record['endTime']}"
        checkpoint = record.get("completionCheckpoint") or record.get("errorCheckpoint")
        if checkpoint:
            line += f"  checkpoint {checkpoint[:10]}"
        reason = record.get("failureReason")
        if reason:
            line += f"  failed: {reason.get('message') or reason.get('type')}"
        print(printable(line))
        if record.get("claudeLogPath"):
            print(printable(f"  agent log: .weft/{record['claudeLogPath']}"))
    _print(events, as_json=False)
    return 0
