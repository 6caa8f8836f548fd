"""What every view of a run is, and the two pieces of plumbing they share:
lines written with one flush per loop turn, and timers armed on the loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

from weft.cli.view.summary import RunSummary
from weft.progress import RunProgress
from weft.state import Processed
from weft.terminal import printable

if TYPE_CHECKING:
    # Only named in annotations: weft.client loads the WebSocket client (websockets.asyncio.client,
    # urllib.request), which a view on weft run's own process never uses.
    from weft.client import Event as WireEvent


class RunView(Protocol):
    """What ``weft run`` shows. ``on_event`` is a StateManager listener: it runs
    on the event loop for every event and must stay cheap."""

    progress: RunProgress
    """The model the view shows; seed it with the state a resumed run starts from."""

    def on_event(self, item: Processed) -> None:
        """Takes one processed event."""

    def on_wire(self, event: WireEvent) -> None:
        """Takes one event as a client received it (``weft attach``)."""

    def note(self, message: str) -> None:
        """Shows a message of the command itself (not an event of the run)."""

    def start(self) -> None:
        """Starts showing. Timed refreshes begin with the first event, on its loop."""

    def stop(self) -> None:
        """Stops showing (a last refresh first); idempotent."""

    def summary(self, result: RunSummary) -> None:
        """Prints the end summary."""


class Lines:
    """Writes lines to a text stream; flushes once per event-loop turn, not per line.

    With ``escape``, each line goes through :func:`weft.terminal.printable`
    first: ids, names, messages and file names come from hank files and agents.
    """

    def __init__(self, stream: TextIO, *, escape: bool = False) -> None:
        self.stream = stream
        self._escape = escape
        self._flush_pending = False
        self._broken = False

    def write(self, line: str) -> None:
        if self._broken:
            return
        if self._escape:
            line = printable(line)
        try:
            self.stream.write(line + "\n")
        except (BrokenPipeError, ValueError):
            # The reader went away (`weft run --json | head`): stop writing, keep running.
            self._broken = True
            return
        if self._flush_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_pending = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        if self._broken:
            return
        try:
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self._broken = True


def call_later(delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle | None:
    # ``weft run`` starts its view before the event loop exists; the timer is
    # then armed by the first event, which the StateManager delivers on the loop.
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(delay, callback)


def cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        with contextlib.suppress(RuntimeError):  # its loop may be closed by now
            timer.cancel()
