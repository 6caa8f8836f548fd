"""A changed hank on resume: the plan the resumed run follows, or why there is none.

An execution resumes with the hank as it is now when the part that already ran
is unchanged: the stored plan's top-level items (codons and loops) up to the
last one with a finished codon (completed or skipped, in any run) must open the
new hank, with the same ids, in the same order, with the same content. The
resumed run then keeps the stored entries of that prefix (a loop's iterations
included) and takes everything after it from the new hank: an added codon
runs, a removed one that had not run does not, an edited one that had not run
runs as edited.

A codon's ``model`` is not part of that content: a codon that ran keeps the
model it ran on (its stored entry), and a codon of the kept part that has not
finished (a loop's planned iterations) takes the new hank's model. So a new
``--model`` (:mod:`weft.runtime.execution.prepare` loads the hank with the model in
force) applies to every codon not yet run.

Anything else (a finished codon changed, removed, moved, or something inserted
before it) raises :class:`PrefixChangedError`, whose message says the exact
difference; the caller adds the choices.

:func:`replan` is pure (a state document and a hank in, a :class:`Replan`
out): :mod:`weft.runtime.execution.prepare` calls it to refuse before anything is
written, and :mod:`weft.runtime.run.recovery` to journal the change
(``PlanTrimmed`` then ``PlanExtended``, once the continuation run started).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weft.config.schema import Hank, Loop
from weft.errors import WeftError
from weft.events.transitions import PlanExtended, PlanTrimmed
from weft.plan import ExecutionPlan, PlannedCodon

FINISHED = frozenset({"completed", "skipped"})


class PrefixChangedError(WeftError):
    """The part of the hank that already ran changed: the run cannot follow the new hank."""


@dataclass(frozen=True, slots=True)
class Replan:
    """The plan a resumed run follows with the new hank.

    ``after`` is the last entry kept from the stored plan (None when nothing
    had finished: the run starts over with the new hank anyway); ``dropped``
    the stored entries that leave the plan; ``inserted`` the new hank's entries
    that follow ``after``.
    """

    plan: ExecutionPlan
    after: str | None
    dropped: tuple[str, ...]
    inserted: tuple[PlannedCodon, ...]

    @property
    def changed(self) -> bool:
        """Whether the stored plan's entries change."""
        return bool(self.dropped or self.inserted)

    def transitions(self, run_id: str) -> list[PlanTrimmed | PlanExtended]:
        """What records the change in the state, while ``run_id`` runs (none without a
        kept entry to extend after: such a run is a fresh one, carrying its plan)."""
        if self.after is None or not self.changed:
            return []
        out: list[PlanTrimmed | PlanExtended] = []
        if self.dropped:
            out.append(PlanTrimmed(run_id=run_id, codon_ids=list(self.dropped)))
        if self.inserted:
            out.append(
                PlanExtended(
                    run_id=run_id,
                    after_codon_id=self.after,
                    entries=[e.to_entry() for e in self.inserted],
                )
            )
        return out


def _item_of(entry: Mapping[str, Any]) -> str:
    loop = (entry.get("loopContext") or {}).get("loopId")
    return f"loop {loop}" if loop else str(entry.get("codonId"))


def _item_of_planned(entry: PlannedCodon) -> str:
    context = entry.loop_context
    return f"loop {context.loop_id}" if context is not None else entry.codon_id


def finished_ids(state: Mapping[str, Any]) -> set[str]:
    """The runtime ids of every codon that finished in a run of ``state``, but
    not one a rollback superseded: it runs again, so it may change like a codon
    that never ran (a fork's rolled-back tail too). Without a rollback, every
    finished record counts, whatever happened to the runs (crashes included)."""
    runs = sorted(state.get("runs") or (), key=lambda r: str(r.get("startTime", "")))
    superseded: set[tuple[int, int]] = set()
    for i, run in enumerate(runs):
        conditions = run.get("startingConditions") or {}
        if conditions.get("reason") != "rollback":
            continue
        source = conditions.get("source") or {}
        target = next(
            (k for k, r in enumerate(runs[:i]) if r.get("runId") == source.get("runId")), None
        )
        if target is None:
            continue
        records = runs[target].get("codons") or ()
        after = source.get("afterCodon")
        kept = max((n for n, r in enumerate(records) if r.get("codonId") == after), default=-1)
        superseded |= {(target, n) for n in range(kept + 1, len(records))}
        for k in range(target + 1, i):
            superseded |= {(k, n) for n in range(len(runs[k].get("codons") or ()))}
    return {
        str(record.get("codonId"))
        for k, run in enumerate(runs)
        for n, record in enumerate(run.get("codons") or ())
        if record.get("status") in FINISHED and (k, n) not in superseded
    }


def replan(state: Mapping[str, Any], hank: Hank) -> Replan:
    """The plan that resumes the execution of ``state`` with ``hank`` (module docstring);
    raises :class:`PrefixChangedError` when the part that ran changed."""
    stored: Sequence[Mapping[str, Any]] = state.get("executionPlan") or ()
    finished = finished_ids(state)
    items: list[str] = []
    last_ran = -1  # the index in ``items`` of the last item with a finished codon
    for entry in stored:
        item = _item_of(entry)
        if not items or items[-1] != item:
            items.append(item)
        if entry.get("codonId") in finished:
            last_ran = len(items) - 1
    prefix = items[: last_ran + 1]
    fresh = ExecutionPlan.from_hank(hank)
    now = [f"loop {item.id}" if isinstance(item, Loop) else item.id for item in hank.hank]
    if now[: len(prefix)] != prefix:
        raise PrefixChangedError(_difference(prefix, now))
    kept_raw = [e for e in stored if _item_of(e) in prefix]
    models = _check_content(kept_raw, fresh, finished)
    kept = ExecutionPlan.from_state(_with_models(kept_raw, models, finished), hank).entries
    tail = tuple(e for e in fresh if _item_of_planned(e) not in prefix)
    stored_tail = [e for e in stored if _item_of(e) not in prefix]
    same = [dict(e) for e in stored_tail] == [e.to_state() for e in tail]
    return Replan(
        plan=ExecutionPlan([*kept, *tail], fresh.loops),
        after=kept[-1].codon_id if kept else None,
        dropped=() if same else tuple(str(e.get("codonId")) for e in stored_tail),
        inserted=() if same else tail,
    )


def _difference(prefix: list[str], now: list[str]) -> str:
    """What changed in the part that ran, and both orders: ``prefix`` (the items that
    ran, up to the last one) and ``now`` (the new hank's items)."""
    gone = [item for item in prefix if item not in now]
    what = (
        f"removed {', '.join(gone)}, which already ran"
        if gone
        else f"the hank no longer starts with what already ran ({', '.join(prefix)})"
    )
    return f"{what} (ran: {', '.join(prefix)}; now: {', '.join(now) or 'nothing'})"


_Key = tuple[str | None, str]
"""A codon of the hank: (its loop's id or None, its id)."""


def _key(entry: Mapping[str, Any]) -> _Key:
    codon = entry.get("codon") or {}
    return ((entry.get("loopContext") or {}).get("loopId"), str(codon.get("id")))


def _without_model(codon: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if codon is None else {k: v for k, v in codon.items() if k != "model"}


def _check_content(
    kept: Sequence[Mapping[str, Any]], fresh: ExecutionPlan, finished: set[str]
) -> dict[_Key, Any]:
    """Every kept stored entry is as the new hank writes it, its model aside (a
    loop's later iterations compared with the same codon of iteration 0); returns
    the new hank's model of each codon."""
    by_codon: dict[_Key, dict[str, Any]] = {}
    for planned in fresh:
        context = planned.loop_context
        key = (None if context is None else context.loop_id, planned.codon.id)
        by_codon[key] = planned.to_state()["codon"]
    changed: list[str] = []
    for entry in kept:
        codon = entry.get("codon") or {}
        if _without_model(by_codon.get(_key(entry))) != _without_model(codon):
            name = str(entry.get("codonId"))
            if name not in changed:
                changed.append(name)
    if changed:
        ran = [name for name in changed if name in finished]
        what = ", ".join(ran or changed)
        raise PrefixChangedError(
            f"changed {what}, which {'already ran' if ran else 'is in the part that ran'}"
        )
    return {key: codon.get("model") for key, codon in by_codon.items()}


def _with_models(
    kept: Sequence[Mapping[str, Any]], models: Mapping[_Key, Any], finished: set[str]
) -> list[Mapping[str, Any]]:
    """``kept`` with each entry that has not finished on the new hank's model."""
    out: list[Mapping[str, Any]] = []
    for entry in kept:
        codon = entry.get("codon") or {}
        model = models.get(_key(entry))
        if entry.get("codonId") in finished or model is None or codon.get("model") == model:
            out.append(entry)
        else:
            out.append({**entry, "codon": {**codon, "model": model}})
    return out
