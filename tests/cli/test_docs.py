"""The docs cannot drift: the commands they show run, their tables match the code.

Every ```console block in README.md and docs/*.md is run, line by line (``$ weft
...``), in a fresh folder on the fake agent, each command expected to exit 0.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.hanks import subprocess_environment

from weft.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```console\n(.*?)```", re.DOTALL)


def console_blocks() -> list[tuple[str, list[str]]]:
    out = []
    for path in DOCS:
        for n, block in enumerate(BLOCK.findall(path.read_text())):
            lines = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
            out.append((f"{path.relative_to(ROOT)}#{n}", lines))
    return out


def test_the_readme_has_a_runnable_tutorial() -> None:
    assert any(name.startswith("README.md") for name, _ in console_blocks())


@pytest.mark.parametrize(("name", "commands"), console_blocks(), ids=lambda v: str(v)[:40])
def test_every_console_block_runs(name: str, commands: list[str], tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    for command in commands:
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
        assert done.returncode == 0, f"{name}: `{command}` exited {done.returncode}\n{done.stderr}"
        assert "Traceback" not in done.stderr


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
