"""The seed's event shapes, for clients written against the seeds (handshake ``seedEvents``).

Weft sends each state transition under its own name (``CodonTransitioned``,
``CostsIncremented``...). A client written against seed 000/001 (and the
reference runtime) expects instead:

* ``state.transition``: every transition wrapped as
  ``{transitionType, runId, codonId, transition: {type, data}, resultingState:
  {currentRunId, runCount, totalCost, currentRunCost}}``;
* ``CostsUpdated``: a live codon's **absolute** cost and tokens (Weft journals
  increments, ``CostsIncremented``, and the agent's own total, ``CodonFinalCostSet``);
* ``CheckpointCreated``: a checkpoint's sha, type and branch (Weft records the
  sha in the ``CodonTransitioned`` that moves the codon: to ``starting`` for the
  rig-setup checkpoint, to ``completed``, ``failed`` or ``skipped`` for the others).

Sending them to every client would double the traffic, so a client asks for them
in its handshake (``seedEvents: true``); the others get exactly what they got
before. :class:`SeedFeed` makes them, without I/O: it is handed the journal's
rows while it is seeded (:meth:`~SeedFeed.fold_row`: only its own small fold is
kept, nothing is sent), then the StateManager's processed items
(:meth:`~SeedFeed.on_processed`), and returns for each the seed messages that
follow it. They are made from Weft's own transitions (the journaled bytes are
wrapped as they are; the derived ``CostsUpdated`` and ``CheckpointCreated`` are
:mod:`weft.events.transitions` structs), so a seed client can never see a shape
the journal does not hold.

Each seed message is a connection message (``{id, timestamp, type, data}``, no
``seq``) with ``sourceSeq``: the journaled event it was made from. The cost
figures are the reducer's (seed 000's ``getCodonCost``): a record's cost is its
current cost while it runs, its final cost once completed, its partial cost once
failed, nothing once skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from weft.events.stream import Event, decode_event
from weft.events.transitions import (
    CheckpointCreated,
    CheckpointType,
    CodonFinalCostSet,
    CodonStarted,
    CodonTransitioned,
    CostsIncremented,
    CostsUpdated,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
    TokenUsage,
    Transition,
)
from weft.events.transitions import encode as encode_transition
from weft.money import NANO, nanos
from weft.server.protocol import message_id, now_iso
from weft.state import Processed

_CHECKPOINT_OF: Final[dict[str, CheckpointType]] = {
    "starting": "rig-setup",
    "completed": "completed",
    "failed": "error",
    "skipped": "skipped",
}
"""The checkpoint a ``CodonTransitioned``'s ``checkpointSha`` is, by target state
(the reducer's slots: rigSetupCheckpoint, completionCheckpoint, errorCheckpoint,
skipCheckpoint)."""


class ResultingState(msgspec.Struct, rename="camel", kw_only=True):
    """The reference's ``resultingState``: the state's figures after the transition."""

    current_run_id: str | None
    run_count: int
    total_cost: float
    current_run_cost: float


class StateTransition(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """``state.transition``'s data."""

    transition_type: str
    transition: msgspec.Raw
    """The journaled ``{type, data}`` bytes, as they are."""
    resulting_state: ResultingState
    run_id: str | None = None
    codon_id: str | None = None


class SeedMessage(msgspec.Struct, kw_only=True, rename="camel"):
    """A seed message: a connection message with the seq it was made from."""

    id: str
    timestamp: str
    type: str
    source_seq: int
    data: StateTransition | CostsUpdated | CheckpointCreated


SEED_MESSAGES: Final[dict[str, type[msgspec.Struct]]] = {
    "state.transition": StateTransition,
    "CostsUpdated": CostsUpdated,
    "CheckpointCreated": CheckpointCreated,
}
"""The seed messages' data shapes, by type (for clients and the schema)."""

SEED_EVENT_TYPES: Final = tuple(SEED_MESSAGES)
"""What a ``seedEvents`` connection gets besides Weft's own events."""


@dataclass(slots=True)
class _Record:
    """One codon attempt's figures, as the reducer keeps them."""

    status: str = "preparing"
    current: int = 0
    """Nano-dollars: the increments, from the last absolute value (the agent's
    own total, ``CodonFinalCostSet``, replaces what came before it)."""
    tokens: TokenUsage = field(default_factory=TokenUsage)

    @property
    def cost(self) -> int:
        """Seed 000's getCodonCost: final once completed, partial once failed,
        current while it runs, nothing otherwise."""
        if self.status in ("completed", "failed", "running", "completing-sentinels"):
            return self.current
        return 0


def _crashed(rec: _Record) -> None:
    """RunCrashed: the run's active record fails (its cost becomes partial)."""
    if rec.status not in ("completed", "failed", "skipped"):
        rec.status = "failed"


def _add(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_creation_tokens=a.cache_creation_tokens + b.cache_creation_tokens,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
    )


def _apply(
    rec: _Record, event: CodonTransitioned | CostsIncremented | CostsUpdated | CodonFinalCostSet
) -> None:
    """One transition on a codon attempt's figures, as the reducer applies it."""
    if isinstance(event, CodonTransitioned):
        rec.status = event.to_status
    elif isinstance(event, CostsIncremented):
        rec.current += nanos(event.cost_delta)
        rec.tokens = _add(rec.tokens, event.tokens_delta)
    elif isinstance(event, CostsUpdated):
        rec.current = nanos(event.cost)
        rec.tokens = event.tokens
    else:
        rec.current = nanos(event.final_cost)
        rec.tokens = event.final_tokens


_encoder = msgspec.json.Encoder()


class SeedFeed:
    """Makes the seed messages that follow each journaled transition."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], _Record] = {}
        """(run id, codon id) -> its latest attempt (a retry replaces it)."""
        self._runs: dict[str, list[tuple[str, str]]] = {}
        """Run id -> its codons' keys (for RunCrashed)."""
        self._branches: dict[str, str] = {}
        self._current: str | None = None
        self._run_cost: dict[str, int] = {}
        """Run id -> nano-dollars of its records (every attempt's)."""
        self._total = 0
        self.last_seq = 0

    # -- feeding ----------------------------------------------------------------

    def fold_row(self, seq: int, _event_id: str, _codon_id: str | None, payload: bytes) -> None:
        """Folds one journal row (while seeding); nothing is made for it."""
        self._fold(decode_event(payload), seq)

    def on_processed(self, item: Processed, make: bool = True) -> list[bytes]:
        """The seed messages that follow ``item`` (none for a stream event or a
        refused transition), in the order the seed sends them: a checkpoint
        before the move that records it, a cost after its increment.
        ``make=False`` only folds it (no client asks now: nothing is encoded)."""
        if item.seq <= self.last_seq:
            return []  # folded while seeding
        event = item.event
        if not item.applied or not isinstance(event, Transition):
            self.last_seq = item.seq
            return []
        if not make:
            self._fold(event, item.seq)
            return []
        before = self._checkpoint(event)
        self._fold(event, item.seq)
        after = self._costs(event)
        out: list[bytes] = []
        ms, stamp = now_iso()
        for derived in before:
            out.append(self._message(ms, stamp, item.seq, derived))
            out.append(self._wrapped(ms, stamp, item.seq, derived, encode_transition(derived)))
        out.append(self._wrapped(ms, stamp, item.seq, event, item.payload))
        for derived in after:
            out.append(self._message(ms, stamp, item.seq, derived))
            out.append(self._wrapped(ms, stamp, item.seq, derived, encode_transition(derived)))
        return out

    # -- the derived transitions --------------------------------------------------

    def _checkpoint(self, event: Transition) -> list[CostsUpdated | CheckpointCreated]:
        if not isinstance(event, CodonTransitioned) or event.metadata is None:
            return []
        sha = event.metadata.checkpoint_sha
        kind = _CHECKPOINT_OF.get(event.to_status)
        if not sha or kind is None:
            return []
        return [
            CheckpointCreated(
                run_id=event.run_id,
                codon_id=event.codon_id,
                checkpoint_type=kind,
                sha=sha,
                branch=self._branches.get(event.run_id, ""),
            )
        ]

    def _costs(self, event: Transition) -> list[CostsUpdated | CheckpointCreated]:
        if not isinstance(event, CostsIncremented | CodonFinalCostSet):
            return []
        rec = self._records.get((event.run_id, event.codon_id))
        if rec is None:
            return []
        return [
            CostsUpdated(
                run_id=event.run_id,
                codon_id=event.codon_id,
                cost=rec.current / NANO,
                tokens=rec.tokens,
            )
        ]

    # -- the fold -----------------------------------------------------------------

    def _fold(self, event: Event | None, seq: int) -> None:
        self.last_seq = seq
        if isinstance(event, RunStarted):
            self._runs.setdefault(event.run_id, [])
            self._run_cost.setdefault(event.run_id, 0)
            self._branches[event.run_id] = event.git_branch
            self._current = event.run_id
        elif isinstance(event, RunCompleted | RunFailed | RunStopped | RunCrashed):
            if isinstance(event, RunCrashed):
                for key in self._runs.get(event.run_id, []):
                    self._change(key, _crashed)
            if self._current == event.run_id:
                self._current = None
        elif isinstance(event, CodonStarted):
            key = (event.run_id, event.codon_id)
            if key not in self._records:
                self._runs.setdefault(event.run_id, []).append(key)
            # A new attempt: the old one's cost stays in the run's (the seed's
            # records are append-only), the new one starts from nothing.
            self._records[key] = _Record()
        elif isinstance(
            event, CodonTransitioned | CostsIncremented | CostsUpdated | CodonFinalCostSet
        ):
            self._change((event.run_id, event.codon_id), lambda rec: _apply(rec, event))

    def _change(self, key: tuple[str, str], change: Callable[[_Record], None]) -> None:
        """Changes one record, keeping its run's cost and the total in step
        (O(1) per transition, however long the execution)."""
        rec = self._records.get(key)
        if rec is None:
            return
        before = rec.cost
        change(rec)
        delta = rec.cost - before
        if delta:
            self._run_cost[key[0]] = self._run_cost.get(key[0], 0) + delta
            self._total += delta

    def resulting_state(self) -> ResultingState:
        """The figures of the state as folded so far."""
        current = 0 if self._current is None else self._run_cost.get(self._current, 0)
        return ResultingState(
            current_run_id=self._current,
            run_count=len(self._runs),
            total_cost=self._total / NANO,
            current_run_cost=current / NANO,
        )

    # -- encoding -----------------------------------------------------------------

    def _wrapped(self, ms: int, stamp: str, seq: int, event: Transition, payload: bytes) -> bytes:
        name = type(event).__name__
        data = StateTransition(
            transition_type=name,
            transition=msgspec.Raw(payload),
            resulting_state=self.resulting_state(),
            run_id=getattr(event, "run_id", None),
            codon_id=getattr(event, "codon_id", None),
        )
        return _encoder.encode(
            SeedMessage(
                id=message_id(ms),
                timestamp=stamp,
                type="state.transition",
                source_seq=seq,
                data=data,
            )
        )

    @staticmethod
    def _message(ms: int, stamp: str, seq: int, event: CostsUpdated | CheckpointCreated) -> bytes:
        return _encoder.encode(
            SeedMessage(
                id=message_id(ms),
                timestamp=stamp,
                type=type(event).__name__,
                source_seq=seq,
                data=event,
            )
        )


__all__ = [
    "SEED_EVENT_TYPES",
    "SEED_MESSAGES",
    "ResultingState",
    "SeedFeed",
    "SeedMessage",
    "StateTransition",
]
