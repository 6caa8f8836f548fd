"""The batch file: every problem at once with where and how to fix; matrix expansion."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
from tests.batch.support import command_step, write_batch

from weft.batch import batch_json_schema, load_batch
from weft.errors import ConfigError


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_batch(path)
    return [p.render() for p in info.value.problems]


def test_structural_problems_are_all_reported_with_hints(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "w",
                    "max_retrys": 1,
                    "steps": [{"id": "a b", "command": ["true"], "expected_exit_codes": ["0"]}],
                }
            ]
        },
    )
    found = problems(path)
    assert len(found) == 3
    assert 'workstreams[0].max_retrys: unknown key "max_retrys"' in found[0]
    assert 'hint: did you mean "max_retries"?' in found[0]
    assert 'steps[0].id: id "a b" contains whitespace' in found[1]
    assert 'expected_exit_codes[0]: expected an integer, got "0"' in found[2]


def test_meaning_problems_dependencies_cycles_and_step_kinds(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "w",
                    "steps": [
                        command_step("build", "tset"),
                        command_step("test", "deploy"),
                        command_step("deploy", "test"),
                        {"id": "both", "hank": "h", "command": ["x"]},
                        {"id": "data-only", "command": ["x"], "data": "d"},
                    ],
                }
            ]
        },
    )
    found = "\n".join(problems(path))
    assert 'steps[0].depends_on[0]: no step "tset" in this workstream' in found
    assert 'did you mean "test"?' in found
    assert "the dependencies form a cycle: test -> deploy -> test" in found
    assert "a step runs either a hank or a command, not both" in found
    assert '"data" only applies to a hank step' in found


def test_toml_syntax_error_says_where(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text("[[workstreams]\nid = 1\n")
    (found,) = problems(path)
    assert "invalid TOML" in found
    assert "line 1" in found


def test_a_missing_hank_or_data_is_named_after_expansion(tmp_path: Path) -> None:
    (tmp_path / "data" / "a").mkdir(parents=True)
    (tmp_path / "hank.json").write_text("{}")
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "eval",
                    "matrix": {"set": ["a", "b"]},
                    "steps": [{"id": "run", "hank": "hank.json", "data": "data/{set}"}],
                }
            ]
        },
    )
    (found,) = problems(path)
    assert "workstreams[0].steps[0].data: data/b does not exist" in found


def test_matrix_expands_ids_and_every_string(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / "data" / name).mkdir(parents=True)
    (tmp_path / "hank.json").write_text("{}")
    path = write_batch(
        tmp_path,
        {
            "defaults": {"max_retries": 2, "expected_exit_codes": [0, 3]},
            "workstreams": [
                {
                    "id": "eval",
                    "matrix": {"set": ["data/a", "data/b"], "model": ["m1", "m2"]},
                    "steps": [
                        {
                            "id": "run",
                            "hank": "hank.json",
                            "data": "{set}",
                            "model": "fake/{model}",
                        },
                        {"id": "echo", "command": ["echo", "${HOME}", "{model}"], "max_retries": 0},
                    ],
                },
                {"id": "named-{x}", "matrix": {"x": ["1"]}, "steps": [command_step("s")]},
            ],
        },
    )
    plan = load_batch(path)
    ids = [w.ws_id for w in plan.workstreams]
    assert ids == ["eval-a-m1", "eval-a-m2", "eval-b-m1", "eval-b-m2", "named-1"]
    run, echo = plan.workstreams[1].steps
    assert (run.data, run.model, run.tool) == (tmp_path / "data" / "a", "fake/m2", "weft")
    assert (run.max_retries, run.expected_exit_codes) == (2, (0, 3))
    assert echo.command == ("echo", "${HOME}", "m2")
    assert (echo.max_retries, echo.tool, echo.cwd) == (0, "echo", tmp_path)


def test_matrix_ids_must_stay_unique(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {"id": "w", "matrix": {"v": ["x/a", "y/a"]}, "steps": [command_step("s")]},
            ]
        },
    )
    (found,) = problems(path)
    assert 'workstream "w-a" appears twice' in found


def test_the_example_validates_against_the_json_schema() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    doc = tomllib.loads((root / "examples" / "batch" / "sweep.toml").read_text())
    jsonschema.validate(doc, batch_json_schema())
    plan = load_batch(root / "examples" / "batch" / "sweep.toml")
    assert [w.ws_id for w in plan.workstreams] == [
        "sweep-alpha",
        "sweep-beta",
        "sweep-gamma",
        "flaky",
    ]


def test_the_documented_batch_file_is_valid() -> None:
    import re
    import tomllib

    doc = (Path(__file__).resolve().parents[2] / "docs" / "batch.md").read_text()
    block = re.search(r"```toml\n(.*?)```", doc, re.S)
    assert block is not None
    jsonschema.validate(tomllib.loads(block.group(1)), batch_json_schema())
