"""The batch file: every problem at once with where and how to fix; matrix expansion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from tests.batch.support import command_step, write_batch

from weft.batch import batch_json_schema, load_batch
from weft.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_HANK = ROOT / "examples" / "batch" / "hank"


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_batch(path)
    return [p.render() for p in info.value.problems]


def with_hank(folder: Path, name: str = "hank") -> Path:
    """The example's valid three-codon hank (fake agents), copied into ``folder``."""
    shutil.copytree(EXAMPLE_HANK, folder / name)
    return folder / name


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
    with_hank(tmp_path)
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "eval",
                    "matrix": {"set": ["a", "b"]},
                    "steps": [{"id": "run", "hank": "hank", "data": "data/{set}"}],
                }
            ]
        },
    )
    (found,) = problems(path)
    assert "workstreams[0].steps[0].data: data/b does not exist" in found


def test_matrix_expands_ids_and_every_string(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / "data" / name).mkdir(parents=True)
    with_hank(tmp_path)
    path = write_batch(
        tmp_path,
        {
            "defaults": {"max_retries": 2, "expected_exit_codes": [0, 3]},
            "workstreams": [
                {
                    "id": "eval",
                    "matrix": {"set": ["data/a", "data/b"], "model": ["sonnet", "haiku"]},
                    "steps": [
                        {
                            "id": "run",
                            "hank": "hank/hank.json",
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
    assert ids == ["eval-a-sonnet", "eval-a-haiku", "eval-b-sonnet", "eval-b-haiku", "named-1"]
    run, echo = plan.workstreams[1].steps
    assert (run.data, run.model, run.tool) == (tmp_path / "data" / "a", "fake/haiku", "weft")
    assert (run.max_retries, run.expected_exit_codes) == (2, (0, 3))
    assert echo.command == ("echo", "${HOME}", "haiku")
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


# Issue 33: what fuzzing found accepted, then failing at run time or doing harm.


def hank_step(**extra: Any) -> dict[str, Any]:
    return {"id": "run", "hank": "hank", **extra}


def one_step_batch(folder: Path, step: dict[str, Any], **top: Any) -> Path:
    return write_batch(folder, {**top, "workstreams": [{"id": "w", "steps": [step]}]})


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt5-turbo-ultra", "no agent harness runs model 'gpt5-turbo-ultra'"),
        ("fake/m1", "no agent harness runs model"),
        ("", "must not be empty"),
    ],
)
def test_a_steps_model_is_checked_as_a_codons_model(
    tmp_path: Path, model: str, expected: str
) -> None:
    with_hank(tmp_path)
    (found,) = problems(one_step_batch(tmp_path, hank_step(model=model)))
    assert "workstreams[0].steps[0].model: " + expected in found
    assert "hint:" in found
    # The hank is not checked a second time under the model that cannot run it.
    assert "hank[" not in found


@pytest.mark.parametrize(
    ("hank", "expected"),
    [
        ("/etc", '"/etc" is an absolute path, outside the batch file\'s folder'),
        ("../../..", '"../../.." leaves the batch file\'s folder'),
        ("hank/../../outside", '"hank/../../outside" leaves the batch file\'s folder'),
    ],
)
def test_a_path_outside_the_batch_files_folder_is_refused(
    tmp_path: Path, hank: str, expected: str
) -> None:
    folder = tmp_path / "batch"
    with_hank(folder)
    (found,) = problems(one_step_batch(folder, hank_step(hank=hank)))
    assert "workstreams[0].steps[0].hank: " + expected in found
    assert "allow_absolute_paths = true" in found


def test_data_and_config_stay_inside_too_and_a_matrix_cannot_smuggle_an_escape(
    tmp_path: Path,
) -> None:
    with_hank(tmp_path)
    doc = {
        "workstreams": [
            {
                "id": "w",
                "matrix": {"d": ["../../../etc"]},
                "steps": [hank_step(data="{d}", config="/etc/passwd")],
            }
        ]
    }
    found = "\n".join(problems(write_batch(tmp_path, doc)))
    assert 'steps[0].data: "../../../etc" leaves the batch file\'s folder' in found
    assert 'steps[0].config: "/etc/passwd" is an absolute path' in found


def test_absolute_paths_are_an_explicit_opt_in_and_dotdot_stays_refused(tmp_path: Path) -> None:
    elsewhere = with_hank(tmp_path / "shared")
    folder = tmp_path / "batch"
    allowed = one_step_batch(folder, hank_step(hank=str(elsewhere)), allow_absolute_paths=True)
    (step,) = load_batch(allowed).steps()
    assert step.hank == elsewhere
    escape = one_step_batch(folder, hank_step(hank="../shared/hank"), allow_absolute_paths=True)
    (found,) = problems(escape)
    assert "leaves the batch file's folder" in found


def test_a_hank_must_be_a_hank(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (found,) = problems(one_step_batch(tmp_path, hank_step(hank="empty")))
    assert "steps[0].hank: empty is a folder without a hank.json" in found
    assert "weft init" in found


def test_the_named_hank_is_validated_as_weft_validate_does_named_by_its_step(
    tmp_path: Path,
) -> None:
    hank = with_hank(tmp_path)
    doc = json.loads((hank / "hank.json").read_text())
    doc["hank"][2]["continuationMode"] = "contine"
    doc["hank"][1]["promptFile"] = "prompts/missing.md"
    (hank / "hank.json").write_text(json.dumps(doc))
    found = problems(one_step_batch(tmp_path, hank_step()))
    assert len(found) == 3
    assert (
        'steps[0].hank: the hank "hank" does not validate: 2 errors, listed after this one'
        in (found[0])
    )
    assert "weft validate hank" in found[0]
    for problem in found[1:]:
        assert problem.startswith(str(Path("hank") / "hank.json")) or "hank.json" in problem
        assert 'batch step "run" > codon' in problem
    assert any('"contine"' in p for p in found[1:])
    assert any("missing.md" in p for p in found[1:])


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([256, -1], ["[0]: must be at most 255, got 256", "[1]: must be at least 0, got -1"]),
        ([], [": must have at least one item"]),
    ],
)
def test_exit_codes_are_bytes_and_at_least_one(
    tmp_path: Path, codes: list[int], expected: list[str]
) -> None:
    step = command_step("s", expected_exit_codes=codes)
    found = problems(
        write_batch(
            tmp_path,
            {
                "defaults": {"expected_exit_codes": codes},
                "workstreams": [{"id": "w", "steps": [step]}],
            },
        )
    )
    assert len(found) == 2 * len(expected)
    for where in ("defaults.expected_exit_codes", "workstreams[0].steps[0].expected_exit_codes"):
        for text in expected:
            assert any(where + text in p and "0 to 255" in p for p in found), (where, text, found)


def test_tool_names_are_non_empty_and_of_the_id_charset(tmp_path: Path) -> None:
    steps = [
        command_step("a", tool=""),
        command_step("b", tool="up stream"),
        {"id": "c", "command": [""]},
        {"id": "d", "command": ["/usr/bin/g++", "-v"]},
    ]
    doc = {"breakers": {"a b": {}}, "workstreams": [{"id": "w", "steps": steps}]}
    found = "\n".join(problems(write_batch(tmp_path, doc)))
    assert 'breakers["a b"]: tool name "a b" contains whitespace' in found
    assert "steps[0].tool: must not be empty" in found
    assert "steps[1].tool: " in found
    assert "steps[2].command[0]: the program to run is an empty string" in found
    assert "steps[3]" not in found
    # A program's name makes a valid tool name when the step names none.
    ok = write_batch(tmp_path, {"workstreams": [{"id": "w", "steps": [steps[3]]}]}, "ok.json")
    (step,) = load_batch(ok).steps()
    assert step.tool == "g_"


@pytest.mark.parametrize("key", ["A=B", "", "1X", "HAS SPACE", "É"])
def test_env_keys_are_posix_names(tmp_path: Path, key: str) -> None:
    step = command_step("s", env={key: "v", "GOOD_1": "x"})
    (found,) = problems(write_batch(tmp_path, {"workstreams": [{"id": "w", "steps": [step]}]}))
    assert "is not a valid environment variable name" in found
    assert f"steps[0].env[{msgspec.json.encode(key).decode()}]: " in found
    assert 'no "="' in found


def test_a_nul_anywhere_is_refused_before_it_cuts_a_string_short(tmp_path: Path) -> None:
    with_hank(tmp_path)
    steps = [
        {"id": "s", "command": ["tr\0ue"], "env": {"A": "x\0y", "B\0": "z"}},
        hank_step(data="da\0ta"),
    ]
    found = problems(write_batch(tmp_path, {"workstreams": [{"id": "w", "steps": steps}]}))
    text = "\n".join(found)
    for where in (
        "steps[0].command[0]",
        "steps[0].env.A",
        'steps[0].env["B\\u0000"]',
        "steps[1].data",
    ):
        assert f"{where}: " in text, where
    assert sum("NUL character" in p for p in found) == 4
    assert "\0" not in text  # shown escaped, never raw on a terminal


def test_a_huge_matrix_is_refused_with_its_count_before_it_is_expanded(tmp_path: Path) -> None:
    values = [str(i) for i in range(100)]
    doc = {
        "workstreams": [
            {
                "id": "w",
                "matrix": {"a": values, "b": values, "c": values},
                "steps": [command_step("s")],
            }
        ]
    }
    path = write_batch(tmp_path, doc)
    started = time.perf_counter()
    (found,) = problems(path)
    elapsed = time.perf_counter() - started
    assert "workstreams[0]: the file expands to 1,000,000 steps, over the limit of 1,000" in found
    assert "100 x 100 x 100 combinations x 1 step = 1,000,000" in found
    assert "max_steps = 1000000" in found
    assert elapsed < 2.0, f"refusing took {elapsed:.1f} s: the matrix was expanded"


def test_max_steps_moves_the_bound_both_ways(tmp_path: Path) -> None:
    doc: dict[str, Any] = {
        "workstreams": [
            {
                "id": "w",
                "matrix": {"a": ["1", "2", "3"]},
                "steps": [command_step("s"), command_step("t")],
            }
        ]
    }
    assert len(load_batch(write_batch(tmp_path, doc)).steps()) == 6
    (found,) = problems(write_batch(tmp_path, {**doc, "max_steps": 5}))
    assert "expands to 6 steps, over the limit of 5" in found
    assert len(load_batch(write_batch(tmp_path, {**doc, "max_steps": 6})).steps()) == 6
    (found,) = problems(write_batch(tmp_path, {**doc, "max_steps": 0}))
    assert "max_steps: must be at least 1" in found


def test_every_problem_of_the_fuzzed_cases_is_reported_at_once(tmp_path: Path) -> None:
    with_hank(tmp_path)
    steps = [
        hank_step(id="a", model="bogus"),
        hank_step(id="b", hank="/etc"),
        command_step("c", expected_exit_codes=[256]),
        command_step("d", tool=""),
        command_step("e", env={"A=B": "1"}),
        {"id": "f", "command": ["tr\0ue"]},
        hank_step(id="g", hank="../../.."),
    ]
    doc = {"workstreams": [{"id": "w", "steps": steps}]}
    found = problems(write_batch(tmp_path, doc))
    assert len(found) == 7, "\n".join(found)
    for s, problem in enumerate(found):
        assert f"workstreams[0].steps[{s}]" in problem
        assert "hint:" in problem, problem


def test_weft_batch_validate_exits_2_with_every_problem_and_no_traceback(tmp_path: Path) -> None:
    with_hank(tmp_path)
    bad = one_step_batch(tmp_path, hank_step(hank="/etc", model="bogus", env={"A=B": "1"}))
    done = subprocess.run(
        [sys.executable, "-m", "weft", "batch", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "3 errors" in done.stderr
    for field in ("hank", "model", 'env["A=B"]'):
        assert f"workstreams[0].steps[0].{field}: " in done.stderr
    good = one_step_batch(tmp_path / "good", {"id": "s", "command": ["true"]})
    done = subprocess.run(
        [sys.executable, "-m", "weft", "batch", "validate", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "valid:" in done.stdout
    assert "1 workstream, 1 step" in done.stdout


def test_a_path_the_system_refuses_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # Found by the fuzz test: Path.exists() raises for a name over 255 bytes.
    with_hank(tmp_path)
    (tmp_path / "data").mkdir()
    doc = {
        "workstreams": [
            {"id": "w", "matrix": {"d": ["x" * 300]}, "steps": [hank_step(data="data/{d}")]}
        ]
    }
    found = "\n".join(problems(write_batch(tmp_path, doc)))
    assert "steps[0].data: " in found
    assert "cannot be used: File name too long" in found


def test_toml_nested_too_deep_or_of_toml_only_types_is_a_problem_not_a_crash(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    (found,) = problems(deep)
    assert "$: invalid TOML: arrays or tables nested too deeply to read" in found
    dates = tmp_path / "dates.toml"
    dates.write_text(
        "name = 1979-05-27T07:32:00Z\n[[workstreams]]\nid = 1979-05-27\n"
        'matrix = { a = [1979-05-27] }\n[[workstreams.steps]]\nid = "s"\n'
        'command = ["true", 07:32:00]\n'
    )
    found = problems(dates)
    assert [p.split(": ", 1)[1].split("\n")[0] for p in found] == [
        "name: expected a string, got datetime",
        "workstreams[0].id: expected a non-empty string, got date",
        "workstreams[0].matrix.a[0]: expected a string, got date",
        "workstreams[0].steps[0].command[1]: expected a string, got time",
    ]


def test_a_huge_matrix_over_a_broken_workstream_is_refused_fast_too(tmp_path: Path) -> None:
    # Found by the fuzz test: with no usable steps the count was 0, and checking
    # each combination's workstream id walked all 207 million of them.
    values = [str(i) for i in range(120)]
    doc = {"workstreams": [{"id": "w", "matrix": dict.fromkeys("abcd", values), "steps": {}}]}
    started = time.perf_counter()
    found = problems(write_batch(tmp_path, doc))
    assert time.perf_counter() - started < 2.0
    assert "expands to 207,360,000 steps" in found[0]
    assert "workstreams[0].steps: expected an array" in found[1]


@pytest.mark.parametrize("timeout", [0, -1, 700000, "60"])
def test_a_timeout_is_a_positive_number_of_seconds(tmp_path: Path, timeout: object) -> None:
    found = problems(
        write_batch(
            tmp_path,
            {
                "defaults": {"timeout_seconds": timeout},
                "workstreams": [{"id": "w", "steps": [command_step("s", timeout_seconds=timeout)]}],
            },
        )
    )
    assert len(found) == 2, found
    for where in ("defaults.timeout_seconds", "workstreams[0].steps[0].timeout_seconds"):
        assert any(where in p and "a number of seconds above 0" in p for p in found), found


def test_a_timeout_comes_from_the_step_else_the_defaults(tmp_path: Path) -> None:
    plan = load_batch(
        write_batch(
            tmp_path,
            {
                "defaults": {"timeout_seconds": 30},
                "workstreams": [
                    {
                        "id": "w",
                        "steps": [command_step("a", timeout_seconds=0.5), command_step("b")],
                    }
                ],
            },
        )
    )
    assert [s.timeout_seconds for s in plan.steps()] == [0.5, 30]
    assert plan.steps()[0].to_json()["timeout_seconds"] == 0.5
    assert (
        "timeout_seconds"
        not in load_batch(
            write_batch(
                tmp_path / "none", {"workstreams": [{"id": "w", "steps": [command_step("a")]}]}
            )
        )
        .steps()[0]
        .to_json()
    )
