"""``weft checkpoints``: newest first, with a time column."""

from __future__ import annotations

from typing import Any

from weft.runtime.rollback import checkpoint_rows


def record(codon: str, end: str, sha: str) -> dict[str, Any]:
    return {
        "codonId": codon,
        "status": "completed",
        "startTime": end,
        "endTime": end,
        "completionCheckpoint": sha,
    }


def test_checkpoints_are_listed_newest_first_across_runs() -> None:
    # The state document keeps its runs newest first.
    state = {
        "runs": [
            {"runId": "r2", "codons": [record("b", "2026-01-02T00:00:00Z", "b2")]},
            {
                "runId": "r1",
                "codons": [
                    record("a", "2026-01-01T00:00:00Z", "a1"),
                    record("b", "2026-01-01T01:00:00Z", "b1"),
                ],
            },
        ]
    }
    rows = checkpoint_rows(state, on_thread=["b2", "a1"], exists=["b2", "a1", "b1"])
    assert [r["sha"] for r in rows] == ["b2", "b1", "a1"]
    assert [r["onThread"] for r in rows] == [True, False, True]
