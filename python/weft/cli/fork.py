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
    parser.add_argument(
        "-n",
        type=_count,
        default=1,
        metavar="N",
        help="make N forks and run them side by side (best of N; compare them with weft diff)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--headless", action="store_true", help="plain timestamped lines")
    output.add_argument("--json", action="store_true", help="print every event as a JSON line")
    parser.set_defaults(run=run)


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of forks from 1 to 64")
    return int(text)


def run(args: argparse.Namespace) -> int:
    """Forks, then runs the fork (unless ``--no-run``); with ``-n``, N forks side by side."""
    from weft.fork.clone import ForkError, fork_name, make_fork

    source = resolve_execution(args.execution)
    if args.n > 1 and args.to is not None:
        print("weft: error: -n makes forks beside the source: drop --to", file=sys.stderr)
        return 2
    forks = []
    try:
        for _ in range(args.n):
            dest = args.to if args.n == 1 else fork_name(source, args.codon)
            forks.append(asyncio.run(make_fork(source, args.codon, dest)))
    except ForkError as exc:
        print(f"weft: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    for fork in forks:
        print(printable(f"Forked {fork.source} at {fork.codon_id} into {fork.path}"))
    if args.no_run:
        for fork in forks:
            print(printable(f"Run it with: weft run --execution {fork.path}"))
        return 0
    if len(forks) == 1:
        from weft.cli import main

        return main(_run_argv(args, forks[0].path))
    return _run_side_by_side(args, [f.path for f in forks])


def _run_argv(args: argparse.Namespace, fork: Path) -> list[str]:
    argv = ["run", "--execution", str(fork), "--yes"]
    if args.hank is not None:
        argv[1:1] = [str(args.hank)]
        argv.append("--rebind")
    if args.model:
        argv += ["--model", args.model]
    if args.headless or (len(argv) and args.n > 1):
        argv.append("--headless")
    if args.json:
        argv.append("--json")
    return argv


def _run_side_by_side(args: argparse.Namespace, forks: list[Path]) -> int:
    """Each fork's run as its own ``weft run`` process, all at once; their
    lines go to ``<fork>/.weft/logs/fork-run.log``. The exit code is the worst."""
    import subprocess

    running = []
    for fork in forks:
        log = fork / ".weft" / "logs"
        log.mkdir(parents=True, exist_ok=True)
        out = (log / "fork-run.log").open("wb")
        argv = [sys.executable, "-m", "weft", *_run_argv(args, fork)]
        running.append((fork, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), out))
    worst = 0
    for fork, proc, out in running:
        code = proc.wait()
        out.close()
        worst = max(worst, code)
        print(
            printable(f"{fork}: weft run exited {code} (its lines: {fork}/.weft/logs/fork-run.log)")
        )
    if len(forks) == 2:
        print(printable(f"Compare them: weft diff {forks[0]} {forks[1]}"))
    return worst
