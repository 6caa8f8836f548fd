"""``weft message [execution] TEXT [--urgent]``: a message for a running codon's agent.

Sent over the execution's WebSocket server (``codon.message``, read-write).
Without ``--urgent`` it joins the next prompt built (the next resume of the
session, or the next codon's prompt); with it, the running session is
interrupted and resumed with the message at once.

The execution is named as every command names one (:mod:`weft.cli.resolve`): a
directory, an id, a hank (its latest execution), or nothing (the current folder,
else the latest execution of ``./hank.json``).
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
from weft.terminal import printable_lines


def register(commands: Any) -> None:
    """Adds the ``message`` command."""
    parser = commands.add_parser(
        "message",
        help="send a message to the agent of a running execution",
        description=(
            "Send a message to the running codon's agent. Queued (default): it joins the next "
            "prompt. --urgent: the agent is interrupted and resumes its session with it."
        ),
    )
    parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    parser.add_argument("text", help="the message")
    parser.add_argument("--urgent", action="store_true", help="interrupt the agent now")
    parser.add_argument("--url", help="connect to this server instead (ws://host:port)")
    parser.add_argument("--token", help="the execution's read-write token")
    parser.set_defaults(run=run)


async def send(target: Target, text: str, *, urgent: bool) -> None:
    """Connects read-write and sends the message."""
    async with client_connect(
        target.url, token=target.token, mode="readandwrite", reconnect=False
    ) as client:
        await client.message(text, urgent=urgent)


def run(args: argparse.Namespace) -> int:
    """Runs ``weft message``."""
    if not args.text.strip():
        print("weft: error: the message is empty", file=sys.stderr)
        return 2
    try:
        # With --url the execution is not needed (and may be on another machine).
        execution = Path() if args.url else resolve_execution(args.execution)
        target = find_target(execution, url=args.url, token=args.token, readonly=False)
    except AttachError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 2
    if target.token is None:
        print(
            "weft: error: sending a message needs the execution's read-write token "
            "(run as its owner, or pass --token)",
            file=sys.stderr,
        )
        return 2
    try:
        uvloop.run(send(target, args.text, urgent=args.urgent))
    except CommandError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 1
    except (ClientError, TimeoutError, OSError) as e:
        print(f"weft: error: {printable_lines(str(e) or 'no answer')}", file=sys.stderr)
        return 1
    print("urgent message sent: the agent resumes with it" if args.urgent else "message queued")
    return 0
