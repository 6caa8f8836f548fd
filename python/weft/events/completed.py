"""The execution thread's finished codons, as ``state.snapshot`` sends them: deltas.

A ``state.snapshot`` once carried the whole list of finished codons, so the
k-th snapshot of a run was k summaries long and the journal grew with the
square of the codon count (183 MB after 1,441 codons). Now each snapshot
carries only what changed since the previous one in the same journal:

``completedFrom``
    how many entries of the previous list stay (a rollback shortens the
    thread; a codon finishing keeps them all);
``completedCodons``
    the entries that follow them;
``completedCount`` and ``completedDigest``
    the length of the whole list and a digest of it, so a client can tell
    whether the list it folded is the runtime's (a client that joined late,
    with only the handshake's last events, sees ``completedFrom`` beyond its
    own list: it asks ``history.sync`` for the journal and folds that).

The fold is ``list = list[:completedFrom] + completedCodons``: :func:`fold`.
An event without ``completedFrom`` (every snapshot Weft journaled before this
change) is a whole list, which the same fold reads correctly.

The digest chains one SHA-256 per entry over ``runId/codonId/status``
(:func:`chain`), so any client can compute it and the runtime can find, in
O(1) per entry, how much of a list it announced earlier is still true.

:class:`CompletedCodons` is the runtime's side: it keeps the list and what the
journal was last told, and makes each snapshot's delta.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from weft.events.stream import CodonSummary, StateSnapshotEvent

EMPTY_DIGEST = "0" * 64
"""The digest of the empty list."""


def chain(previous: str, codon: CodonSummary) -> str:
    """The digest of a list once ``codon`` is appended to one whose digest is ``previous``."""
    item = f"{codon.run_id}/{codon.codon_id}/{codon.status}".encode()
    return hashlib.sha256(bytes.fromhex(previous) + item).hexdigest()


def digest(codons: Iterable[CodonSummary]) -> str:
    """The digest of a whole list (``completedDigest``)."""
    value = EMPTY_DIGEST
    for codon in codons:
        value = chain(value, codon)
    return value


def fold(codons: list[CodonSummary], snapshot: StateSnapshotEvent) -> list[CodonSummary]:
    """The finished codons after ``snapshot``, given those before it.

    Raises ``ValueError`` when ``codons`` is shorter than the entries the
    snapshot keeps: events were missed, so fold the journal from its start.
    """
    keep = snapshot.completed_from
    if keep > len(codons):
        raise ValueError(
            f"state.snapshot keeps {keep} finished codons but only {len(codons)} are known; "
            "some events were missed: fold the whole journal (history.sync)"
        )
    return codons[:keep] + snapshot.completed_codons


@dataclass(frozen=True, slots=True)
class Mark:
    """What a journaled snapshot said the whole list was."""

    count: int
    digest: str


_snapshot = msgspec.json.Decoder(StateSnapshotEvent)


class _Envelope(msgspec.Struct):
    data: msgspec.Raw


_envelope = msgspec.json.Decoder(_Envelope)


def mark_of(payload: str | bytes) -> Mark | None:
    """The list a journaled ``state.snapshot`` payload (``{"type","data"}``)
    describes, whether it is a delta or an old whole-list snapshot; None when
    it cannot be read (the next snapshot then carries the whole list)."""
    try:
        event = _snapshot.decode(_envelope.decode(payload).data)
    except msgspec.DecodeError:
        return None
    if event.completed_count is not None and event.completed_digest is not None:
        return Mark(event.completed_count, event.completed_digest)
    # A whole-list snapshot from before deltas: it says everything itself.
    return Mark(len(event.completed_codons), digest(event.completed_codons))


class CompletedCodons:
    """The runtime's list of finished codons and what the journal knows of it.

    :meth:`reset` takes the list read from the execution thread (at start and
    after a rollback), :meth:`append` adds a codon that just finished, and
    :meth:`delta` says what the next ``state.snapshot`` must carry, then
    counts it as announced. Cost per call: O(changed entries), except
    :meth:`reset`, which is O(list) and rare.
    """

    def __init__(self) -> None:
        self._codons: list[CodonSummary] = []
        self._digests: list[str] = [EMPTY_DIGEST]
        """``_digests[k]`` is the digest of the first k entries."""
        self._announced = 0
        """How many leading entries the journal's last snapshot already holds."""
        self._expected: Mark | None = None

    def __len__(self) -> int:
        return len(self._codons)

    @property
    def codons(self) -> Sequence[CodonSummary]:
        """The finished codons, oldest first."""
        return self._codons

    def reset(self, codons: Iterable[CodonSummary]) -> None:
        """Replaces the list; the announced part shrinks to what both lists
        share (or, the first time after :meth:`expect`, to what the journal's
        snapshot holds)."""
        old = self._digests
        self._codons = []
        self._digests = [EMPTY_DIGEST]
        for codon in codons:
            self.append(codon)
        if self._expected is not None:
            mark, self._expected = self._expected, None
            matches = mark.count < len(self._digests) and self._digests[mark.count] == mark.digest
            # A journal whose list is not a prefix of ours gets it whole, once.
            self._announced = mark.count if matches else 0
            return
        shared = min(self._announced, len(self._digests) - 1, len(old) - 1)
        # Chained digests: once two prefixes differ, every longer one does.
        while shared and self._digests[shared] != old[shared]:
            shared -= 1
        self._announced = shared

    def append(self, codon: CodonSummary) -> None:
        """Adds a codon that just finished."""
        self._codons.append(codon)
        self._digests.append(chain(self._digests[-1], codon))

    def expect(self, mark: Mark | None) -> None:
        """What the journal's newest snapshot said (None: there is none); the
        next :meth:`reset` (the list read at start) sends only what it lacks."""
        self._expected = mark or Mark(0, EMPTY_DIGEST)

    def delta(self) -> tuple[int, list[CodonSummary], int, str]:
        """``(completedFrom, completedCodons, completedCount, completedDigest)``
        for the next snapshot; afterwards the whole list counts as announced."""
        keep = self._announced
        self._announced = len(self._codons)
        return keep, self._codons[keep:], len(self._codons), self._digests[-1]
