"""``weft clean``: remove finished executions from the managed root.

Only executions under the managed root are ever removed (a folder given to
``weft run --execution`` may hold the user's own files, so it is left
alone). A live execution is never removed: each candidate is checked under
the same ``flock`` that ``weft run`` holds while it prepares an execution,
and skipped when a Weft process holds its lock. ``--dry-run`` lists what
would go without removing anything.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from weft.cli.ls import STATES, hank_filter, human_size, select
from weft.cli.resolve import ExecutionInfo, managed_root, scan
from weft.terminal import printable

DEFAULT_STATES = ("completed",)
"""What ``weft clean`` removes without ``--state``: executions with nothing left to run
(a rolled-back or stopped one has codons left: ``rolled-back``, ``stopped``,
``budget-stopped``, ``incomplete``)."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w`` (or plain seconds) as a time span."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; use a number and a unit: 90s, 30m, 12h, 7d, 2w"
        )
    return timedelta(seconds=int(match[1]) * _UNITS[match[2] or "s"])


def register(commands: Any) -> None:
    """Adds ``clean``."""
    parser = commands.add_parser(
        "clean",
        help="remove finished executions (see --dry-run)",
        description=(
            "Remove finished executions from the managed root (~/.weft-executions, or "
            "$WEFT_RUNTIME_EXECUTION_BASE_DIR). By default only completed executions (nothing "
            "left to run: not a rolled-back or incomplete one); never one a Weft process is "
            "running; never a folder outside the managed root."
        ),
    )
    parser.add_argument(
        "--state",
        action="append",
        choices=[s for s in STATES if s != "live"] + ["any"],
        help="remove executions in this state (repeatable; default: completed; "
        "any: every one that is not live)",
    )
    parser.add_argument(
        "--older-than",
        type=duration,
        metavar="AGE",
        help="only executions last used longer ago than AGE (90s, 30m, 12h, 7d, 2w)",
    )
    parser.add_argument("--hank", type=Path, help="only executions of this hank file or folder")
    parser.add_argument(
        "-n", "--dry-run", action="store_true", help="list what would be removed; remove nothing"
    )
    parser.set_defaults(run=run)


def _old_enough(info: ExecutionInfo, cutoff: datetime | None) -> bool:
    if cutoff is None:
        return True
    try:
        used = datetime.fromisoformat(info.last_used.replace("Z", "+00:00"))
    except ValueError:
        return False
    return used < cutoff


def candidates(
    found: list[ExecutionInfo],
    *,
    states: list[str] | None,
    older_than: timedelta | None,
    hank: str | None,
    now: datetime | None = None,
) -> list[ExecutionInfo]:
    """The executions ``weft clean`` would remove (live ones never)."""
    wanted = list(states or DEFAULT_STATES)
    if "any" in wanted:
        wanted = [s for s in STATES if s != "live"]
    cutoff = None if older_than is None else (now or datetime.now(UTC)) - older_than
    return [
        e
        for e in select(found, hank=hank, states=wanted)
        if e.live_pid is None and _old_enough(e, cutoff)
    ]


def remove(info: ExecutionInfo) -> str | None:
    """Removes one execution; the reason it was kept, or None when it is gone."""
    from weft.errors import LockHeldError
    from weft.store.execution import live_holder

    try:
        fd = os.open(info.root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"cannot open it ({e.strerror})"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "a `weft run` is preparing it right now"
        try:
            holder = live_holder(info.root / ".weft")
        except LockHeldError:
            return "its lock file is unreadable (a run may be live)"
        if holder is not None:
            return f"Weft is running on it (PID {holder.pid})"
        # .weft/ first: from then on no Weft command treats the rest as an execution.
        try:
            shutil.rmtree(info.root / ".weft")
            shutil.rmtree(info.root)
        except OSError as e:
            return f"removal failed: {e.strerror}: {e.filename}"
        return None
    finally:
        os.close(fd)


def _forks_kept(
    found: list[ExecutionInfo], chosen: list[ExecutionInfo]
) -> dict[Path, list[ExecutionInfo]]:
    """Source -> its forks that stay: a fork reads its source's checkpoint
    objects (git alternates), so a source goes only with every fork of it."""
    going = {c.root.resolve() for c in chosen}
    out: dict[Path, list[ExecutionInfo]] = {}
    for e in found:
        if e.forked_from is not None and e.root.resolve() not in going:
            out.setdefault(Path(e.forked_from[0]).resolve(), []).append(e)
    return out


def run(args: argparse.Namespace) -> int:
    """Removes (or, with ``--dry-run``, lists) the matching executions."""
    base = managed_root()
    found = scan(base)
    chosen = candidates(
        found,
        states=args.state,
        older_than=args.older_than,
        hank=hank_filter(args.hank),
    )
    if not chosen:
        print(f"nothing to remove under {base}")
        return 0
    verb = "would remove" if args.dry_run else "removed"
    freed = 0
    failed = held_back = 0
    forks = _forks_kept(found, chosen)
    for info in chosen:
        held = forks.get(info.root.resolve())
        if held:
            # Not a failure: the source is kept on purpose while forks need it.
            names = ", ".join(f.execution_id for f in held)
            print(
                printable(
                    f"kept {info.root}: its forks read its checkpoints ({names}); remove "
                    "them first (or clean them in the same command)"
                ),
                file=sys.stderr,
            )
            held_back += 1
            continue
        kept = None if args.dry_run else remove(info)
        if kept is not None:
            failed += 1
            print(printable(f"kept {info.root}: {kept}"), file=sys.stderr)
            continue
        freed += info.size
        print(printable(f"{verb} {info.root}  ({info.state}, {human_size(info.size)})"))
    done = len(chosen) - failed - held_back
    noun = "execution" if done == 1 else "executions"
    print(f"{verb} {done} {noun}, {human_size(freed)}")
    return 1 if failed else 0
