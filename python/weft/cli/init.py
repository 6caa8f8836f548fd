"""``weft init [dir]``: scaffold a starter hank that validates and runs on the fake agent.

Writes ``hank.json`` (two codons on ``fake/sonnet``: a fresh one, then one
that continues its session), their prompts, and ``hank.schema.json`` for
editor completion. Refuses to overwrite an existing hank.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from weft.cli.schema import schema_text
from weft.config import validate_hank

STARTER_HANK: dict[str, Any] = {
    "$schema": "./hank.schema.json",
    "meta": {
        "name": "starter",
        "version": "0.1.0",
        "description": "A starter hank: plan, then build on the same session.",
    },
    "hank": [
        {
            "id": "plan",
            "name": "Plan",
            "description": "Survey the task and write a plan.",
            "model": "fake/sonnet",
            "continuationMode": "fresh",
            "promptFile": "prompts/plan.md",
            "rigSetup": [
                {
                    "type": "command",
                    "command": {"run": "mkdir -p notes", "workingDirectory": "project"},
                }
            ],
            "checkpointedFiles": ["notes/**"],
        },
        {
            "id": "build",
            "name": "Build",
            "description": "Carry out the plan, continuing the planning session.",
            "model": "fake/sonnet",
            "continuationMode": "continue-previous",
            "promptFile": "prompts/build.md",
            "checkpointedFiles": ["notes/**", "src/**"],
        },
    ],
}

_FAKE_NOTE = (
    "<!-- The @@fake:...@@ line tells the fake agent (model fake/sonnet) what to write, so the "
    "starter shows real files changing; delete it when you switch to a real model. -->\n"
)

PROMPTS = {
    "prompts/plan.md": (
        "<!-- Prompts are Markdown. HTML comments like this one are removed before the agent "
        "sees the prompt. -->\n"
        + _FAKE_NOTE
        + "Read the data in <%DATA_DIR%> and write a short plan to notes/plan.md.\n"
        '@@fake:write path=notes/plan.md content="# Plan\\n\\n1. Write src/hello.py.\\n"@@\n'
    ),
    "prompts/build.md": (
        _FAKE_NOTE + "Carry out the plan in notes/plan.md. Put the code in src/.\n"
        '@@fake:write path=src/hello.py content="print(\\"hello from the starter hank\\")\\n"@@\n'
    ),
}


def register(commands: Any) -> None:
    """Adds the ``init`` command."""
    parser = commands.add_parser(
        "init",
        help="create a starter hank",
        description="Create a starter hank (hank.json, prompts, hank.schema.json) in a "
        "directory. It validates and runs on the fake agent (model fake/sonnet).",
    )
    parser.add_argument(
        "directory", nargs="?", default=".", type=Path, help="where to create it (default: .)"
    )
    parser.set_defaults(run=run)


def scaffold(directory: Path) -> list[Path]:
    """Writes the starter hank into ``directory``; returns the files written.

    Raises ``FileExistsError`` if ``directory`` already has a hank.json or
    one of the prompt files.
    """
    files = {
        "hank.json": json.dumps(STARTER_HANK, indent=2) + "\n",
        **PROMPTS,
        "hank.schema.json": schema_text(),
    }
    for name in ("hank.json", *PROMPTS):
        if (directory / name).exists():
            raise FileExistsError(directory / name)
    written: list[Path] = []
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    """Creates the starter hank and checks it."""
    directory: Path = args.directory
    if directory.exists() and not directory.is_dir():
        print(f"weft: error: {directory} is not a directory", file=sys.stderr)
        return 2
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = scaffold(directory)
    except FileExistsError as e:
        print(
            f"weft: error: {e.args[0]} already exists; init does not overwrite files "
            "(choose an empty directory)",
            file=sys.stderr,
        )
        return 2
    except OSError as e:
        print(f"weft: error: cannot write into {directory}: {e.strerror}", file=sys.stderr)
        return 2
    report = validate_hank(directory)
    for path in written:
        print(f"created {path}")
    if not report.valid:  # a bug in the template, not the user's doing
        print("\n".join(p.render() for p in report.errors), file=sys.stderr)
        return 2
    print(f"next: weft run {shlex.quote(str(directory))}")
    return 0
