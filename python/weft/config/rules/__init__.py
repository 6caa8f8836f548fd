"""The checks a schema cannot express (reference hankweave §3.15).

They run on the parsed document after the structural walk, in the same
pass, and look only at values of the right type, so a hank with a typo in
one codon still gets every other codon checked: duplicate ids, the rules of
``continue-previous`` and of loops, file references, sentinel configs,
budgets, requirements, model routing, and the warnings.

The rules are grouped by what they look at, one module each:
:mod:`~weft.config.rules.root`, :mod:`~weft.config.rules.codon`,
:mod:`~weft.config.rules.paths` (paths and commands),
:mod:`~weft.config.rules.sentinels`, :mod:`~weft.config.rules.loops` (and
budgets), :mod:`~weft.config.rules.sequence` (across codons);
:mod:`~weft.config.rules.context` holds what they share.
"""

from __future__ import annotations

from typing import Any

from weft.config.rules.codon import check_codon
from weft.config.rules.context import RuleContext, by_id, get_dict, get_list, slots_of
from weft.config.rules.loops import check_container_budget, check_loop
from weft.config.rules.root import check_root
from weft.config.rules.sentinels import load_sentinel_file
from weft.config.rules.sequence import check_continuations, check_ids

__all__ = ["RuleContext", "check_rules", "load_sentinel_file"]


def check_rules(doc: Any, ctx: RuleContext) -> None:
    """Runs every rule on the document ``doc`` (a parsed hank file)."""
    if not isinstance(doc, dict):
        return
    sink = ctx.sink
    check_root(doc, ctx)
    slots = list(slots_of(doc))
    top_ids: list[str] = []
    for i, item in enumerate(get_list(doc, "hank")):
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            top_ids.append(item["id"])
        if isinstance(item, dict) and item.get("type") == "loop":
            check_loop(item, ("hank", i), ctx)
    for slot in slots:
        check_codon(slot, ctx)
    check_ids(doc, sink)
    check_continuations(slots, sink)
    budget = get_dict(get_dict(doc, "overrides"), "budget")
    if budget is not None:
        children = by_id(get_list(doc, "hank"))
        check_container_budget(budget, ("overrides", "budget"), children, sink)
