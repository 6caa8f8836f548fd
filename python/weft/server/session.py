"""One client connection's protocol logic, without I/O.

A :class:`Session` takes each message the client sent and answers with one
action for the adapter (:mod:`weft.server.server`) to carry out: send a
reply, join the client to the stream, run a command, send history. It owns
the rules: the handshake comes first, tokens, read-only gating, rollback and
shutdown gating, and the range of events each ``history.sync`` may send so
that nothing reaches the client twice.

The exactly-once bookkeeping: from the moment a client joins, it is given
every event after its join point (live, or catch-up pages first when it
resumed). ``floor`` is the oldest seq it has been given or will be given on
this connection; ``history.sync`` sends only events older than ``floor`` and
then lowers it, so handshake history, every ``history.sync`` and the live
stream together are the journal, with no gaps and no duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class ServerView:
    """What a session needs to know about the server when a message arrives."""

    rolling_back: bool = False
    shutting_down: bool = False


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


def _invalid(exc: msgspec.MsgspecError, where: str) -> str:
    # msgspec paths are relative to what it decoded; say where that was.
    text = str(exc)
    text = text.replace("`$", f"`{where}") if "`$" in text else f"{text} - at `{where}`"
    return f"Invalid command format: {text}"


class Session:
    """The state of one connection: before the handshake, then joined."""

    def __init__(
        self,
        client_id: str,
        *,
        token: str,
        loopback: bool,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        self.client_id = client_id
        self._token = token
        self._loopback = loopback
        self._page_size = page_size
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
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Reply(error_message(Code.INVALID_COMMAND, _invalid(exc, "$")))
        name, command_id = envelope.type, envelope.id
        if name == "handshake":
            return self._handshake(envelope)
        if not self.handshaken:
            return Reply(
                error_message(
                    Code.HANDSHAKE_REQUIRED,
                    "Handshake required before sending commands: send "
                    '{"type": "handshake", "data": {"mode": "readonly"}} first',
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
        try:
            data = self._data(name, envelope.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
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
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Reply(
                error_message(
                    Code.INVALID_COMMAND,
                    _invalid(exc, "$.data"),
                    command="handshake",
                    command_id=command_id,
                )
            )
        needs_token = data.mode == "readandwrite" or not self._loopback
        if needs_token and not token_matches(self._token, data.token):
            why = (
                "read-write access needs the execution's token"
                if data.mode == "readandwrite"
                else "connections from other machines, or from web pages of other sites, "
                "need the execution's token"
            )
            given = "a wrong token was given" if data.token is not None else "none was given"
            return Reply(
                error_message(
                    Code.INVALID_TOKEN,
                    f"{why} ({given}): pass it as data.token; it is in the execution's "
                    ".weft/server.token (`weft attach` reads it from there), or connect "
                    'with {"mode": "readonly"} from this machine',
                    command="handshake",
                    command_id=command_id,
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
