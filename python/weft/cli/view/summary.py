"""The end summary of ``weft run`` and ``weft attach``: what the runtime knows
(:class:`RunSummary`) and the fold's figures, as data and as labelled rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft.cli.view.format import clip, format_cost, format_duration, format_tokens
from weft.progress import PENDING, RunProgress
from weft.runtime.execution import ExecutionLayout
from weft.store.execution import DATABASE


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the runtime knows when ``weft run`` ends; the view adds the figures."""

    status: str
    """``completed``, ``failed``, ``crashed``, ``interrupted``..."""
    exit_code: int
    execution: Path | None = None
    """The execution directory (the journal and checkpoints are under it)."""
    resume_command: str | None = None
    """The command that resumes or continues this execution."""
    message: str | None = None
    """Why the run ended that way, when there is more to say."""
    duration_ms: int | None = None
    """Wall time of the whole command; by default, from the run's start to its end."""

    @property
    def journal(self) -> Path | None:
        """The journal database of the execution."""
        return (
            None if self.execution is None else ExecutionLayout(self.execution).weft_dir / DATABASE
        )

    @property
    def checkpoint_repository(self) -> Path | None:
        """The folder of the shadow checkpoint repository."""
        return None if self.execution is None else ExecutionLayout(self.execution).checkpoints


def summary_data(progress: RunProgress, result: RunSummary, now_ns: int) -> dict[str, Any]:
    """The end summary as JSON-ready data (camelCase, like the events)."""
    counts = progress.counts()
    earlier = sum(1 for c in progress.codons if c.status == PENDING and c.earlier == "completed")
    if result.duration_ms is not None:
        wall_ms: int | None = result.duration_ms
    else:
        elapsed = progress.elapsed(now_ns)
        wall_ms = None if elapsed is None else round(elapsed * 1000)
    return {
        "status": result.status,
        "exitCode": result.exit_code,
        "message": result.message,
        "runId": progress.run_id,
        "codons": {
            "completed": counts["completed"],
            "failed": counts["failed"],
            "skipped": counts["skipped"],
            "notRun": counts[PENDING] - earlier + counts["active"],
            "total": len(progress.codons),
            "doneEarlier": earlier,
        },
        "totalCost": None
        if progress.unpriced and not progress.total_cost_nanos
        else (progress.total_cost),
        "unpricedCodons": progress.unpriced,
        "spent": progress.spent,
        "budgetExceeded": [e.message for e in progress.budget_exceeded],
        "sentinelCost": progress.sentinel_cost,
        "tokens": progress.total_tokens,
        "wallTimeMs": wall_ms,
        "checkpoints": len(progress.checkpoints),
        "failures": [{"codonId": c, "reason": r} for c, r in progress.failures],
        "execution": None if result.execution is None else str(result.execution),
        "journal": None if result.journal is None else str(result.journal),
        "checkpointRepository": (
            None if result.checkpoint_repository is None else str(result.checkpoint_repository)
        ),
        "resumeCommand": result.resume_command,
    }


def summary_rows(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The summary as ``(label, text)`` rows, for the text views."""
    rows: list[tuple[str, str]] = []
    if data["runId"] is not None:
        rows += _figures(data)
    if data["journal"]:
        rows.append(("journal", data["journal"]))
    if data["checkpointRepository"]:
        rows.append(("repository", data["checkpointRepository"]))
    if data["resumeCommand"]:
        label = "resume" if data["exitCode"] != 0 else "continue"
        rows.append((label, data["resumeCommand"]))
    return rows


def _figures(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    codons = data["codons"]
    counted = (
        f"{codons['completed']} completed, {codons['failed']} failed, {codons['skipped']} skipped"
    )
    if codons["notRun"]:
        counted += f", {codons['notRun']} not run"
    counted += f" (of {codons['total']})"
    if codons["doneEarlier"]:
        counted += f"; {codons['doneEarlier']} done in earlier runs"
    rows = [("codons", counted)]
    rows.append(("cost", f"{_cost_text(data)} ({format_tokens(data['tokens'])} tokens)"))
    if data.get("sentinelCost"):
        rows.append(
            ("sentinels", f"{format_cost(data['sentinelCost'])} (apart from the cost above)")
        )
    for message in data["budgetExceeded"]:
        rows.append(("budget", clip(message, 160)))
    if data["wallTimeMs"] is not None:
        rows.append(("time", format_duration(data["wallTimeMs"] / 1000)))
    rows.append(("checkpoints", f"{data['checkpoints']} made"))
    failures = data["failures"]
    for failure in failures[:5]:
        rows.append(("failed", f"{failure['codonId']}: {clip(failure['reason'], 160)}"))
    if len(failures) > 5:
        rows.append(("failed", f"… and {len(failures) - 5} more (weft status)"))
    return rows


def _cost_text(data: Mapping[str, Any]) -> str:
    """The run's cost: a lower bound with unpriced codons, and what skipped
    attempts spent beside it."""
    unpriced = data["unpricedCodons"]
    total = data["totalCost"] or 0.0
    text = format_cost(total)
    if unpriced:
        text = f"≥ {text} ({unpriced} codon{'s' * (unpriced > 1)} unpriced)"
    if data["spent"] > total + 5e-10:
        text += f", spent {format_cost(data['spent'])}"
    return text


_TITLES = {"nothing_to_do": "Nothing to do"}


def title(result: RunSummary, *, with_message: bool = True) -> str:
    """``Run failed (exit 1): codon build failed`` (without ``with_message``, the
    part before the colon)."""
    text = f"{_heading(result)} (exit {result.exit_code})"
    message = reason(result)
    return f"{text}: {message}" if message and with_message else text


def _heading(result: RunSummary) -> str:
    return _TITLES.get(result.status, f"Run {result.status}")


def reason(result: RunSummary) -> str:
    """Why the run ended so, without the heading's words again at its end
    (``Execution … is complete``, not ``… is complete: nothing to do``)."""
    message = result.message or ""
    ending = f": {_heading(result)}"
    if message.lower().endswith(ending.lower()):
        message = message[: -len(ending)]
    return message
