"""The budgets a run is held to, read from the hank and the run ceiling.

A hank has three levels of budget (reference hankweave-runtime §3.9):

* the **run** ceiling: ``--max-cost`` / ``--max-time`` / ``--max-tokens``, else the stricter of
  the runtime config (``weft.json``, ``WEFT_RUNTIME_BUDGET_*``) and the hank's
  ``overrides.budget`` (resolved by :func:`weft.config.runtime.resolve_runtime_config`),
  with the hank's allocation, shares and ``onExceeded``;
* a **loop**'s ``budget``, shared by its codons over all its iterations;
* a **codon**'s ``budget``: caps on one attempt (per iteration inside a loop).

A container's ``allocation`` says how its children (codons and loops at the
top level, codons inside a loop) draw on its dollars: ``shared`` is first
come, first served; ``proportional`` gives each child its share (``shares``,
or an even split of what no share claims) plus what earlier children left of
theirs; ``proportional-strict`` makes the shares hard caps.

A container's ``maxTokens`` counts every token of every attempt (input,
output, cache writes and cache reads: :func:`weft.progress.token_total`),
for subscriptions that are never charged dollars; shares divide dollars only.

Nothing here does I/O or reads a clock: :class:`BudgetBook` is the static
picture, :mod:`weft.budget.ledger` counts the spending against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from weft.config.schema import CodonBudget, ContainerBudget, Hank, Loop

__all__ = [
    "DEFAULT_ON_EXCEEDED",
    "BudgetBook",
    "Caps",
    "Container",
    "LimitKind",
    "OnExceeded",
    "ceiling_source",
]

OnExceeded = Literal["complete", "fail"]
LimitKind = Literal["dollars", "timeSeconds", "outputTokens", "contextTokens", "tokens"]

DEFAULT_ON_EXCEEDED: OnExceeded = "complete"
"""What a crossed budget does when its ``onExceeded`` is not set: the codon
keeps its work (completed) and what the budget covers stops. The reference
leaves the default open; ending with the work kept loses nothing paid for."""


@dataclass(frozen=True, slots=True)
class Caps:
    """Limits of one scope; None means no limit of that kind."""

    dollars: float | None = None
    seconds: float | None = None
    output_tokens: int | None = None
    context_tokens: int | None = None
    tokens: int | None = None
    """Every token of a run's or a loop's attempts (containers only)."""

    @property
    def any(self) -> bool:
        """Whether any limit is set."""
        return any(
            v is not None
            for v in (
                self.dollars, self.seconds, self.output_tokens, self.context_tokens, self.tokens,
            )
        )  # fmt: skip

    def as_dict(self) -> dict[str, float | int]:
        """The limits that are set, by their hank names."""
        out: dict[str, float | int] = {}
        for name, value in (
            ("maxDollars", self.dollars),
            ("maxTimeSeconds", self.seconds),
            ("maxOutputTokens", self.output_tokens),
            ("maxContextTokens", self.context_tokens),
            ("maxTokens", self.tokens),
        ):
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class Container:
    """A budget shared by children: the run's or a loop's."""

    scope: Literal["run", "loop"]
    scope_id: str
    """``run`` or the loop's id."""
    caps: Caps
    allocation: Literal["shared", "proportional", "proportional-strict"] = "shared"
    shares: Mapping[str, float] = field(default_factory=dict)
    """Child id -> fraction of ``caps.dollars`` (after an even split of the rest)."""
    on_exceeded: OnExceeded = DEFAULT_ON_EXCEEDED
    children: tuple[str, ...] = ()
    source: str = "hank"
    """Where the limits came from (for the messages): ``--max-cost``, ``overrides.budget``..."""

    @property
    def proportional(self) -> bool:
        """Whether the children draw fixed shares of the dollars."""
        return self.allocation != "shared" and self.caps.dollars is not None

    def share(self, child: str) -> float:
        """The fraction of the dollars ``child`` is given (proportional* only)."""
        if child in self.shares:
            return self.shares[child]
        rest = [c for c in self.children if c not in self.shares]
        left = max(0.0, 1.0 - sum(self.shares.values()))
        return left / len(rest) if rest else 0.0


@dataclass(frozen=True, slots=True)
class CodonCaps:
    """A codon's own caps (per attempt) and what crossing them does."""

    caps: Caps
    on_exceeded: OnExceeded = DEFAULT_ON_EXCEEDED


@dataclass(frozen=True, slots=True)
class BudgetBook:
    """Every budget of a hank, by scope."""

    run: Container
    loops: Mapping[str, Container] = field(default_factory=dict)
    codons: Mapping[str, CodonCaps] = field(default_factory=dict)
    """Base codon id (``draft``, not ``draft#2``) -> its caps."""

    @property
    def any(self) -> bool:
        """Whether any budget is set at all (no budget: nothing to watch)."""
        return (
            self.run.caps.any
            or any(c.caps.any for c in self.loops.values())
            or any(c.caps.any for c in self.codons.values())
        )

    @classmethod
    def from_hank(
        cls,
        hank: Hank,
        *,
        max_dollars: float | None = None,
        max_seconds: float | None = None,
        max_tokens: int | None = None,
        source: str = "hank",
    ) -> BudgetBook:
        """The budgets of ``hank`` under a run ceiling already resolved from
        the flags, the runtime config and ``overrides.budget`` (strictest wins)."""
        overrides = hank.overrides.budget if hank.overrides is not None else None
        top = tuple(item.id for item in hank.hank)
        # The hank's allocation, shares and onExceeded; the ceiling as resolved.
        run = dataclasses.replace(
            _container("run", "run", overrides, top, source),
            caps=Caps(dollars=max_dollars, seconds=max_seconds, tokens=max_tokens),
            source=source,
        )
        loops: dict[str, Container] = {}
        codons: dict[str, CodonCaps] = {}
        for item in hank.hank:
            members = item.codons if isinstance(item, Loop) else [item]
            if isinstance(item, Loop) and item.budget is not None:
                ids = tuple(c.id for c in item.codons)
                loops[item.id] = _container(
                    "loop", item.id, item.budget, ids, f"loop {item.id} budget"
                )
            for codon in members:
                if codon.budget is not None:
                    codons[codon.id] = _codon_caps(codon.budget)
        return cls(run=run, loops=loops, codons=codons)


def _container(
    scope: Literal["run", "loop"],
    scope_id: str,
    budget: ContainerBudget | None,
    children: tuple[str, ...],
    source: str,
) -> Container:
    if budget is None:
        return Container(scope=scope, scope_id=scope_id, caps=Caps(), children=children)
    return Container(
        scope=scope,
        scope_id=scope_id,
        caps=Caps(
            dollars=budget.max_dollars, seconds=budget.max_time_seconds, tokens=budget.max_tokens
        ),
        allocation=budget.allocation,
        shares=dict(budget.shares or {}),
        on_exceeded=budget.on_exceeded or DEFAULT_ON_EXCEEDED,
        children=children,
        source=source,
    )


def _codon_caps(budget: CodonBudget) -> CodonCaps:
    return CodonCaps(
        caps=Caps(
            dollars=budget.max_dollars,
            seconds=budget.max_time_seconds,
            output_tokens=budget.max_output_tokens,
            context_tokens=budget.max_context_tokens,
        ),
        on_exceeded=budget.on_exceeded or DEFAULT_ON_EXCEEDED,
    )


_CEILING_SETTINGS = ("budget.maxDollars", "budget.maxTimeSeconds", "budget.maxTokens")

_BUDGET_SOURCES = {
    "cli": ("--max-cost", "--max-time", "--max-tokens"),
    "environment": (
        "WEFT_RUNTIME_BUDGET_MAX_DOLLARS",
        "WEFT_RUNTIME_BUDGET_MAX_TIME_SECONDS",
        "WEFT_RUNTIME_BUDGET_MAX_TOKENS",
    ),
    "weft.json": (
        "weft.json budget.maxDollars",
        "weft.json budget.maxTimeSeconds",
        "weft.json budget.maxTokens",
    ),
}


def ceiling_source(sources: Mapping[str, str]) -> str:
    """Where the run's ceiling came from, named as the user set it."""
    names = []
    for i, key in enumerate(_CEILING_SETTINGS):
        layer = sources.get(key, "default")
        if layer in _BUDGET_SOURCES:
            names.append(_BUDGET_SOURCES[layer][i])
        elif layer == "hank overrides":
            names.append("overrides.budget")
    return ", ".join(dict.fromkeys(names)) or "overrides.budget"
