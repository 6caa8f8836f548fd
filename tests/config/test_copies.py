"""Bounded rig copies: a copy whose target lies inside its source (or the
reverse) is refused at validation and by ``weft run`` before anything exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.config.hankfiles import codon, hank, write_hank

from weft.cli import main
from weft.config import copies, load_hank, validate_hank
from weft.config.copies import MAX_SCANNED_DIRS, check_copy_bounds, executions_inside


def _copying(source: str, target: str = "w") -> dict[str, Any]:
    return hank(codon("a", rigSetup=[{"type": "copy", "copy": {"from": source, "to": target}}]))


def _fake_execution(folder: Path, hank_file: Path) -> None:
    """An execution folder as ``weft run`` leaves it (only what validation reads)."""
    (folder / ".weft").mkdir(parents=True)
    (folder / "agentRoot").mkdir()
    meta = {"version": "1.0.0", "hankPath": str(hank_file)}
    (folder / ".weft" / "execution-meta.json").write_text(json.dumps(meta))


def test_a_copied_folder_holding_this_hanks_execution_is_an_error(tmp_path: Path) -> None:
    directory = write_hank(tmp_path / "proj", _copying("work"), files={"work/f.txt": "x"})
    _fake_execution(directory / "work" / "runs" / "exec", directory / "hank.json")
    report = validate_hank(directory)
    [problem] = report.errors
    assert problem.code == "unbounded_copy"
    assert problem.path == "hank[0].rigSetup[0].copy.from"
    assert "copy itself without end" in problem.message
    assert "--execution" in (problem.hint or "")


def test_a_copied_folder_holding_another_execution_is_a_warning(tmp_path: Path) -> None:
    directory = write_hank(tmp_path / "proj", _copying("work"), files={"work/f.txt": "x"})
    _fake_execution(directory / "work" / "exec", tmp_path / "elsewhere" / "hank.json")
    report = validate_hank(directory)
    assert report.valid
    assert [p.code for p in report.warnings] == ["copies_execution"]


def test_the_scan_for_executions_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MAX_SCANNED_DIRS >= 1000
    monkeypatch.setattr(copies, "MAX_SCANNED_DIRS", 50)
    for i in range(55):
        (tmp_path / "src" / f"d{i:05}").mkdir(parents=True)
    _fake_execution(tmp_path / "src" / "zz-last", tmp_path / "hank.json")
    assert list(executions_inside(tmp_path / "src")) == []
    _fake_execution(tmp_path / "small" / "x", tmp_path / "hank.json")
    assert [p for p, _ in executions_inside(tmp_path / "small")] == [tmp_path / "small" / "x"]


def test_run_time_bounds_see_the_execution_and_the_workspace(tmp_path: Path) -> None:
    directory = write_hank(tmp_path / "proj", _copying("work"), files={"work/f.txt": "x"})
    loaded = load_hank(directory)
    inside = check_copy_bounds(loaded, execution=directory / "work" / "exec")
    assert [p.path for p in inside] == ["hank[0].rigSetup[0].copy.from"]
    assert check_copy_bounds(loaded, execution=tmp_path / "exec") == []
    # The managed base folder inside the source: every new execution would be too.
    assert check_copy_bounds(loaded, execution=directory / "work")

    over = write_hank(tmp_path / "ws" / "agentRoot" / "h", _copying("tpl", "h"), {"tpl/f": "x"})
    problems = check_copy_bounds(
        load_hank(over), execution=tmp_path / "ws", workspace=tmp_path / "ws" / "agentRoot"
    )
    assert [p.path for p in problems] == ["hank[0].rigSetup[0].copy.to"]
    assert "overwrite its source" in problems[0].message


def test_weft_run_refuses_a_self_copy_before_creating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEFT_RUNTIME_EXECUTION_BASE_DIR", str(tmp_path / "managed"))
    directory = write_hank(tmp_path / "proj", _copying("work"), files={"work/f.txt": "x"})
    execution = directory / "work" / "exec"
    code = main(["run", str(directory), "--execution", str(execution), "--headless"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("weft: error: invalid configuration")
    assert "copy itself without end" in err
    assert "Traceback" not in err
    assert not execution.exists()
    assert sorted(p.name for p in (directory / "work").iterdir()) == ["f.txt"]
