"""``weft attach [execution]``: the live view of a running execution, from another terminal.

It finds the run's server through ``.weft/runtime.lock`` (its port) and
connects with :mod:`weft.client`: read-write when the execution's read-write
token is readable (``.weft/server.token``, or ``--token``), read-only with
the read token (``.weft/server-read.token``) otherwise. The
journal is replayed first (so the table shows the whole run), then events
follow live. In a terminal, keys steer the run:

  n  start the next codon (``codon.next``)     s  skip the running codon
  f  force-stop the running codon               r  roll back to the last success
  x  stop the run (graceful shutdown)           l  list checkpoints
  q  detach (the run goes on)

``r`` and ``x`` ask for ``y`` to confirm. The command ends when the run ends
(exit 0 if it completed, 1 otherwise), on ``q`` (0) or Ctrl-C (130).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import uvloop

from weft.cli.resolve import EXECUTION_HELP, resolve_execution
from weft.cli.view import JsonView, RunSummary, RunView, checkpoint_list_text, make_view
from weft.cli.view.notes import fold_wire
from weft.client import (
    Client,
    ClientError,
    CommandError,
    ConnectionLostError,
    HandshakeError,
)
from weft.client import connect as client_connect
from weft.errors import WeftError
from weft.server.auth import client_token, read_read_token, read_token
from weft.store.execution import weft_dir_of
from weft.store.lock import LOCK, pid_alive, read_lock
from weft.terminal import printable_lines

KEYS_HELP = (
    "keys: n next · s skip · f force-stop codon · r roll back to last success · "
    "x stop the run · l checkpoints · m message · u urgent message · q detach"
)


class AttachError(WeftError):
    """Nothing to attach to; the message says why and what to do."""


def register(commands: Any) -> None:
    """Adds the ``attach`` command."""
    parser = commands.add_parser(
        "attach",
        help="watch (and steer) a running execution",
        description=(
            "Show the live view of a running execution through its WebSocket server. "
            "Read-write when the execution's read-write token is readable (or --token), "
            "read-only with its read token otherwise. Keys: n next, s skip, f force-stop, "
            "r rollback, x stop, l checkpoints, m message (next prompt), u urgent message "
            "(interrupts the agent, which resumes with it), q detach."
        ),
    )
    parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    parser.add_argument("--url", help="connect to this server instead (ws://host:port)")
    parser.add_argument(
        "--token", help="the execution's read-write token, or its read token (read-only access)"
    )
    parser.add_argument(
        "--readonly", action="store_true", help="connect read-only even when a token is available"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--headless", action="store_true", help="plain timestamped lines")
    output.add_argument(
        "--json", action="store_true", help="every event as a JSON line (the whole journal first)"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="plain lines (as --headless) that also show the agent's tool calls, their results "
        "and its messages",
    )
    parser.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect, with which token."""

    url: str
    token: str | None
    execution: Path | None
    mode: Literal["readonly", "readandwrite"] | None = None
    """None: read-write when there is a token (read-only if the server refuses it)."""


def find_target(execution: Path, *, url: str | None, token: str | None, readonly: bool) -> Target:
    """The server of ``execution`` (or ``url``), the token to use and the mode."""
    if url is not None:
        return Target(url, token, None, "readonly" if readonly else None)
    weft_dir = weft_dir_of(execution)
    if not weft_dir.is_dir():
        raise AttachError(
            f"{execution}: not an execution directory (no .weft/ inside); "
            "pass the directory `weft run` printed, or --url"
        )
    lock = read_lock(weft_dir / LOCK)
    if lock is None:
        raise AttachError(
            f"{execution}: no run is active (no .weft/{LOCK}); start one with `weft run`"
        )
    if not pid_alive(lock.pid):
        raise AttachError(
            f"{execution}: the run's process (PID {lock.pid}) is gone; "
            f"`weft status {execution}` shows where it stopped"
        )
    if lock.port is None:
        raise AttachError(
            f"{execution}: the run (PID {lock.pid}) has not opened its WebSocket server yet; "
            "try again in a moment"
        )
    url = f"ws://127.0.0.1:{lock.port}"
    if token is not None:
        return Target(url, token, weft_dir.parent, "readonly" if readonly else None)
    if readonly:
        # The read token when there is one: a read-only attach needs no more.
        token = read_read_token(weft_dir) or read_token(weft_dir)
        return Target(url, token, weft_dir.parent, "readonly")
    found = client_token(weft_dir)
    if found is None:
        # A run started with --allow-anonymous-read lets this in; others say why not.
        return Target(url, None, weft_dir.parent, "readonly")
    return Target(url, found[0], weft_dir.parent, found[1])


# --------------------------------------------------------------------------- keys


@contextlib.contextmanager
def cbreak(stream: TextIO) -> Iterator[bool]:
    """Single keys without Enter while inside (when ``stream`` is a terminal)."""
    try:
        fd = stream.fileno()
        saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    except (OSError, ValueError, termios.error):
        saved = None
    if saved is None:
        yield False
        return
    tty.setcbreak(fd)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


_COMMANDS: dict[str, tuple[str, dict[str, Any] | None, str]] = {
    "n": ("codon.next", None, "next codon requested"),
    "s": ("codon.skip", None, "skip requested"),
    "f": ("codon.forceStop", {"reason": "User requested from weft attach"}, "force stop requested"),
    "l": ("checkpoint.list", None, "checkpoint list requested"),
    "r": ("rollback.toLastSuccess", {"autoRestart": True}, "rollback requested"),
    "x": ("server.shutdown", {"reason": "User requested from weft attach"}, "stop requested"),
}
_CONFIRM = {"r": "roll back to the last success", "x": "stop the run"}


class Keys:
    """Reads keys and sends the matching commands."""

    def __init__(self, client: Client, note: Callable[[str], None], detach: asyncio.Event) -> None:
        self.client = client
        self.note = note
        self.detach = detach
        self.pending: str | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.typing: bool | None = None
        """While a message is typed: whether it is urgent (None: not typing)."""
        self.text = ""

    def _type(self, key: str) -> None:
        """One key of a message being typed: Enter sends, Escape cancels.
        Nothing is echoed character by character (the live view owns the
        screen); the message is shown once sent."""
        urgent = bool(self.typing)
        if key in ("\n", "\r"):
            text, self.typing, self.text = self.text.strip(), None, ""
            if not text:
                self.note("empty message: not sent")
                return
            done = f"{'urgent ' if urgent else ''}message sent: {text}"
            task = asyncio.get_running_loop().create_task(
                self._command("codon.message", {"message": text, "urgent": urgent}, done)
            )
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif key == "\x1b":
            self.typing, self.text = None, ""
            self.note("message cancelled")
        elif key in ("\x7f", "\b"):
            self.text = self.text[:-1]
        elif key.isprintable():
            self.text += key

    def press(self, key: str) -> None:
        """Handles one key."""
        if self.typing is not None:
            self._type(key)
            return
        if self.pending is not None:
            confirmed, self.pending = self.pending, None
            if key.lower() == "y":
                self._send(confirmed)
            else:
                self.note("cancelled")
            return
        if key in ("q", "Q"):
            self.detach.set()
            return
        if key in ("m", "u"):
            if self.client.mode != "readandwrite":
                self.note("read-only: messages need the execution's token (or --token)")
                return
            self.typing = key == "u"
            kind = "urgent message (interrupts the agent)" if self.typing else "message"
            self.note(f"type the {kind}; Enter sends, Esc cancels")
            return
        if key not in _COMMANDS:
            if key.isprintable() and key.strip():
                self.note(KEYS_HELP)
            return
        if self.client.mode != "readandwrite" and key != "l":
            self.note(
                "read-only: steering needs the execution's token "
                "(run as its owner, or pass --token)"
            )
            return
        if key in _CONFIRM:
            self.pending = key
            self.note(f"{_CONFIRM[key]}? press y to confirm")
            return
        self._send(key)

    def _send(self, key: str) -> None:
        name, data, done = _COMMANDS[key]
        task = asyncio.get_running_loop().create_task(self._command(name, data, done))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _command(self, name: str, data: dict[str, Any] | None, done: str) -> None:
        try:
            if name == "checkpoint.list":
                # The list comes to this client alone (it is not journaled).
                done = checkpoint_list_text(await self.client.checkpoint_list())
            else:
                await self.client.command(name, data)
        except CommandError as e:
            self.note(f"{name}: {e}")
        except (ClientError, TimeoutError) as e:
            self.note(f"{name}: no answer ({e or 'timed out'})")
        else:
            self.note(done)


# --------------------------------------------------------------------------- the command


async def attach(target: Target, view: RunView, *, keys_from: TextIO | None) -> int:
    """Follows the run until it ends, the user detaches, or the connection is lost."""
    try:
        async with client_connect(target.url, token=target.token, mode=target.mode) as client:
            return await _follow(client, target, view, keys_from)
    except HandshakeError as e:
        if e.code != "INVALID_TOKEN" or target.token is None or target.mode == "readonly":
            raise
        # A --token may be the read token: it still opens a read-only connection.
        view.note("the token was refused for read-write; attaching read-only")
        readonly = Target(target.url, target.token, target.execution, "readonly")
        async with client_connect(readonly.url, token=readonly.token, mode="readonly") as client:
            return await _follow(client, readonly, view, keys_from)


async def _follow(client: Client, target: Target, view: RunView, keys_from: TextIO | None) -> int:
    where = target.execution or target.url
    mode = "read-write" if client.mode == "readandwrite" else "read-only"
    view.note(f"attached to {where} ({mode})")
    detach = asyncio.Event()
    follower = asyncio.get_running_loop().create_task(_events(client, view))
    loop = asyncio.get_running_loop()
    with contextlib.ExitStack() as stack:
        keys: Keys | None = None
        if keys_from is not None and stack.enter_context(cbreak(keys_from)):
            keys = Keys(client, view.note, detach)
            fd = keys_from.fileno()
            reader = keys
            loop.add_reader(fd, lambda: reader.press(os.read(fd, 1).decode(errors="replace")))
            stack.callback(loop.remove_reader, fd)
            view.note(KEYS_HELP)
        stopper = loop.create_task(detach.wait())
        await asyncio.wait((follower, stopper), return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
    if not follower.done():
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        view.note("detached; the run goes on")
        return 0
    try:
        follower.result()
    except ConnectionLostError as e:
        view.note(f"lost the run: {e}")
        return 1
    progress = view.progress
    status = progress.run_status or "ended"
    code = 0 if status == "completed" else 1
    view.stop()
    view.summary(
        RunSummary(
            status=status,
            exit_code=code,
            execution=target.execution,
            resume_command=(
                None if target.execution is None else f"weft run --execution {target.execution}"
            ),
        )
    )
    return code


async def _events(client: Client, view: RunView) -> None:
    # The history is folded into the table without a line per old event
    # (the JSON view prints it all: it is a dump of the journal). The wire
    # events go to the fold as the client decoded them: no second core, no
    # re-encoding (a refused transition is already its journaled error event).
    quiet = not isinstance(view, JsonView)
    live = client.joined_at == 0
    if live:
        view.start()
    progress = view.progress
    async for batch in client.batches(replay=True):
        for event in batch:
            if live or not quiet:
                view.on_wire(event)
            else:
                fold_wire(progress, event)
        if not live and client.cursor >= client.joined_at:
            live = True
            view.start()


def run(args: argparse.Namespace) -> int:
    """Runs ``weft attach``."""
    try:
        # With --url the execution is not needed (and may be on another machine).
        execution = Path() if args.url else resolve_execution(args.execution)
        target = find_target(execution, url=args.url, token=args.token, readonly=args.readonly)
    except AttachError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 2
    mode = "json" if args.json else "headless" if args.headless else "live"
    if args.json and args.verbose:
        print(
            "weft: error: --verbose shows more lines; --json already prints every event: "
            "pass one of them",
            file=sys.stderr,
        )
        return 2
    view = make_view(mode, sys.stdout, verbose=args.verbose)
    keys_from = None if args.json else sys.stdin
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(attach(target, view, keys_from=keys_from))
    except KeyboardInterrupt:
        view.note("detached; the run goes on")
        return 130
    except HandshakeError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 2
    except ConnectionLostError as e:
        print(
            f"weft: error: {printable_lines(str(e))}; is the run still going? (`weft status`)",
            file=sys.stderr,
        )
        return 1
    finally:
        view.stop()
