"""``weft run --dry-run`` and the forecast ceiling check of every ``weft run``.

:func:`before_prepare` is the one call ``weft run`` makes once the hank is loaded
and its settings resolved, before any execution is created: with ``--dry-run`` it
prints the forecast (:mod:`weft.fork.forecast`: each codon's median and 90th
percentile cost and time from the earlier executions of the hank under the
managed root, and the totals) and ends the command; otherwise, when a dollar
ceiling is set and the hank has history, it refuses a run whose forecast median
already exceeds the ceiling (unless ``--force-budget``), before anything is spent.
Without a ceiling it reads nothing, so a plain ``weft run`` pays nothing for it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from weft.money import format_cost
from weft.runtime.execution.errors import ExecutionSetupError
from weft.terminal import plural, printable_lines

if TYPE_CHECKING:
    from weft.config.loader import LoadedHank
    from weft.config.runtime import ResolvedRuntimeConfig
    from weft.fork.forecast import CodonForecast, Forecast, Spread

FORCE_FLAG = "--force-budget"

_CEILING_NAMES = {
    "cli": "--max-cost",
    "environment": "WEFT_RUNTIME_BUDGET_MAX_DOLLARS",
    "weft.json": "budget.maxDollars in weft.json",
    "hank overrides": "the hank's overrides.budget.maxDollars",
}
"""Where the dollar ceiling came from (a resolved setting's layer), as the user set it."""


def before_prepare(
    args: argparse.Namespace, loaded: LoadedHank, hank_path: Path, resolved: ResolvedRuntimeConfig
) -> int | None:
    """The exit code of a ``--dry-run`` (after printing it), else None when the run
    may go on; raises :class:`ExecutionSetupError` (exit 2) for a run whose forecast
    median exceeds its dollar ceiling."""
    if args.dry_run:
        problem = _flag_problem(args)
        if problem is not None:
            raise ExecutionSetupError(problem)
        found = _forecast(args, loaded, hank_path, resolved)
        if args.json:
            print(json.dumps(found.to_json()))
        else:
            print(printable_lines(render(found, hank_path)))
        return 0
    ceiling = resolved.config.budget.max_dollars
    if ceiling is None or args.force_budget or _resumes(args, hank_path):
        return None
    found = _forecast(args, loaded, hank_path, resolved)
    total = found.cost
    if found.executions == 0 or total is None or total.median <= ceiling:
        return None
    named = _CEILING_NAMES.get(resolved.sources.get("budget.maxDollars", ""), "budget.maxDollars")
    raise ExecutionSetupError(
        f"the forecast for this hank is {format_cost(total.median)} (median of "
        f"{plural(found.executions, 'earlier execution')}), more than the run's ceiling of "
        f"{format_cost(ceiling)} ({named}); nothing was run. See the forecast with weft run "
        f"{hank_path} --dry-run, raise the ceiling, or pass {FORCE_FLAG} to run anyway (the "
        "ceiling still stops the run when it is reached)"
    )


def _resumes(args: argparse.Namespace, hank_path: Path) -> bool:
    """Whether this ``weft run`` would resume an execution rather than start one:
    the forecast is of a whole hank, while a resumed execution has already spent
    part of its ceiling and runs only what is left (its budget says so itself)."""
    if args.new:
        return False
    if args.execution is not None:
        return (Path(args.execution) / ".weft").is_dir()
    from weft.cli.resolve import latest_for_hank

    return latest_for_hank(hank_path) is not None


def _flag_problem(args: argparse.Namespace) -> str | None:
    """Why the flags given with ``--dry-run`` cannot go together."""
    if args.reuse:
        return (
            "--dry-run forecasts the whole hank; it cannot forecast a --reuse fork: drop one "
            "of them"
        )
    if args.force_budget:
        return f"--dry-run spends nothing, so there is no ceiling to force: drop {FORCE_FLAG}"
    return None


def _forecast(
    args: argparse.Namespace, loaded: LoadedHank, hank_path: Path, resolved: ResolvedRuntimeConfig
) -> Forecast:
    # Imported here: a run without --dry-run or a ceiling never needs them.
    from weft.agents.pricing import default_table
    from weft.fork.forecast import forecast, read_history
    from weft.plan import ExecutionPlan

    base = Path(os.path.expanduser(resolved.config.execution_base_dir))
    history = read_history(base, hank_path)
    plan = ExecutionPlan.from_hank(loaded.hank)
    return forecast(plan, history, default_table(), skip=frozenset(args.skip))


def render(found: Forecast, hank_path: Path) -> str:
    """The forecast as a table: one line per codon, then the total."""
    rows = [("CODON", "MODEL", "COST (MEDIAN / P90)", "TIME (MEDIAN / P90)", "BASIS")]
    for codon in found.codons:
        skipped = codon.basis == "skipped"
        rows.append(
            (
                codon.codon_id + (" (every iteration)" if codon.loop else ""),
                codon.model,
                "-" if skipped else _money(codon.cost),
                "-" if skipped else _time(codon.seconds),
                _basis(codon),
            )
        )
    cost, seconds = found.cost, found.seconds
    unknown = found.unknown
    rows.append(
        (
            "total",
            "",
            _money(cost) + (f" + {len(unknown)} unknown" if unknown and cost else ""),
            _time(seconds),
            "",
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    head = (
        f"Forecast for {hank_path} from {plural(found.executions, 'earlier execution')} "
        "on this machine (nothing was run)"
    )
    return "\n".join([head, *lines])


def _money(value: Spread | None) -> str:
    return "unknown" if value is None else f"{format_cost(value.median)} / {format_cost(value.p90)}"


def _time(value: Spread | None) -> str:
    if value is None:
        return "unknown"
    return f"{_duration(value.median)} / {_duration(value.p90)}"


def _duration(seconds: float) -> str:
    from weft.cli.view.format import format_duration

    # A codon of a few seconds is common: to the tenth below 10 s, not "<1s".
    return f"{seconds:.1f}s" if seconds < 10 else format_duration(seconds)


def _basis(codon: CodonForecast) -> str:
    if codon.basis == "history":
        return f"{plural(codon.samples, 'execution')}"
    if codon.basis == "skipped":
        return "skipped (--skip)"
    return codon.note
