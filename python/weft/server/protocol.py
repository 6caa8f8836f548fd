"""The wire protocol: client commands, connection messages, error codes.

Everything here is data; :mod:`weft.server.session` decides what to do with
it and :mod:`weft.server.server` moves the bytes. The shapes follow the
reference runtime's protocol (``{id, type, data}`` commands, ``{id,
timestamp, type, data}`` server messages, camelCase fields), with Weft's
additions marked as such:

* every journaled event carries ``seq``, its journal sequence number;
* the handshake may carry ``token`` (read-write access), ``afterSeq`` (resume:
  the connection's stream starts right after that event), ``liveBatches``
  (live events many per message) and ``pageSize``;
* ``history.sync`` takes ``afterSeq`` and answers in pages of many events;
* commands are answered: ``command.ack`` when the runtime accepted one,
  ``error`` (with ``commandId``) when it did not.

Journaled events are never re-encoded here: their bytes come from the
journal (or from the StateManager, which wrote the same bytes there) and are
spliced into messages as :class:`msgspec.Raw`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Annotated, Any, Final, Generic, Literal, TypeAlias, TypeVar

import msgspec

from weft.clock import iso_from_ms
from weft.events.stream import CheckpointEntry
from weft.events.transitions import BudgetStop
from weft.outcome import Kind

PROTOCOL_VERSION: Final = 1
"""Bumped when a message changes incompatibly; sent in ``handshake.response``."""

HISTORY_LIMIT: Final = 50
"""Events a handshake with ``sendPreviousEvents`` gets (the reference's limit)."""

DEFAULT_PAGE_SIZE: Final = 2000
MAX_PAGE_SIZE: Final = 10_000
PAGE_BYTES: Final = 1 << 20
"""A page ends at ``pageSize`` events or once it holds this many bytes."""

Mode: TypeAlias = Literal["readonly", "readandwrite"]


# --------------------------------------------------------------------------- error codes


class Code:
    """The ``code`` of an ``error`` reply. The first three are the reference's."""

    HANDSHAKE_REQUIRED: Final = "HANDSHAKE_REQUIRED"
    INSUFFICIENT_PERMISSIONS: Final = "INSUFFICIENT_PERMISSIONS"
    ROLLBACK_IN_PROGRESS: Final = "ROLLBACK_IN_PROGRESS"
    INVALID_COMMAND: Final = "INVALID_COMMAND"
    """Not JSON, not an object, or a field of the wrong type."""
    UNKNOWN_COMMAND: Final = "UNKNOWN_COMMAND"
    INVALID_TOKEN: Final = "INVALID_TOKEN"
    ALREADY_HANDSHAKEN: Final = "ALREADY_HANDSHAKEN"
    SHUTTING_DOWN: Final = "SHUTTING_DOWN"
    NOT_AVAILABLE: Final = "NOT_AVAILABLE"
    """Nothing in this process handles the command (no runtime, no rollback yet)."""
    COMMAND_REJECTED: Final = "COMMAND_REJECTED"
    """The runtime answered that the command does not apply now."""
    COMMAND_FAILED: Final = "COMMAND_FAILED"
    RATE_LIMITED: Final = "RATE_LIMITED"
    """(Weft) Too many read-only commands on this connection; retry later."""


CLOSE_TOO_SLOW: Final = 4008
"""Close code for a client whose send queue overflowed; it should resume."""
CLOSE_TOO_SLOW_REASON: Final = "too slow: reconnect and resume (handshake or history.sync afterSeq)"
CLOSE_GOING_AWAY: Final = 1001
"""Close code when the server stops (the run ended)."""


# --------------------------------------------------------------------------- client -> server


class _Data(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Base of command data: unknown fields are ignored, known ones are typed."""


class CommandEnvelope(msgspec.Struct, kw_only=True):
    """A client message: ``{id?, type, data?}``."""

    type: str
    id: str | int | None = None
    data: msgspec.Raw = msgspec.Raw(b"null")
    """Kept undecoded until the command's own type is known."""


PageSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE_SIZE)]
Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A journal sequence number: SQLite's integer range."""


class HandshakeData(_Data):
    """``handshake``: must be the first message.

    ``token``: the read-write token for ``readandwrite``; the read token or
    the read-write token for ``readonly`` (a server started with
    ``--allow-anonymous-read`` lets loopback clients read without one).
    ``afterSeq`` (Weft) resumes: the connection first gets every event after
    it, as ``history.batch`` pages, then the live stream, in order.
    ``liveBatches`` (Weft) delivers live events as ``live.batch`` messages of
    many events instead of one message each.
    """

    mode: Mode
    send_previous_events: bool = False
    token: str | None = None
    after_seq: Seq | None = None
    live_batches: bool = False
    page_size: PageSize | None = None
    progress: bool = False
    """(Weft) The connection also gets ``progress.snapshot`` messages: the
    server's fold of the run (:class:`ProgressSnapshot`)."""
    seed_events: bool = False
    """The connection also gets the seed's shapes of the live transitions:
    ``state.transition``, ``CostsUpdated``, ``CheckpointCreated``
    (:mod:`weft.server.seed`)."""


class NoData(_Data):
    """A command without data."""


class CodonStartData(_Data):
    """``codon.start``."""

    codon_id: str | None = None
    skip_pre_commands: bool = False


class ReasonData(_Data):
    """``codon.forceStop``, ``server.shutdown``."""

    reason: str | None = None


class MessageData(_Data):
    """``codon.message``: a message for the running codon's agent. Urgent: the
    session is interrupted and resumed with it; otherwise it joins the next
    prompt built (the next resume, or the next codon's prompt)."""

    message: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    urgent: bool = False


class BreakerResetData(_Data):
    """``breaker.reset``: closes an agent provider's circuit breaker (seed 004
    Recovery 3); codons waiting on it go at once."""

    provider: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    """``anthropic``, ``openai`` or ``google``."""


class CheckpointListData(_Data):
    """``checkpoint.list``."""

    run_id: str | None = None


class RollbackToCheckpointData(_Data):
    """``rollback.toCheckpoint``: a checkpoint sha or a unique prefix of one."""

    checkpoint_sha: str
    auto_restart: bool = False


class RollbackToCodonData(_Data):
    """``rollback.toCodon``."""

    codon_id: str
    checkpoint_type: Literal["start", "end", "rig-setup", "completed", "error", "skipped"]
    auto_restart: bool = False


class RollbackToLastSuccessData(_Data):
    """``rollback.toLastSuccess``."""

    auto_restart: bool = False


class HistorySyncData(_Data):
    """``history.sync``: every journaled event after ``afterSeq`` that this
    connection has not been given yet, in ``history.batch`` pages."""

    after_seq: Seq = 0
    page_size: PageSize | None = None


Route: TypeAlias = Literal["runtime", "rollback", "server"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """How a command is checked and who carries it out."""

    data: type[_Data]
    readonly: bool
    """Allowed to read-only clients (and during a rollback or a shutdown)."""
    route: Route


COMMANDS: Final[dict[str, CommandSpec]] = {
    "codon.start": CommandSpec(CodonStartData, False, "runtime"),
    "codon.next": CommandSpec(NoData, False, "runtime"),
    "codon.skip": CommandSpec(NoData, False, "runtime"),
    "codon.redo": CommandSpec(NoData, False, "runtime"),
    "codon.forceStop": CommandSpec(ReasonData, False, "runtime"),
    "codon.message": CommandSpec(MessageData, False, "runtime"),
    "breaker.reset": CommandSpec(BreakerResetData, False, "runtime"),
    "server.shutdown": CommandSpec(ReasonData, False, "runtime"),
    "server.force_shutdown": CommandSpec(NoData, False, "runtime"),
    "checkpoint.list": CommandSpec(CheckpointListData, True, "rollback"),
    "rollback.toCheckpoint": CommandSpec(RollbackToCheckpointData, False, "rollback"),
    "rollback.toCodon": CommandSpec(RollbackToCodonData, False, "rollback"),
    "rollback.toLastSuccess": CommandSpec(RollbackToLastSuccessData, False, "rollback"),
    "ping": CommandSpec(NoData, True, "server"),
    "ping.broadcast": CommandSpec(NoData, False, "server"),
    "history.sync": CommandSpec(HistorySyncData, True, "server"),
}
"""Every command of the reference's §4.3 (the handshake is separate)."""


# --------------------------------------------------------------------------- server -> client

E = TypeVar("E")
D = TypeVar("D")


class WireEvent(msgspec.Struct, kw_only=True):
    """A journaled event as clients get it: the journal row's id, seq and
    timestamp around the journal's ``{type, data}`` payload."""

    id: str
    seq: int
    timestamp: str
    type: str
    data: Any = None


class Message(msgspec.Struct, Generic[D], kw_only=True):
    """A connection message (not journaled): ``{id, timestamp, type, data}``."""

    id: str
    timestamp: str
    type: str
    data: D


class _Reply(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Base of connection message data."""


class HandshakeResponse(_Reply, Generic[E]):
    """``handshake.response``: to the client that shook hands."""

    client_id: str
    mode: Mode
    event_history: list[E]
    total_events: int
    last_seq: int
    """(Weft) The connection's join point: live events start after it."""
    live_batches: bool = False
    protocol_version: int = PROTOCOL_VERSION


class ServerReady(_Reply):
    """``server.ready``: sent right after ``handshake.response``."""

    server_version: str
    execution_path: str
    agent_root_path: str
    data_path: str | None
    port: int
    protocol_version: int = PROTOCOL_VERSION
    replay: bool = False
    """(Weft) The server replays a finished execution's journal (``weft ui``): no run
    is attached and no event will follow the replay. Sent only when true."""


class Pong(_Reply):
    """``pong``: to the sender of ``ping``, or to everyone for ``ping.broadcast``
    (then with the sender's ``clientId``)."""

    message: str
    timestamp: str
    client_id: str | None = None
    command_id: str | int | None = None


class HistoryBatch(_Reply, Generic[E]):
    """``history.batch``: one page of journaled events, oldest first.

    ``lastSeq`` is the newest seq the page covers (the cursor to resume
    after); ``hasMore`` is false on the last page of an answer.
    """

    events: list[E]
    has_more: bool
    last_seq: int
    command_id: str | int | None = None


class LiveBatch(_Reply, Generic[E]):
    """``live.batch`` (Weft, with ``liveBatches``): live events, many per message."""

    events: list[E]


class CommandAck(_Reply):
    """``command.ack`` (Weft): the command was accepted and is being carried out;
    its effects arrive as events."""

    command_id: str | int | None
    command: str


class CheckpointListReply(_Reply):
    """``checkpoint.list``: the answer to a ``checkpoint.list`` command, to the
    client that asked only (not journaled, so asking costs no disk): the
    checkpoints of every run (or of ``runId``), newest first. The data is the
    journaled ``checkpoint.list`` event's of earlier versions, plus ``commandId``."""

    checkpoints: list[CheckpointEntry]
    current_branch: str | None
    run_id: str | None = None
    command_id: str | int | None = None


class ErrorReply(_Reply):
    """``error`` sent to one client about its own message (not journaled)."""

    message: str
    code: str
    fatal: bool = False
    severity: Literal["fatal", "codon", "operation", "warning"] = "operation"
    command: str | None = None
    command_id: str | int | None = None


class _Figures(msgspec.Struct, rename="camel", kw_only=True):
    """Base of the progress figures: every field is always sent (``null`` included)."""


class LoopPlace(_Figures):
    """Where a codon sits in a loop."""

    loop_id: str
    iteration: int
    """0 for the loop's first iteration (the plan's ``loopContext.iteration``)."""


class CodonFigures(_Figures):
    """One codon of the run, as :class:`weft.progress.CodonProgress` has it."""

    codon_id: str
    name: str | None
    model: str | None
    status: str
    """The seed's codon states, ``pending`` (not started in this run) and
    ``stopped`` (failed because a stop cut it short: it stays to do)."""
    earlier: str | None
    """The terminal state it reached in an earlier run of the execution."""
    to_do: bool
    """The run has still to run it: pending and not completed earlier, or stopped."""
    attempts: int
    cost: float | None
    """Dollars of every attempt (the seed's rule); ``null`` when its model has no
    price and nothing priced was spent (a lower bound when ``unpriced``)."""
    cost_text: str
    """:attr:`cost` in the words of every view: ``$0.0320``, ``unpriced``, ``≥ $0.0320``."""
    unpriced: bool
    spent: float | None
    """Every dollar its attempts spent, skipped attempts included."""
    tokens: int
    started_at: str | None
    """When its latest attempt started (ISO-8601 UTC)."""
    ended_at: str | None
    failure: str | None
    """``<type>: <message>`` of its latest failure."""
    loop: LoopPlace | None
    parked: str | None = None
    """While it waits for its provider's usage window: when it resumes and why
    (``15:05 UTC (anthropic five_hour window)``), as every view words it."""


class RunEnding(_Figures):
    """How a run ended (:class:`weft.outcome.Ending`), or that it runs."""

    run_id: str
    kind: Kind
    word: str
    """The one word of :data:`weft.outcome.WORD` (``budget-stopped``...)."""
    codon_id: str | None
    reason: str | None
    forced: bool
    budget: BudgetStop | None
    loop: LoopPlace | None
    """The loop place of ``codonId`` (what a stop left to do), if it is a loop's."""


class CodonCounts(_Figures):
    """How many codons are in each state (:meth:`weft.progress.RunProgress.counts`)."""

    completed: int
    failed: int
    stopped: int
    skipped: int
    active: int
    pending: int
    to_do: int
    done_earlier: int


class ProgressTotals(_Figures):
    """The run's figures."""

    cost: float | None
    """``null`` when unpriced codons spent nothing priced."""
    cost_text: str
    """The words of the run summary's cost row (``≥ $0.0320 (2 codons unpriced)``)."""
    unpriced_codons: int
    spent: float | None
    tokens: int
    sentinel_cost: float
    codons: CodonCounts


class LoopCut(_Figures):
    """A loop a budget of the hank ended early."""

    loop_id: str
    iterations: int


class ProgressSnapshot(_Figures):
    """``progress.snapshot`` (Weft, with the handshake's ``progress``): the one
    fold of the journal (:class:`weft.progress.RunProgress`), as every view shows
    it: the newest run's codons in plan order, its outcome and totals. Sent when
    the connection goes live (after its replay), then at most a few times a
    second while events come."""

    seq: int
    """The newest journaled event the figures include."""
    run_id: str | None
    ending: RunEnding | None
    """The newest run's outcome (``kind`` ``running`` while it runs); null before any run."""
    runs: list[RunEnding]
    """Every run the fold saw, oldest first, each with its outcome."""
    started_at: str | None
    ended_at: str | None
    codons: list[CodonFigures]
    totals: ProgressTotals
    loops_cut: list[LoopCut]
    series: list[tuple[str, float, int]]
    """``[time, dollars, tokens]`` of the run's totals over time (a few hundred points)."""


CONNECTION_MESSAGES: Final[dict[str, type[msgspec.Struct]]] = {
    "handshake.response": HandshakeResponse[WireEvent],
    "server.ready": ServerReady,
    "pong": Pong,
    "history.batch": HistoryBatch[WireEvent],
    "live.batch": LiveBatch[WireEvent],
    "command.ack": CommandAck,
    "checkpoint.list": CheckpointListReply,
    "error": ErrorReply,
    "progress.snapshot": ProgressSnapshot,
}
"""Connection messages by type: their data shapes, for the client and the schema."""


# --------------------------------------------------------------------------- encoding

_encoder = msgspec.json.Encoder()
_counter = itertools.count()
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def now_iso() -> tuple[int, str]:
    """(milliseconds since the epoch, the same as ISO-8601 UTC)."""
    ms = time.time_ns() // 1_000_000
    return ms, iso_from_ms(ms)


def message_id(ms: int) -> str:
    """``<13-digit ms>-z<8 base36>``: the reference's id shape. Journal ids end
    in hex digits of the seq, so the ``z`` keeps connection ids apart from them."""
    n = next(_counter) % 36**8
    digits = []
    for _ in range(8):
        n, r = divmod(n, 36)
        digits.append(_ALPHABET[r])
    return f"{ms:013d}-z{''.join(reversed(digits))}"


def encode_message(kind: str, data: msgspec.Struct) -> bytes:
    """A connection message, ``{id, timestamp, type, data}``, as bytes."""
    ms, stamp = now_iso()
    return _encoder.encode(Message(id=message_id(ms), timestamp=stamp, type=kind, data=data))


def message_head(kind: str) -> bytes:
    """The start of a connection message up to ``"data":``, for messages whose
    data is spliced together from journal bytes."""
    ms, stamp = now_iso()
    return b'{"id":"%s","timestamp":"%s","type":"%s","data":' % (
        message_id(ms).encode(),
        stamp.encode(),
        kind.encode(),
    )


def encode_json(value: Any) -> bytes:
    """``value`` as compact JSON (for the few fields spliced by hand)."""
    return _encoder.encode(value)


def history_page(
    events: bytes, has_more: bool, last_seq: int, command_id: str | int | None
) -> bytes:
    """A ``history.batch`` message around ``events``: journal envelopes joined by commas."""
    tail = b'],"hasMore":%s,"lastSeq":%d' % (b"true" if has_more else b"false", last_seq)
    if command_id is not None:
        tail += b',"commandId":' + _encoder.encode(command_id)
    return message_head("history.batch") + b'{"events":[' + events + tail + b"}}"


def live_batch(events: bytes) -> bytes:
    """A ``live.batch`` message around ``events``: journal envelopes joined by commas."""
    return message_head("live.batch") + b'{"events":[' + events + b"]}}"
