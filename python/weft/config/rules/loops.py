"""The rules of loops and of container budgets (the hank's and each loop's):
context loops, allocation and shares, children whose caps exceed their container.
"""

from __future__ import annotations

import math
from typing import Any

from weft.config.hints import did_you_mean
from weft.config.problems import JsonPath
from weft.config.rules.context import RuleContext, by_id, get_dict, get_list, get_num
from weft.config.rules.paths import check_archive_paths
from weft.config.walk import Sink

__all__ = ["check_container_budget", "check_loop"]


def check_loop(loop: dict[str, Any], path: JsonPath, ctx: RuleContext) -> None:
    """A loop: no fresh codon in a contextExceeded loop, archive paths, its budget."""
    sink = ctx.sink
    terminate = get_dict(loop, "terminateOn")
    codons = get_list(loop, "codons")
    if terminate is not None and terminate.get("type") == "contextExceeded":
        for j, codon in enumerate(codons):
            if isinstance(codon, dict) and codon.get("continuationMode") == "fresh":
                sink.add(
                    (*path, "codons", j, "continuationMode"),
                    "fresh_in_context_loop",
                    "a contextExceeded loop runs one session until its context is full, "
                    "so its codons cannot start fresh",
                    hint='use "continue-previous", or end the loop with iterationLimit',
                )
    check_archive_paths(loop, path, sink)
    budget = get_dict(loop, "budget")
    if budget is not None:
        children = by_id(codons)
        check_container_budget(budget, (*path, "budget"), children, sink)


def check_container_budget(
    budget: dict[str, Any], path: JsonPath, children: dict[str, dict[str, Any]], sink: Sink
) -> None:
    """A container's budget against its own settings and its children's caps."""
    allocation = budget.get("allocation", "shared")
    shares = get_dict(budget, "shares")
    max_dollars = get_num(budget, "maxDollars")
    if allocation in ("proportional", "proportional-strict") and max_dollars is None:
        sink.add(
            (*path, "allocation"),
            "budget",
            f'allocation "{allocation}" divides a dollar budget, and maxDollars is not set',
            hint='add "maxDollars" or use allocation "shared"',
        )
    if shares is not None:
        if allocation == "shared":
            sink.add(
                (*path, "shares"),
                "budget",
                'shares need allocation "proportional" or "proportional-strict"',
                hint='set "allocation": "proportional"',
            )
        numbers = [v for v in shares.values() if isinstance(v, int | float)]
        total = math.fsum(numbers)
        if total > 1.0 + 1e-9:
            sink.add((*path, "shares"), "budget", f"shares add up to {total:g}, more than 1")
        ids = list(children)
        for key in shares:
            if key not in children:
                sink.add(
                    (*path, "shares", key),
                    "budget",
                    f'"{key}" is not the id of a codon or loop here',
                    hint=did_you_mean(key, ids) or f"ids here: {', '.join(ids)}",
                )
    container_time = get_num(budget, "maxTimeSeconds")
    for child_id, child in children.items():
        child_budget = get_dict(child, "budget")
        if child_budget is None:
            continue
        child_dollars = get_num(child_budget, "maxDollars")
        if max_dollars is not None and child_dollars is not None and child_dollars > max_dollars:
            sink.warn(
                (*path, "maxDollars"),
                "budget",
                f'"{child_id}" has its own cap of ${child_dollars:g}, above this budget '
                f"(${max_dollars:g})",
            )
        child_time = get_num(child_budget, "maxTimeSeconds")
        if container_time is not None and child_time is not None and child_time > container_time:
            sink.warn(
                (*path, "maxTimeSeconds"),
                "budget",
                f'"{child_id}" has its own time cap of {child_time:g}s, above this budget '
                f"({container_time:g}s)",
            )
