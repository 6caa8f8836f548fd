"""Entry points: the flavour from ``--flavor``, the program name or the
console script; version output; errors without tracebacks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from weft.agents.fake.cli import _flavour_from_argv

from .support import Fake
from .wire import check_claude, check_codex, check_gemini


def test_flavour_selection() -> None:
    assert _flavour_from_argv(["x", "--flavor", "codex", "exec"]) == ("codex", ["exec"])
    assert _flavour_from_argv(["x", "--flavour=gemini", "-p", "q"]) == ("gemini", ["-p", "q"])
    assert _flavour_from_argv(["/usr/bin/fake-gemini", "-p"]) == ("gemini", ["-p"])
    assert _flavour_from_argv(["/opt/codex", "exec"]) == ("codex", ["exec"])
    assert _flavour_from_argv(["/opt/claude", "-p"]) == ("claude", ["-p"])


def test_unknown_flavour_exits_2(fake: Fake) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weft.agents.fake", "--flavor", "llama"],
        capture_output=True,
        env=fake.env,
        check=False,
    )
    assert done.returncode == 2
    assert b"unknown flavour 'llama'" in done.stderr


def test_program_name_selects_the_flavour(fake: Fake, tmp_path: Path) -> None:
    # A launcher named like the real CLI: argv[0] decides the flavour.
    launcher = tmp_path / "codex"
    launcher.write_text(
        f"#!{sys.executable}\nimport sys\nfrom weft.agents.fake.cli import main\nsys.exit(main())\n"
    )
    launcher.chmod(0o755)
    done = subprocess.run(
        [str(launcher), "exec", "--json", "--skip-git-repo-check", "-"],
        input=b"hi",
        capture_output=True,
        env=fake.env,
        cwd=fake.cwd,
        check=False,
    )
    assert done.returncode == 0
    check_codex([json.loads(x) for x in done.stdout.splitlines()])


@pytest.mark.parametrize("name", ["fake-claude", "fake-codex", "fake-gemini"])
def test_console_scripts(fake: Fake, name: str) -> None:
    script = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if script is None:
        pytest.skip(f"{name} is not installed in this environment")
    args = {
        "fake-claude": ["-p", "--output-format", "stream-json", "--verbose"],
        "fake-codex": ["exec", "--json", "--skip-git-repo-check"],
        "fake-gemini": ["-o", "stream-json"],
    }[name]
    done = subprocess.run(
        [script, *args],
        input=b"hello",
        capture_output=True,
        env=fake.env,
        cwd=fake.cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith(b"{")]
    {"fake-claude": check_claude, "fake-codex": check_codex, "fake-gemini": check_gemini}[name](
        lines
    )


def test_versions(fake: Fake) -> None:
    assert fake.run("claude", "--version", stdin=None).text == "2.1.330 (Claude Code)\n"
    assert fake.run("codex", "--version", stdin=None).text.startswith("codex-cli ")
    custom = fake.run("gemini", "--version", stdin=None, env={"FAKE_AGENT_VERSION": "9.9.9"})
    assert custom.text == "9.9.9\n"


def test_interactive_modes_are_not_emulated(fake: Fake) -> None:
    claude = fake.run("claude", stdin="hi")
    assert claude.code == 2
    assert "-p" in claude.stderr
    codex = fake.run("codex", "login", stdin=None)
    assert codex.code == 2
    assert "codex exec" in codex.stderr


def test_strict_flags_reject_unknown_options(fake: Fake) -> None:
    lax = fake.claude("hi", "--frobnicate")
    assert lax.code == 0
    strict = fake.claude("hi", "--frobnicate", env={"FAKE_AGENT_STRICT_FLAGS": "1"})
    assert strict.code == 1
    assert "unknown option '--frobnicate'" in strict.stderr


def test_a_closed_stdout_does_not_print_a_traceback(fake: Fake) -> None:
    proc = subprocess.Popen(
        [*fake.command("claude"), "-p", "--output-format", "stream-json", "--verbose"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=fake.environ({"FAKE_AGENT_SCENARIO": "sigterm,interval_ms=1,lines=200"}),
        cwd=fake.cwd,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdin.write(b"hi")
    proc.stdin.close()
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(30) == 1
    assert b"Traceback" not in err


@pytest.mark.parametrize(
    ("flavour", "args"),
    [
        ("codex", ["exec", "--json", "-a", "never", "-"]),
        ("gemini", ["-p", "x", "-y", "--approval-mode", "yolo"]),
        ("claude", ["-p", "--permission-mode", "nope"]),
    ],
)
def test_a_refused_command_line_is_still_recorded(
    fake: Fake, tmp_path: Path, flavour: str, args: list[str]
) -> None:
    record = tmp_path / "record.json"
    done = fake.run(flavour, *args, stdin=None, env={"FAKE_AGENT_RECORD": str(record)})
    assert done.code in (1, 2)
    doc = json.loads(record.read_text())
    assert doc["argv"] == args
    assert doc["flavour"] == flavour
    assert doc["stdin"] is None
