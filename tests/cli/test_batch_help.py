"""Every command's ``--help`` ends with its own examples and exit codes: a
sub-command (``weft batch run``) never shows those of a top-level command that
shares its name (``weft run``)."""

from __future__ import annotations

import argparse

import pytest

from weft.cli import build_parser, main
from weft.cli.helptext import COMMAND_EXIT_CODES, EXAMPLES, EXIT_CODES

BATCH_VERBS = [
    "run",
    "resume",
    "status",
    "abandon",
    "retry",
    "skip",
    "reset-breaker",
    "drain",
    "rebuild",
    "schema",
]


def _commands(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, str]]:
    """(path after ``weft``, rendered help) of every command and sub-command."""
    found = []
    for action in parser._actions:  # argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{path} {name}".strip()
                found.append((full, sub.format_help()))
                found += _commands(sub, full)
    return found


def _examples(help_text: str) -> list[str]:
    """The command lines of a help text's ``examples:`` section."""
    if "examples:\n" not in help_text:
        return []
    section = help_text.split("examples:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in section.splitlines()]


def test_no_command_shows_another_commands_examples() -> None:
    commands = _commands(build_parser())
    assert {"batch run", "batch status", "batch schema", "store rebuild"} <= {
        path for path, _ in commands
    }
    for path, help_text in commands:
        aliases = {path.replace("executions", "ls")}  # `weft executions` is `weft ls`
        for line in _examples(help_text):
            assert any(line.startswith(f"weft {p}") for p in aliases), (path, line)


@pytest.mark.parametrize("verb", BATCH_VERBS)
def test_each_batch_subcommand_help_shows_its_own_examples_and_exit_codes(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["batch", verb, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    examples = _examples(out)
    assert examples, f"weft batch {verb} --help has no examples"
    assert all(line.startswith(f"weft batch {verb} ") for line in examples), examples
    assert f"batch {verb}" in EXAMPLES
    assert out.rstrip().endswith(COMMAND_EXIT_CODES[f"batch {verb}"].splitlines()[-1])
    assert EXIT_CODES not in out, "the batch commands have their own exit codes"


def test_batch_run_help_names_its_exit_codes() -> None:
    codes = COMMAND_EXIT_CODES["batch run"]
    assert "every workstream succeeded" in codes
    assert "weft batch resume" in codes
