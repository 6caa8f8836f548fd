"""``weft pack``: a hank and everything it references as one ``.hank`` bundle
(:mod:`weft.bundle`; guide: ``docs/bundles.md``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from weft.terminal import printable

__all__ = ["register", "run"]


def register(commands: Any) -> None:
    """Adds the ``pack`` command."""
    parser = commands.add_parser(
        "pack",
        help="bundle a hank and the files it references into one .hank file",
        description="Bundle a hank with its prompt files, sentinel configs, schemas and every "
        "file or folder it references, plus hank.lock (each member's sha256 and mode, the "
        "bundle hash), into one deterministic .hank file: the same files give the same "
        "bytes. weft run x.hank and weft validate x.hank use it as it is. Exit 0 when "
        "packed, 2 when the hank is invalid or cannot be bundled.",
    )
    parser.add_argument(
        "hank",
        nargs="?",
        default=".",
        type=Path,
        help="a hank.json file, or a directory holding one (default: .)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the bundle to write (default: <hank folder name>.hank here)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Packs ``args.hank``; 0 when packed, 2 when not."""
    from weft import __version__
    from weft.bundle.pack import pack_hank
    from weft.cli.validate import render
    from weft.config import validate_hank

    # This machine's agent CLIs and variables are not the bundle's business: it
    # may run elsewhere (weft validate x.hank there checks them).
    report = validate_hank(args.hank, check_environment=False)
    loaded = report.loaded
    if loaded is None:
        print(render(report), file=sys.stderr)
        print("weft: error: the hank is invalid; nothing was packed", file=sys.stderr)
        return 2
    output: Path = args.output or Path(f"{loaded.directory.name or 'hank'}.hank")
    try:
        digest, collected = pack_hank(loaded, output, __version__)
        size = output.stat().st_size
    except OSError as e:
        from weft.store.diskspace import STORAGE_ERRNOS

        if e.errno in STORAGE_ERRNOS:
            raise  # a full or failing disk: said as such by the CLI (exit 1)
        # A referenced file that cannot be read, or an output that cannot be written.
        where = printable(str(e.filename or output))
        print(
            f"weft: error: cannot write the bundle {printable(str(output))}: {e.strerror} "
            f"({where})",
            file=sys.stderr,
        )
        return 2
    files = sum(1 for m in collected.members.values() if m.kind == "file")
    if args.json:
        out = {
            "bundle": str(output),
            "bundleHash": digest,
            "hank": collected.hank,
            "members": len(collected.members),
            "files": files,
            "bytes": size,
        }
        print(json.dumps(out))
    else:
        print(
            f"packed {printable(collected.hank)} and {files - 1} other file(s) into "
            f"{printable(str(output))} ({size:,} bytes)\n  bundle hash: {digest}"
        )
    return 0
