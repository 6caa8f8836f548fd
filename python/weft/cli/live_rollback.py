"""``weft rollback`` on a live execution: the rollback goes through the run's server.

A live ``weft run`` holds the execution's lock, so the offline rollback (which
takes the lock) cannot run beside it. Instead the command is sent to the
run's WebSocket server (its port is in ``.weft/runtime.lock``, the read-write
token in ``.weft/server.token``): ``rollback.toLastSuccess``,
``rollback.toCodon`` or ``rollback.toCheckpoint``. The run itself restores the
files and starts the continuation run; this command prints its
``rollback.*`` events until ``rollback.completed`` (exit 0), or the reason it
was refused or failed (exit 1). The run then waits for ``codon.next`` (manual
mode). Uncheckpointed changes are saved to a ``recovery/`` branch first, as
offline (``--discard`` skips that).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from weft.cli.attach import AttachError, find_target
from weft.client import ClientError, CommandError
from weft.client import connect as client_connect
from weft.terminal import printable, printable_lines

ROLLBACK_TIMEOUT = 300.0
"""Seconds to wait for the run to report the rollback's end."""


def command_for(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The server command (and its data) for ``weft rollback``'s target flags."""
    if args.checkpoint is not None:
        return "rollback.toCheckpoint", {"checkpointSha": args.checkpoint}
    if args.codon is not None:
        return "rollback.toCodon", {"codonId": args.codon, "checkpointType": args.type}
    return "rollback.toLastSuccess", {}


def say(kind: str, data: Any) -> str | None:
    """The line printed for one journaled event of the rollback (None: nothing)."""
    if not isinstance(data, dict):
        return None
    if kind == "rollback.started":
        undone = ", ".join(data.get("codonsToProcess") or []) or "nothing"
        return (
            f"Rolling back to the {data.get('checkpointType')} checkpoint "
            f"{str(data.get('toCheckpoint', ''))[:10]} of {data.get('toCodon')}; "
            f"superseded: {undone}"
        )
    if kind == "rollback.progress":
        return str(data.get("message", ""))
    if kind == "rollback.completed":
        return (
            f"Rolled back; run {data.get('toRun')} continues from "
            f"{str(data.get('checkpoint', ''))[:10]}"
        )
    return None


async def rollback_live(
    args: argparse.Namespace,
    execution: Path,
    *,
    save: Callable[[], Awaitable[None]],
) -> int:
    """Sends the rollback to the live run of ``execution`` and follows it to its end.

    ``save`` keeps the uncheckpointed changes first (skipped with ``--discard``).
    """
    try:
        target = find_target(execution, url=None, token=None, readonly=False)
    except AttachError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 1
    if target.token is None or target.mode == "readonly":
        print(
            "weft: error: a run is live on this execution and rolling it back needs its "
            "read-write token (.weft/server.token); run as its owner, or stop the run first",
            file=sys.stderr,
        )
        return 1
    name, data = command_for(args)
    async with client_connect(
        target.url, token=target.token, mode="readandwrite", reconnect=False
    ) as client:
        if not args.discard:
            await save()
        try:
            await client.command(name, data)
        except CommandError as e:
            print(f"weft: error: the live run refused: {printable_lines(str(e))}", file=sys.stderr)
            return 1
        except (ClientError, TimeoutError) as e:
            print(f"weft: error: {name}: no answer ({e or 'timed out'})", file=sys.stderr)
            return 1
        print(f"The live run ({target.url}) accepted {name}", flush=True)
        try:
            async with asyncio.timeout(ROLLBACK_TIMEOUT):
                async for event in client.events(replay=False):
                    line = say(event.type, event.data)
                    if line:
                        print(printable(line), flush=True)
                    if event.type == "rollback.completed":
                        print(
                            "The run waits for the next codon: `weft attach` and press n, "
                            "or send codon.next"
                        )
                        return 0
                    if event.type == "error" and isinstance(event.data, dict):
                        message = str(event.data.get("message", ""))
                        if message.startswith("rollback failed"):
                            print(f"weft: error: {printable_lines(message)}", file=sys.stderr)
                            return 1
        except TimeoutError:
            print(
                f"weft: error: the run did not report the rollback's end within "
                f"{ROLLBACK_TIMEOUT:.0f} s; `weft status` shows where it stands",
                file=sys.stderr,
            )
            return 1
        except ClientError as e:
            print(f"weft: error: lost the run during the rollback: {e}", file=sys.stderr)
            return 1
    print("weft: error: the run ended before the rollback completed", file=sys.stderr)
    return 1
