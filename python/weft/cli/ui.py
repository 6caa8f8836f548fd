"""``weft ui [--root DIR] [--host H] [--port P]``: a dashboard over every execution.

It serves the list page of the executions under the managed root (the one
``weft run`` creates them in: ``~/.weft-executions`` or
``$WEFT_RUNTIME_EXECUTION_BASE_DIR``) and opens any of them: a live run on its
own server, a finished one as a read-only replay of its journal (see
:mod:`weft.web.machine`). It prints the page's address with a fresh token in
the URL fragment when the output is a terminal; otherwise (a log, a pipe) the
address alone, and the token goes to ``--token-file``. It runs until Ctrl-C
(exit 130) or SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import uvloop

from weft.runtime.execution.prepare import managed_base_dir
from weft.server import ServerError
from weft.server.auth import is_loopback
from weft.terminal import printable_lines

EPILOG = """\
examples:
  weft ui                           the executions under the managed root
  weft ui --root DIR --token-file F  another root; the token written to F (mode 0600)

exit codes:
  0    stopped by SIGTERM (a normal stop: a server has nothing to save)
  2    usage error, or the address cannot be served (nothing was started)
  130  interrupted by Ctrl-C (SIGINT)"""
"""The end of ``weft ui --help``: ``helptext.add_epilogs`` keeps an epilog that has its
own exit codes (a server that runs until stopped has no "run failed" and exits 0 on
SIGTERM)."""


def register(commands: Any) -> None:
    """Adds the ``ui`` command."""
    parser = commands.add_parser(
        "ui",
        help="serve a web dashboard over every execution on this machine",
        description=(
            "Serve a web dashboard listing the executions under the managed root; open any of "
            "them (a live run follows live, a finished one is replayed from its journal)."
        ),
        # Its own exit codes: the shared table's (1 a run failed, 143 on SIGTERM) are not ui's.
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--root",
        type=Path,
        help="the executions' root "
        "(default: $WEFT_RUNTIME_EXECUTION_BASE_DIR or ~/.weft-executions)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument("--port", type=int, default=0, help="the port (default 0: a free one)")
    parser.add_argument(
        "--token-file",
        type=Path,
        help="write the page's token to this file (mode 0600) instead of printing it",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs ``weft ui`` until interrupted."""
    from weft.web.machine import MachineDashboard

    if not 0 <= args.port <= 65535:
        print(f"weft: error: --port {args.port} is not a port (0-65535)", file=sys.stderr)
        return 2
    root = managed_base_dir(args.root)
    dashboard = MachineDashboard(root, host=args.host, port=args.port)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_serve(dashboard, args.token_file))
    except ServerError as exc:
        print(f"weft: error: {printable_lines(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _serve(dashboard: Any, token_file: Path | None) -> int:
    await dashboard.start()
    if not is_loopback(dashboard.host) and dashboard.host != "localhost":
        print(
            f"warning: listening on {dashboard.host}: anyone who reaches this port with the token "
            "can read every execution under the root and steer its live runs",
            file=sys.stderr,
            flush=True,
        )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if token_file is not None:
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(dashboard.token + "\n")
        print(f"Dashboard of {dashboard.root}: {dashboard.url} (token in {token_file})", flush=True)
    elif sys.stdout.isatty():
        print(f"Dashboard of {dashboard.root}: {dashboard.url}#token={dashboard.token}", flush=True)
    else:
        print(
            f"Dashboard of {dashboard.root}: {dashboard.url} "
            "(not a terminal: the token is not printed; use --token-file)",
            flush=True,
        )
    try:
        await stop.wait()
    finally:
        await dashboard.close()
    return 0
