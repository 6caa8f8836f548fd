"""The fish completion script of ``weft``, generated from its argument parser.

shtab writes bash, zsh and tcsh scripts but not fish, so this module walks the
same parser. What it writes:

* ``__weft_scan`` reads the words typed so far: the command path
  (``""``, ``run``, ``batch run``) and how many positionals follow it,
  skipping options and the values of the options that take one, so
  ``weft batch run`` is not taken for ``weft run``, nor ``weft run -m batch``
  for ``weft batch``;
* each command path's subcommands and options as ``complete`` lines guarded
  by that path, and each positional guarded by the places it can take
  (``weft show CODON [EXECUTION]``: the codon first, then the execution).
  Values with choices complete the choices, paths complete files, folders
  complete folders, anything else (ids, numbers, text) completes nothing
  rather than file names.

Static, like the other shells' scripts: completing never starts Python.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator

from weft.cli.completion import FILES, FOLDERS, commands, subparsers

__all__ = ["fish_script"]


def _quote(text: str) -> str:
    """``text`` as one fish word in single quotes."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _describe(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument's help on one line, its ``%(default)s``-style fields filled."""
    text = action.help or ""
    if "%" in text:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            text = parser._get_formatter()._expand_help(action)  # argparse's own expansion
    return " ".join(text.split())


def _values(action: argparse.Action) -> str:
    """What completes an argument's value: its choices, files, folders or nothing."""
    if action.choices is not None:
        return "-x -a " + _quote(" ".join(str(c) for c in action.choices))
    if action.dest in FILES or (action.dest == "execution" and not action.option_strings):
        # A positional execution may also be a hank file: files and folders.
        return "-r -F"
    if action.dest in FOLDERS:
        return "-x -a '(__fish_complete_directories)'"
    return "-x"


_MOST: dict[object, float] = {None: 1, "?": 1, "*": math.inf, "+": math.inf}
_LEAST: dict[object, int] = {None: 1, "?": 0, "*": 0, "+": 1}


def _places(positionals: list[argparse.Action]) -> Iterator[tuple[argparse.Action, int, int]]:
    """Each positional with the first and last place (0-based, among the
    positionals typed) it can take; -1: no last place."""
    least, most = 0, 0.0
    for action in positionals:
        count_least = action.nargs if isinstance(action.nargs, int) else _LEAST[action.nargs]
        count_most = action.nargs if isinstance(action.nargs, int) else _MOST[action.nargs]
        last = most + count_most - 1
        yield action, least, -1 if math.isinf(last) else int(last)
        least, most = least + count_least, most + count_most


def _lines(path: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    when = f"-n {_quote(f'__weft_at {_quote(path)}')}"
    sub = subparsers(parser)
    if sub is not None:
        leading = f"-n {_quote(f'__weft_at {_quote(path)} 0 0')}"  # the command's first word
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name in sub.choices:
            described = " ".join(helps.get(name, "").split())
            yield f"complete -c weft {leading} -f -a {_quote(name)} -d {_quote(described)}"
    positionals = [
        a
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]
    for action, first, last in _places(positionals):
        if action.help == argparse.SUPPRESS:
            continue
        at = f"-n {_quote(f'__weft_at {_quote(path)} {first} {last}')}"
        yield f"complete -c weft {at} {_values(action)} -d {_quote(_describe(parser, action))}"
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        described = _quote(_describe(parser, action))
        names = []
        for option in action.option_strings:
            if option.startswith("--"):
                names.append(f"-l {_quote(option[2:])}")
            elif len(option) == 2:
                names.append(f"-s {_quote(option[1:])}")
            else:
                names.append(f"-o {_quote(option[1:])}")
        value = _values(action) if action.nargs != 0 else "-f"
        yield f"complete -c weft {when} {' '.join(names)} {value} -d {described}"


def _switch(cases: dict[str, list[str]]) -> list[str]:
    lines = ["    switch $argv[1]"]
    for path, words in cases.items():
        if words:
            lines.append(f"        case {_quote(path)}")
            lines.append(f"            printf '%s\\n' {' '.join(_quote(w) for w in words)}")
    lines.append("    end")
    return lines


def fish_script(parser: argparse.ArgumentParser) -> str:
    """The fish completion script of ``parser`` (the ``weft`` command's)."""
    every = list(commands(parser))
    subcommands: dict[str, list[str]] = {}
    valued: dict[str, list[str]] = {}
    for path, command in every:
        sub = subparsers(command)
        subcommands[path] = list(sub.choices) if sub is not None else []
        valued[path] = [
            option
            for action in command._actions
            if action.option_strings and action.nargs != 0
            for option in action.option_strings
        ]
    out = [
        "# fish completion for weft: generated by `weft completion fish`; do not edit.",
        "complete -c weft -e",
        "complete -c weft -f",
        "",
        "function __weft_subcommands",
        *_switch(subcommands),
        "end",
        "",
        "function __weft_valued",
        *_switch(valued),
        "end",
        "",
        "# The words typed before the cursor: the command path, then how many",
        "# positionals follow it (options and their values skipped; -- ends options).",
        "function __weft_scan",
        "    set -l path ''",
        "    set -l count 0",
        "    set -l skip 0",
        "    set -l options 1",
        "    set -l deeper 1",
        "    for word in (commandline -opc)[2..-1]",
        "        if test $skip -eq 1",
        "            set skip 0",
        "            continue",
        "        end",
        "        if test $options -eq 1; and test $word = '--'",
        "            set options 0",
        "            continue",
        "        end",
        "        if test $options -eq 1; and string match -q -- '-?*' $word",
        "            if not string match -q -- '*=*' $word",
        '                and contains -- $word (__weft_valued "$path")',
        "                set skip 1",
        "            end",
        "            continue",
        "        end",
        '        if test $deeper -eq 1; and contains -- $word (__weft_subcommands "$path")',
        '            set path (string trim -- "$path $word")',
        "            continue",
        "        end",
        "        set deeper 0",
        "        set count (math $count + 1)",
        "    end",
        "    printf '%s\\n' $path $count",
        "end",
        "",
        "# Whether the cursor is in command PATH, and (with FIRST and LAST) at a",
        "# positional place between them (LAST -1: no end).",
        "function __weft_at",
        "    set -l scanned (__weft_scan)",
        '    test "$scanned[1]" = $argv[1]; or return 1',
        "    set -q argv[2]; or return 0",
        "    test $scanned[2] -ge $argv[2]; or return 1",
        "    test $argv[3] -eq -1; or test $scanned[2] -le $argv[3]",
        "end",
        "",
    ]
    for path, command in every:
        out.extend(_lines(path, command))
    return "\n".join(out) + "\n"
