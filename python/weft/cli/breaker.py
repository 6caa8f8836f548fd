"""``weft breaker reset [execution] PROVIDER``: closes an agent provider's circuit breaker.

The execution is named as every command names one (:mod:`weft.cli.resolve`): a
directory, an id, a hank (its latest execution), or nothing (the current folder,
else the latest execution of ``./hank.json``).

Sent over the execution's WebSocket server (``breaker.reset``, read-write):
the seed 004 Recovery 3. Codons waiting for the provider's cool-down go at
once; the breaker counts failures from zero again. ``weft status`` shows each
provider's breaker.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import uvloop

from weft.cli.attach import AttachError, Target, find_target
from weft.cli.resolve import EXECUTION_HELP, resolve_execution
from weft.client import ClientError, CommandError
from weft.client import connect as client_connect
from weft.runtime.codon.breakers import PROVIDERS
from weft.terminal import printable_lines


def register(commands: Any) -> None:
    """Adds the ``breaker`` command (its one verb: ``reset``)."""
    parser = commands.add_parser(
        "breaker",
        help="reset an agent provider's circuit breaker in a running execution",
        description=(
            "Agent providers' circuit breakers open after provider failures in a row; "
            "codons wait out the cool-down. 'weft breaker reset PROVIDER' closes one now."
        ),
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    reset = verbs.add_parser("reset", help="close a provider's breaker now")
    reset.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    reset.add_argument("provider", choices=sorted(set(PROVIDERS.values())), help="the provider")
    reset.add_argument("--url", help="connect to this server instead (ws://host:port)")
    reset.add_argument("--token", help="the execution's read-write token")
    reset.set_defaults(run=run)


async def send(target: Target, provider: str) -> None:
    """Connects read-write and sends ``breaker.reset``."""
    async with client_connect(
        target.url, token=target.token, mode="readandwrite", reconnect=False
    ) as client:
        await client.breaker_reset(provider)


def run(args: argparse.Namespace) -> int:
    """Runs ``weft breaker reset``."""
    try:
        # With --url the execution is not needed (and may be on another machine).
        execution = Path() if args.url else resolve_execution(args.execution)
        target = find_target(execution, url=args.url, token=args.token, readonly=False)
    except AttachError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 2
    if target.token is None:
        print(
            "weft: error: resetting a breaker needs the execution's read-write token "
            "(run as its owner, or pass --token)",
            file=sys.stderr,
        )
        return 2
    try:
        uvloop.run(send(target, args.provider))
    except CommandError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 1
    except (ClientError, TimeoutError, OSError) as e:
        print(f"weft: error: {printable_lines(str(e) or 'no answer')}", file=sys.stderr)
        return 1
    print(f"{args.provider} circuit breaker closed")
    return 0
