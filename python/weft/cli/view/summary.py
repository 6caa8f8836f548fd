"""The end summary of ``weft run`` and ``weft attach``: what the runtime knows
(:class:`RunSummary`) and the fold's figures, as data and as labelled rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft.cli.view.format import clip, format_duration, format_tokens
from weft.money import format_cost, known_cost, known_dollars, total_cost
from weft.progress import PENDING, RunProgress
from weft.runtime.execution.prepare import ExecutionLayout
from weft.store.execution import DATABASE


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the runtime knows when ``weft run`` ends; the view adds the figures."""

    status: str
    """The ending's kind (:mod:`weft.outcome`: ``completed``, ``failed``, ``stopped``,
    ``budget``), or ``nothing_to_do``."""
    exit_code: int
    execution: Path | None = None
    """The execution directory (the journal and checkpoints are under it)."""
    resume_command: str | None = None
    """The command that resumes or continues this execution."""
    message: str | None = None
    """Why the run ended that way, when there is more to say."""
    duration_ms: int | None = None
    """Wall time of the whole command; by default, from the run's start to its end."""
    forked_from: tuple[str, str] | None = None
    """``(source execution, codon)`` when the execution is a fork (``weft fork``, ``--reuse``)."""

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
            "stopped": counts["stopped"],
            "skipped": counts["skipped"],
            "notRun": counts[PENDING] - earlier + counts["active"],
            "total": len(progress.codons),
            "doneEarlier": earlier,
        },
        "totalCost": known_dollars(progress.total_cost, progress.unpriced),
        "unpricedCodons": progress.unpriced,
        "spent": known_dollars(progress.spent, progress.unpriced),
        "allRuns": _all_runs(progress),
        "budgetExceeded": [e.message for e in progress.budget_exceeded],
        "loopsCut": [{"loopId": loop, "iterations": n} for loop, n in progress.loops_cut],
        "ending": _ending(progress),
        "sentinelCost": progress.sentinel_cost,
        "tokens": progress.total_tokens,
        "wallTimeMs": wall_ms,
        "checkpoints": len(progress.checkpoints),
        "failures": [_failure(progress, c, r) for c, r in progress.failures],
        "execution": None if result.execution is None else str(result.execution),
        "journal": None if result.journal is None else str(result.journal),
        "checkpointRepository": (
            None if result.checkpoint_repository is None else str(result.checkpoint_repository)
        ),
        "resumeCommand": result.resume_command,
        "reusedFrom": None
        if result.forked_from is None
        else {
            "execution": result.forked_from[0],
            "codonId": result.forked_from[1],
            "codons": earlier,
        },
    }


def _ending(progress: RunProgress) -> dict[str, Any] | None:
    """How the run ended, as journaled (the fold's), with the loop place of the
    codon a stop left to do."""
    ending = progress.ending
    if ending is None:
        return None
    codon = None if ending.codon_id is None else progress.codon(ending.codon_id)
    loop = None if codon is None or codon.loop is None else codon.loop
    place = None if loop is None else {"loopId": loop[0], "iteration": loop[1] + 1}
    return {**ending.to_json(), "loop": place}


def _left(ending: Mapping[str, Any] | None) -> str | None:
    """What a stopped run left to do, in words."""
    if ending is None or ending["kind"] not in ("stopped", "budget") or not ending["codonId"]:
        return None
    loop = ending.get("loop")
    where = (
        f" (loop {loop['loopId']}, iteration {loop['iteration']}; its remaining iterations too)"
        if loop
        else ""
    )
    return f"{ending['codonId']}{where} and what follows: run the same command to continue"


def _all_runs(progress: RunProgress) -> dict[str, Any] | None:
    """What every run of the execution spent, as the run's ``budget.summary``
    (the ``budget:`` line) says: earlier runs (a redo or a rollback in manual
    mode starts a new run), skipped attempts and sentinels included."""
    budget = progress.budget
    if budget is None:
        return None
    return {
        "spent": known_dollars(budget.actual_dollars, budget.unpriced_codons),
        "unpricedAttempts": budget.unpriced_codons,
    }


def _failure(progress: RunProgress, codon_id: str, reason: str) -> dict[str, Any]:
    """One codon that failed in the run, once however often it was tried."""
    c = progress.codon(codon_id)
    return {
        "codonId": codon_id,
        "reason": reason,
        "failedAttempts": progress.failed_attempts.get(codon_id, 1),
        "attempts": c.attempts if c is not None else 1,
        "status": c.status if c is not None else "failed",
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
    if codons.get("stopped"):
        counted += f", {codons['stopped']} stopped (to do again)"
    if codons["notRun"]:
        counted += f", {codons['notRun']} not run"
    counted += f" (of {codons['total']})"
    if codons["doneEarlier"]:
        counted += f"; {codons['doneEarlier']} done in earlier runs"
    rows = [("codons", counted)]
    reused = data.get("reusedFrom")
    if reused:
        n = reused["codons"]
        rows.append(
            (
                "reused",
                f"{n} codon{'s' * (n != 1)} reused from {reused['execution']} "
                f"(forked at {reused['codonId']}: not run or paid for again)",
            )
        )
    cost = total_cost(data["totalCost"], data["unpricedCodons"], data["spent"])
    all_runs = _all_runs_text(data)
    this_run = " in this run" if all_runs else ""
    rows.append(("cost", f"{cost} ({format_tokens(data['tokens'])} tokens){this_run}"))
    if data.get("sentinelCost"):
        rows.append(
            ("sentinels", f"{format_cost(data['sentinelCost'])} (apart from the cost above)")
        )
    if all_runs:
        rows.append(("all runs", all_runs))
    for message in data["budgetExceeded"]:
        rows.append(("budget", clip(message, 160)))
    for cut in data.get("loopsCut") or ():
        n = cut["iterations"]
        rows.append(
            ("cut", f"loop {cut['loopId']} ended by its budget after {n} iteration{'s' * (n != 1)}")
        )
    left = _left(data.get("ending"))
    if left:
        rows.append(("left", left))
    if data["wallTimeMs"] is not None:
        rows.append(("time", format_duration(data["wallTimeMs"] / 1000)))
    rows.append(("checkpoints", f"{data['checkpoints']} made"))
    failures = data["failures"]
    for failure in failures[:5]:
        said = f"{failure['codonId']}{_attempts(failure)}: {clip(failure['reason'], 160)}"
        rows.append(("failed", said))
    if len(failures) > 5:
        rows.append(("failed", f"… and {len(failures) - 5} more (weft status)"))
    return rows


def _all_runs_text(data: Mapping[str, Any]) -> str | None:
    """The ``all runs`` row: what every run of the execution spent (the
    ``budget:`` line's figure), when it is not what this run spent (the cost
    row's money, skipped attempts and sentinels included)."""
    every = data.get("allRuns")
    if not every:
        return None
    spent = known_cost(every["spent"], every["unpricedAttempts"])
    this_run = known_cost((data["spent"] or 0.0) + data["sentinelCost"], data["unpricedCodons"])
    if spent == this_run:
        return None
    return f"{spent} spent by every run of the execution (the budget line's figure)"


def _attempts(failure: Mapping[str, Any]) -> str:
    """How often a failed codon was tried: `` (3 attempts failed)``, or
    `` (1 of 2 attempts failed, then completed)``; nothing for one attempt."""
    failed, attempts = failure["failedAttempts"], failure["attempts"]
    if attempts <= 1:
        return ""
    if failed >= attempts and failure["status"] == "failed":
        return f" ({failed} attempts failed)"
    status = failure["status"]
    then = f", then {status}" if status in ("completed", "skipped") else ""
    return f" ({failed} of {attempts} attempts failed{then})"


_TITLES = {
    "nothing_to_do": "Nothing to do",
    "stopped": "Run stopped",
    "budget": "Run stopped by its budget",
}


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
