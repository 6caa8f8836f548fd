"""What a run of a hank will cost and take, from the executions of it this machine already ran.

``weft run --dry-run`` prints it, and ``weft run`` with a dollar ceiling refuses up
front a run whose expected cost already exceeds the ceiling. The pieces:

* :func:`read_history`: the I/O. The executions of the hank under a base directory
  (``execution-meta.json`` names the hank, as ``weft ls --hank`` matches it), each
  read from its ``state.json`` snapshot only (no journal, no store, no lock: safe
  beside a live run, one small read per execution). Every codon record becomes a
  :class:`Attempt` carrying its cost, wall time, tokens and the model its
  execution's plan gave the codon. A fork's copy of its source's records is
  counted once (records are keyed by run, codon and start).
* :func:`forecast`: the pure part. For every entry of the plan
  (:meth:`weft.plan.ExecutionPlan.from_hank`), one sample per earlier execution
  that completed the codon (every attempt of it in that execution added up, since
  a retry is spent too; a loop's codon: every iteration); of the samples on the
  codon's planned model, the median and the 90th percentile of cost and time.
  When the history ran the codon only on other models, the cost is the history's
  median (and 90th-percentile) tokens priced for the new model with the pricing
  table (:mod:`weft.agents.pricing`), and the time is the other models'. Without
  any history, or a new model without a price, the codon is unknown.
* :class:`Forecast`: the per-codon rows, the totals (sum of medians, sum of 90th
  percentiles, over the codons that are known) and how many executions it rests
  on; :meth:`Forecast.to_json` is ``weft run --dry-run --json``.

Nothing here writes; the forecast is an estimate, never a limit (the run's budget
ceilings are :mod:`weft.budget`'s).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from weft.agents.events import Tokens
from weft.agents.pricing import PricingTable
from weft.clock import ms_from_iso
from weft.plan import ExecutionPlan, PlannedCodon
from weft.runtime.execution.layout import META_FILE, WEFT_DIR

STATE_FILE = "state.json"

Basis: TypeAlias = Literal["history", "tokens", "unknown", "skipped"]
"""Where a codon's figures come from: its own records on the same model, the
records' tokens priced for a new model, nothing, or the run skips it."""

_TOKEN_FIELDS = (
    ("input", "inputTokens"),
    ("output", "outputTokens"),
    ("cache_creation", "cacheCreationTokens"),
    ("cache_read", "cacheReadTokens"),
)
""":class:`~weft.agents.events.Tokens` fields and their names in a codon record."""


# --------------------------------------------------------------------------- history


@dataclass(frozen=True, slots=True)
class Attempt:
    """One codon record of an earlier execution."""

    execution: str
    """The execution's folder name."""
    codon_id: str
    """The runtime id (``c``, or ``c#2`` for a loop's codon in iteration 2)."""
    model: str | None
    """The model the execution's plan gave the codon (None: the plan does not say)."""
    completed: bool
    cost: float
    """Dollars: ``finalCost`` of a completed record, ``partialCost`` of a failed one."""
    seconds: float | None
    """Wall time from ``startTime`` to ``endTime`` (None: not ended)."""
    tokens: Tokens | None
    """The record's tokens (final, else partial); None when it reports none."""


@dataclass(frozen=True, slots=True)
class History:
    """The earlier executions of one hank and their codon records."""

    executions: tuple[str, ...]
    """Every execution of the hank that was read, by folder name."""
    attempts: tuple[Attempt, ...]


def read_history(base_dir: Path, hank_path: Path) -> History:
    """The executions of ``hank_path`` directly under ``base_dir`` (the managed root)."""
    wanted = str(hank_path.resolve())
    try:
        children = sorted(os.scandir(base_dir), key=lambda e: e.name)
    except OSError:
        return History((), ())
    executions: list[str] = []
    attempts: list[Attempt] = []
    seen: set[tuple[str, str, str]] = set()
    for child in children:
        weft_dir = Path(child.path) / WEFT_DIR
        meta = _json(weft_dir / META_FILE)
        if meta is None or meta.get("hankPath") != wanted:
            continue
        state = _json(weft_dir / STATE_FILE)
        if state is None:
            continue
        executions.append(child.name)
        attempts.extend(_attempts(child.name, state, seen))
    return History(tuple(executions), tuple(attempts))


def _attempts(
    execution: str, state: Mapping[str, Any], seen: set[tuple[str, str, str]]
) -> Iterable[Attempt]:
    models = _planned_models(state.get("executionPlan"))
    for run in _dicts(state.get("runs")):
        run_id = str(run.get("runId"))
        for record in _dicts(run.get("codons")):
            codon_id = str(record.get("codonId"))
            key = (run_id, codon_id, str(record.get("startTime")))
            if key in seen:  # a fork's copy of its source's record
                continue
            seen.add(key)
            status = record.get("status")
            if status not in ("completed", "failed"):
                continue  # skipped, or still running: nothing to learn from
            completed = status == "completed"
            cost = record.get("finalCost" if completed else "partialCost")
            started, ended = (
                ms_from_iso(record.get("startTime")),
                ms_from_iso(record.get("endTime")),
            )
            yield Attempt(
                execution=execution,
                codon_id=codon_id,
                model=models.get(codon_id) or models.get(codon_id.split("#", 1)[0]),
                completed=completed,
                cost=float(cost) if isinstance(cost, int | float) else 0.0,
                seconds=None if started is None or ended is None else (ended - started) / 1000,
                tokens=_tokens(record.get("finalTokens") or record.get("partialTokens")),
            )


def _planned_models(plan: object) -> dict[str, str]:
    """Runtime codon id (and plain codon id) -> the model the stored plan gives it."""
    models: dict[str, str] = {}
    for entry in _dicts(plan):
        codon = entry.get("codon")
        model = codon.get("model") if isinstance(codon, dict) else None
        if isinstance(model, str):
            codon_id = str(entry.get("codonId"))
            models[codon_id] = model
            models.setdefault(codon_id.split("#", 1)[0], model)
    return models


def _tokens(raw: object) -> Tokens | None:
    if not isinstance(raw, dict):
        return None
    counts = {field: raw.get(key) for field, key in _TOKEN_FIELDS}
    if not any(isinstance(v, int) and v > 0 for v in counts.values()):
        return None
    return Tokens(**{f: int(v) if isinstance(v, int | float) else 0 for f, v in counts.items()})


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# --------------------------------------------------------------------------- forecast


@dataclass(frozen=True, slots=True)
class Spread:
    """The median and the 90th percentile of a figure."""

    median: float
    p90: float

    def to_json(self) -> dict[str, float]:
        return {"median": round(self.median, 9), "p90": round(self.p90, 9)}


@dataclass(frozen=True, slots=True)
class CodonForecast:
    """One plan entry's expected cost and time."""

    codon_id: str
    model: str
    basis: Basis
    cost: Spread | None
    """Dollars (None: unknown)."""
    seconds: Spread | None
    """Wall time (None: unknown)."""
    samples: int
    """The earlier executions the figures rest on."""
    note: str = ""
    """Why the basis is what it is (which models the history ran it on)."""
    loop: bool = False
    """A loop's codon: the figures are every iteration of it together."""

    def to_json(self) -> dict[str, Any]:
        return {
            "codonId": self.codon_id,
            "model": self.model,
            "basis": self.basis,
            "cost": None if self.cost is None else self.cost.to_json(),
            "seconds": None if self.seconds is None else self.seconds.to_json(),
            "samples": self.samples,
            "loop": self.loop,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class Forecast:
    """The plan's expected cost and time."""

    codons: tuple[CodonForecast, ...]
    executions: int
    """The earlier executions of the hank read (the history)."""

    @property
    def unknown(self) -> tuple[str, ...]:
        """The codons whose cost is unknown (the totals leave them out)."""
        return tuple(c.codon_id for c in self.codons if c.basis != "skipped" and c.cost is None)

    @property
    def cost(self) -> Spread | None:
        """Sum of the medians and of the 90th percentiles of the known costs (None: none known)."""
        return _total([c.cost for c in self.codons])

    @property
    def seconds(self) -> Spread | None:
        """Sum of the medians and of the 90th percentiles of the known times."""
        return _total([c.seconds for c in self.codons])

    def to_json(self) -> dict[str, Any]:
        cost, seconds = self.cost, self.seconds
        return {
            "executions": self.executions,
            "codons": [c.to_json() for c in self.codons],
            "total": {
                "cost": None if cost is None else cost.to_json(),
                "seconds": None if seconds is None else seconds.to_json(),
                "unknown": list(self.unknown),
            },
        }


def _total(spreads: Sequence[Spread | None]) -> Spread | None:
    known = [s for s in spreads if s is not None]
    if not known:
        return None
    return Spread(math.fsum(s.median for s in known), math.fsum(s.p90 for s in known))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated between the two
    nearest ranks (so it always lies within the values' range)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def spread(values: Sequence[float]) -> Spread:
    """The median and 90th percentile of ``values`` (at least one)."""
    return Spread(percentile(values, 0.5), percentile(values, 0.9))


@dataclass(frozen=True, slots=True)
class _Sample:
    """One execution's spend on one codon (every attempt, every iteration)."""

    model: str | None
    cost: float
    seconds: float | None
    tokens: Tokens | None


def forecast(
    plan: ExecutionPlan,
    history: History,
    table: PricingTable,
    *,
    skip: Collection[str] = (),
) -> Forecast:
    """The expected cost and time of every entry of ``plan`` from ``history``;
    ``table`` prices tokens for a model the history did not run the codon on;
    ``skip``: codon ids the run skips (their rows say so and count for nothing)."""
    by_codon: dict[str, list[Attempt]] = {}
    for attempt in history.attempts:
        by_codon.setdefault(attempt.codon_id.split("#", 1)[0], []).append(attempt)
    rows = []
    for entry in plan.entries:
        if entry.codon.id in skip:
            rows.append(CodonForecast(entry.codon_id, entry.codon.model, "skipped", None, None, 0))
            continue
        rows.append(_codon(entry, by_codon.get(entry.codon.id, []), table))
    return Forecast(tuple(rows), len(history.executions))


def _codon(entry: PlannedCodon, attempts: list[Attempt], table: PricingTable) -> CodonForecast:
    loop = entry.loop_context is not None
    # A top-level codon matches its own id; a loop's codon every iteration of it.
    mine = attempts if loop else [a for a in attempts if a.codon_id == entry.codon_id]
    samples = _samples(mine)
    model = entry.codon.model
    same = [s for s in samples if s.model == model]
    if same:
        return CodonForecast(
            entry.codon_id,
            model,
            "history",
            spread([s.cost for s in same]),
            _seconds(same),
            len(same),
            loop=loop,
        )
    if not samples:
        return CodonForecast(
            entry.codon_id, model, "unknown", None, None, 0, "no earlier execution ran it", loop
        )
    others = ", ".join(sorted({s.model or "an unknown model" for s in samples}))
    counted = [s.tokens for s in samples if s.tokens is not None]
    median, p90 = (
        (None, None)
        if not counted
        else (
            table.cost_usd(model, _token_quantile(counted, 0.5)),
            table.cost_usd(model, _token_quantile(counted, 0.9)),
        )
    )
    if median is None or p90 is None:
        why = "its records have no tokens" if not counted else f"{model} has no price"
        return CodonForecast(
            entry.codon_id,
            model,
            "unknown",
            None,
            _seconds(samples),
            len(samples),
            f"ran on {others}; {why}",
            loop,
        )
    return CodonForecast(
        entry.codon_id,
        model,
        "tokens",
        Spread(median, p90),
        _seconds(samples),
        len(samples),
        f"tokens on {others} priced for {model}",
        loop,
    )


def _samples(attempts: list[Attempt]) -> list[_Sample]:
    """One sample per execution that completed the codon."""
    grouped: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        grouped.setdefault(attempt.execution, []).append(attempt)
    samples = []
    for group in grouped.values():
        done = [a for a in group if a.completed]
        if not done:
            continue  # it never finished there: no measure of what finishing takes
        seconds = [a.seconds for a in group if a.seconds is not None]
        tokens = [a.tokens for a in group if a.tokens is not None]
        samples.append(
            _Sample(
                model=done[-1].model,
                cost=math.fsum(a.cost for a in group),
                seconds=math.fsum(seconds) if seconds else None,
                tokens=_token_sum(tokens) if tokens else None,
            )
        )
    return samples


def _seconds(samples: list[_Sample]) -> Spread | None:
    times = [s.seconds for s in samples if s.seconds is not None]
    return spread(times) if times else None


def _token_sum(tokens: list[Tokens]) -> Tokens:
    return Tokens(**{f: sum(getattr(t, f) for t in tokens) for f, _ in _TOKEN_FIELDS})


def _token_quantile(tokens: list[Tokens], q: float) -> Tokens:
    """Each kind of token at its own ``q`` quantile (rounded to whole tokens)."""
    return Tokens(
        **{f: round(percentile([getattr(t, f) for t in tokens], q)) for f, _ in _TOKEN_FIELDS}
    )
