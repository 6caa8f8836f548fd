"""The ``weft`` command line.

Each command lives in its own module; this one parses arguments and turns
errors into a message and an exit code (2 for usage and configuration
errors, 1 for a failed run or an unusable store, 0 for success), never a
traceback.

Start-up is kept short (``weft --version`` and ``weft status`` well under
the 150 ms budget of an interactive command): a command's module, and what it
imports, is loaded only when that command runs (or for the full ``--help``).
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from collections.abc import Sequence

from weft.bundle.errors import BundleError
from weft.cli.helptext import add_epilogs, epilog
from weft.cli.resolve import ResolveError
from weft.errors import ConfigError, LockHeldError, StoreCorruptError, StoreError, WeftError
from weft.terminal import printable_lines

COMMANDS: dict[str, str] = {
    "run": "run",
    "status": "status",
    "thread": "thread",
    "checkpoints": "thread",
    "rollback": "thread",
    "fork": "fork",
    "export": "portable",
    "import": "portable",
    "replay": "replay",
    "diff": "diff",
    "store": "store",
    "validate": "validate",
    "pack": "pack",
    "schema": "schema",
    "init": "init",
    "agents": "agents",
    "attach": "attach",
    "ls": "ls",
    "executions": "ls",
    "clean": "clean",
    "logs": "logs",
    "show": "logs",
    "export-trace": "export_trace",
    "completion": "completion",
    "message": "message",
    "breaker": "breaker",
    "ui": "ui",
    "batch": "batch",
}
"""Each command, and the module under ``weft.cli`` that registers it (in help order)."""


class _IntermixedParser(argparse.ArgumentParser):
    """A command's parser that lets options and positionals mix
    (``weft run hank --headless data``): argparse's own ``parse_intermixed_args``,
    which refuses a parser with sub-commands, so those parse as usual."""

    _inside = False

    def parse_known_args(  # type: ignore[override]  # same signature, narrower use
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inside or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        # parse_known_intermixed_args calls parse_known_args itself: once through.
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``weft`` command; with ``command`` (a key of
    :data:`COMMANDS`), only that command is registered, so only its module loads."""
    from weft import __version__
    from weft._core import BUILD_PROFILE

    parser = argparse.ArgumentParser(
        prog="weft",
        description="Weft: a fast, crash-safe runtime for long-running AI-agent pipelines.",
        epilog=epilog("weft"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"weft {__version__} (core: {BUILD_PROFILE} build)",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_IntermixedParser
    )
    wanted = COMMANDS.values() if command is None else [COMMANDS[command]]
    for module in dict.fromkeys(wanted):
        importlib.import_module(f"weft.cli.{module}").register(commands)
    add_epilogs(commands)
    return parser


SIGPIPE_EXIT = 141
"""Exit status when the reader of stdout went away mid-output (128 + SIGPIPE, as a
command killed by the signal reports it in a shell)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``weft`` and ``python -m weft``.

    ``weft ... | head``: when the reader closes the pipe, the command stops
    quietly (no traceback, no "Exception ignored" at exit) with
    :data:`SIGPIPE_EXIT`; a run whose view already stopped writing keeps its
    own exit status.
    """
    try:
        try:
            code = _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, where a failure cannot be caught
    except BrokenPipeError:
        _drop_stdout()
        return SIGPIPE_EXIT
    return code


def _drop_stdout() -> None:
    # The Python documentation's recipe (signal module, "Note on SIGPIPE"): point
    # stdout at /dev/null so the interpreter's final flush does not fail again.
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _main(argv: Sequence[str] | None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments in (["-V"], ["--version"]):
        return _version()
    first = next((a for a in arguments if not a.startswith("-")), None)
    only = first if first in COMMANDS and arguments[0] == first else None
    parser = build_parser(only)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.run(args)
    except (StoreCorruptError, LockHeldError) as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 1
    except (StoreError, ConfigError, ResolveError, BundleError) as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 2
    except WeftError as e:
        print(f"weft: error: {printable_lines(str(e))}", file=sys.stderr)
        return 1
    except (OSError, sqlite3.Error) as e:
        from weft.store.diskspace import is_storage_failure, storage_error

        # A full, read-only or failing disk under any command: one line, exit 1.
        if not is_storage_failure(e):
            raise
        print(f"weft: error: {printable_lines(str(storage_error(_where(e), e)))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C before a command installs its own handling (loading a hank,
        # preparing an execution): what was saved stays saved; no traceback.
        print("weft: interrupted", file=sys.stderr)
        return 130
    return code


def _version() -> int:
    from weft import __version__
    from weft._core import BUILD_PROFILE

    print(f"weft {__version__} (core: {BUILD_PROFILE} build)")
    return 0


def _where(error: BaseException) -> str:
    filename = getattr(error, "filename", None)
    return str(filename) if filename else "a file Weft needed"
