"""weft run's positionals: which hank and which data, and clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from weft.cli.run_args import resolve_inputs
from weft.runtime.execution.errors import InputPathError

HANK = '{"meta": {"name": "demo", "version": "1.0.0"}, "hank": []}'


def write_hank(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HANK)
    return path


def make_data(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_no_argument_runs_hank_json_of_the_current_folder(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank.json")
    assert resolve_inputs([], cwd=tmp_path) == (hank.resolve(), None)


def test_no_argument_without_hank_json_says_how_to_pass_one(tmp_path: Path) -> None:
    with pytest.raises(InputPathError, match=r"no hank\.json in .*weft run path/to/hank\.json"):
        resolve_inputs([], cwd=tmp_path)


def test_one_json_argument_is_the_hank(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "pipes" / "mine.json")
    assert resolve_inputs(["pipes/mine.json"], cwd=tmp_path) == (hank.resolve(), None)


def test_one_folder_with_a_hank_json_is_the_hank(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "pipes" / "hank.json")
    assert resolve_inputs(["pipes"], cwd=tmp_path) == (hank.resolve(), None)


def test_one_other_argument_is_data_for_the_local_hank(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank.json")
    data = make_data(tmp_path / "inputs", {"x.txt": "1"})
    single = tmp_path / "one.csv"
    single.write_text("a")
    assert resolve_inputs(["inputs"], cwd=tmp_path) == (hank.resolve(), data.resolve())
    assert resolve_inputs(["one.csv"], cwd=tmp_path) == (hank.resolve(), single.resolve())


def test_data_without_a_local_hank_explains_the_guess(tmp_path: Path) -> None:
    make_data(tmp_path / "inputs", {"x.txt": "1"})
    with pytest.raises(InputPathError, match=r"taken as the data.*pass both"):
        resolve_inputs(["inputs"], cwd=tmp_path)


def test_two_arguments_are_hank_then_data(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "p" / "hank.json")
    data = make_data(tmp_path / "d", {"x": "1"})
    assert resolve_inputs(["p", "d"], cwd=tmp_path) == (hank.resolve(), data.resolve())
    assert resolve_inputs(["p/hank.json", "d"], cwd=tmp_path) == (hank.resolve(), data.resolve())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a", "b", "c"], "too many positional arguments.*got 3"),
        (["missing.json"], "missing.json: hank file not found"),
        (["nothing-here"], "nothing-here: no such file or directory"),
        (["hank.json", "nowhere"], "nowhere: data not found"),
        (["empty", "hank.json"], "the folder has no hank.json"),
        (["-"], "stdin"),
    ],
)
def test_bad_positionals_are_clear_errors(tmp_path: Path, args: list[str], message: str) -> None:
    write_hank(tmp_path / "hank.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputPathError, match=message):
        resolve_inputs(args, cwd=tmp_path)
