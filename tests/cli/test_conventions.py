"""Command-line conventions: options and positionals mix, every help ends with
examples and exit codes, plurals are right, each problem is said once."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pytest

from weft.cli import build_parser
from weft.cli.helptext import EXAMPLES
from weft.errors import LockHeldError
from weft.store.lock import LOCK, RuntimeLock
from weft.terminal import plural


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "hank", "--headless", "data"],
        ["run", "--headless", "hank", "data"],
        ["run", "hank", "data", "--headless"],
        ["run", "hank", "-m", "fake/sonnet", "data", "--headless"],
    ],
)
def test_options_and_positionals_mix(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.paths == ["hank", "data"]
    assert args.headless


def test_a_command_with_sub_commands_still_parses() -> None:
    args = build_parser().parse_args(["store", "rebuild", "--from-snapshot", "x"])
    assert (args.action, args.execution, args.from_snapshot) == ("rebuild", "x", True)
    args = build_parser().parse_args(["status", "--json", "x"])
    assert (args.execution, args.json) == ("x", True)


OWN_EXIT_CODES = {"ui": ("0 ", "2 ", "130")}
"""Commands whose help states codes of their own instead of the common table: ``ui``
is a server (SIGTERM is its normal stop, exit 0; it has no run to fail)."""


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_help_ends_with_examples_and_exit_codes(name: str) -> None:
    text = commands()[name].format_help()
    assert "exit codes:" in text
    for code in OWN_EXIT_CODES.get(name, ("0 ", "1 ", "2 ", "130", "143")):
        assert f"\n  {code}" in text
    if name in EXAMPLES:
        assert "examples:\n  weft " in text
    assert "seed 0" not in text


def test_every_built_in_command_has_examples() -> None:
    ours = {"run", "status", "thread", "checkpoints", "rollback", "store", "validate"}
    ours |= {"schema", "init", "agents", "attach", "ls", "clean"}
    assert ours <= set(EXAMPLES)


def test_the_top_help_has_examples_and_exit_codes() -> None:
    text = build_parser().format_help()
    assert "examples:\n  weft init demo" in text
    assert "130" in text
    assert "141" in text
    assert "seed 0" not in text  # the seeds are the project's documents, not the user's words
    assert "-V, --version" in text


@pytest.mark.parametrize(
    ("count", "expected"), [(0, "0 problems"), (1, "1 problem"), (2, "2 problems")]
)
def test_plurals(count: int, expected: str) -> None:
    assert plural(count, "problem") == expected


def test_the_lock_message_promises_no_wait(tmp_path: Path) -> None:
    held = RuntimeLock.acquire(tmp_path)
    try:
        # Another (live) pid holding it: our parent process.
        info = json.loads((tmp_path / LOCK).read_text())
        info["pid"] = os.getppid()
        info["lastHeartbeat"] = time.time()
        (tmp_path / LOCK).write_text(json.dumps(info))
        with pytest.raises(LockHeldError) as refused:
            RuntimeLock.acquire(tmp_path)
    finally:
        held.release()
    message = str(refused.value)
    assert "wait" not in message
    assert f"kill {os.getppid()}" in message
    assert "taken over at once" in message


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh", "fish"])
def test_completion_scripts_know_every_command(shell: str) -> None:
    from weft.cli import COMMANDS
    from weft.cli.completion import script

    text = script(shell)
    for command in COMMANDS:
        assert command in text
    assert "--execution" in text


RUN_MACHINERY = (
    "asyncio",
    "concurrent.futures",
    "uvloop",
    "pygit2",
    "websockets",
    "rich",
    "weft.state",
    "weft.store.writer",
    "weft.runtime.run.runtime",
    "weft.cli.view",
    "weft.agents",
    "weft.server",
)
"""What a reading command never needs: the event loop, the single writer, the runtime,
the views, the agents, the server (each costs start-up time; issue 21 asks < 150 ms)."""


def test_status_of_a_real_execution_loads_no_run_machinery(tmp_path: Path) -> None:
    """``weft status`` on an execution a real run made: the store is opened to read
    (journal, snapshot, lock) without the modules only a run needs."""
    import subprocess
    import sys

    from tests.runtime.hanks import codon, subprocess_environment, write_hank

    hank = write_hank(tmp_path / "project", codon("a"))
    env = subprocess_environment(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "weft", "run", "--headless", str(hank)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr + made.stdout
    (execution,) = (tmp_path / "managed").iterdir()
    code = (
        "import sys; from weft.cli import main\n"
        "code = main(sys.argv[1:])\n"
        f"print('loaded:' + ','.join(m for m in sys.modules if m.startswith({RUN_MACHINERY!r})))\n"
        "sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "status", str(execution)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "a" in done.stdout  # the codon's line: the status was read
    loaded = done.stdout.rsplit("loaded:", 1)[1].strip()
    assert loaded == "", f"weft status loaded {loaded}"


def test_run_help_gives_each_outcome_its_exit_code() -> None:
    text = " ".join(commands()["run"].format_help().split())
    assert "0 completed: every codon done" in text
    assert "1 failed: a codon failed for good" in text
    assert "3 stopped by the budget ceiling (--max-cost" in text
    assert "130 stopped by you (Ctrl-C, q, server.shutdown)" in text
    assert "143 stopped by SIGTERM" in text
