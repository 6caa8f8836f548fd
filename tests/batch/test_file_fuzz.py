"""Fuzzing the batch file (issue 33): random mutations of the example's
``sweep.toml`` (deleted fields, swapped types, weird strings with NUL, huge
numbers and matrices, path escapes), through the real parse and checks.

Whatever the input, it loads or raises :class:`ConfigError` with problems that
say where and what; nothing else escapes. What loads holds the rules the
checks promise (so a harmful file cannot slip through as a valid one), and
through the command line ``weft batch validate`` exits 0 or 2, never with a
traceback, agreeing with the in-process verdict.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft.agents.harness import route
from weft.batch import BatchPlan, load_batch
from weft.config.ids import ID_PATTERN
from weft.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "batch"

FUZZ = settings(
    # WEFT_FUZZ_EXAMPLES raises the count for a long local hunt.
    max_examples=int(os.environ.get("WEFT_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

WEIRD = st.sampled_from(
    [
        "",
        "\0",
        "tr\0ue",
        "hank\0",
        "/etc",
        "/etc/passwd",
        "../../..",
        "..",
        ".",
        "hank/../../x",
        "hank",
        "hank/hank.json",
        "data/alpha",
        "data/{dataset}",
        "{dataset}",
        "{nope}",
        "fake/sonnet",
        "fake/m1",
        "bogus",
        "A=B",
        "*",
        "${HOME}",
        "sh",
        "a b",
        "x" * 300,
        "É",
        "\n",
        "-rf",
    ]
)
NUMBERS = st.one_of(
    st.sampled_from([0, -1, 255, 256, 2**31, 2**63, 2**64, 10**30, -(2**70)]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=12), WEIRD)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), WEIRD), children, max_size=4),
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "id",
        "hank",
        "data",
        "model",
        "config",
        "command",
        "env",
        "tool",
        "depends_on",
        "expected_exit_codes",
        "max_retries",
        "retry_backoff",
        "matrix",
        "steps",
        "workstreams",
        "allow_absolute_paths",
        "max_steps",
        "breakers",
        "budget",
        "defaults",
    ]
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example (batch file, hank, data) copied, so mutations stay in a temporary folder."""
    target = tmp_path_factory.mktemp("fuzz") / "batch"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".weft-batch"))
    return target


def example_doc() -> dict[str, Any]:
    return tomllib.loads((EXAMPLE / "sweep.toml").read_text())


def _locations(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_locations(v, (*path, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_locations(v, (*path, i)))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


def mutate(doc: Any, data: st.DataObject) -> Any:
    """One random mutation of ``doc`` (which it may replace)."""
    where = data.draw(st.sampled_from(_locations(doc)), label="where")
    op = data.draw(
        st.sampled_from(["replace", "weird", "number", "delete", "insert", "swap", "matrix"]),
        label="op",
    )
    if op == "matrix":
        # A matrix as large as it gets: the count is refused without expanding it.
        values = [str(i) for i in range(data.draw(st.integers(1, 120), label="values"))]
        keys = data.draw(st.lists(st.sampled_from("abcde"), max_size=4, unique=True))
        streams = _items(doc.get("workstreams") if isinstance(doc, dict) else None)
        if streams:
            ws = data.draw(st.sampled_from(streams), label="workstream")
            matrix = ws.get("matrix")
            ws["matrix"] = {
                **(matrix if isinstance(matrix, dict) else {}),
                **dict.fromkeys(keys, values),
            }
        return doc
    if not where:
        return data.draw(JSON, label="document") if op == "replace" else doc
    parent, key = _get(doc, where[:-1]), where[-1]
    if op == "replace":
        parent[key] = data.draw(JSON, label="value")
    elif op == "weird":
        parent[key] = data.draw(WEIRD, label="value")
    elif op == "number":
        parent[key] = data.draw(NUMBERS, label="value")
    elif op == "delete":
        del parent[key]
    elif op == "insert":
        target = parent[key]
        if isinstance(target, dict):
            target[data.draw(KEYS, label="key")] = data.draw(JSON, label="value")
        elif isinstance(target, list):
            target.append(data.draw(JSON, label="value"))
    elif op == "swap":
        # The same value as another JSON type: a string in a list, a list as an object, ...
        value = parent[key]
        swapped: Any = (
            [value] if not isinstance(value, list) else {str(i): v for i, v in enumerate(value)}
        )
        parent[key] = swapped if not isinstance(value, str) else len(value)
    return doc


def _items(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def mutated(data: st.DataObject) -> Any:
    doc: Any = copy.deepcopy(example_doc())
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        doc = mutate(doc, data)
    return doc


def write(folder: Path, doc: Any, name: str = "fuzz.json") -> Path:
    path = folder / name
    # NaN and infinities come out as JSON the parser refuses: a bad_json problem, also fine.
    path.write_text(json.dumps(doc))
    return path


def check(path: Path, folder: Path) -> BatchPlan | None:
    """The outcome's invariants: a plan that keeps every promise, or a ConfigError
    whose every problem says where and what."""
    try:
        plan = load_batch(path)
    except ConfigError as e:
        refused: ConfigError | None = e
    else:
        refused = None
    if refused is not None:
        assert refused.problems
        for problem in refused.problems:
            assert problem.file
            assert problem.path
            assert problem.message
            assert "\0" not in problem.render()
        return None
    doc = json.loads(path.read_text())
    absolute = doc.get("allow_absolute_paths") is True
    assert len(plan.steps()) <= doc.get("max_steps", 1000)
    for step in plan.steps():
        assert re.match(ID_PATTERN, step.ws_id)
        assert re.match(ID_PATTERN, step.tool), step.tool
        assert step.expected_exit_codes
        assert all(0 <= code <= 255 for code in step.expected_exit_codes)
        assert all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) for k in step.env)
        assert not any("\0" in s for s in [*(step.command or ()), *step.env.values()])
        if step.command is not None:
            assert step.command[0]
        if step.model is not None:
            route(step.model)
        for path_of in (step.hank, step.data, step.config):
            if path_of is not None:
                assert path_of.exists()
                assert absolute or path_of.is_relative_to(folder.resolve()), path_of
    return plan


@FUZZ
@given(data=st.data())
def test_a_mutated_batch_file_loads_cleanly_or_says_what_is_wrong(
    data: st.DataObject, folder: Path
) -> None:
    check(write(folder, mutated(data)), folder)


def test_the_unmutated_example_loads(folder: Path) -> None:
    plan = check(write(folder, example_doc()), folder)
    assert plan is not None
    assert len(plan.steps()) == 11


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_weft_batch_validate_exits_0_or_2_without_a_traceback(
    data: st.DataObject, folder: Path
) -> None:
    path = write(folder, mutated(data), "cli.json")
    in_process = check(path, folder)
    done = subprocess.run(
        [sys.executable, "-m", "weft", "batch", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == (0 if in_process is not None else 2), done.stderr
    if done.returncode == 2:
        assert "weft: error: invalid configuration" in done.stderr
