"""``weft validate [hank] [--json]``: every check of a hank file, without running it.

Prints a tree of the hank (codons, loops, models and their harnesses, rig
operations, sentinels), then the warnings and the errors, each with its
file, JSON path, codon or loop, and a hint. Exits 0 when the hank is valid
(warnings allowed) and 2 when it is not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from weft.agents.harness import route
from weft.budget.limits import BudgetBook, ceiling_source
from weft.budget.table import budget_table, budget_warnings, render_table
from weft.bundle import hank_argument
from weft.cli.colour import paint, wants_colour
from weft.config import HankReport, LoadedHank, validate_hank
from weft.config.preflight import agent_cli_problems, document_cli_problems
from weft.config.runtime import resolve_runtime_config
from weft.config.schema import Codon as CodonT
from weft.config.schema import (
    CommandOp,
    ContextExceeded,
    Loop,
    SentinelConfig,
)
from weft.errors import ConfigError
from weft.terminal import plural, printable


def register(commands: Any) -> None:
    """Adds the ``validate`` command."""
    parser = commands.add_parser(
        "validate",
        help="check a hank file and show its structure",
        description="Check a hank file (schema, references, continuation and loop rules, "
        "sentinels, budgets, requirements, models) and print its structure. "
        "Exit 0 when valid, 2 when not.",
    )
    parser.add_argument(
        "hank",
        nargs="?",
        default=".",
        type=Path,
        help="a hank.json file, a directory holding one, or a .hank bundle (default: .)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "-m",
        "--model",
        default=None,
        help="check as if every codon used this model (like a run's --model)",
    )
    parser.add_argument(
        "--sentinel-model",
        metavar="MODEL",
        default=None,
        help="check as if every sentinel used this provider/model (like a run's "
        "--sentinel-model; fake/haiku needs no key)",
    )
    parser.add_argument(
        "--no-environment",
        action="store_true",
        help="skip the checks of this machine (agent CLIs installed, the requirements' "
        "variables and tools): for a hank that runs elsewhere",
    )
    parser.set_defaults(run=run)


def _codon_tree(codon: CodonT, loaded: LoadedHank) -> dict[str, Any]:
    target = route(codon.model)
    rig: list[dict[str, Any]] = []
    for op in codon.rig_setup:
        if isinstance(op, CommandOp):
            rig.append(
                {
                    "type": "command",
                    "run": op.command.run,
                    "workingDirectory": op.command.working_directory,
                    "allowFailure": op.allow_failure,
                }
            )
        else:
            rig.append(
                {
                    "type": "copy",
                    "from": op.copy.from_,
                    "to": op.copy.to,
                    "allowFailure": op.allow_failure,
                }
            )
    sentinels: list[dict[str, Any]] = []
    for entry in codon.sentinels:
        config = entry.sentinel_config
        if isinstance(config, SentinelConfig):
            sentinels.append({"id": config.id, "source": "inline", "model": config.model})
        else:
            loaded_config = loaded.sentinel_configs.get(loaded.resolve(config))
            sentinels.append(
                {
                    "id": loaded_config.id if loaded_config else None,
                    "source": config,
                    "model": loaded_config.model if loaded_config else None,
                    "loaded": loaded_config is not None,
                }
            )
    return {
        "kind": "codon",
        "id": codon.id,
        "name": codon.name,
        "continuationMode": codon.continuation_mode,
        "model": codon.model,
        "harness": target.harness,
        "fake": target.fake,
        "rigSetup": rig,
        "sentinels": sentinels,
        "onFailure": codon.on_failure,
    }


def describe(loaded: LoadedHank) -> dict[str, Any]:
    """The structure of a valid hank as JSON-ready data."""
    items: list[dict[str, Any]] = []
    for item in loaded.hank.hank:
        if isinstance(item, Loop):
            terminate = item.terminate_on
            items.append(
                {
                    "kind": "loop",
                    "id": item.id,
                    "name": item.name,
                    "terminateOn": (
                        {"type": "contextExceeded"}
                        if isinstance(terminate, ContextExceeded)
                        else {"type": "iterationLimit", "limit": terminate.limit}
                    ),
                    "codons": [_codon_tree(c, loaded) for c in item.codons],
                }
            )
        else:
            items.append(_codon_tree(item, loaded))
    meta = loaded.hank.meta
    return {
        "name": meta.name if meta else None,
        "version": meta.version if meta else None,
        "items": items,
    }


def _codon_lines(codon: dict[str, Any], prefix: str) -> list[str]:
    model = codon["model"] + f" ({codon['harness']}{', fake agent' if codon['fake'] else ''})"
    lines = [f'codon {codon["id"]} "{codon["name"]}"  {codon["continuationMode"]}  {model}']
    details: list[str] = []
    for op in codon["rigSetup"]:
        tail = "  (allowFailure)" if op["allowFailure"] else ""
        if op["type"] == "copy":
            details.append(f"rig copy {op['from']} -> {op['to']}{tail}")
        else:
            where = "" if op["workingDirectory"] == "project" else f" in {op['workingDirectory']}"
            details.append(f"rig command {json.dumps(op['run'])}{where}{tail}")
    for s in codon["sentinels"]:
        ident = s["id"] or "(not loaded)"
        details.append(f"sentinel {ident} <- {s['source']}")
    for i, d in enumerate(details):
        branch = "└── " if i == len(details) - 1 else "├── "
        lines.append(f"{prefix}{branch}{d}")
    return lines


def render_tree(tree: dict[str, Any], file: str) -> str:
    """The structure of a hank as an indented tree."""
    title = f'hank "{tree["name"]}" {tree["version"]}' if tree["name"] else "hank"
    lines = [f"{title}  ({file})"]
    items = tree["items"]
    for i, item in enumerate(items):
        last = i == len(items) - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        if item["kind"] == "loop":
            term = item["terminateOn"]
            how = (
                "until context exceeded"
                if term["type"] == "contextExceeded"
                else (f"iterationLimit {term['limit']}")
            )
            lines.append(f'{branch}loop {item["id"]} "{item["name"]}"  {how}')
            for j, codon in enumerate(item["codons"]):
                inner_last = j == len(item["codons"]) - 1
                b2, c2 = ("└── ", "    ") if inner_last else ("├── ", "│   ")
                sub = _codon_lines(codon, cont + c2)
                lines.append(cont + b2 + sub[0])
                lines.extend(sub[1:])
        else:
            sub = _codon_lines(item, cont)
            lines.append(branch + sub[0])
            lines.extend(sub[1:])
    return "\n".join(lines)


def book_of(loaded: LoadedHank) -> BudgetBook:
    """The hank's budgets under the run ceiling its overrides and the
    ``WEFT_RUNTIME_BUDGET_*`` variables set (what a run without flags gets)."""
    try:
        resolved = resolve_runtime_config(hank=loaded.hank)
    except ConfigError:
        # A bad variable is reported by the run itself; the hank's own budget still shows.
        budget = loaded.hank.overrides.budget if loaded.hank.overrides else None
        return BudgetBook.from_hank(
            loaded.hank,
            max_dollars=budget.max_dollars if budget else None,
            max_seconds=budget.max_time_seconds if budget else None,
            max_tokens=budget.max_tokens if budget else None,
        )
    settings = resolved.config.budget
    return BudgetBook.from_hank(
        loaded.hank,
        max_dollars=settings.max_dollars,
        max_seconds=settings.max_time_seconds,
        max_tokens=settings.max_tokens,
        source=ceiling_source(resolved.sources),
    )


def _budgets(loaded: LoadedHank) -> dict[str, Any]:
    book = book_of(loaded)
    rows = budget_table(book, loaded.hank) if book.any else []
    return {
        "table": [
            {
                "scope": r.scope,
                **r.caps.as_dict(),
                "allocation": r.allocation,
                "allotted": r.allotted,
                "onExceeded": r.on_exceeded,
            }
            for r in rows
        ],
        "warnings": [
            {"code": w.code, "path": w.path, "message": w.message}
            for w in budget_warnings(book, loaded.hank)
        ],
    }


def to_json(report: HankReport) -> dict[str, Any]:
    """The whole report as JSON-ready data."""
    return {
        "file": report.file,
        "valid": report.valid and not report.errors,
        "errors": [p.to_json() for p in report.errors],
        "warnings": [p.to_json() for p in report.warnings],
        "tree": describe(report.loaded) if report.loaded is not None else None,
        "budgets": _budgets(report.loaded) if report.loaded is not None else None,
    }


def render(report: HankReport, *, colour: bool = False) -> str:
    """The whole report as text (printable: control characters escaped), the
    verdict and the problem counts coloured when ``colour``."""
    return "\n".join(_paint_line(printable(line), colour) for line in _render(report).split("\n"))


def _paint_line(line: str, colour: bool) -> str:
    for prefix, style in (("valid: ", "green"), ("invalid: ", "red")):
        if line.startswith(prefix):
            return paint(line, style, on=colour)
    if line.endswith(":") and line.split(" ", 1)[0].isdigit():
        return paint(line, "red" if "error" in line else "yellow", on=colour)
    return line


def _render(report: HankReport) -> str:
    parts: list[str] = []
    if report.loaded is not None:
        parts.append(render_tree(describe(report.loaded), report.file))
        book = book_of(report.loaded)
        if book.any:
            parts.append("budgets:")
            parts.append(render_table(budget_table(book, report.loaded.hank)))
        warned = budget_warnings(book, report.loaded.hank)
        if warned:
            parts.append(f"{len(warned)} budget warning(s):")
            parts.extend(w.render() for w in warned)
    if report.warnings:
        parts.append(f"{plural(len(report.warnings), 'warning')}:")
        parts.extend(p.render() for p in report.warnings)
    if report.errors:
        parts.append(f"{plural(len(report.errors), 'error')}:")
        parts.extend(p.render() for p in report.errors)
    if report.valid and not report.errors:
        assert report.loaded is not None
        codons = len(report.loaded.codons())
        loops = sum(isinstance(i, Loop) for i in report.loaded.hank.hank)
        parts.append(f"valid: {plural(codons, 'codon')}, {plural(loops, 'loop')}")
    else:
        parts.append(f"invalid: {report.file}")
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    """Validates ``args.hank``; 0 when valid, 2 when not."""
    from weft.sentinels.checks import load_problems
    from weft.sentinels.providers import ProviderError, split_model

    override = args.sentinel_model or os.environ.get("WEFT_RUNTIME_SENTINEL_MODEL") or None
    if override is not None:
        try:
            split_model(override)
        except ProviderError as exc:
            print(f"weft: error: --sentinel-model: {exc}", file=sys.stderr)
            return 2
    environment = not args.no_environment
    hank = hank_argument(args.hank) or args.hank  # a .hank bundle: its verified, extracted hank
    report = validate_hank(hank, model=args.model, check_environment=environment)
    # Every problem in one pass: the checks below do not depend on the prompt
    # checks (preflight), so they run on the built hank whatever those found; a
    # structure error leaves no hank, but the agent CLIs are still checked.
    built = report.built
    if built is not None:
        # Whether each sentinel would load on this machine (its provider and key).
        report.problems.extend(load_problems(built, file=report.file, model_override=override))
    if environment and (built is not None or report.document is not None):
        # As `weft run` checks before it starts (weft.config.preflight).
        missing = (
            agent_cli_problems(built, file=report.file, env=os.environ)
            if built is not None
            else document_cli_problems(report.document, file=report.file, env=os.environ)
        )
        if missing:
            report.problems = [*report.problems, *missing]
            report.loaded = None
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(render(report, colour=wants_colour(sys.stdout)))
    return 0 if report.valid and not report.errors else 2
