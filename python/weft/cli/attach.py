"""``weft attach [execution]``: the live view of a running execution, from another terminal.

It finds the run's server through ``.weft/runtime.lock`` (its port) and
connects with :mod:`weft.client`: read-write when the execution's read-write
token is readable (``.weft/server.token``, or ``--token``), read-only with
the read token (``.weft/server-read.token``) otherwise. The
journal is replayed first (so the table shows the whole run), then events
follow live. In a terminal, keys steer the run:

  n  start the next codon (``codon.next``)     s  skip the running codon
  f  force-stop the running codon               d  redo the last codon (``codon.redo``)
  r  roll back to the last success, run on      l  numbered checkpoints: pick one, roll back
  x  stop the run (graceful shutdown)           m / u  message / urgent message
  q  detach (the run goes on)

``r``, ``d``, ``x`` and a picked checkpoint ask for ``y`` to confirm. When
the run waits (manual mode), the view says for what ("waiting for next (n)").
Typed keys are never echoed: prompts and answers are notes of the view.
The command ends when the run ends (exit 0 if it completed, 1 otherwise), on
``q`` (0) or Ctrl-C (130).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import uvloop

from weft.cli.resolve import EXECUTION_HELP, resolve_execution
from weft.cli.view import JsonView, RunSummary, RunView, checkpoint_list_text, make_view
from weft.cli.view.notes import fold_wire
from weft.cli.view.terminal import single_keys
from weft.client import (
    Client,
    ClientError,
    CommandError,
    ConnectionLostError,
    HandshakeError,
)
from weft.client import connect as client_connect
from weft.errors import WeftError
from weft.outcome import exit_code
from weft.server.auth import client_token, read_read_token, read_token
from weft.store.execution import weft_dir_of
from weft.store.lock import LOCK, pid_alive, read_lock
from weft.terminal import printable_lines

KEYS_HELP = (
    "keys: n next · s skip · f force-stop codon · d redo last codon · r roll back to last "
    "success · l pick a checkpoint to roll back to · x stop the run · m message · "
    "u urgent message · q detach"
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
            "d redo the last codon, r roll back to the last success, l list checkpoints and "
            "pick one to roll back to, x stop, m message (next prompt), u urgent message "
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


Command = tuple[str, dict[str, Any] | None, str]
"""A command's name, its data, and what to say once the server accepted it."""

_COMMANDS: dict[str, Command] = {
    "n": ("codon.next", None, "next codon requested"),
    "s": ("codon.skip", None, "skip requested"),
    "f": ("codon.forceStop", {"reason": "User requested from weft attach"}, "force stop requested"),
    "d": ("codon.redo", None, "redo requested"),
    "l": ("checkpoint.list", None, "checkpoint list requested"),
    "r": ("rollback.toLastSuccess", {"autoRestart": True}, "rollback requested"),
    "x": ("server.shutdown", {"reason": "User requested from weft attach"}, "stop requested"),
}
_CONFIRM = {
    "r": "roll back to the last success (and run on from there)",
    "d": "redo the last codon from the checkpoint it started from",
    "x": "stop the run",
}
PICK_SHOWN = 20
"""Checkpoints the ``l`` menu numbers (newest first)."""

_BUSY = ("Codon", "codon.", "rollback.", "server.shutdown")
"""Event types after which the run no longer waits where its last ``server.idle`` said."""


def waiting_for(data: Any) -> str:
    """What a ``server.idle`` event means for the keys: what the run waits for."""
    data = data if isinstance(data, dict) else {}
    message = str(data.get("message", ""))
    if data.get("reason") == "all-codons-completed":
        return "all codons done: d redo the last · r/l roll back · x stop"
    if message.startswith("Waiting for codon.next"):
        codon = message.rsplit(" ", 1)[-1]
        return f"waiting for next (n): {codon} · d redo · r/l roll back · x stop"
    return f"waiting: {message} · d redo · r/l roll back · x stop"


def checkpoint_choice(row: Mapping[str, Any]) -> str:
    """One checkpoint of the ``l`` menu: codon, type, sha, when."""
    name = row.get("codonName") or row.get("codonId")
    when = str(row.get("timestamp") or "")[11:19]
    sha = str(row.get("sha"))[:10]
    return f"{name} ({row.get('codonId')}) {row.get('checkpointType')} {sha} {when}".rstrip()


class Keys:
    """Reads keys and sends the matching commands.

    Nothing typed is echoed (the terminal is in cbreak mode without echo, and
    the live view owns the screen); prompts and answers go through the view's
    notes. Modes, tried in order: typing a message (``m``/``u``), picking a
    checkpoint by number (after ``l``), confirming (y), plain keys.
    """

    def __init__(self, client: Client, note: Callable[[str], None], detach: asyncio.Event) -> None:
        self.client = client
        self.note = note
        self.detach = detach
        self.pending: tuple[Command, str] | None = None
        """A command waiting for ``y``, and its question."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.typing: bool | None = None
        """While a message is typed: whether it is urgent (None: not typing)."""
        self.text = ""
        self.choices: list[Mapping[str, Any]] | None = None
        """While a checkpoint is picked (after ``l``): the numbered checkpoints."""
        self.number = ""

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
            self._spawn(("codon.message", {"message": text, "urgent": urgent}, done))
        elif key == "\x1b":
            self.typing, self.text = None, ""
            self.note("message cancelled")
        elif key in ("\x7f", "\b"):
            self.text = self.text[:-1]
        elif key.isprintable():
            self.text += key

    def _pick(self, key: str) -> None:
        """One key while picking a checkpoint: digits, Enter chooses, Escape cancels."""
        choices = self.choices or []
        if key.isdigit():
            self.number += key
        elif key in ("\x7f", "\b"):
            self.number = self.number[:-1]
        elif key == "\x1b" or key in ("q", "c"):
            self.choices, self.number = None, ""
            self.note("rollback cancelled")
        elif key in ("\n", "\r"):
            number, self.number = self.number, ""
            if not number or not 1 <= int(number) <= len(choices):
                self.note(
                    f"no checkpoint {number or '(none typed)'}: type 1-{len(choices)}, Esc cancels"
                )
                return
            row = choices[int(number) - 1]
            self.choices = None
            data = {"checkpointSha": str(row.get("sha")), "autoRestart": False}
            command = ("rollback.toCheckpoint", data, f"rolling back to {checkpoint_choice(row)}")
            self.pending = (command, f"roll back to {number}. {checkpoint_choice(row)}")
            self.note(f"{self.pending[1]}? press y to confirm")

    def press(self, key: str) -> None:
        """Handles one key."""
        if self.typing is not None:
            self._type(key)
            return
        if self.choices is not None:
            self._pick(key)
            return
        if self.pending is not None:
            (confirmed, _), self.pending = self.pending, None
            if key.lower() == "y":
                self._spawn(confirmed)
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
            self.pending = (_COMMANDS[key], _CONFIRM[key])
            self.note(f"{_CONFIRM[key]}? press y to confirm")
            return
        self._spawn(_COMMANDS[key])

    def _spawn(self, command: Command) -> None:
        task = asyncio.get_running_loop().create_task(self._command(*command))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _command(self, name: str, data: dict[str, Any] | None, done: str) -> None:
        try:
            if name == "checkpoint.list":
                # The list comes to this client alone (it is not journaled).
                self._menu(await self.client.checkpoint_list())
                return
            await self.client.command(name, data)
        except CommandError as e:
            self.note(f"{name}: {e}")
        except (ClientError, TimeoutError) as e:
            self.note(f"{name}: no answer ({e or 'timed out'})")
        else:
            self.note(done)

    def _menu(self, listing: Mapping[str, Any]) -> None:
        """Numbers the checkpoints of the thread (newest first) and, read-write,
        waits for one to be picked."""
        rows = [r for r in listing.get("checkpoints") or [] if r.get("onThread")]
        if not rows:
            self.note(checkpoint_list_text(listing))
            self.note("no checkpoint of the execution thread to roll back to")
            return
        shown = rows[:PICK_SHOWN]
        more = f" ({len(rows) - len(shown)} older not shown)" if len(rows) > len(shown) else ""
        self.note(f"checkpoints of the thread, newest first{more}:")
        for number, row in enumerate(shown, 1):
            self.note(f"  {number:>2}. {checkpoint_choice(row)}")
        if self.client.mode != "readandwrite":
            return
        self.choices, self.number = shown, ""
        self.note("type a number and Enter to roll back to it (the run then waits); Esc cancels")


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
    loop = asyncio.get_running_loop()
    with contextlib.ExitStack() as stack:
        steering = False
        if keys_from is not None and stack.enter_context(single_keys(keys_from)):
            keys = Keys(client, view.note, detach)
            fd = keys_from.fileno()
            loop.add_reader(fd, lambda: keys.press(os.read(fd, 1).decode(errors="replace")))
            stack.callback(loop.remove_reader, fd)
            view.note(KEYS_HELP)
            steering = client.mode == "readandwrite"
        follower = loop.create_task(_events(client, view, hints=steering))
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
    ending = progress.ending
    # weft run's exit code for the run's journaled ending (attach saw no signal).
    status = "ended" if ending is None else ending.kind
    code = 1 if ending is None else exit_code(ending)
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


async def _events(client: Client, view: RunView, *, hints: bool = False) -> None:
    # The history is folded into the table without a line per old event
    # (the JSON view prints it all: it is a dump of the journal). The wire
    # events go to the fold as the client decoded them: no second core, no
    # re-encoding (a refused transition is already its journaled error event).
    quiet = not isinstance(view, JsonView)
    live = client.joined_at == 0
    if live:
        view.start()
    # With ``hints`` (keys that steer), each ``server.idle`` is followed by
    # what the keys can do about it; one still pending when the replay ends
    # (the run waited before this client came) is said once live.
    progress = view.progress
    idle: Any = None
    async for batch in client.batches(replay=True):
        for event in batch:
            if live or not quiet:
                view.on_wire(event)
            else:
                fold_wire(progress, event)
            if event.type == "server.idle":
                idle = event.data
                if live and hints:
                    view.note(waiting_for(idle))
            elif event.type.startswith(_BUSY):
                idle = None
        if not live and client.cursor >= client.joined_at:
            live = True
            view.start()
            if hints and idle is not None:
                view.note(waiting_for(idle))


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
