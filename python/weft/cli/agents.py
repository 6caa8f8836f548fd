"""``weft agents [MODEL ...] [--json]``: the agent CLIs Weft can drive.

Shows which real CLIs are installed (where, and their ``--version``), where
the fake agents are, and which model ids route to which harness. Given model
ids, it routes each one and says whether Weft's price table knows it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from weft.agents.harness import Route, route
from weft.agents.pricing import default_table
from weft.agents.registry import (
    BIN_ENV,
    BINARY,
    HARNESSES,
    AgentInfo,
    fake_command,
    installed_agents,
)
from weft.terminal import printable

ROUTING = (
    ("sonnet, opus, haiku, claude-*, anthropic/<model>", "claude"),
    ("gpt-*, o1*, o3*, o4*, codex*, openai/<model>", "codex"),
    ("gemini-*, google/<model>", "gemini"),
    ("fake/<model>", "the fake agent of <model>'s harness"),
)
"""The routing rules of :func:`weft.agents.harness.route`, for people."""
ALIASES = frozenset({"sonnet", "opus", "haiku"})


def register(commands: Any) -> None:
    """Adds the ``agents`` command."""
    parser = commands.add_parser(
        "agents",
        help="show the installed agent CLIs and how models route to them",
        description=(
            "Show which agent CLIs (claude, codex, gemini) are installed and their versions, "
            "where the fake agents are, and which model ids route to which harness."
        ),
    )
    parser.add_argument(
        "models", nargs="*", metavar="MODEL", help="model ids to route (e.g. sonnet, fake/gpt-5)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the report, every good model id included; exit 2 when one id or more
    routes nowhere (each is named, and in ``--json`` listed under ``unroutable``)."""
    routes: list[tuple[str, Route]] = []
    bad: list[dict[str, str]] = []
    for model in args.models:
        try:
            routes.append((model, route(model)))
        except ValueError as e:
            bad.append({"model": model, "error": str(e)})
    report = build_report(installed_agents(), routes)
    report["unroutable"] = bad
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_text(report)
    for entry in bad:
        print(printable(f"weft agents: {entry['error']}"), file=sys.stderr)
    return 2 if bad else 0


def build_report(agents: list[AgentInfo], routes: list[tuple[str, Route]]) -> dict[str, Any]:
    """The JSON-ready report."""
    table = default_table()
    models = []
    for model, r in routes:
        row = table.lookup(r.model)
        models.append(
            {
                "model": model,
                "harness": r.harness,
                "cliModel": r.model,
                "fake": r.fake,
                "pricedAs": row.prefix if row is not None else None,
            }
        )
    return {
        "agents": [
            {
                "name": a.name,
                "installed": a.command is not None,
                "command": a.command,
                "source": a.source,
                "version": a.version,
                "error": a.error,
            }
            for a in agents
        ],
        "fakeAgents": [
            {"name": name, "command": (f := fake_command(name)).command, "source": f.source}
            for name in HARNESSES
        ],
        "routing": [{"models": pattern, "harness": harness} for pattern, harness in ROUTING],
        "models": models,
    }


def print_text(report: dict[str, Any]) -> None:
    """The report for people."""
    print("Agent CLIs")
    for a in report["agents"]:
        name = a["name"]
        if not a["installed"]:
            hint = f"not installed (put {BINARY[name]} on PATH or set {BIN_ENV[name]})"
            print(f"  {name:<7} {hint}")
            continue
        where = " ".join(a["command"])
        what = a["version"] if a["version"] else f"({a['error']})"
        print(f"  {name:<7} {what}  [{where}, from {a['source']}]")
    print("Fake agents (model fake/<model>)")
    for f in report["fakeAgents"]:
        print(f"  {f['name']:<7} {' '.join(f['command'])}")
    print("Model routing")
    for rule in report["routing"]:
        print(f"  {rule['models']:<52} -> {rule['harness']}")
    if report["models"]:
        print("Models")
        for m in report["models"]:
            runs = f"{m['harness']} (fake agent)" if m["fake"] else m["harness"]
            if m["pricedAs"]:
                price = f"priced as {m['pricedAs']}"
            elif m["cliModel"] in ALIASES:
                price = "an alias: priced as the model the CLI reports"
            else:
                price = "unpriced"
            print(f"  {m['model']:<28} -> {runs}, --model {m['cliModel']}; {price}")
