"""Budgets: what a run may spend, counted as it spends, enforced as it runs.

The pieces, each with one job:

* :mod:`~weft.budget.limits`: the budgets of a hank (run ceiling, loops,
  codons; allocation and shares) as a static :class:`~weft.budget.limits.BudgetBook`;
* :mod:`~weft.budget.ledger`: the sans-I/O accounting: spending in, a
  :class:`~weft.budget.ledger.Verdict` out when a budget is crossed (an
  injected clock for the time limits);
* :mod:`~weft.budget.report`: the ledger as ``budget.exceeded`` and
  ``budget.summary`` events, and rebuilt from the state of earlier runs;
* :mod:`~weft.budget.watchdog`: the thin asyncio adapter the codon runner
  drives: it feeds the ledger the agent's live usage, ticks for the time
  limits and stops the agent the moment a budget is crossed;
* :mod:`~weft.budget.table`: the budget table and the W1-W10 warnings of
  ``weft validate``.

See ``docs/hank-file.md`` (Budgets) for the rules.
"""

from weft.budget.ledger import EarlierSpend, Ledger, Row, Slot, Verdict
from weft.budget.limits import BudgetBook, Caps, Container
from weft.budget.report import exceeded_event, restore_from_state, summary_event
from weft.budget.watchdog import Watchdog

__all__ = [
    "BudgetBook",
    "Caps",
    "Container",
    "EarlierSpend",
    "Ledger",
    "Row",
    "Slot",
    "Verdict",
    "Watchdog",
    "exceeded_event",
    "restore_from_state",
    "summary_event",
]
