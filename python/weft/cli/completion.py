"""``weft completion bash|zsh|tcsh|fish``: the shell completion script, printed.

Generated from the argument parser (by shtab; fish's by
:mod:`weft.cli.fish_completion`, which shtab does not write), so it knows
every command and option and cannot drift; static, so completing costs the
shell nothing and ``weft`` itself no start-up time (shtab loads only for this
command). Install: ``weft completion bash > ~/.local/share/bash-completion/completions/weft``
(zsh: ``weft completion zsh > "${fpath[1]}/_weft"``; fish:
``weft completion fish > ~/.config/fish/completions/weft.fish``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

SHELLS = ("bash", "zsh", "tcsh", "fish")
FILES = frozenset(("paths", "hank", "config", "output", "file", "junit", "token_file"))
"""Arguments (by ``dest``) that name files: they complete file names."""
FOLDERS = frozenset(("execution", "directory", "root", "state_dir"))
"""Arguments (by ``dest``) that name folders: they complete folder names (ids and
hanks are typed)."""


def register(commands: Any) -> None:
    """Adds ``completion``."""
    parser = commands.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, tcsh, fish)",
        description="Print the completion script of a shell; install it where that shell "
        "looks for completions (see the examples).",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell")
    parser.set_defaults(run=run)


def subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    """The parser's subcommands, if it has any."""
    for action in parser._actions:  # argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command path of ``parser`` (``""``, ``run``, ``batch run`` ...) with
    its parser, parents first."""
    yield path, parser
    sub = subparsers(parser)
    if sub is not None:
        for name, child in sub.choices.items():
            yield from commands(child, f"{path} {name}".strip())


def script(shell: str) -> str:
    """The completion script of ``weft`` for ``shell``."""
    from weft.cli import build_parser

    parser = build_parser()
    if shell == "fish":
        from weft.cli.fish_completion import fish_script

        return fish_script(parser)
    import shtab

    for _, command in commands(parser):
        for arg in command._actions:
            if arg.dest in FILES:
                arg.complete = shtab.FILE  # type: ignore[attr-defined]
            elif arg.dest in FOLDERS:
                arg.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    return str(shtab.complete(parser, shell=shell))


def run(args: argparse.Namespace) -> int:
    """Prints the script."""
    print(script(args.shell))
    return 0
