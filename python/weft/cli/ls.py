"""``weft ls`` (alias ``weft executions``): the managed executions, newest first.

Each line shows the execution's id, its hank, its data, its state, when it
was last used, what it cost (``unpriced``, or ``≥ $X``, when a model had no
price; ``null`` in JSON when nothing priced was spent) and how much disk it takes; ``--hank`` and
``--state`` filter, ``--json`` prints the same as a JSON list. Read-only
(see :func:`weft.cli.resolve.scan`).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from weft.cli.resolve import ExecutionInfo, managed_root, scan
from weft.money import known_cost
from weft.terminal import printable_lines

STATES = (
    "live",
    "running",
    "completed",
    "incomplete",
    "rolled-back",
    "failed",
    "stopped",
    "budget-stopped",
    "crashed",
    "new",
    "unknown",
)
"""Every state ``weft ls`` shows (:class:`weft.cli.resolve.ExecutionInfo` says what each means)."""


def register(commands: Any) -> None:
    """Adds ``ls`` and its alias ``executions``."""
    parser = commands.add_parser(
        "ls",
        aliases=["executions"],
        help="list the executions, newest first",
        description=(
            "List the executions under the managed root (~/.weft-executions, or "
            "$WEFT_RUNTIME_EXECUTION_BASE_DIR), newest first: id, hank, data, state, last "
            "used, cost and size. Executions made with --execution elsewhere are not listed."
        ),
    )
    parser.add_argument("--hank", type=Path, help="only executions of this hank file or folder")
    parser.add_argument(
        "--state",
        action="append",
        choices=STATES,
        help="only executions in this state (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(run=run)


def hank_filter(hank: Path | None) -> str | None:
    """The resolved hank file ``--hank`` names (a file, or a folder's hank.json)."""
    if hank is None:
        return None
    path = hank / "hank.json" if hank.is_dir() else hank
    return str(path.resolve())


def select(
    found: list[ExecutionInfo], *, hank: str | None, states: list[str] | None
) -> list[ExecutionInfo]:
    """The executions that pass ``--hank`` and ``--state``."""
    return [
        e for e in found if (hank is None or e.hank == hank) and (not states or e.state in states)
    ]


def human_size(size: int) -> str:
    """``size`` bytes as ``512 B``, ``3.4 MB``..."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - the loop returns at GB


def age(stamp: str, now: datetime | None = None) -> str:
    """How long ago the ISO time ``stamp`` was: ``12s ago``, ``5m ago``, ``3h ago``, ``2d ago``."""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds // span}{unit} ago"
    return f"{seconds}s ago"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def render(found: list[ExecutionInfo]) -> str:
    """The executions as an aligned table."""
    rows = [("ID", "HANK", "DATA", "STATE", "LAST USED", "COST", "SIZE")]
    for e in found:
        hank = Path(e.hank)
        hank_text = str(hank.parent.name + "/" + hank.name) if hank.parent.name else hank.name
        fork = "" if e.forked_from is None else f" (fork of {Path(e.forked_from[0]).name})"
        rows.append(
            (
                e.execution_id + fork,
                _short(hank_text, 28),
                _short(Path(e.data).name, 20) if e.data else "-",
                e.state,
                age(e.last_used),
                known_cost(e.cost, e.unpriced),
                human_size(e.size),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Prints the executions."""
    found = select(scan(), hank=hank_filter(args.hank), states=args.state)
    if args.json:
        print(json.dumps([e.to_json() for e in found], indent=2))
        return 0
    if not found:
        print(f"no executions under {managed_root()}", file=sys.stderr)
        return 0
    print(printable_lines(render(found)))
    return 0
