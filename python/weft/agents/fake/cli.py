"""Entry points: ``fake-claude``, ``fake-codex``, ``fake-gemini`` and
``python -m weft.agents.fake --flavor claude|codex|gemini``.

The flavour comes from the entry point, else from a leading ``--flavor``
(``--flavour``) option, else from the program name (``argv[0]`` containing
``codex`` or ``gemini``; anything else is Claude). Everything after that is
the real CLI's argv.
"""

from __future__ import annotations

import os
import signal
import sys

from weft.agents.fake.common import (
    FLAVOURS,
    CliError,
    FakeConfigError,
    Settings,
    record_if_missing,
)


def _flavour_from_argv(argv: list[str]) -> tuple[str, list[str]]:
    args = argv[1:]
    if args and args[0].split("=", 1)[0] in ("--flavor", "--flavour"):
        name, eq, value = args[0].partition("=")
        if eq:
            return value, args[1:]
        if len(args) < 2:
            raise FakeConfigError(f"{name} needs a value: claude, codex or gemini")
        return args[1], args[2:]
    program = os.path.basename(argv[0]) if argv else ""
    for flavour in ("codex", "gemini"):
        if flavour in program:
            return flavour, args
    return "claude", args


def main(argv: list[str] | None = None, flavour: str | None = None) -> int:
    """Run a fake agent; returns the exit code."""
    argv = list(sys.argv if argv is None else argv)
    # Until the scenario's signal policy is installed, Ctrl-C ends the
    # process quietly instead of printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    label = f"fake-{flavour or 'agent'}"
    settings: Settings | None = None
    args: list[str] = argv[1:]
    try:
        if flavour is None:
            flavour, args = _flavour_from_argv(argv)
        else:
            args = argv[1:]
        label = f"fake-{flavour}"
        if flavour not in FLAVOURS:
            raise FakeConfigError(f"unknown flavour {flavour!r}; use claude, codex or gemini")
        settings = Settings(os.environ, flavour)
        if flavour == "claude":
            from weft.agents.fake import claude

            return claude.main(args, settings)
        if flavour == "codex":
            from weft.agents.fake import codex

            return codex.main(args, settings)
        from weft.agents.fake import gemini

        return gemini.main(args, settings)
    except FakeConfigError as exc:
        _record_refusal(settings, flavour, args)
        _stderr(f"{label}: {exc}\n")
        return 2
    except CliError as exc:
        _record_refusal(settings, flavour, args)
        _stderr(exc.message + "\n")
        return exc.code
    except BrokenPipeError:
        # The reader went away; die quietly like a CLI killed by EPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _record_refusal(settings: Settings | None, flavour: str | None, args: list[str]) -> None:
    if settings is None or flavour is None:
        return
    try:
        record_if_missing(settings, flavour, args)
    except FakeConfigError as exc:
        _stderr(f"fake-{flavour}: {exc}\n")


def _stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass


def claude_main() -> None:
    """``fake-claude``."""
    sys.exit(main(flavour="claude"))


def codex_main() -> None:
    """``fake-codex``."""
    sys.exit(main(flavour="codex"))


def gemini_main() -> None:
    """``fake-gemini``."""
    sys.exit(main(flavour="gemini"))
