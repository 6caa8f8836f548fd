"""Rebuilding an execution's state on start: snapshot + journal tail.

The journal is the truth; state.json is a shortcut through it. Recovery
takes the newest usable snapshot (state.json, else state.json.bak), replays
the applied transitions journaled after the sequence number it records, and
falls back to replaying the whole journal when no snapshot is usable or a
snapshot disagrees with the journal. Every fallback is said, with its reason.

Every snapshot is cross-checked against the journal, whose fold is the
truth: a snapshot brought up to date must be the state the whole journal
folds to (:func:`differences` names what differs: an edited ``finalCost``,
a status). One that is not is noted and the journal wins. This costs a
full fold at every open (about 1 s per million journaled events, beside
the 1.5 s the payload checksums already take there).

One disagreement is not a fallback but a refusal: a snapshot that reflects
more of the journal than the journal holds proves committed events were
lost (:class:`~weft.errors.JournalLossError`); replaying what is left would
start the work they describe over. Unless what it holds is exactly the
journal's state at its end: then its ``journalSeq`` is what is wrong (an
edit; or the rows gone changed no state), which is noted, and the journal wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weft._core import Core
from weft.errors import JournalLossError, StoreCorruptError, WeftError
from weft.store.journal import Journal
from weft.store.loss import lost_events_message
from weft.store.snapshot import read_snapshots


@dataclass
class Recovery:
    """The recovered state and how it was obtained."""

    core: Core
    source: str
    """``state.json``, ``state.json.bak``, ``journal`` (rebuilt) or ``new``."""
    notes: list[str] = field(default_factory=list)
    """What was unusable and why, for the user."""
    replayed: int = 0
    """Transitions replayed from the journal."""


class _DisagreementError(Exception):
    """The core refused a journaled transition during replay.

    Control flow inside this module only (it becomes a recovery report that
    names the transition), so it is not a :class:`~weft.errors.WeftError`.
    """

    def __init__(self, seq: int, message: str) -> None:
        super().__init__(message)
        self.seq = seq
        self.message = message


def _replay(core: Core, journal: Journal, after: int, upto: int) -> int:
    """Applies the journaled transitions in ``(after, upto]``; ``upto`` is the end
    read first, so a live writer's later commits cannot move the fold past it."""
    replayed = 0
    for seqs, payloads in journal.transition_payloads(after, upto=upto):
        result = core.apply_many(payloads)
        if result.rejected:
            first = result.rejected[0]
            raise _DisagreementError(seqs[first.seq - result.first_seq], first.message or "")
        replayed += len(payloads)
    return replayed


def _start(journal: Journal) -> tuple[Core, int]:
    """Where the fold begins: nothing, or a restored journal's baseline state."""
    baseline = journal.baseline()
    if baseline is None:
        return Core(), 0
    seq, state = baseline
    try:
        return Core(state), seq
    except WeftError as e:
        raise StoreCorruptError(
            f"{journal.path}: the baseline state the journal was restored from is unusable ({e})"
        ) from None


def rebuild(journal: Journal, *, upto: int | None = None) -> Core:
    """The state as the fold of the whole journal (through ``upto``, the end
    already read, if given; from its baseline, if it was restored from a
    snapshot); raises if it does not fold."""
    core, start = _start(journal)
    last = journal.last_seq() if upto is None else upto
    try:
        _replay(core, journal, start, last)
    except _DisagreementError as d:
        raise StoreCorruptError(
            f"{journal.path}: the journaled transition at seq {d.seq} does not apply "
            f"({d.message}); the journal is inconsistent and the run will not continue"
        ) from None
    core.skip_to(last + 1)
    return core


SHOWN_DIFFERENCES = 3
"""How many differing places a note names (the rest are counted)."""


def _doc(core: Core) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(core.state_json())
    doc.pop("journalSeq", None)  # compared apart: where each document says it stands
    return doc


def _walk(path: str, ours: object, theirs: object, out: list[tuple[str, object, object]]) -> None:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(ours.keys() | theirs.keys()):
            _walk(f"{path}.{key}" if path else key, ours.get(key), theirs.get(key), out)
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _walk(f"{path}[{i}]", a, b, out)
    elif ours != theirs:
        out.append((path, ours, theirs))


def differences(snapshot: Core, fold: Core, name: str) -> str | None:
    """What ``snapshot`` (read from the file ``name``) holds that the journal's
    ``fold`` does not, in one line naming the first places; None when they agree."""
    if snapshot.journal_seq == fold.journal_seq and snapshot.state_json() == fold.state_json():
        return None  # the usual case, decided without parsing two large documents
    found: list[tuple[str, object, object]] = []
    _walk("", _doc(snapshot), _doc(fold), found)
    if not found:
        return None
    shown = "; ".join(
        f"{path} is {json.dumps(ours)} in {name}, {json.dumps(theirs)} in the journal"
        for path, ours, theirs in found[:SHOWN_DIFFERENCES]
    )
    more = len(found) - SHOWN_DIFFERENCES
    return shown + (f" (and {more} more)" if more > 0 else "")


def recover(weft_dir: Path, journal: Journal, *, use_snapshots: bool = True) -> Recovery:
    """The execution's state: the best snapshot brought up to date and checked
    against the journal's fold, else the fold."""
    last = journal.last_seq()
    notes: list[str] = []
    folded: list[Core] = []

    def fold() -> Core:
        # The whole journal folded once, through the end read first.
        if not folded:
            folded.append(rebuild(journal, upto=last))
        return folded[0]

    base, base_seq = _start(journal)
    base_runs, base_codons = base.run_count, base.codon_record_count
    for snapshot in read_snapshots(weft_dir) if use_snapshots else []:
        try:
            core = Core(snapshot.data)
        except WeftError as e:
            notes.append(f"{snapshot.name} is unusable: {e}")
            continue
        seq = core.journal_seq or 0
        if seq > last:
            # A reader of a live execution may read a snapshot written after it
            # read the journal's end: look again before calling anything lost.
            last = max(last, journal.last_seq())
        if seq > last:
            # Snapshots are written after their events commit (synchronous =
            # FULL), so the journal once reached seq: the rest is gone, unless
            # the snapshot holds nothing the journal lacks (its seq is wrong).
            if differences(core, fold(), snapshot.name) is not None:
                raise JournalLossError(lost_events_message(weft_dir, snapshot.name, seq, last))
            notes.append(
                f"{snapshot.name} says it reflects journal seq {seq} but the journal ends at "
                f"{last}, and what it holds is the journal's state at {last}: its journalSeq "
                "is wrong (or the rows gone changed no state); the journal wins"
            )
            continue
        if seq < base_seq:
            notes.append(
                f"{snapshot.name} predates the snapshot the journal was restored from; "
                "the journal wins"
            )
            continue
        # Every run and codon record comes from exactly one journaled
        # RunStarted or CodonStarted: a snapshot with other counts is not the
        # fold of the journal it claims to reflect.
        runs = base_runs + journal.count_applied("RunStarted", seq)
        codons = base_codons + journal.count_applied("CodonStarted", seq)
        if (core.run_count, core.codon_record_count) != (runs, codons):
            notes.append(
                f"{snapshot.name} holds {core.run_count} runs and {core.codon_record_count} "
                f"codon records, but the journal through seq {seq} started {runs} and "
                f"{codons}; the journal wins"
            )
            continue
        try:
            replayed = _replay(core, journal, seq, last)
        except _DisagreementError as d:
            notes.append(
                f"{snapshot.name} disagrees with the journal at seq {d.seq} ({d.message}); "
                "the journal wins"
            )
            continue
        core.skip_to(last + 1)
        differ = differences(core, fold(), snapshot.name)
        if differ is not None:
            notes.append(f"{snapshot.name} does not match the journal: {differ}; the journal wins")
            continue
        return Recovery(core, snapshot.name, notes, replayed)
    core = fold() if folded else rebuild(journal, upto=last)
    source = "journal" if last or notes else "new"
    if source == "journal" and use_snapshots:
        notes.append("state rebuilt from the journal alone")
    return Recovery(core, source, notes, journal.count())
