"""The reference the server's ``progress.snapshot`` is checked against:
:class:`weft.progress.RunProgress` folded over a journal read back from disk,
and the figures of a snapshot to compare with it (shared by the server and the
dashboard tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from weft.events.stream import TokenUsageEvent, decode_event
from weft.money import NANO, known, total_cost
from weft.progress import RunProgress
from weft.store import Journal


def folded(database: Path) -> RunProgress:
    """The reference: RunProgress folded over every row of the journal on disk."""
    fold = RunProgress()
    journal = Journal.open(database, readonly=True, check=False)
    try:
        for page in journal.pages():
            for row in page:
                event = decode_event(row.payload.encode())
                fold.fold(event, int(row.id[:13]) * 1_000_000, row.seq, row.codon_id)
    finally:
        journal.close()
    return fold


def refused(database: Path) -> int:
    """How many transitions the core refused (journaled as error events)."""
    journal = Journal.open(database, readonly=True, check=False)
    try:
        return sum(
            1
            for page in journal.pages()
            for row in page
            if row.type == "error" and '"transitionType"' in row.payload
        )
    finally:
        journal.close()


def unpriced_usage(codon: str) -> TokenUsageEvent:
    """Tokens reported without a cost: a model without a price."""
    return TokenUsageEvent(
        codon_id=codon,
        input_tokens=500,
        output_tokens=20,
        cache_creation_tokens=0,
        cache_read_tokens=0,
        total_cost=None,
    )


def dollars(nano_dollars: int, unpriced: bool) -> float | None:
    return None if unpriced and nano_dollars == 0 else nano_dollars / NANO


def expected(fold: RunProgress) -> dict[str, Any]:
    """What the snapshot must say, from the reference fold."""
    ending = fold.ending
    kind = "running" if ending is None else ending.kind
    unpriced = fold.unpriced
    cost = dollars(fold.total_cost_nanos, bool(unpriced))
    spent = dollars(fold.spent_nanos, bool(unpriced))
    return {
        "seq": fold.last_seq,
        "runId": fold.run_id,
        "ending": None
        if fold.run_id is None
        else {
            "kind": kind,
            "codonId": None if ending is None else ending.codon_id,
            "reason": None if ending is None else ending.reason,
            "forced": False if ending is None else ending.forced,
        },
        "codons": [
            {
                "codonId": c.codon_id,
                "status": "stopped" if c.stopped else c.status,
                "attempts": c.attempts,
                "cost": dollars(c.cost_nanos, c.unpriced),
                "costText": known(c.cost_nanos, c.unpriced),
                "unpriced": c.unpriced,
                "tokens": c.tokens,
                "failure": c.failure,
            }
            for c in fold.codons
        ],
        "totals": {
            "cost": cost,
            "costText": total_cost(cost, unpriced, spent),
            "unpricedCodons": unpriced,
            "tokens": fold.total_tokens,
            "stopped": fold.counts()["stopped"],
        },
    }


def said(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The same figures, from the message."""
    ending = snapshot["ending"]
    totals = snapshot["totals"]
    return {
        "seq": snapshot["seq"],
        "runId": snapshot["runId"],
        "ending": None
        if ending is None
        else {k: ending[k] for k in ("kind", "codonId", "reason", "forced")},
        "codons": [
            {
                k: c[k]
                for k in (
                    "codonId",
                    "status",
                    "attempts",
                    "cost",
                    "costText",
                    "unpriced",
                    "tokens",
                    "failure",
                )
            }
            for c in snapshot["codons"]
        ],
        "totals": {
            "cost": totals["cost"],
            "costText": totals["costText"],
            "unpricedCodons": totals["unpricedCodons"],
            "tokens": totals["tokens"],
            "stopped": totals["codons"]["stopped"],
        },
    }
