"""How a run ended: the one vocabulary every surface speaks.

A run ends as exactly one of five outcomes, each journaled distinctly:

========================  =====================  ==========================================
outcome (``kind``)        journaled as           exit code of ``weft run``
========================  =====================  ==========================================
``completed``             ``RunCompleted``       0
``failed``                ``RunFailed``          1 (which codon, why: ``codonId``, ``reason``)
``stopped``               ``RunStopped`` by user 130 (SIGINT, ``q``, ``server.shutdown``),
                                                 143 (SIGTERM); ``forced`` when the agent was killed
``budget``                ``RunStopped`` by      3 (which cap, what was spent: ``budget``;
                          budget                 what is left to do stays in the plan)
``crashed``               ``RunCrashed``         (found by a later start; that start goes on)
========================  =====================  ==========================================

A run still going is ``running``. The state (``state.json``) records the run's
``status`` (``running``, ``completed``, ``failed``, ``stopped``, ``crashed``) and,
for a stopped run, its ``stop`` (``by``, ``forced``, ``reason``, ``codonId``,
``budget``); :func:`ending_of` reads one run record of it. :class:`weft.progress.RunProgress`
folds the same facts from the events, into the same :class:`Ending`. Nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

Kind: TypeAlias = Literal["running", "completed", "failed", "stopped", "budget", "crashed"]

EXIT_COMPLETED: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_BUDGET: Final = 3
"""Stopped by a budget ceiling: nothing failed, work is left, raise the cap to go on."""
EXIT_SIGINT: Final = 130
"""128 + SIGINT: stopped by you (Ctrl-C, ``q``, ``server.shutdown``), as shells report it."""
EXIT_SIGTERM: Final = 143
"""128 + SIGTERM."""

WORD: Final[Mapping[Kind, str]] = {
    "running": "running",
    "completed": "completed",
    "failed": "failed",
    "stopped": "stopped",
    "budget": "budget-stopped",
    "crashed": "crashed",
}
"""The one word a list shows (``weft ls``, ``weft status``, ``weft ui``, the dashboard)."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How one run ended (or that it is still running)."""

    kind: Kind
    forced: bool = False
    """A user stop that killed the agent (a second Ctrl-C, ``server.force_shutdown``)."""
    codon_id: str | None = None
    """The codon that failed (``failed``), or that was stopped and stays to do."""
    reason: str | None = None
    """In words: the failure, the budget crossed, the signal."""
    budget: Mapping[str, Any] | None = None
    """``{scope, kind, limit, used, source}`` of the ceiling that stopped the run."""

    @property
    def word(self) -> str:
        """The one word a list shows."""
        return WORD[self.kind]

    def to_json(self) -> dict[str, Any]:
        """The ending as every ``--json`` gives it (camelCase)."""
        return {
            "kind": self.kind,
            "word": self.word,
            "codonId": self.codon_id,
            "reason": self.reason,
            "forced": self.forced,
            "budget": None if self.budget is None else dict(self.budget),
        }

    @property
    def finished(self) -> bool:
        """The run is over (whatever the outcome)."""
        return self.kind != "running"


def ending_of(run: Mapping[str, Any]) -> Ending:
    """The ending of one run record of a state document (``state["runs"][i]``)."""
    status = str(run.get("status", "running"))
    if status == "stopped":
        stop = run.get("stop") or {}
        by_budget = stop.get("by") == "budget"
        return Ending(
            "budget" if by_budget else "stopped",
            forced=bool(stop.get("forced", False)),
            codon_id=stop.get("codonId"),
            reason=stop.get("reason"),
            budget=stop.get("budget") if by_budget else None,
        )
    if status == "failed":
        failure = run.get("failure") or {}
        return Ending("failed", codon_id=failure.get("codonId"), reason=failure.get("reason"))
    if status in ("completed", "crashed", "running"):
        return Ending(status)  # type: ignore[arg-type]
    return Ending("failed", reason=f"unknown run status {status!r}")


def exit_code(ending: Ending, signal: int | None = None) -> int:
    """``weft run``'s exit code for a run that ended so (``signal``: the one that stopped it)."""
    if ending.kind in ("completed", "running"):
        return EXIT_COMPLETED
    if ending.kind == "budget":
        return EXIT_BUDGET
    if ending.kind == "stopped":
        return 128 + signal if signal else EXIT_SIGINT
    return EXIT_FAILED


__all__ = [
    "EXIT_BUDGET",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "WORD",
    "Ending",
    "Kind",
    "ending_of",
    "exit_code",
]
