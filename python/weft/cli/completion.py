"""``weft completion bash|zsh|tcsh``: the shell completion script, printed.

Generated from the argument parser by shtab, so it knows every command and
option and cannot drift; static, so completing costs the shell nothing and
``weft`` itself no start-up time (shtab loads only for this command).
Install: ``weft completion bash > ~/.local/share/bash-completion/completions/weft``
(zsh: ``weft completion zsh > "${fpath[1]}/_weft"``).
"""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "tcsh")


def register(commands: Any) -> None:
    """Adds ``completion``."""
    parser = commands.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, tcsh)",
        description="Print the completion script of a shell; install it where that shell "
        "looks for completions (see the examples).",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell")
    parser.set_defaults(run=run)


def script(shell: str) -> str:
    """The completion script of ``weft`` for ``shell``."""
    import shtab

    from weft.cli import build_parser

    parser = build_parser()
    # Paths complete as files, executions as folders (ids and hanks are typed).
    for action in parser._actions:  # argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                for arg in sub._actions:
                    if arg.dest in ("paths", "hank", "config", "output"):
                        arg.complete = shtab.FILE
                    elif arg.dest in ("execution", "directory"):
                        arg.complete = shtab.DIRECTORY
    return str(shtab.complete(parser, shell=shell))


def run(args: argparse.Namespace) -> int:
    """Prints the script."""
    print(script(args.shell))
    return 0
