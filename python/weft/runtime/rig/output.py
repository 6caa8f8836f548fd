"""A rig command's output, turned into ``rig.output`` events at a bounded cost.

Each stream (stdout, stderr) gets an :class:`OutputStream`: lines are
coalesced for ``interval`` (100 ms), an event carries at most ``event_bytes``
(the newest lines win; the others are counted in ``droppedLines``), and after
``streamed_bytes`` per command (a shared :class:`Budget`) only the latest
line of each stream is sent, once per ``trickle_interval``. :class:`LineSplitter`
decodes only the newest lines of a large chunk, so a flood is read at pipe
speed; :class:`Tail` keeps the last ``tail_bytes`` for the failure reason.
No I/O: the events go to the ``send`` callable given.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Budget", "LineSplitter", "OutputLimits", "OutputStream", "Tail"]


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """How command output is turned into ``rig.output`` events."""

    interval: float = 0.1
    """Seconds over which a stream's lines are coalesced into one event."""
    event_bytes: int = 16 * 1024
    """Most text in one event; older lines of the window are dropped past it."""
    streamed_bytes: int = 1024 * 1024
    """Text streamed per command before only the latest line is sent."""
    trickle_interval: float = 1.0
    """Seconds between events once ``streamed_bytes`` is spent."""
    tail_bytes: int = 16 * 1024
    """Output kept (both streams, in arrival order) for the result."""
    line_bytes: int = 4096
    """Longer lines are cut into pieces of this size."""


class LineSplitter:
    """Splits a byte stream into lines; of a large chunk only the newest ``keep`` bytes of
    lines are decoded (the others are counted), so a flood costs little."""

    __slots__ = ("_buf", "keep", "line_bytes")

    def __init__(self, line_bytes: int, keep: int) -> None:
        self.line_bytes = line_bytes
        self.keep = keep
        self._buf = bytearray()

    def _pieces(self, raw: bytes) -> list[str]:
        raw = raw.removesuffix(b"\r")
        if len(raw) <= self.line_bytes:
            return [raw.decode(errors="replace")]
        step = self.line_bytes
        return [raw[i : i + step].decode(errors="replace") for i in range(0, len(raw), step)]

    def push(self, data: bytes) -> tuple[list[str], int]:
        """The lines ``data`` completes, and how many complete lines were skipped."""
        last = data.rfind(b"\n")
        if last < 0:
            self._buf += data
            lines: list[str] = []
            while len(self._buf) >= self.line_bytes:
                lines.append(bytes(self._buf[: self.line_bytes]).decode(errors="replace"))
                del self._buf[: self.line_bytes]
            return lines, 0
        block = bytes(self._buf) + data[:last]
        self._buf = bytearray(data[last + 1 :])
        skipped = 0
        if len(block) > self.keep:
            cut = block.find(b"\n", len(block) - self.keep)
            if cut < 0:
                cut = block.rfind(b"\n")
            if cut >= 0:
                skipped = block.count(b"\n", 0, cut + 1)
                block = block[cut + 1 :]
        out: list[str] = []
        for raw in block.split(b"\n"):
            out.extend(self._pieces(raw))
        return out, skipped

    def finish(self) -> list[str]:
        """The unterminated last line, if any."""
        rest, self._buf = bytes(self._buf), bytearray()
        return self._pieces(rest) if rest else []


class Tail:
    """The last ``cap`` characters of output (whole lines; at least the newest)."""

    __slots__ = ("cap", "lines", "size")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0

    def add(self, line: str) -> None:
        """Keeps ``line`` (dropping the oldest lines past ``cap``)."""
        self.lines.append(line)
        self.size += len(line) + 1
        while self.size > self.cap and len(self.lines) > 1:
            self.size -= len(self.lines.popleft()) + 1

    def text(self) -> str:
        """The kept lines, joined."""
        return "\n".join(self.lines)


class Budget:
    """Text a command may still stream; once spent, its streams trickle."""

    __slots__ = ("left", "trickle")

    def __init__(self, left: int) -> None:
        self.left = left
        self.trickle = False


class OutputStream:
    """Coalesces one stream's lines into ``rig.output`` events."""

    def __init__(
        self,
        name: str,
        *,
        send: Callable[[dict[str, Any]], None],
        limits: OutputLimits,
        budget: Budget,
        tail: Tail,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.name = name
        self._send = send
        self._limits = limits
        self._budget = budget
        self._tail = tail
        self._loop = loop
        self._framer = LineSplitter(limits.line_bytes, max(limits.event_bytes, limits.tail_bytes))
        self._pending: collections.deque[str] = collections.deque()
        self._pending_size = 0
        self._dropped = 0
        self._last_flush = -1e9
        self._timer: asyncio.TimerHandle | None = None

    def feed(self, data: bytes) -> None:
        """Takes a chunk of the stream."""
        lines, skipped = self._framer.push(data)
        self._dropped += skipped
        self._add(lines)

    def close(self) -> None:
        """Sends the unterminated last line and whatever is pending."""
        self._add(self._framer.finish())
        self.flush()

    def _add(self, lines: list[str]) -> None:
        if not lines:
            return
        for line in lines:
            self._tail.add(line)
        if self._budget.trickle:
            self._dropped += len(self._pending) + len(lines) - 1
            self._pending.clear()
            self._pending.append(lines[-1])
            self._pending_size = len(lines[-1])
        else:
            cap = self._limits.event_bytes
            for line in lines:
                self._pending.append(line)
                self._pending_size += len(line) + 1
                while self._pending_size > cap and len(self._pending) > 1:
                    self._pending_size -= len(self._pending.popleft()) + 1
                    self._dropped += 1
        if self._timer is None:
            every = self._limits.trickle_interval if self._budget.trickle else self._limits.interval
            delay = max(0.0, self._last_flush + every - self._loop.time())
            self._timer = self._loop.call_later(delay, self.flush)

    def flush(self) -> None:
        """Sends the pending lines as one ``rig.output`` event (and charges the budget)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        text = "\n".join(self._pending)
        data: dict[str, Any] = {"stream": self.name, "line": text, "lines": len(self._pending)}
        if self._dropped:
            data["droppedLines"] = self._dropped
        self._pending.clear()
        self._pending_size = 0
        self._dropped = 0
        self._last_flush = self._loop.time()
        self._budget.left -= len(text)
        if self._budget.left <= 0:
            self._budget.trickle = True
        self._send(data)
