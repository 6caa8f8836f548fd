"""Comparing two executions codon by codon: what ``weft diff A B`` says.

Pure: the caller reads (the state documents, the journal's tool calls and
unpriced codons, the checkpoints' files) and prints; this module only
compares values. The pieces:

* :func:`side`: one execution as compared (:class:`Side`): the codons of its
  execution thread (the core's, the history that counts: a codon a rollback or
  a fork superseded is not on it), oldest first, each as the latest record of
  that codon on the thread with the figures of the attempts of its run
  (:class:`CodonFigures`), and the execution's total as ``weft status`` says it
  (every record, superseded ones included).
* :func:`checkpoints_to_read`: the completion checkpoints whose files the
  comparison needs (a codon whose two checkpoints are one commit needs none).
* :func:`compare`: the two sides aligned by codon id (:class:`CodonDiff`),
  the files each codon's completion checkpoints differ in (:class:`FileChange`,
  with a unified diff), the totals, and where the two diverge: the first
  codon whose record is not the same record (same run, same place in it) on
  both. Two forks of one source keep the source's records up to the fork point,
  so that is where they diverge; two unrelated executions diverge at once.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from weft.cli.resolve import codon_cost
from weft.clock import ms_from_iso
from weft.money import NANO, known_dollars, nanos

__all__ = [
    "CodonDiff",
    "CodonFigures",
    "ExecutionDiff",
    "FileChange",
    "Side",
    "checkpoints_to_read",
    "compare",
    "side",
]

Files = Mapping[str, bytes]
"""A checkpoint's files: path -> content (:meth:`weft.checkpoints.CheckpointRepo.files`)."""

_TOKEN_FIELDS = ("finalTokens", "partialTokens", "currentTokens")
"""Where a record keeps its tokens, by status (the first present is the attempt's)."""


@dataclass(frozen=True, slots=True)
class CodonFigures:
    """One codon of one execution's thread.

    ``status`` and ``checkpoint`` (its completion checkpoint) are the latest
    record's. The figures count every attempt of the run that holds it (a codon
    retried in its run is paid for twice): ``cost`` by the seed's getCodonCost
    (what ``weft status`` counts), ``tokens`` every token, ``seconds`` from each
    attempt's start to its end (None while one has no end), ``tool_calls`` the
    journal's ``assistant.action`` tool uses."""

    run_id: str
    index: int
    """The latest record's place in its run's codons."""
    status: str
    cost: float
    unpriced: bool
    tokens: int
    seconds: float | None
    attempts: int
    tool_calls: int
    checkpoint: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "status": self.status,
            "cost": known_dollars(self.cost, self.unpriced),
            "unpriced": self.unpriced,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "attempts": self.attempts,
            "toolCalls": self.tool_calls,
            "completionCheckpoint": self.checkpoint,
        }


@dataclass(frozen=True, slots=True)
class Side:
    """One execution as compared: its thread's codons (oldest first) and its totals."""

    execution: str
    codons: Mapping[str, CodonFigures]
    total_cost: float
    """Every record's cost (``weft status``'s ``totalCost``), superseded ones included."""
    unpriced_codons: int
    forked_from: tuple[str, str] | None = None
    """``(source, codon)`` of a fork (``execution-meta.json``'s ``forkedFrom``)."""

    @property
    def thread_cost(self) -> float:
        """What the thread's codons cost (the codons compared), to the nano-dollar."""
        return sum(nanos(c.cost) for c in self.codons.values()) / NANO

    @property
    def thread_unpriced(self) -> int:
        return sum(1 for c in self.codons.values() if c.unpriced)

    def totals(self) -> dict[str, Any]:
        """The thread's figures summed, and the execution's total cost."""
        seconds = [c.seconds for c in self.codons.values()]
        return {
            "codons": len(self.codons),
            "cost": known_dollars(self.thread_cost, self.thread_unpriced),
            "unpricedCodons": self.thread_unpriced,
            "tokens": sum(c.tokens for c in self.codons.values()),
            "seconds": None if None in seconds else math.fsum(s for s in seconds if s is not None),
            "attempts": sum(c.attempts for c in self.codons.values()),
            "toolCalls": sum(c.tool_calls for c in self.codons.values()),
            "executionCost": known_dollars(self.total_cost, self.unpriced_codons),
            "executionUnpricedCodons": self.unpriced_codons,
        }


@dataclass(frozen=True, slots=True)
class FileChange:
    """A file the two completion checkpoints of a codon hold differently (A to B)."""

    path: str
    change: Literal["added", "removed", "modified"]
    """``added``: only B has it; ``removed``: only A has it."""
    patch: str
    """The unified diff from A's to B's (``Binary files differ`` for non-text)."""


@dataclass(frozen=True, slots=True)
class CodonDiff:
    """One codon of either thread, as each execution has it (None: not on that thread)."""

    codon_id: str
    a: CodonFigures | None
    b: CodonFigures | None
    files: tuple[FileChange, ...] | None
    """What the completion checkpoints differ in; None when either has none (or
    one could not be read)."""

    @property
    def same_record(self) -> bool:
        """Both threads hold the same record: the history they share."""
        return (
            self.a is not None
            and self.b is not None
            and (self.a.run_id, self.a.index) == (self.b.run_id, self.b.index)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "codonId": self.codon_id,
            "sameRecord": self.same_record,
            "a": None if self.a is None else self.a.to_json(),
            "b": None if self.b is None else self.b.to_json(),
            "costDelta": _delta(self.a, self.b),
            "files": None
            if self.files is None
            else [{"path": f.path, "change": f.change} for f in self.files],
        }


@dataclass(frozen=True, slots=True)
class ExecutionDiff:
    """Two executions compared (see the module docstring)."""

    a: Side
    b: Side
    codons: tuple[CodonDiff, ...]
    diverged_at: str | None
    """The first codon whose record differs; None when none does."""
    patches: bool = field(default=False)
    """Whether the files' patches are part of the JSON (``--files``)."""

    def to_json(self) -> dict[str, Any]:
        def about(s: Side) -> dict[str, Any]:
            forked = s.forked_from
            return {
                "execution": s.execution,
                "forkedFrom": None
                if forked is None
                else {"execution": forked[0], "codonId": forked[1]},
                "totals": s.totals(),
            }

        codons = []
        for c in self.codons:
            entry = c.to_json()
            if self.patches and c.files is not None:
                for out, f in zip(entry["files"], c.files, strict=True):
                    out["patch"] = f.patch
            codons.append(entry)
        return {
            "a": about(self.a),
            "b": about(self.b),
            "divergedAt": self.diverged_at,
            "codons": codons,
        }


def _delta(a: CodonFigures | None, b: CodonFigures | None) -> float | None:
    if a is None or b is None or a.unpriced or b.unpriced:
        return None  # an unknown price makes the difference unknown, not 0
    return (nanos(b.cost) - nanos(a.cost)) / NANO


def _tokens(record: Mapping[str, Any]) -> int:
    for key in _TOKEN_FIELDS:
        tokens = record.get(key)
        if isinstance(tokens, Mapping):
            return sum(v for v in tokens.values() if isinstance(v, int))
    return 0


def _seconds(record: Mapping[str, Any]) -> float | None:
    start, end = ms_from_iso(record.get("startTime")), ms_from_iso(record.get("endTime"))
    if start is None or end is None:
        return None
    return max(end - start, 0) / 1000


def side(
    execution: str,
    state: Mapping[str, Any],
    *,
    tool_calls: Mapping[tuple[str, str], int],
    unpriced: Iterable[tuple[str | None, str | None]] = (),
    forked_from: tuple[str, str] | None = None,
) -> Side:
    """One execution's :class:`Side` from its state document (``state.json``'s
    shape), the journal's tool calls per ``(run id, codon id)`` and the
    ``(run id, codon id)`` of the codons that used a model without a price."""
    from weft._core import analyze_execution_thread

    runs: list[Mapping[str, Any]] = list(state.get("runs") or ())
    by_run = {str(r["runId"]): r for r in runs}
    unpriced_pairs = set(unpriced)
    thread = analyze_execution_thread(json.dumps(state), validate_checkpoints=False)
    codons: dict[str, CodonFigures] = {}
    for tc in reversed(list(thread.codons)):  # oldest first; a later record replaces
        run = by_run.get(tc.run_id)
        if run is None:
            continue
        records = run.get("codons") or []
        latest = records[tc.codon_index_in_run]
        tries = [r for r in records if r.get("codonId") == tc.codon_id]
        seconds = [_seconds(r) for r in tries]
        codons.pop(tc.codon_id, None)  # its place is where its latest record ran
        codons[tc.codon_id] = CodonFigures(
            run_id=tc.run_id,
            index=tc.codon_index_in_run,
            status=str(latest.get("status")),
            cost=sum(nanos(codon_cost(r)) for r in tries) / NANO,
            unpriced=(tc.run_id, tc.codon_id) in unpriced_pairs,
            tokens=sum(_tokens(r) for r in tries),
            seconds=None if None in seconds else math.fsum(s for s in seconds if s is not None),
            attempts=len(tries),
            tool_calls=tool_calls.get((tc.run_id, tc.codon_id), 0),
            checkpoint=latest.get("completionCheckpoint"),
        )
    total = sum(nanos(codon_cost(c)) for r in runs for c in r.get("codons") or ()) / NANO
    return Side(
        execution=execution,
        codons=codons,
        total_cost=total,
        unpriced_codons=len(unpriced_pairs),
        forked_from=forked_from,
    )


def _aligned(a: Side, b: Side) -> list[str]:
    """Codon ids in thread order: A's, with those only B has placed just before
    the next codon both have (after A's own codons there), or at the end."""
    order = list(a.codons)
    pending: list[str] = []
    for codon_id in b.codons:
        if codon_id not in a.codons:
            pending.append(codon_id)
        elif pending:
            at = order.index(codon_id)
            order[at:at] = pending
            pending = []
    return order + pending


def checkpoints_to_read(a: Side, b: Side) -> tuple[set[str], set[str]]:
    """The completion checkpoints of A and of B whose files :func:`compare` needs."""
    need_a: set[str] = set()
    need_b: set[str] = set()
    for codon_id, fa in a.codons.items():
        fb = b.codons.get(codon_id)
        if fb is None or fa.checkpoint is None or fb.checkpoint is None:
            continue
        if fa.checkpoint != fb.checkpoint:
            need_a.add(fa.checkpoint)
            need_b.add(fb.checkpoint)
    return need_a, need_b


def compare(
    a: Side,
    b: Side,
    files_a: Mapping[str, Files],
    files_b: Mapping[str, Files],
    *,
    patches: bool = False,
) -> ExecutionDiff:
    """A and B codon by codon; ``files_a`` / ``files_b`` hold the files of
    the checkpoints :func:`checkpoints_to_read` named (sha -> files)."""
    rows = []
    diverged: str | None = None
    for codon_id in _aligned(a, b):
        fa, fb = a.codons.get(codon_id), b.codons.get(codon_id)
        changes: tuple[FileChange, ...] | None = None
        if fa is not None and fb is not None and fa.checkpoint and fb.checkpoint:
            if fa.checkpoint == fb.checkpoint:
                changes = ()
            elif fa.checkpoint in files_a and fb.checkpoint in files_b:
                changes = file_changes(files_a[fa.checkpoint], files_b[fb.checkpoint])
        row = CodonDiff(codon_id=codon_id, a=fa, b=fb, files=changes)
        if diverged is None and not row.same_record:
            diverged = codon_id
        rows.append(row)
    return ExecutionDiff(a=a, b=b, codons=tuple(rows), diverged_at=diverged, patches=patches)


def file_changes(a: Files, b: Files) -> tuple[FileChange, ...]:
    """The files ``a`` and ``b`` hold differently, by path, with their unified diffs."""
    out = []
    for path in sorted(a.keys() | b.keys()):
        old, new = a.get(path), b.get(path)
        if old == new:
            continue
        change: Literal["added", "removed", "modified"] = (
            "added" if old is None else "removed" if new is None else "modified"
        )
        out.append(FileChange(path=path, change=change, patch=_patch(path, old, new)))
    return tuple(out)


def _text(content: bytes | None) -> list[str] | None:
    if content is None:
        return []
    if b"\0" in content:
        return None
    try:
        return content.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _patch(path: str, old: bytes | None, new: bytes | None) -> str:
    before, after = _text(old), _text(new)
    a_name = "/dev/null" if old is None else f"a/{path}"
    b_name = "/dev/null" if new is None else f"b/{path}"
    if before is None or after is None:
        return f"Binary files {a_name} and {b_name} differ\n"
    lines = []
    for line in difflib.unified_diff(before, after, a_name, b_name):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)
