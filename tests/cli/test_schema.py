"""``weft schema``: the JSON Schema of hank files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weft.cli import main
from weft.config import json_schema


def test_it_prints_the_schema_of_the_structs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json_schema()
    assert "Codon" in printed["$defs"]


def test_it_writes_a_file(tmp_path: Path) -> None:
    target = tmp_path / "hank.schema.json"
    assert main(["schema", "-o", str(target)]) == 0
    assert json.loads(target.read_text()) == json_schema()


def test_an_unwritable_target_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "-o", str(tmp_path / "no" / "dir" / "s.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
