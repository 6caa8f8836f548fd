"""``weft replay``: a recorded execution played back through the run views, with no agent.

Every journaled event goes to the same view ``weft run`` shows (``--headless``
lines, ``--json`` wire events, or the live table on a terminal) through the
same fold, in the journal's order, with the recorded gaps between events
divided by ``--speed`` (0: no waiting; a gap is never waited longer than
``--max-gap``). The execution is only read (no lock), so a live one can be
replayed beside its run up to what it has journaled.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from weft.cli.resolve import resolve_execution
from weft.clock import ms_from_iso


def register(commands: Any) -> None:
    """Adds ``replay``."""
    parser = commands.add_parser(
        "replay",
        help="play a recorded execution back through the run views (no agent runs)",
        description=(
            "Show a recorded execution's events as `weft run` showed them, in order, at a chosen "
            "speed. Nothing runs and nothing is written."
        ),
    )
    parser.add_argument(
        "execution", nargs="?", help="the execution (default: the latest of ./hank.json)"
    )
    parser.add_argument(
        "--speed",
        type=_speed,
        default=1.0,
        metavar="X",
        help="X times the recorded pace (default 1; 0: as fast as the output goes)",
    )
    parser.add_argument(
        "--max-gap",
        type=_speed,
        default=5.0,
        metavar="SECONDS",
        help="wait at most this long between two events (default 5)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--headless", action="store_true", help="plain timestamped lines")
    output.add_argument("--json", action="store_true", help="every event as a JSON line")
    parser.set_defaults(run=run)


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of 0 or more")
    return value


def wait_s(before_ms: int | None, at_ms: int | None, speed: float, max_gap: float) -> float:
    """Seconds to wait before an event recorded at ``at_ms`` when the one before
    was at ``before_ms``: the gap divided by ``speed`` (0: none), at most ``max_gap``."""
    if speed <= 0 or before_ms is None or at_ms is None:
        return 0.0
    return max(0.0, min((at_ms - before_ms) / 1000 / speed, max_gap))


def run(args: argparse.Namespace) -> int:
    """Plays the journal back; the exit code is the recorded run's."""
    from weft.cli.view import RunSummary, make_view
    from weft.client import Event as WireEvent
    from weft.outcome import exit_code
    from weft.store import ExecutionStore

    execution = resolve_execution(args.execution)
    store = ExecutionStore.open(execution, readonly=True)
    mode = "json" if args.json else "headless" if args.headless else "live"
    view = make_view(mode)
    view.start()
    last_ms: int | None = None
    try:
        for page in store.journal.pages():
            for row in page:
                at = ms_from_iso(row.timestamp)
                gap = wait_s(last_ms, at, args.speed, args.max_gap)
                if gap > 0:
                    time.sleep(gap)
                last_ms = at if at is not None else last_ms
                data = json.loads(row.payload).get("data")
                view.on_wire(
                    WireEvent(
                        id=row.id, seq=row.seq, timestamp=row.timestamp, type=row.type, data=data
                    )
                )
    except KeyboardInterrupt:
        view.stop()
        print("weft: replay interrupted", file=sys.stderr)
        return 130
    finally:
        import asyncio

        asyncio.run(store.close())
    view.stop()
    ending = view.progress.ending
    code = 0 if ending is None else exit_code(ending)
    view.summary(
        RunSummary(
            status="nothing_to_do" if ending is None else ending.kind,
            exit_code=code,
            execution=execution,
            resume_command=None,
        )
    )
    return code
