"""Resolving the program for a route, and probing installed CLIs, with real
executables written into a temporary PATH."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from weft.agents.claude import ClaudeHarness
from weft.agents.harness import AgentStartError, route
from weft.agents.registry import (
    cli_version,
    fake_command,
    harness_class,
    harness_for,
    installed_agents,
    real_command,
)


def script(directory: Path, name: str, body: str) -> Path:
    """An executable Python script called ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def is_dead(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_real_cli_is_found_on_path(tmp_path: Path) -> None:
    claude = script(tmp_path / "bin", "claude", "print('2.1.30 (Claude Code)')\n")
    found = real_command("claude", {"PATH": str(tmp_path / "bin")})
    assert found is not None
    assert (found.command, found.source) == ([str(claude)], "PATH")
    assert real_command("codex", {"PATH": str(tmp_path / "bin")}) is None


def test_the_env_override_wins_and_may_carry_arguments(tmp_path: Path) -> None:
    script(tmp_path / "bin", "claude", "")
    env = {"PATH": str(tmp_path / "bin"), "WEFT_CLAUDE_BIN": "node '/opt/my cli/cli.js'"}
    found = real_command("claude", env)
    assert found is not None
    assert (found.command, found.source) == (["node", "/opt/my cli/cli.js"], "env")


def test_fake_agents_resolve_to_a_runnable_command() -> None:
    for name in ("claude", "codex", "gemini"):
        command = fake_command(name, {"PATH": ""}).command
        assert os.access(command[0], os.X_OK)


def test_fake_agent_falls_back_to_the_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    found = fake_command("codex", {"PATH": str(tmp_path)})
    assert found.source == "module"
    assert found.command == [
        str(tmp_path / "python"),
        "-m",
        "weft.agents.fake",
        "--flavor",
        "codex",
    ]


def test_harness_for_a_route_gets_the_resolved_command(tmp_path: Path) -> None:
    claude = script(tmp_path / "bin", "claude", "")
    harness = harness_for(route("sonnet"), {"PATH": str(tmp_path / "bin")})
    assert isinstance(harness, ClaudeHarness)
    assert harness.command == [str(claude)]
    assert not harness.fake
    fake = harness_for(route("fake/claude-sonnet-4-5"), {"PATH": ""})
    assert isinstance(fake, ClaudeHarness)
    assert fake.fake
    assert fake.command == fake_command("claude").command


def test_a_missing_cli_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(AgentStartError, match="WEFT_CLAUDE_BIN") as info:
        harness_for(route("opus"), {"PATH": str(tmp_path)})
    assert "fake/opus" in str(info.value)


def test_an_unknown_harness_is_refused() -> None:
    with pytest.raises(AgentStartError, match="unknown harness 'cursor'"):
        harness_class("cursor")


def test_installed_agents_reports_versions_absences_and_hangs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    script(bin_dir, "claude", "print()\nprint('2.1.30 (Claude Code)')\n")
    pid_file = tmp_path / "gemini.pid"
    script(
        bin_dir,
        "gemini",
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(30)\n",
    )
    began = time.monotonic()
    agents = {a.name: a for a in installed_agents({"PATH": str(bin_dir)}, timeout=1.0)}
    assert time.monotonic() - began < 10
    assert agents["claude"].version == "2.1.30 (Claude Code)"
    assert agents["claude"].error is None
    assert agents["codex"].command is None
    assert agents["gemini"].version is None
    assert agents["gemini"].error == "no answer to --version within 1 s"
    assert is_dead(int(pid_file.read_text()))


def test_a_failing_version_probe_reports_the_exit(tmp_path: Path) -> None:
    broken = script(tmp_path, "broken", "import sys\nsys.exit('bad install')\n")
    assert cli_version([str(broken)]) == (None, "--version exited 1: bad install")
    assert cli_version([str(tmp_path / "missing")])[1] is not None


@pytest.mark.parametrize(
    ("model", "name"), [("fake/gpt-5", "codex"), ("fake/gemini-2.5-pro", "gemini")]
)
def test_every_harness_is_built_the_same_way(model: str, name: str) -> None:
    harness = harness_for(route(model), {"PATH": ""})
    assert harness.name == name
    assert harness.command == fake_command(name).command  # type: ignore[attr-defined]
    assert harness.fake is True  # type: ignore[attr-defined]
