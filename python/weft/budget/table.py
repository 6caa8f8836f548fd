"""``weft validate``'s budget table and the budget warnings (W1-W10).

The table lists every budget of the hank (the run ceiling, each loop's, each
codon's caps) with what each child of a proportional budget is allotted. The
warnings are the reference's W1-W10, combinations that are valid but do not
do what they seem to:

=====  ==================================================================
W1     a cap above what its container allots it (codon or loop vs. share/pool)
W2     part of a proportional-strict pool that no child can ever spend
W3     a time budget on an ``exhaustWithPrompt`` codon
W4     a dollar budget over a model without a price (its spend is unknown)
W5     a child whose effective budget is zero
W6     ``onExceeded: fail`` with ``onFailure: retry``
W7     a ``fail`` codon after others in a shared pool (they may spend it first)
W8     a codon time cap above its loop's or the run's time budget
W9     a loop budget above the run ceiling (the run stops first)
W10    a time budget on a ``contextExceeded`` loop (time ends it, not context)
=====  ==================================================================

W3, W6 and W8 (and W1 for caps above a whole pool) are also found by the
hank checks (:mod:`weft.config.rules`), which report them with every other
warning of the file; :func:`budget_warnings` adds the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weft.agents.harness import route
from weft.agents.pricing import default_table
from weft.budget.limits import BudgetBook, Caps, Container
from weft.config.schema import Codon, ContextExceeded, Hank, Loop

__all__ = [
    "BudgetWarning",
    "TableRow",
    "budget_table",
    "budget_warnings",
    "is_priced",
    "render_table",
]


@dataclass(frozen=True, slots=True)
class TableRow:
    """One budget: where it applies, its limits, its allotment and what crossing it does."""

    scope: str
    """``run``, ``loop <id>`` or ``codon <id>``."""
    caps: Caps
    allocation: str | None = None
    allotted: float | None = None
    """Dollars its container allots it (proportional budgets only)."""
    on_exceeded: str = "complete"
    source: str = ""


@dataclass(frozen=True, slots=True)
class BudgetWarning:
    """One of W1-W10, with the JSON path it is about."""

    code: str
    path: str
    message: str

    def render(self) -> str:
        """``warning W4 at $.hank[0].budget: ...``"""
        return f"  warning {self.code} at {self.path}: {self.message}"


def is_priced(model: str) -> bool:
    """Whether Weft knows what ``model`` costs: Claude reports its own cost; the
    others are priced from the table (``pricing.toml``)."""
    try:
        target = route(model)
    except ValueError:
        return False
    if target.harness == "claude":
        return True
    return default_table().lookup(target.model) is not None


def _allotted(container: Container, child: str) -> float | None:
    if not container.proportional or container.caps.dollars is None:
        return None
    return container.share(child) * container.caps.dollars


def budget_table(book: BudgetBook, hank: Hank) -> list[TableRow]:
    """Every budget of the hank under ``book``'s run ceiling, run first."""
    rows = [
        TableRow(
            "run",
            book.run.caps,
            book.run.allocation,
            None,
            book.run.on_exceeded,
            book.run.source if book.run.caps.any else "",
        )
    ]
    for item in hank.hank:
        if isinstance(item, Loop):
            loop = book.loops.get(item.id)
            if loop is not None:
                rows.append(
                    TableRow(
                        f"loop {item.id}",
                        loop.caps,
                        loop.allocation,
                        _allotted(book.run, item.id),
                        loop.on_exceeded,
                    )
                )
            for codon in item.codons:
                rows += _codon_row(book, codon, loop)
        else:
            rows += _codon_row(book, item, None, book.run)
    return rows


def _codon_row(
    book: BudgetBook, codon: Codon, loop: Container | None, run: Container | None = None
) -> list[TableRow]:
    own = book.codons.get(codon.id)
    container = loop if loop is not None else run
    allotted = None if container is None else _allotted(container, codon.id)
    if own is None and allotted is None:
        return []
    caps = own.caps if own is not None else Caps()
    on_exceeded = own.on_exceeded if own is not None else "complete"
    return [TableRow(f"codon {codon.id}", caps, None, allotted, on_exceeded)]


def render_table(rows: list[TableRow]) -> str:
    """The table as text (``-`` for no limit)."""

    def cell(value: float | int | None, money: bool = False) -> str:
        if value is None:
            return "-"
        return f"${value:.4f}" if money else f"{value:g}"

    # "tokens" is every token of every attempt (a run's or a loop's maxTokens).
    header = (
        "budget", "dollars", "seconds", "tokens", "out tokens", "ctx tokens", "allotted",
        "onExceeded",
    )  # fmt: skip
    lines = [header]
    for r in rows:
        scope = r.scope if r.allocation in (None, "shared") else f"{r.scope} ({r.allocation})"
        if r.source:
            scope += f" [{r.source}]"
        lines.append(
            (
                scope,
                cell(r.caps.dollars, True),
                cell(r.caps.seconds),
                "-" if r.caps.tokens is None else f"{r.caps.tokens:,}",
                cell(r.caps.output_tokens),
                cell(r.caps.context_tokens),
                cell(r.allotted, True),
                r.on_exceeded,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def budget_warnings(
    book: BudgetBook, hank: Hank, priced: Callable[[str], bool] = is_priced
) -> list[BudgetWarning]:
    """The budget warnings the hank checks do not already give (see the module docs)."""
    out: list[BudgetWarning] = []
    run = book.run
    any_dollars = (
        run.caps.dollars is not None
        or any(c.caps.dollars is not None for c in book.loops.values())
        or any(c.caps.dollars is not None for c in book.codons.values())
    )
    for i, item in enumerate(hank.hank):
        where = f"$.hank[{i}]"
        if isinstance(item, Loop):
            loop = book.loops.get(item.id)
            out += _child_warnings(run, item.id, loop.caps if loop else None, where)
            if loop is not None:
                out += _loop_warnings(item, loop, run, where, hank)
            for j, codon in enumerate(item.codons):
                cw = f"{where}.codons[{j}]"
                own = book.codons.get(codon.id)
                if loop is not None:
                    out += _child_warnings(loop, codon.id, own.caps if own else None, cw)
                out += _priced(codon, cw, any_dollars, priced)
        else:
            own = book.codons.get(item.id)
            out += _child_warnings(run, item.id, own.caps if own else None, where)
            out += _priced(item, where, any_dollars, priced)
    out += _pool_warnings(run, "$.overrides.budget")
    for i, item in enumerate(hank.hank):
        if isinstance(item, Loop) and item.id in book.loops:
            out += _pool_warnings(book.loops[item.id], f"$.hank[{i}].budget")
            out += _fail_order(book, [c.id for c in item.codons], book.loops[item.id], i)
    out += _fail_order(book, [item.id for item in hank.hank], run, None)
    return out


def _child_warnings(
    container: Container, child: str, caps: Caps | None, where: str
) -> list[BudgetWarning]:
    allotted = _allotted(container, child)
    if allotted is None:
        return []
    out = []
    if allotted <= 0:
        out.append(
            BudgetWarning(
                "W5",
                where,
                f'"{child}" gets $0 of {_name(container)}: the shares leave nothing for it',
            )
        )
    elif (
        caps is not None
        and caps.dollars is not None
        and allotted < caps.dollars <= (container.caps.dollars or 0.0)
    ):
        # Above the whole pool is the hank checks' warning already.
        out.append(
            BudgetWarning(
                "W1",
                f"{where}.budget.maxDollars",
                f'"{child}" has a cap of ${caps.dollars:g}, above the ${allotted:g} '
                f"{_name(container)} allots it",
            )
        )
    return out


def _pool_warnings(container: Container, where: str) -> list[BudgetWarning]:
    if container.allocation != "proportional-strict" or container.caps.dollars is None:
        return []
    if any(c not in container.shares for c in container.children):
        return []
    total = sum(container.shares.values())
    if total < 1.0 - 1e-9:
        left = (1.0 - total) * container.caps.dollars
        return [
            BudgetWarning(
                "W2",
                f"{where}.shares",
                f"the shares add up to {total:g}: ${left:g} of {_name(container)} "
                "is allotted to no one and can never be spent",
            )
        ]
    return []


def _loop_warnings(
    item: Loop, loop: Container, run: Container, where: str, hank: Hank
) -> list[BudgetWarning]:
    out = []
    run_dollars, loop_dollars = run.caps.dollars, loop.caps.dollars
    own = hank.overrides.budget if hank.overrides is not None else None
    hank_dollars = None if own is None else own.max_dollars
    # Above the hank's own overrides.budget is the hank checks' warning; this
    # one is for a lower ceiling set outside the hank (weft.json, the environment).
    if (
        run_dollars is not None
        and loop_dollars is not None
        and loop_dollars > run_dollars
        and (hank_dollars is None or loop_dollars <= hank_dollars)
    ):
        out.append(
            BudgetWarning(
                "W9",
                f"{where}.budget.maxDollars",
                f"loop {item.id}'s ${loop_dollars:g} is above the run ceiling "
                f"(${run_dollars:g}): the run stops first",
            )
        )
    if isinstance(item.terminate_on, ContextExceeded) and loop.caps.seconds is not None:
        out.append(
            BudgetWarning(
                "W10",
                f"{where}.budget.maxTimeSeconds",
                f"loop {item.id} ends when its context is exceeded, but its time budget may "
                "end it first",
            )
        )
    return out


def _priced(
    codon: Codon, where: str, any_dollars: bool, priced: Callable[[str], bool]
) -> list[BudgetWarning]:
    if not any_dollars or priced(codon.model):
        return []
    return [
        BudgetWarning(
            "W4",
            f"{where}.model",
            f"{codon.model} has no price: its spending is unknown, so dollar budgets "
            "cannot count it (the totals are lower bounds)",
        )
    ]


def _fail_order(
    book: BudgetBook, children: list[str], container: Container, loop_index: int | None
) -> list[BudgetWarning]:
    if container.allocation != "shared" or not container.caps.any:
        return []
    out = []
    for position, child in enumerate(children):
        own = book.codons.get(child)
        if position > 0 and own is not None and own.on_exceeded == "fail":
            where = (
                f"$.hank[{position}]"
                if loop_index is None
                else f"$.hank[{loop_index}].codons[{position}]"
            )
            out.append(
                BudgetWarning(
                    "W7",
                    f"{where}.budget.onExceeded",
                    f'"{child}" fails when the shared pool of {_name(container)} runs out, '
                    "and the codons before it draw on that pool first",
                )
            )
    return out


def _name(container: Container) -> str:
    return "the run's budget" if container.scope == "run" else f"loop {container.scope_id}"
