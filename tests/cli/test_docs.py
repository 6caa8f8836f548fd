"""The docs cannot drift: the commands they show run, their tables match the code.

How README.md or a page of docs/ shows a command decides what this test does with it:

* a ```console block (the doc's runnable example): each ``$ weft ...`` line runs, in
  order, in one fresh folder holding a copy of the repository's ``examples/``, on the
  fake agent (no network, no agent CLI, nothing outside the folder); each must exit 0,
  or the code a trailing ``# exit N`` names, without a traceback. Lines without ``$ ``
  are the output shown, never compared.
* any other fenced block (```sh, ```bash, or none) that shows ``weft`` commands: each
  concrete command is parsed by weft's own parser (nothing runs), so a renamed command
  or flag fails; a synopsis line (``[OPTIONAL]``, ``<PLACEHOLDER>``, ``A | B``,
  ``...``) is not a command and is skipped.
* a ```text block: shown as it is and never checked. Use it for output, synopses and
  commands that cannot run offline here (a real agent CLI, a network, a live run, a
  file the block does not create).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.hanks import subprocess_environment

from weft.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
COMMAND = re.compile(r"^\s*(?:\$ )?(weft\s.*)$")
SYNOPSIS = re.compile(r"\[|\]|<|>|\s\|\s|\.\.\.|…")


def blocks(language: str | None) -> list[tuple[str, str]]:
    """``(path:line, body)`` of the fenced blocks in ``language`` (None: every block that
    is neither ``console`` nor ``text``)."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang = match[1]
            if lang == language or (language is None and lang not in ("console", "text")):
                line = text[: match.start()].count("\n") + 1
                out.append((f"{path.relative_to(ROOT)}:{line}", match[2]))
    return out


def console_blocks() -> list[tuple[str, list[str]]]:
    return [
        (name, [line[2:] for line in body.splitlines() if line.startswith("$ ")])
        for name, body in blocks("console")
    ]


def shown_commands() -> list[tuple[str, str]]:
    """``(where, command)`` of each concrete ``weft`` command in a block that is not run."""
    out = []
    for name, body in blocks(None):
        for line in body.splitlines():
            match = COMMAND.match(line)
            if match is None:
                continue
            command = match[1].split("#", 1)[0].strip()
            if SYNOPSIS.search(command) or "(" in command:
                continue
            out.append((name, command))
    return out


def test_the_readme_has_a_runnable_tutorial() -> None:
    assert any(name.startswith("README.md") for name, _ in console_blocks())


def test_the_docs_show_runnable_examples() -> None:
    assert any(name.startswith("docs/") for name, _ in console_blocks())


@pytest.mark.parametrize(("name", "commands"), console_blocks(), ids=lambda v: str(v)[:40])
def test_every_console_block_runs(name: str, commands: list[str], tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for line in commands:
        expected = EXIT.search(line)
        code = int(expected[1]) if expected else 0
        command = line[: expected.start()] if expected else line
        argv = shlex.split(command)
        assert argv[0] == "weft", f"{name}: only weft commands are run: {command}"
        done = subprocess.run(
            [sys.executable, "-m", "weft", *argv[1:]],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == code, (
            f"{name}: `{command}` exited {done.returncode}, not {code}\n{done.stderr}"
        )
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("name", "command"), shown_commands(), ids=lambda v: str(v)[:50])
def test_every_command_shown_parses(
    name: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(command)[1:]
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS and argv[0] == first else None)
    code: object = 0
    try:
        parser.parse_args(argv)
    except SystemExit as exit:  # argparse's way to refuse (or to print help: code 0)
        code = exit.code
    assert code == 0, f"{name}: `{command}` does not parse: {capsys.readouterr().err}"


def test_the_readme_lists_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"README.md does not list docs/{page.name}"


def test_the_running_options_table_lists_every_run_flag() -> None:
    table = (ROOT / "docs" / "running.md").read_text().split("## Options", 1)[1]
    parser = build_parser("run")
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    run = commands.choices["run"]
    for action in run._actions:
        for flag in action.option_strings:
            if flag in ("-h", "--help"):
                continue
            assert f"`{flag}" in table or f" {flag}" in table or f"{flag}`" in table, flag
