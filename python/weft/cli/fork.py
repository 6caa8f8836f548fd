"""``weft fork``: a new execution whose history up to a codon is another's, then run.

The fork is made by :mod:`weft.fork.clone`; it then runs as ``weft run
--execution FORK --yes`` would, with the options given (another hank file, a
model), unless ``--no-run``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from weft.cli.resolve import resolve_execution
from weft.terminal import printable


def register(commands: Any) -> None:
    """Adds ``fork``."""
    parser = commands.add_parser(
        "fork",
        help="a new execution that shares another's history up to a codon, then runs",
        description=(
            "Make a new execution whose history, work tree and agent sessions are EXECUTION's "
            "up to the start of CODON (the source is never changed), then run CODON and what "
            "follows, with another hank file or model if given. The money spent before CODON "
            "is inherited, not spent again."
        ),
    )
    parser.add_argument(
        "execution", nargs="?", help="the execution to fork (default: the latest of ./hank.json)"
    )
    parser.add_argument(
        "--from", dest="codon", required=True, metavar="CODON", help="the codon to run again"
    )
    parser.add_argument(
        "--to", type=Path, metavar="DIR", help="the fork's folder (default: beside the source)"
    )
    parser.add_argument(
        "--hank", type=Path, metavar="FILE", help="run the fork with this hank file (edited)"
    )
    parser.add_argument("-m", "--model", metavar="ID", help="run the fork's codons on this model")
    parser.add_argument(
        "--no-run", action="store_true", help="make the fork and stop (run it with weft run)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--headless", action="store_true", help="plain timestamped lines")
    output.add_argument("--json", action="store_true", help="print every event as a JSON line")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Forks, then runs the fork (unless ``--no-run``)."""
    from weft.fork.clone import ForkError, make_fork

    source = resolve_execution(args.execution)
    try:
        fork = asyncio.run(make_fork(source, args.codon, args.to))
    except ForkError as exc:
        print(f"weft: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    print(printable(f"Forked {fork.source} at {fork.codon_id} into {fork.path}"))
    if args.no_run:
        print(printable(f"Run it with: weft run --execution {fork.path}"))
        return 0
    from weft.cli import main

    argv = ["run", "--execution", str(fork.path), "--yes"]
    if args.hank is not None:
        argv[1:1] = [str(args.hank)]
        argv.append("--rebind")
    if args.model:
        argv += ["--model", args.model]
    if args.headless:
        argv.append("--headless")
    if args.json:
        argv.append("--json")
    return main(argv)
