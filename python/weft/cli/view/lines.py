"""The line views: :class:`HeadlessView` (timestamped lines for CI logs) and
:class:`JsonView` (each event as one JSON line, the journal's bytes)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import msgspec
import orjson

from weft.cli.view.base import Lines, call_later, cancel
from weft.cli.view.format import attempt_figures, describe_last, format_duration, iso
from weft.cli.view.notes import (
    Note,
    detail,
    fold_wire,
    is_waiting,
    waiting_words,
    wire_time_ns,
    word,
)
from weft.cli.view.summary import RunSummary, summary_data, summary_rows, title
from weft.progress import NANO, RunProgress
from weft.state import Processed

if TYPE_CHECKING:
    # Only named in annotations: weft.client loads the WebSocket client (websockets.asyncio.client,
    # urllib.request), which a view on weft run's own process never uses.
    from weft.client import Event

_wire_encoder = msgspec.json.Encoder()


class HeadlessView:
    """Plain timestamped lines for CI logs: a line per codon state change, rig
    failures, errors, information, retries, loop iterations, and every
    ``progress_every`` seconds a progress line for the codon being run. Token
    and cost updates only ever show in those lines. With ``verbose``, also a
    line per tool call, tool result and agent message (``weft run --verbose``)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        progress: RunProgress | None = None,
        progress_every: float = 30.0,
        clock: Callable[[], int] = time.time_ns,
        verbose: bool = False,
        keys: bool = False,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self._verbose = verbose
        self._keys = keys
        self._out = Lines(stream if stream is not None else sys.stdout, escape=True)
        self._every_ns = int(progress_every * NANO)
        self._clock = clock
        self._last_line: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._running = False

    def on_event(self, item: Processed) -> None:
        """Folds the event; writes its line, if it has one."""
        event = self.progress.apply(item)
        codon = None if item.stream is None else item.stream.codon_id
        note = word(self.progress, event, item.time_ns, codon)
        if note is None and self._verbose:
            note = detail(event)
        self._show(note, item.time_ns, item.timestamp)

    def on_wire(self, event: Event) -> None:
        """Folds a wire event; writes its line, if it has one."""
        typed_event, at = fold_wire(self.progress, event)
        note = word(self.progress, typed_event, at)
        if note is None and self._verbose:
            note = detail(typed_event)
        self._show(note, wire_time_ns(event), event.timestamp)

    def _show(self, note: Note | None, at_ns: int, stamp: str) -> None:
        if note is not None:
            text = waiting_words(note.text) if self._keys and is_waiting(note) else note.text
            self._out.write(f"{stamp} {text}")
            if note.codon_id is not None:
                self._last_line[note.codon_id] = at_ns
        if self._timer is None and self._running:
            self._schedule()

    def note(self, message: str) -> None:
        """Writes ``message`` as a timestamped line."""
        self._out.write(f"{iso(self._clock())} {message}")

    def tick(self, now_ns: int) -> None:
        """Writes a progress line for the active codon if it has been quiet for
        ``progress_every`` seconds."""
        c = self.progress.active
        if c is None or c.started_ns is None:
            return
        last = self._last_line.get(c.codon_id, c.started_ns)
        if now_ns - last < self._every_ns:
            return
        self._last_line[c.codon_id] = now_ns
        did = describe_last(c)
        action = f", last: {did}" if did else ""
        self._out.write(
            f"{iso(now_ns)} {c.codon_id}: {c.status} for {format_duration(c.elapsed(now_ns) or 0)}"
            f" ({attempt_figures(c)}{action})"
        )

    def start(self) -> None:
        """Enables the progress timer; it runs on the loop of the events."""
        self._running = True
        self._schedule()

    def stop(self) -> None:
        """Stops the progress timer."""
        self._running = False
        cancel(self._timer)
        self._timer = None
        self._out.flush()

    def summary(self, result: RunSummary) -> None:
        """Writes the summary: a title line, then indented ``label  text`` lines."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        self._out.write(f"{iso(now)} {title(result)}")
        for label, text in summary_rows(data):
            self._out.write(f"  {label:<12} {text}")
        self._out.flush()

    def _schedule(self) -> None:
        # A quiet agent sends no events, so a timer (not the events) drives the
        # progress lines; checking every second is cheaper than one event.
        period = max(0.05, min(1.0, self._every_ns / NANO / 4))
        self._timer = call_later(period, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._running:
            return
        self.tick(self._clock())
        self._schedule()


class JsonView:
    """Each event as one JSON line, ``{"id","seq","timestamp","type","data"}``:
    the journal's payload bytes with the envelope spliced in front, never
    re-encoded. A refused transition appears as the journal records it, an
    ``error`` event. The summary is one last line, ``{"type": "run.summary", ...}``."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        progress: RunProgress | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self._out = Lines(stream if stream is not None else sys.stdout)
        self._clock = clock

    def on_event(self, item: Processed) -> None:
        """Writes the event's line (and folds it, for the summary)."""
        self.progress.apply(item)
        payload = item.payload.decode("utf-8", "replace").strip()
        head = f'{{"id":"{item.id}","seq":{item.seq},"timestamp":"{item.timestamp}"'
        rest = payload[1:].lstrip()
        if not payload.startswith("{") or not rest:
            return
        self._out.write(f"{head}}}" if rest.startswith("}") else f"{head},{rest}")

    def on_wire(self, event: Event) -> None:
        """Writes a wire event's line, ``{"id","seq","timestamp","type","data"}``
        (and folds it): the client decoded it, so this encodes it once."""
        fold_wire(self.progress, event)
        self._out.write(_wire_encoder.encode(event).decode("utf-8", "replace"))

    def note(self, message: str) -> None:
        """Writes ``{"type":"note","timestamp":...,"data":{"message":...}}``."""
        line = {"type": "note", "timestamp": iso(self._clock()), "data": {"message": message}}
        self._out.write(orjson.dumps(line).decode())

    def start(self) -> None:
        """Nothing to start: lines are written as events come."""

    def stop(self) -> None:
        """Flushes."""
        self._out.flush()

    def summary(self, result: RunSummary) -> None:
        """Writes ``{"type":"run.summary","timestamp":...,"data":{...}}``."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        line = {"type": "run.summary", "timestamp": iso(now), "data": data}
        self._out.write(orjson.dumps(line).decode())
        self._out.flush()
