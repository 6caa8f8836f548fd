"""The end of every ``weft COMMAND --help``: examples, then the exit codes.

One table for all commands, applied by :func:`add_epilogs` once the parser is
built, so each command's module only declares its arguments. A command added
without an entry here still gets the exit codes.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["EXAMPLES", "EXIT_CODES", "add_epilogs", "epilog"]

EXIT_CODES = """\
exit codes:
  0    success
  1    the run failed, or the store cannot be used
  2    usage or configuration error (nothing was run)
  130  interrupted by Ctrl-C (SIGINT); what was saved stays saved: run again to continue
  143  stopped by SIGTERM; likewise"""

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "weft": (
        ("weft init demo", "a starter hank in demo/, on the fake agent"),
        ("weft run demo", "run it"),
        ("weft ls", "list the executions, newest first"),
        ("weft status demo", "the latest execution of that hank"),
    ),
    "run": (
        ("weft run", "run ./hank.json (resumes its execution if it has one)"),
        ("weft run hank.json data/", "run a hank on a data folder"),
        ("weft run -m fake/sonnet --headless", "every codon on the fake agent, CI output"),
        ("weft run --execution DIR", "continue an execution with its own hank"),
        ("weft run --new", "start over in a new execution"),
    ),
    "status": (
        ("weft status", "the latest execution of ./hank.json"),
        ("weft status path/to/hank.json", "the latest execution of that hank"),
        ("weft status 1795601048577 --json", "an execution by id (or prefix), as JSON"),
    ),
    "thread": (
        ("weft thread", "the history of the latest execution of ./hank.json"),
        ("weft thread DIR --json", "an execution's thread as JSON"),
    ),
    "checkpoints": (
        ("weft checkpoints", "checkpoints of the latest execution of ./hank.json"),
        ("weft checkpoints DIR --json", "as JSON"),
    ),
    "rollback": (
        ("weft rollback --last-success", "back to the newest confirmed success"),
        ("weft rollback --codon plan", "back to the end of codon plan"),
        ("weft rollback DIR --checkpoint 1a2b3c", "back to a checkpoint of DIR"),
    ),
    "store": (("weft store rebuild", "rebuild state.json from the journal"),),
    "validate": (
        ("weft validate", "check ./hank.json"),
        ("weft validate path/to/hank.json --json", "the structure or the problems as JSON"),
        ("weft validate -m fake/sonnet", "check as if every codon ran on the fake agent"),
    ),
    "schema": (("weft schema -o hank.schema.json", "the JSON Schema for editors"),),
    "init": (("weft init my-hank", "a starter hank in my-hank/"),),
    "agents": (
        ("weft agents", "installed agent CLIs and routing rules"),
        ("weft agents sonnet fake/gpt-5", "where these model ids run"),
    ),
    "attach": (
        ("weft attach", "watch the running execution of ./hank.json"),
        ("weft attach DIR --readonly", "watch without steering"),
    ),
    "ls": (
        ("weft ls", "every execution, newest first"),
        ("weft ls --hank ./hank.json", "only the executions of this hank"),
        ("weft ls --state failed --json", "failed ones, as JSON"),
    ),
    "logs": (
        ("weft logs", "what the agents of ./hank.json's latest execution said"),
        ("weft logs DIR --tools --thinking", "with tool calls and thinking"),
    ),
    "show": (
        ("weft show plan", "codon plan of ./hank.json's latest execution"),
        ("weft show build DIR --json", "as JSON lines"),
    ),
    "completion": (
        (
            "weft completion bash > ~/.local/share/bash-completion/completions/weft",
            "bash",
        ),
        ('weft completion zsh > "${fpath[1]}/_weft"', "zsh (then restart the shell)"),
    ),
    "clean": (
        ("weft clean --dry-run", "what would be removed"),
        ("weft clean", "remove completed executions"),
        ("weft clean --state failed --older-than 7d", "failed ones unused for a week"),
    ),
}
"""Each command's examples: the command line, and what it does."""


def epilog(command: str) -> str:
    """The examples (when there are some) and the exit codes of ``command``."""
    examples = EXAMPLES.get(command, ())
    if not examples:
        return EXIT_CODES
    width = max(len(line) for line, _ in examples)
    lines = [f"  {line.ljust(width)}  {what}" for line, what in examples]
    return "examples:\n" + "\n".join(lines) + "\n\n" + EXIT_CODES


def add_epilogs(commands: argparse._SubParsersAction[Any]) -> None:
    """Ends the help of every command (and sub-command) with its examples and exit codes."""
    for name, parser in commands.choices.items():
        if parser.epilog and "exit codes:" in parser.epilog:
            continue  # an alias seen twice, or a command that wrote its own
        parser.epilog = epilog(name)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        for action in parser._actions:  # argparse has no public accessor
            if isinstance(action, argparse._SubParsersAction):
                add_epilogs(action)
