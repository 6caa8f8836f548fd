"""One client connection's protocol logic, without I/O.

A :class:`Session` takes each message the client sent and answers with one
action for the adapter (:mod:`weft.server.server`) to carry out: send a
reply, join the client to the stream, run a command, send history. It owns
the rules: the handshake comes first, tokens, read-only gating, rollback and
shutdown gating, the rate of read-only commands, and the range of events each
``history.sync`` may send so that nothing reaches the client twice.

Whatever a client sends, :meth:`Session.receive` answers with an action:
hostile input (JSON nested too deeply for the decoder, wrong types, numbers
out of range, bytes that are not UTF-8) is an ``INVALID_COMMAND`` reply,
never an exception that would close the connection.

The exactly-once bookkeeping: from the moment a client joins, it is given
every event after its join point (live, or catch-up pages first when it
resumed). ``floor`` is the oldest seq it has been given or will be given on
this connection; ``history.sync`` sends only events older than ``floor`` and
then lowers it, so handshake history, every ``history.sync`` and the live
stream together are the journal, with no gaps and no duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from weft.server.auth import token_matches
from weft.server.protocol import (
    COMMANDS,
    DEFAULT_PAGE_SIZE,
    Code,
    CommandEnvelope,
    ErrorReply,
    HandshakeData,
    HistorySyncData,
    Mode,
    Route,
    encode_message,
)

READ_RATE: Final = 50.0
"""Read-only commands a connection may send per second, sustained. They cost
the server work (a ``history.sync`` reads the journal) but are never
journaled, so a flood can slow the server, not fill the disk."""
READ_BURST: Final = 200
"""Read-only commands a connection may send at once before the rate applies
(a client catching up after a drop sends a few in a row)."""


@dataclass(frozen=True, slots=True)
class ServerView:
    """What a session needs to know about the server when a message arrives."""

    rolling_back: bool = False
    shutting_down: bool = False
    now: float = 0.0
    """A monotonic clock in seconds (the rate limit's); tests pass their own."""


class TokenBucket:
    """A token bucket: ``burst`` commands at once, refilled at ``rate`` per second.

    Sans-I/O: the caller passes the time, so tests need no clock.
    """

    __slots__ = ("_last", "_level", "burst", "rate")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._level = float(burst)
        self._last: float | None = None

    def take(self, now: float) -> bool:
        """Spends one token at ``now``; False when the bucket is empty."""
        if self._last is not None and now > self._last:
            self._level = min(float(self.burst), self._level + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now
        if self._level < 1.0:
            return False
        self._level -= 1.0
        return True

    def retry_after(self) -> float:
        """Seconds until the next token."""
        return max(0.0, (1.0 - self._level) / self.rate) if self.rate > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class Reply:
    """Send this encoded message to the client."""

    message: bytes


@dataclass(frozen=True, slots=True)
class Join:
    """The handshake succeeded: join the client to the stream and answer it."""

    mode: Mode
    send_previous: bool
    after_seq: int | None
    live_batches: bool
    page_size: int
    progress: bool = False
    """The client asked for ``progress.snapshot`` messages."""
    seed_events: bool = False
    """The client asked for the seed's shapes (:mod:`weft.server.seed`)."""


@dataclass(frozen=True, slots=True)
class Run:
    """Carry out a command through its route (the runtime or the rollback handler)."""

    command: str
    data: msgspec.Struct
    command_id: str | int | None
    route: Route


@dataclass(frozen=True, slots=True)
class SendHistory:
    """Send journaled events in ``(after, upto]`` as ``history.batch`` pages."""

    after: int
    upto: int
    page_size: int
    command_id: str | int | None


@dataclass(frozen=True, slots=True)
class Ping:
    """Answer a ping: to the sender, or to every client (``everyone``)."""

    command_id: str | int | None
    everyone: bool


Action = Reply | Join | Run | SendHistory | Ping

_envelope_decoder = msgspec.json.Decoder(CommandEnvelope)
_data_decoders = {name: msgspec.json.Decoder(spec.data) for name, spec in COMMANDS.items()}
_handshake_decoder = msgspec.json.Decoder(HandshakeData)


def error_message(
    code: str,
    message: str,
    *,
    command: str | None = None,
    command_id: str | int | None = None,
) -> bytes:
    """An ``error`` reply for one client."""
    return encode_message(
        "error", ErrorReply(message=message, code=code, command=command, command_id=command_id)
    )


_DecodeFailure = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeError)
"""What decoding a hostile message may raise. RecursionError: msgspec refuses
JSON nested deeper than the interpreter's stack allows (a 2 kB message can
be 1,000 levels deep); it is an answer for the client, not a server fault."""


def _invalid(exc: Exception, where: str) -> str:
    if isinstance(exc, RecursionError):
        return f"Invalid command format: JSON nested too deeply - at `{where}`"
    # msgspec paths are relative to what it decoded; say where that was.
    text = str(exc).encode("utf-8", "replace").decode()
    text = text.replace("`$", f"`{where}") if "`$" in text else f"{text} - at `{where}`"
    return f"Invalid command format: {text}"


class Session:
    """The state of one connection: before the handshake, then joined."""

    def __init__(
        self,
        client_id: str,
        *,
        token: str,
        read_token: str | None = None,
        anonymous_read: bool = False,
        page_size: int = DEFAULT_PAGE_SIZE,
        read_rate: float = READ_RATE,
        read_burst: int = READ_BURST,
    ) -> None:
        """``token`` grants read-write, ``read_token`` read-only;
        ``anonymous_read``: a read-only handshake without a token is let in
        (the server's opt-in, for a loopback peer that is not a foreign web page)."""
        self.client_id = client_id
        self._token = token
        self._read_token = read_token
        self._anonymous_read = anonymous_read
        self._page_size = page_size
        self._reads = TokenBucket(read_rate, read_burst)
        self.mode: Mode | None = None
        self.floor: int | None = None
        """The oldest seq this connection has been (or will be) given."""

    @property
    def handshaken(self) -> bool:
        """Whether the handshake succeeded."""
        return self.mode is not None

    def joined(self, floor: int) -> None:
        """The adapter joined the client: it is given everything from ``floor`` on."""
        self.floor = floor

    def receive(self, message: str | bytes, view: ServerView) -> Action:
        """Decides what to do with one message from the client."""
        try:
            envelope = _envelope_decoder.decode(message)
        except _DecodeFailure as exc:
            return Reply(error_message(Code.INVALID_COMMAND, _invalid(exc, "$")))
        if not _encodable(envelope.type) or not _encodable(envelope.id):
            # A lone surrogate (\ud800) decodes but could not be echoed back.
            return Reply(
                error_message(
                    Code.INVALID_COMMAND,
                    "Invalid command format: `type` and `id` must be valid Unicode",
                )
            )
        name, command_id = envelope.type, envelope.id
        if name == "handshake":
            return self._handshake(envelope)
        if not self.handshaken:
            return Reply(
                error_message(
                    Code.HANDSHAKE_REQUIRED,
                    "Handshake required before sending commands: send "
                    '{"type": "handshake", "data": {"mode": "readonly", "token": "..."}} first',
                    command=name,
                    command_id=command_id,
                )
            )
        spec = COMMANDS.get(name)
        if spec is None:
            known = ", ".join(sorted(COMMANDS))
            return Reply(
                error_message(
                    Code.UNKNOWN_COMMAND,
                    f"Unknown command {name!r}; the commands are: {known}",
                    command=name,
                    command_id=command_id,
                )
            )
        refusal = self._gate(name, spec.readonly, view)
        if refusal is not None:
            code, text = refusal
            return Reply(error_message(code, text, command=name, command_id=command_id))
        if spec.readonly and not self._reads.take(view.now):
            return Reply(
                error_message(
                    Code.RATE_LIMITED,
                    f"{name} refused: more than {self._reads.burst} read-only commands at once "
                    f"or {self._reads.rate:g} a second on this connection; retry in "
                    f"{self._reads.retry_after():.2f} s",
                    command=name,
                    command_id=command_id,
                )
            )
        try:
            data = self._data(name, envelope.data)
        except _DecodeFailure as exc:
            return Reply(
                error_message(
                    Code.INVALID_COMMAND,
                    _invalid(exc, "$.data"),
                    command=name,
                    command_id=command_id,
                )
            )
        if name == "history.sync":
            assert isinstance(data, HistorySyncData)
            return self._history(data, command_id)
        if name in ("ping", "ping.broadcast"):
            return Ping(command_id, everyone=name == "ping.broadcast")
        return Run(name, data, command_id, spec.route)

    # -- internals -----------------------------------------------------------

    def _handshake(self, envelope: CommandEnvelope) -> Action:
        command_id = envelope.id
        if self.handshaken:
            return Reply(
                error_message(
                    Code.ALREADY_HANDSHAKEN,
                    "This connection already completed its handshake; "
                    "open a new connection to change mode",
                    command="handshake",
                    command_id=command_id,
                )
            )
        try:
            data = _handshake_decoder.decode(bytes(envelope.data))
        except _DecodeFailure as exc:
            return Reply(
                error_message(
                    Code.INVALID_COMMAND,
                    _invalid(exc, "$.data"),
                    command="handshake",
                    command_id=command_id,
                )
            )
        refusal = self._refuse_token(data)
        if refusal is not None:
            return Reply(
                error_message(
                    Code.INVALID_TOKEN, refusal, command="handshake", command_id=command_id
                )
            )
        self.mode = data.mode
        if data.page_size is not None:
            self._page_size = data.page_size  # the connection's default from now on
        return Join(
            mode=data.mode,
            send_previous=data.send_previous_events,
            after_seq=data.after_seq,
            live_batches=data.live_batches,
            page_size=data.page_size or self._page_size,
            progress=data.progress,
            seed_events=data.seed_events,
        )

    def _refuse_token(self, data: HandshakeData) -> str | None:
        """Why the handshake's token does not open the mode it asks for (None: it does)."""
        given = data.token
        if data.mode == "readandwrite":
            if token_matches(self._token, given):
                return None
            why = "read-write access needs the execution's read-write token"
            where = ".weft/server.token"
        else:
            if token_matches(self._token, given) or (
                self._read_token is not None and token_matches(self._read_token, given)
            ):
                return None
            if given is None and self._anonymous_read:
                return None
            why = "reading a run needs the execution's read token (or its read-write token)"
            where = ".weft/server-read.token or .weft/server.token"
        said = "a wrong token was given" if given is not None else "none was given"
        return (
            f"{why} ({said}): pass it as data.token; it is in the execution's {where} "
            "(`weft attach` reads it from there)"
        )

    def _gate(self, name: str, readonly: bool, view: ServerView) -> tuple[str, str] | None:
        if readonly:
            return None
        if self.mode != "readandwrite":
            return (
                Code.INSUFFICIENT_PERMISSIONS,
                f"{name} needs a read-write connection; this one is read-only "
                "(handshake with mode readandwrite and the execution's token)",
            )
        if view.rolling_back:
            return (
                Code.ROLLBACK_IN_PROGRESS,
                f"{name} refused: a rollback is in progress; wait for rollback.completed",
            )
        # A second, forced shutdown must get through while the first one runs.
        if view.shutting_down and name != "server.force_shutdown":
            return (
                Code.SHUTTING_DOWN,
                f"{name} refused: the server is shutting down (server.force_shutdown still works)",
            )
        return None

    def _data(self, name: str, raw: msgspec.Raw) -> msgspec.Struct:
        # Raises one of _DecodeFailure for hostile data.
        text = bytes(raw)
        if text.strip() == b"null":
            text = b"{}"  # a command without data may leave it out or send null
        result: msgspec.Struct = _data_decoders[name].decode(text)
        return result

    def _history(self, data: HistorySyncData, command_id: str | int | None) -> Action:
        floor = self.floor if self.floor is not None else 1
        upto = floor - 1
        after = min(data.after_seq, upto)
        self.floor = min(floor, after + 1)
        return SendHistory(after, upto, data.page_size or self._page_size, command_id)


def _encodable(value: object) -> bool:
    """Whether a decoded string can be encoded back (no lone surrogates)."""
    if not isinstance(value, str):
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True
