"""``weft export`` and ``weft import``: an execution as one file, and back
(:mod:`weft.portable`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from weft.cli.resolve import managed_root, resolve_execution
from weft.terminal import printable


def register(commands: Any) -> None:
    """Adds ``export`` and ``import``."""
    export = commands.add_parser(
        "export",
        help="pack an execution into one file, to move it to another machine",
        description=(
            "Write EXECUTION (its journal, state, checkpoints, logs, work tree, the agents' "
            "session transcripts and the hank it runs) to one archive; `weft import` restores "
            "it anywhere. The execution is only read, also while a run writes it."
        ),
    )
    export.add_argument(
        "execution", nargs="?", help="the execution (default: the latest of ./hank.json)"
    )
    export.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="the archive (default: ./<id>.weftx)"
    )
    export.set_defaults(run=run_export)
    restore = commands.add_parser(
        "import",
        help="restore an execution exported with weft export",
        description=(
            "Restore an archive made by `weft export` as an execution: status, logs, thread, "
            "checkpoints, diff and the dashboard read it, and `weft run --execution` continues it."
        ),
    )
    restore.add_argument("archive", type=Path, help="the .weftx file")
    restore.add_argument(
        "--to", type=Path, metavar="DIR", help="the execution folder (default: the managed root)"
    )
    restore.set_defaults(run=run_import)


def run_export(args: argparse.Namespace) -> int:
    """Writes the archive."""
    from weft.portable.export import ArchiveError, export_execution

    execution = resolve_execution(args.execution)
    out = args.output or Path(f"{execution.name}.weftx")
    try:
        done = export_execution(execution, out)
    except ArchiveError as exc:
        print(f"weft: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    print(
        printable(
            f"Exported {execution} to {done.path} ({done.members} members, {done.bytes:,} bytes)"
        )
    )
    return 0


def run_import(args: argparse.Namespace) -> int:
    """Restores the archive."""
    from weft.portable.export import ArchiveError
    from weft.portable.restore import import_archive, planned_name

    try:
        dest = args.to or managed_root() / planned_name(args.archive)
        done = import_archive(args.archive, dest)
    except ArchiveError as exc:
        print(f"weft: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    print(printable(f"Imported {args.archive} as {done}"))
    print(printable(f"Continue with: weft run --execution {done}"))
    return 0
