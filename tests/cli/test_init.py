"""``weft init``: a starter hank that validates and runs on the fake agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weft.agents.harness import route
from weft.cli import main
from weft.config import json_schema, load_hank


def test_it_creates_a_valid_hank_on_the_fake_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "new"
    assert main(["init", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"created {target / 'hank.json'}" in out
    loaded = load_hank(target)
    assert loaded.warnings == []
    assert [c.continuation_mode for c, _ in loaded.codons()] == ["fresh", "continue-previous"]
    assert all(route(c.model).fake for c, _ in loaded.codons())
    assert loaded.hank.schema_url == "./hank.schema.json"
    assert json.loads((target / "hank.schema.json").read_text()) == json_schema()
    for c, _ in loaded.codons():
        assert isinstance(c.prompt_file, str)
        assert loaded.resolve(c.prompt_file).read_text().strip()


def test_it_refuses_to_overwrite_a_hank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hank.json").write_text("{}")
    assert main(["init", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "hank.json").read_text() == "{}"
    assert not (tmp_path / "prompts").exists()


def test_a_file_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["init", str(tmp_path / "f")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_the_starter_runs_on_the_fake_agent_and_changes_visible_files(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.runtime.hanks import subprocess_environment

    env = subprocess_environment(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "weft", "init", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[-1] == "next: weft run demo"
    done = subprocess.run(
        [sys.executable, "-m", "weft", "run", "demo", "--headless"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    (execution,) = (tmp_path / "managed").iterdir()
    workspace = execution / "agentRoot"
    assert (workspace / "notes" / "plan.md").read_text().startswith("# Plan")
    assert (workspace / "src" / "hello.py").read_text() == 'print("hello from the starter hank")\n'
