"""Where a changed hank first differs from what an execution ran: the fork
point of ``weft run --reuse``.

A codon that finished in the execution can be reused when its inputs are
equal: its resolved entry in the stored plan (prompt, settings, rig, files:
everything the hank says of it) and its model, compared with the new hank's;
its work tree is then equal too, since every codon before it was reused. The
first top-level item (codon or loop) that differs, or that the new hank
removed, moved or inserted before, is where the fork starts; the words say
which input differs. Pure: a state document and a hank in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weft.config.schema import Hank
from weft.plan import ExecutionPlan
from weft.runtime.run.replan import finished_ids

__all__ = ["ForkPoint", "fork_point"]


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Fork at ``codon_id`` (the first codon of the first item that differs)."""

    codon_id: str
    reused: tuple[str, ...]
    """The codons kept from the execution, in order."""
    why: str
    """Which input of ``codon_id`` differs, in words."""


def _item(entry: Mapping[str, Any]) -> str:
    loop = (entry.get("loopContext") or {}).get("loopId")
    return f"loop {loop}" if loop else str(entry.get("codonId"))


def _groups(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    out: list[tuple[str, list[Mapping[str, Any]]]] = []
    for entry in entries:
        item = _item(entry)
        if not out or out[-1][0] != item:
            out.append((item, []))
        out[-1][1].append(entry)
    return out


def _what_differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    if old.get("model") != new.get("model"):
        return f"its model changed ({old.get('model')} -> {new.get('model')})"
    keys = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
    prompts = [k for k in keys if k.startswith("prompt")]
    if prompts:
        return "its prompt changed"
    return f"its settings changed ({', '.join(keys)})"


def fork_point(state: Mapping[str, Any], hank: Hank) -> ForkPoint | None:
    """Where ``hank`` first differs from what the execution of ``state`` ran to
    the end; None when every codon that finished is unchanged (a plain resume
    follows the hank) or nothing finished."""
    finished = finished_ids(state)
    stored = _groups(state.get("executionPlan") or ())
    fresh = _groups([e.to_state() for e in ExecutionPlan.from_hank(hank)])
    reused: list[str] = []
    for index, (item, entries) in enumerate(stored):
        ran = [e for e in entries if e.get("codonId") in finished]
        if not ran:
            return None  # what follows has not run: a resume takes the new hank as it is
        first = str(entries[0].get("codonId"))
        if index >= len(fresh) or fresh[index][0] != item:
            now = fresh[index][0] if index < len(fresh) else "nothing"
            return ForkPoint(first, tuple(reused), f"the hank has {now} where {item} ran")
        new_entries = fresh[index][1]
        # A loop's iterations share one codon list: its first iteration says it.
        for old, new in zip(entries, new_entries, strict=False):
            if old.get("codon") != new.get("codon"):
                why = _what_differs(old.get("codon") or {}, new.get("codon") or {})
                return ForkPoint(str(old.get("codonId")), tuple(reused), why)
            if old.get("codonId") in finished:
                reused.append(str(old.get("codonId")))
        if len(ran) < len(entries):
            return None  # a loop that had not finished: a resume continues it
    return None
