"""``weft schema``: the JSON Schema of hank files, for editors.

Generated from the Structs that the loader itself uses, so it cannot
disagree with ``weft validate``. Point a hank file's ``$schema`` at a saved
copy (``weft schema > hank.schema.json``) to get completion and checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from weft.config import json_schema


def register(commands: Any) -> None:
    """Adds the ``schema`` command."""
    parser = commands.add_parser(
        "schema",
        help="print the JSON Schema of hank files",
        description="Print the JSON Schema of hank.json files (for editor completion).",
    )
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="write it to this file instead"
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="print the schema of the WebSocket server's events instead",
    )
    parser.set_defaults(run=run)


def schema_text() -> str:
    """The schema as indented JSON text, ending with a newline."""
    return json.dumps(json_schema(), indent=2) + "\n"


def events_schema_text() -> str:
    """The schema of the server's events (``--events``), as indented JSON text."""
    from weft.server.schema import events_json_schema

    return json.dumps(events_json_schema(), indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    """Prints (or writes) the schema."""
    text = events_schema_text() if args.events else schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"weft: error: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    return 0
