"""Live fan-out: every processed event to every live client, encoded once.

The StateManager calls :meth:`Fanout.on_processed` after each durable batch
(durable before visible). Each event becomes one wire envelope, the journal
payload with ``id``, ``seq`` and ``timestamp`` spliced in front (the bytes a
replay reads from the journal are the same), and the envelopes of one batch
go out together on the next loop turn: per-event clients get one WebSocket
frame per event, ``liveBatches`` clients one ``live.batch`` frame, and both
chunks are framed once and written as-is to every client that wants them.

Nothing here waits for a client. A client's send queue is its transport's
write buffer: when new events are due and more than ``send_limit`` bytes sent
earlier are still waiting, the client is behind and is dropped
(:meth:`Subscriber.lagging`); it resumes from its cursor later. So a slow
client never slows the run or the other clients, and holds at most
``send_limit`` bytes plus one batch.

A ring of the newest envelopes serves handshake history and short catch-ups
without touching the journal.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeAlias

from weft.clock import iso_from_ms
from weft.server.protocol import live_batch
from weft.state import Processed, event_id

log = logging.getLogger(__name__)

_WS = b" \t\n\r"


def envelope(item: Processed) -> bytes:
    """The wire form of a processed event: ``{"id","seq","timestamp",...payload}``.

    A refused transition goes out as the journal records it, an ``error``
    event: the StateManager encoded that once, and these are its bytes.
    """
    return _wire(item.seq, item.payload, item.time_ns)


def _wire(seq: int, payload: bytes, time_ns: int) -> bytes:
    if payload[:1] != b"{":
        payload = payload.lstrip(_WS)
    return b'{"id":"%s","seq":%d,"timestamp":"%s",%s' % (
        event_id(seq, time_ns).encode(),
        seq,
        iso_from_ms(time_ns // 1_000_000).encode(),
        payload[1:],
    )


_Held: TypeAlias = "tuple[int, bytes] | tuple[int, bytes, int]"
"""A ring entry: ``(seq, envelope)``, or ``(seq, payload, time_ns)`` for an
event seen while no client was live (its envelope is made if one asks)."""


def _envelope_of(entry: _Held) -> tuple[int, bytes]:
    if len(entry) == 2:
        return entry
    return entry[0], _wire(*entry)


def frame_header(length: int) -> bytes:
    """The header of an unmasked, final text frame of ``length`` bytes (RFC 6455 §5.2):
    what a server sends, with no extension in use."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, length)
    return struct.pack("!BBQ", 0x81, 127, length)


def text_frame(payload: bytes) -> bytes:
    """``payload`` as one complete text frame."""
    return frame_header(len(payload)) + payload


def frames(payloads: Iterable[bytes]) -> bytes:
    """Each payload as its own text frame, concatenated."""
    parts: list[bytes] = []
    for p in payloads:
        parts.append(frame_header(len(p)))
        parts.append(p)
    return b"".join(parts)


class Subscriber(Protocol):
    """A live client, as the fan-out sees it."""

    cursor: int
    """The newest seq it has been sent."""
    live_batches: bool

    def waiting(self) -> int:
        """Bytes written to it earlier that are still waiting to be sent."""

    def write(self, data: bytes) -> None:
        """Writes complete frames."""

    def lagging(self) -> None:
        """Called once, after it was removed for falling too far behind."""


class Fanout:
    """Turns processed events into frames and writes them to live subscribers."""

    def __init__(self, head: int, *, ring_size: int = 4096, send_limit: int = 16 << 20) -> None:
        self.head = head
        """The newest seq the fan-out has seen (all older ones are journaled)."""
        self.send_limit = send_limit
        self._ring: deque[_Held] = deque(maxlen=max(ring_size, 1))
        self._pending: list[bytes] = []
        self._subscribers: dict[Subscriber, None] = {}
        self._scheduled = False
        self.events = 0
        """Events seen since start."""

    # -- the StateManager side ---------------------------------------------

    def on_processed(self, item: Processed) -> None:
        """The StateManager listener: called in seq order, after commit."""
        self.head = item.seq
        self.events += 1
        if not self._subscribers:
            # No one is live (the usual `weft run`): keep what makes the
            # envelope, and make it only if a client asks for history. What
            # waited for a client that left goes too: no one needs it, and
            # add() counts it as not yet flushed.
            self._ring.append((item.seq, item.payload, item.time_ns))
            self._pending.clear()
            return
        env = envelope(item)
        self._ring.append((item.seq, env))
        self._pending.append(env)
        if not self._scheduled:
            self._scheduled = True
            # One flush per loop turn: the StateManager hands over a whole
            # committed batch before the loop runs anything else.
            asyncio.get_running_loop().call_soon(self.flush)

    def seed(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Puts journal events just older than everything in the ring in front
        of it. Rows that would not join up with the ring are left out (the
        ring then serves less, and the journal the rest)."""
        if not rows:
            return
        oldest = self._ring[0][0] if self._ring else self.head + 1
        if rows[-1][0] != oldest - 1 or len(self._ring) == self._ring.maxlen:
            return
        held: Iterable[_Held] = itertools.chain(rows, self._ring)
        self._ring = deque(held, maxlen=self._ring.maxlen)

    # -- reading the ring --------------------------------------------------

    def since(self, after: int, upto: int | None = None) -> list[tuple[int, bytes]] | None:
        """The ring's events in ``(after, upto]`` (``upto`` defaults to the head),
        or None when the ring no longer holds all of them."""
        upto = self.head if upto is None else min(upto, self.head)
        if after >= upto:
            return []
        if not self._ring or self._ring[0][0] > after + 1:
            return None
        start = after + 1 - self._ring[0][0]
        return [_envelope_of(e) for e in itertools.islice(self._ring, start, start + upto - after)]

    def last(self, n: int) -> list[tuple[int, bytes]]:
        """The ``n`` newest events in the ring, oldest first."""
        if n <= 0:
            return []
        size = len(self._ring)
        return [_envelope_of(e) for e in itertools.islice(self._ring, max(size - n, 0), size)]

    # -- subscribers -------------------------------------------------------

    def add(self, subscriber: Subscriber) -> None:
        """Makes ``subscriber`` live. It must have been sent everything up to
        at least the last flushed event; anything newer it has not seen comes
        with the next flush."""
        flushed = self.head - len(self._pending)
        if subscriber.cursor < flushed:
            raise ValueError(
                f"a subscriber at seq {subscriber.cursor} would miss events "
                f"{subscriber.cursor + 1}..{flushed}"
            )
        self._subscribers[subscriber] = None

    def remove(self, subscriber: Subscriber) -> None:
        """Stops sending to ``subscriber`` (idempotent)."""
        self._subscribers.pop(subscriber, None)

    @property
    def subscribers(self) -> int:
        """How many clients are live."""
        return len(self._subscribers)

    def flush(self) -> None:
        """Writes the events seen since the last flush to every live subscriber."""
        self._scheduled = False
        envs = self._pending
        if not envs:
            return
        self._pending = []
        last = self.head
        first = last - len(envs) + 1
        shared: dict[bool, bytes] = {}
        dropped: list[Subscriber] = []
        for sub in self._subscribers:
            cursor = sub.cursor
            if cursor >= last:
                continue
            if cursor >= first:
                # It caught up past the start of this batch: only its suffix.
                chunk = self._chunk(envs[cursor - first + 1 :], sub.live_batches)
            else:
                batched = sub.live_batches
                cached = shared.get(batched)
                if cached is None:
                    cached = shared[batched] = self._chunk(envs, batched)
                chunk = cached
            try:
                if sub.waiting() > self.send_limit:
                    # It has not taken what it was sent before: it is behind.
                    dropped.append(sub)
                    continue
                sub.cursor = last
                sub.write(chunk)
            except Exception:
                log.exception("writing to a live client failed; dropping it")
                dropped.append(sub)
        for sub in dropped:
            self._subscribers.pop(sub, None)
            sub.lagging()

    @staticmethod
    def _chunk(envs: Sequence[bytes], batched: bool) -> bytes:
        if batched:
            return text_frame(live_batch(b",".join(envs)))
        return frames(envs)
